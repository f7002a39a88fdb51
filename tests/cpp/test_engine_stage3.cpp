// ZeRO-3 parameter coordination on one rank: the trace and prefetching, the live-parameter bound,
// reuse distance, a changed acquire order, tensors held across a step; and the progress lines
// steps_per_print and wall_clock_breakdown write.
#include <gtest/gtest.h>

#include <mutex>
#include <random>
#include <string>

#include "engine_test_util.h"
#include "util/log.h"

namespace dsrt {
namespace {

using testing_util::random_values;
using testing_util::round_to;

TrainConfig stage3_config() {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-2;
  c.steps_per_print = 0;
  c.bf16_enabled = true;
  c.zero.stage = 3;
  c.zero.overlap_comm = true;
  c.zero.reduce_bucket_size = 2000;
  c.zero.stage3_param_persistence_threshold = 16;
  c.zero.stage3_prefetch_bucket_size = 2500;
  c.zero.stage3_max_live_parameters = 3500;
  c.zero.stage3_max_reuse_distance = 0;
  return c;
}

std::unique_ptr<Engine> build(const TrainConfig &config, int tensors, int64_t numel) {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(Engine::create(config, comm, &e).ok());
  std::mt19937 rng(3);
  for (int t = 0; t < tensors; ++t) {
    const int64_t shape[] = {t == 0 ? 8 : numel};  // tensor 0 is persistent
    const std::vector<float> init = random_values(rng, static_cast<size_t>(shape[0]), 1.0f);
    EXPECT_TRUE(e->add_param("w" + std::to_string(t), shape, 1, init.data(), nullptr).ok());
  }
  EXPECT_TRUE(e->build().ok());
  return e;
}

// Forward in `order`, backward in reverse; records the largest gathered footprint seen.
void micro_step(Engine &e, const std::vector<size_t> &order, uint64_t *peak_gathered) {
  auto observe = [&] {
    if (peak_gathered)
      *peak_gathered = std::max<uint64_t>(*peak_gathered, e.param_coordinator()->gathered_bytes());
  };
  for (size_t t : order) {
    void *data = nullptr;
    ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
    observe();
    ASSERT_TRUE(e.release(t).ok());
  }
  for (size_t k = order.size(); k-- > 0;) {
    const size_t t = order[k];
    void *data = nullptr;
    ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
    observe();
    ASSERT_TRUE(testing_util::update_grad(e, t, [&](void *grad, dsrt_dtype dtype) {
                  for (int64_t i = 0; i < e.tensor_numel(t); ++i)
                    from_float(grad, dtype, static_cast<size_t>(i), 0.01f * (i % 7));
                }).ok());
    ASSERT_TRUE(e.grad_ready(t).ok());
    ASSERT_TRUE(e.release(t).ok());
  }
  Status s = e.step(nullptr);
  ASSERT_TRUE(s.ok()) << s.message();
}

TEST(EngineStage3, PrefetchFollowsTheRecordedOrderWithinLimits) {
  const TrainConfig config = stage3_config();
  std::unique_ptr<Engine> e = build(config, 6, 1000);
  std::vector<size_t> order = {0, 1, 2, 3, 4, 5};
  const ParamCoordinator *pc = e->param_coordinator();
  ASSERT_NE(pc, nullptr);
  EXPECT_TRUE(pc->persistent(0));
  EXPECT_FALSE(pc->persistent(1));
  uint64_t peak = 0;
  micro_step(*e, order, &peak);
  EXPECT_TRUE(pc->trace_valid());
  EXPECT_EQ(pc->prefetch_hits(), 0) << "nothing to prefetch before the order is known";
  micro_step(*e, order, &peak);
  micro_step(*e, order, &peak);
  EXPECT_GT(pc->prefetch_hits(), 10) << "later micro-steps prefetch along the trace";
  // Live gathered elements stay within max_live_parameters plus the tensor being acquired and the
  // persistent one (bf16: 2 bytes each).
  EXPECT_LE(peak, static_cast<uint64_t>((config.zero.stage3_max_live_parameters + 1000 + 8) * 2));
  // Between micro-steps only persistent tensors stay gathered.
  EXPECT_EQ(pc->gathered_bytes(), 8u * 2u);
  // Freed copies are kept for reuse, within min(2 * largest + prefetch bucket, max live) elements,
  // and reported as buffers.
  EXPECT_GT(pc->cached_bytes(), 0u);
  EXPECT_LE(pc->cached_bytes(), static_cast<uint64_t>(config.zero.stage3_max_live_parameters * 2));
  dsrt_memory_stats m;
  m.struct_size = sizeof m;
  ASSERT_TRUE(e->memory(&m).ok());
  EXPECT_GE(m.buffers[DSRT_LOC_DEVICE], pc->cached_bytes());
}

TEST(EngineStage3, ReuseDistanceKeepsSoonReusedTensors) {
  TrainConfig config = stage3_config();
  config.zero.stage3_max_reuse_distance = 100000;
  config.zero.stage3_max_live_parameters = 100000;
  std::unique_ptr<Engine> e = build(config, 4, 500);
  const std::vector<size_t> order = {0, 1, 2, 3};
  micro_step(*e, order, nullptr);
  // With the trace known, tensor 3 released at the end of forward is acquired again at once.
  void *data = nullptr;
  for (size_t t : order) {
    ASSERT_TRUE(e->acquire(t, &data, nullptr).ok());
    ASSERT_TRUE(e->release(t).ok());
  }
  EXPECT_GE(e->param_coordinator()->gathered_bytes(), 500u * 2u) << "tensor 3 is kept for its reuse";
  for (size_t k = order.size(); k-- > 0;) {
    ASSERT_TRUE(e->acquire(order[k], &data, nullptr).ok());
    ASSERT_TRUE(e->release(order[k]).ok());
  }
  ASSERT_TRUE(e->step(nullptr).ok());
}

TEST(EngineStage3, ChangedOrderIsRecordedAgainAndResultsStayRight) {
  const TrainConfig config = stage3_config();
  std::unique_ptr<Engine> e = build(config, 5, 700);
  TrainConfig flat = config;
  flat.zero.stage = 0;
  std::unique_ptr<Engine> ref = build(flat, 5, 700);
  const std::vector<size_t> a = {0, 1, 2, 3, 4}, b = {0, 3, 1, 4, 2};
  for (const auto *order : {&a, &a, &b, &b, &a}) {
    micro_step(*e, *order, nullptr);
    micro_step(*ref, *order, nullptr);
  }
  for (size_t t = 0; t < e->num_tensors(); ++t) {
    std::vector<float> got(static_cast<size_t>(e->tensor_numel(t))), want(got.size());
    ASSERT_TRUE(e->read_fp32(t, got.data(), got.size()).ok());
    ASSERT_TRUE(ref->read_fp32(t, want.data(), want.size()).ok());
    EXPECT_EQ(got, want) << "tensor " << t;
  }
}

TEST(EngineStage3, TensorHeldAcrossAStepIsRefreshed) {
  const TrainConfig config = stage3_config();
  std::unique_ptr<Engine> e = build(config, 3, 300);
  void *held = nullptr;
  ASSERT_TRUE(e->acquire(2, &held, nullptr).ok());
  micro_step(*e, {0, 1, 2}, nullptr);
  std::vector<float> master(300);
  ASSERT_TRUE(e->read_fp32(2, master.data(), master.size()).ok());
  for (size_t i = 0; i < master.size(); ++i)
    ASSERT_EQ(to_float(held, DSRT_BF16, i), round_to(DSRT_BF16, master[i])) << i;
  ASSERT_TRUE(e->release(2).ok());
  EXPECT_EQ(e->release(2).code(), DSRT_ERR_STATE);
}

struct Captured {
  std::mutex mutex;
  std::vector<std::string> lines;
};

void capture(int32_t level, const char *msg, void *user) {
  auto *c = static_cast<Captured *>(user);
  std::lock_guard<std::mutex> lock(c->mutex);
  if (level == DSRT_LOG_INFO) c->lines.emplace_back(msg);
}

TEST(EngineProgress, StepsPerPrintWritesProgressAndBreakdown) {
  Captured captured;
  log_set_callback(capture, &captured);
  TrainConfig config = stage3_config();
  config.zero.stage = 2;
  config.steps_per_print = 2;
  config.wall_clock_breakdown = true;
  std::unique_ptr<Engine> e = build(config, 3, 100);
  for (int i = 0; i < 4; ++i) micro_step(*e, {0, 1, 2}, nullptr);
  log_set_callback(nullptr, nullptr);
  std::vector<std::string> progress, breakdown;
  for (const std::string &line : captured.lines) {
    if (line.find("loss_scale") != std::string::npos) progress.push_back(line);
    if (line.find("time per step") != std::string::npos) breakdown.push_back(line);
  }
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress[0].rfind("step 2:", 0), 0u) << progress[0];
  EXPECT_NE(progress[1].find("step 4:"), std::string::npos);
  EXPECT_NE(progress[1].find("lr 0.01"), std::string::npos) << progress[1];
  EXPECT_NE(progress[1].find("samples/s"), std::string::npos);
  EXPECT_NE(progress[1].find("skipped 0"), std::string::npos);
  ASSERT_EQ(breakdown.size(), 2u);
  for (const char *phase : {"reduce", "norm", "optimizer", "allgather"})
    EXPECT_NE(breakdown[0].find(phase), std::string::npos) << breakdown[0];
}

}  // namespace
}  // namespace dsrt
