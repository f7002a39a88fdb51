// dsrt-mpi-ranks: 2
// Checkpoints of an engine with both the optimizer states and the parameters on NVMe
// (offload_optimizer and offload_param "nvme", stage 3) across two ranks: a run saved, reloaded
// into a fresh engine (its own swap folders) and continued is bitwise the run that was never
// interrupted; the 16-bit model streamed from the swap files is byte for byte the in-memory
// engine's. Parameter shards are split between host memory and NVMe by max_in_cpu.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "../cpp/offload_test_util.h"
#include "ckpt/ckpt.h"
#include "mpi_scratch_dir.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace offload_test;

std::shared_ptr<Comm> g_world;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

TrainConfig both_on_nvme(const std::string &swap, int64_t max_in_cpu) {
  TrainConfig c = base_config(3);
  c.bf16_enabled = true;
  set_nvme(&c, swap, 700, 2, true);
  c.zero.offload_param.device = OffloadDevice::Nvme;
  c.zero.offload_param.nvme_path = swap;
  c.zero.offload_param.buffer_count = 2;
  c.zero.offload_param.buffer_size = 4096;
  c.zero.offload_param.max_in_cpu = max_in_cpu;
  return c;
}

std::string file_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(MpiOffloadCkpt, SaveLoadWithOptimizerAndParamsOnNvmeResumesBitwise) {
  // max_in_cpu 0: every shard on NVMe; 600: the first shard (500 elements per rank) in memory.
  for (int64_t max_in_cpu : {int64_t{0}, int64_t{600}}) {
    SCOPED_TRACE(Format("max_in_cpu %lld", static_cast<long long>(max_in_cpu)));
    const std::string dir = mpi_test::shared_dir(*g_world, "offload_ckpt");
    TempFolder swap_a, swap_b;
    std::unique_ptr<Engine> a, b;
    Status s = make_engine(both_on_nvme(swap_a.path, max_in_cpu), g_world, kShapes, &a);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(a->nvme_offload() && a->param_nvme_offload());
    EXPECT_EQ(a->param_nvme_resident_bytes() > 0, max_in_cpu > 0);
    EXPECT_GT(a->param_nvme_shard_bytes(), 0u);
    train(*a, 3);
    s = save_checkpoint(*a, dir, "mid");
    ASSERT_TRUE(s.ok()) << s.message();
    train(*a, 3, 30);  // the uninterrupted run

    s = make_engine(both_on_nvme(swap_b.path, max_in_cpu), g_world, kShapes, &b, false);
    ASSERT_TRUE(s.ok()) << s.message();
    s = load_checkpoint(*b, dir, "mid");
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(b->counters().global_step, 3);
    train(*b, 3, 30);
    expect_bitwise_equal(read_all(*a), read_all(*b));
    expect_same_working_copies(*a, *b);
    EXPECT_EQ(b->counters().applied_steps, a->counters().applied_steps);
    EXPECT_GT(b->param_coordinator()->swap_in_stats().read_hits, 0);
    a.reset();
    b.reset();
    mpi_test::remove_shared_dir(*g_world, dir);
  }
}

TEST(MpiOffloadCkpt, SixteenBitModelFromNvmeMatchesInMemory) {
  const std::string dir = mpi_test::shared_dir(*g_world, "offload_model16");
  TempFolder swap;
  TrainConfig reference_config = base_config(3);
  reference_config.bf16_enabled = true;
  std::unique_ptr<Engine> reference, e;
  ASSERT_TRUE(make_engine(reference_config, g_world, kShapes, &reference).ok());
  Status s = make_engine(both_on_nvme(swap.path, 600), g_world, kShapes, &e);
  ASSERT_TRUE(s.ok()) << s.message();
  train(*reference, 2);
  train(*e, 2);
  const std::string a = dir + "/reference.safetensors", b = dir + "/nvme.safetensors";
  s = save_16bit_model(*reference, a, g_world->rank() == 0);
  ASSERT_TRUE(s.ok()) << s.message();
  s = save_16bit_model(*e, b, g_world->rank() == 0);
  ASSERT_TRUE(s.ok()) << s.message();
  if (g_world->rank() == 0) {
    const std::string ra = file_bytes(a), rb = file_bytes(b);
    EXPECT_GT(ra.size(), 2u * (7 + 1000 + 33 * 65 + 3000 + 5 + 129));
    EXPECT_TRUE(ra == rb) << "the 16-bit model files differ";
  }
  e.reset();
  mpi_test::remove_shared_dir(*g_world, dir);
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_offload_ckpt", &dsrt::g_world); }
