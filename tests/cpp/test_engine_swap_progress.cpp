// The progress line wall_clock_breakdown adds for offload_param "nvme": the parameter swap-in of
// the steps since the last line (read wait, bytes read, rate, prefetch hits). The bytes and the
// number of gathers are checked against what the model's shard sizes and the acquire order imply,
// the other numbers for consistency with each other and with the steps' wall time.
#include <gtest/gtest.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "offload_test_util.h"
#include "util/log.h"

namespace dsrt {
namespace {

using namespace offload_test;

// Tensors 0 and 4 are persistent (threshold 10); 1, 2, 3 and 5 have shards on NVMe.
const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

struct Captured {
  std::mutex mutex;
  std::vector<std::string> lines;
};

void capture(int32_t level, const char *msg, void *user) {
  auto *c = static_cast<Captured *>(user);
  std::lock_guard<std::mutex> lock(c->mutex);
  if (level == DSRT_LOG_INFO) c->lines.emplace_back(msg);
}

TrainConfig swap_config(const std::string &path, bool breakdown) {
  TrainConfig c = base_config(3);
  c.bf16_enabled = true;
  c.steps_per_print = 2;
  c.wall_clock_breakdown = breakdown;
  c.zero.offload_param.device = OffloadDevice::Nvme;
  c.zero.offload_param.nvme_path = path;
  c.zero.offload_param.buffer_count = 3;
  c.zero.offload_param.buffer_size = 4096;
  c.zero.offload_param.max_in_cpu = 0;  // every shard on NVMe
  c.zero.stage3_max_reuse_distance = 0;  // every release frees: each micro-step reads every shard
  return c;
}

// Trains 4 steps with the log captured; returns the swap-in progress lines.
std::vector<std::string> swap_lines(const TrainConfig &config, std::unique_ptr<Engine> *engine) {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  Status s = make_engine(config, comm, kShapes, engine);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  Captured captured;
  log_set_callback(capture, &captured);
  train(**engine, 4);
  log_set_callback(nullptr, nullptr);
  std::vector<std::string> out;
  for (const std::string &line : captured.lines)
    if (line.find("NVMe parameter swap-in") != std::string::npos) out.push_back(line);
  return out;
}

TEST(EngineSwapProgress, BreakdownReportsTheParameterSwapIn) {
  TempFolder folder;
  std::unique_ptr<Engine> e;
  const std::vector<std::string> lines = swap_lines(swap_config(folder.path, true), &e);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->param_nvme_offload());
  ASSERT_EQ(lines.size(), 2u);
  // Per micro-step the host acquires 0..5 forward and 5..0 backward; with reuse distance 0 the
  // shard tensors 1, 2, 3 are read twice and, once the order is recorded (after the first
  // micro-step), 5 once: its backward acquire follows its release, so it is kept. The first
  // micro-step reads 5 twice.
  uint64_t shard_bytes[6] = {};
  for (size_t t : {1u, 2u, 3u, 5u})
    shard_bytes[t] = static_cast<uint64_t>(e->partitioning().shard_layout().shard_size(t)) * 2;  // bf16
  const uint64_t bytes_per_step = 2 * (shard_bytes[1] + shard_bytes[2] + shard_bytes[3]) + shard_bytes[5];
  ASSERT_GT(bytes_per_step, 10000u);
  for (size_t k = 0; k < lines.size(); ++k) {
    SCOPED_TRACE(lines[k]);
    long long step = 0, steps = 0, hits = 0, gathers = 0, on_demand = 0, ahead = 0, reclaimed = 0, cancelled = 0;
    unsigned long long bytes = 0;
    double wait_ms = -1, mb = -1, ms = -1, gbps = -1;
    const int fields = std::sscanf(
        lines[k].c_str(),
        "step %lld NVMe parameter swap-in over %lld steps: read wait %lf ms, read %lf MB (%llu bytes) in %lf ms = "
        "%lf GB/s, prefetch hits %lld of %lld shard gathers (%lld read on demand), %lld reads ahead, %lld buffers "
        "reclaimed, %lld reads cancelled",
        &step, &steps, &wait_ms, &mb, &bytes, &ms, &gbps, &hits, &gathers, &on_demand, &ahead, &reclaimed,
        &cancelled);
    ASSERT_EQ(fields, 13);
    EXPECT_EQ(step, 2 * static_cast<long long>(k + 1));
    EXPECT_EQ(steps, 2);
    EXPECT_EQ(bytes, 2 * bytes_per_step + (k == 0 ? shard_bytes[5] : 0));
    EXPECT_NEAR(mb, 1e-6 * static_cast<double>(bytes), 0.006);
    EXPECT_EQ(gathers, k == 0 ? 15 : 14);  // 7 shard gathers per recorded micro-step
    EXPECT_EQ(hits + on_demand, gathers);
    EXPECT_GE(hits, 0);
    EXPECT_GE(on_demand, 0);
    EXPECT_GE(reclaimed, 0);
    EXPECT_GE(cancelled, 0);
    EXPECT_GT(ms, 0.0);
    EXPECT_GE(wait_ms, 0.0);
    EXPECT_LE(wait_ms, ms + 0.002);  // waits happen within the steps' wall time
    EXPECT_NEAR(gbps, 1e-6 * static_cast<double>(bytes) / ms, 0.0005 + 0.01 * gbps);
    if (k == 1) {
      EXPECT_GT(hits, 0);  // the order is recorded: reads run ahead of the gathers
      EXPECT_GT(ahead, 0);
    }
  }
}

TEST(EngineSwapProgress, NoLineWithoutBreakdownOrParameterOffload) {
  TempFolder folder;
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(swap_lines(swap_config(folder.path, false), &e).empty());
  TrainConfig in_memory = swap_config(folder.path, true);
  in_memory.zero.offload_param.device = OffloadDevice::None;
  e.reset();
  EXPECT_TRUE(swap_lines(in_memory, &e).empty());
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->param_nvme_offload());
}

}  // namespace
}  // namespace dsrt
