// Multi-rank checkpoints at the same world size: bitwise-exact continuation at every stage,
// every rank refusing (and changing nothing) when one rank's shard is damaged, the gathered
// 16-bit model at stage 3, and node-local storage.
// dsrt-mpi-ranks: 2 4
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "../cpp/ckpt_test_util.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "mpi_scratch_dir.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace ckpt_test;

std::shared_ptr<Comm> g_world;

TEST(MpiCheckpoint, ContinuationIsBitwiseExactAtEveryStage) {
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " stage " + std::to_string(stage));
      const std::string dir = mpi_test::shared_dir(*g_world, "cont");
      TrainConfig config = config_for(stage, dtype);
      config.gradient_clipping = 0.5;
      auto a = make_engine(config, g_world);
      train(*a, 3);
      Status s = save_checkpoint(*a, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      train(*a, 4);
      const auto want = partition_bytes(*a);
      const auto want_masters = masters(*a);
      auto b = make_engine(config, g_world, shapes(), 321);
      s = load_checkpoint(*b, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      train(*b, 4);
      EXPECT_TRUE(bitwise_equal(want, partition_bytes(*b)));
      EXPECT_TRUE(bitwise_equal(want_masters, masters(*b)));
      EXPECT_EQ(a->counters().global_step, b->counters().global_step);
      EXPECT_EQ(a->current_lr(), b->current_lr());
      if (g_world->rank() == 0) {
        Manifest m;
        ASSERT_TRUE(read_manifest(dir + "/global_step3", &m).ok());
        // Stage 0 replicates everything: one shard; otherwise one per rank.
        EXPECT_EQ(m.shards.size(), stage == 0 ? 1u : static_cast<size_t>(g_world->size()));
      }
      mpi_test::remove_shared_dir(*g_world, dir);
    }
  }
}

// States without a host pointer (as in GPU memory; forced here by the test hook): every rank
// streams its shard through read_partition_state in 4 KiB chunks and loads through
// write_partition_state, also into another stage's layout.
TEST(MpiCheckpoint, StatesWithoutHostPointerSaveAndReshard) {
  for (int load_stage : {2, 3}) {
    SCOPED_TRACE("stage 2 into stage " + std::to_string(load_stage));
    const std::string dir = mpi_test::shared_dir(*g_world, "nohost");
    checkpoint_test_hooks().states_without_host_pointer = true;
    checkpoint_test_hooks().block_bytes = 4096;
    auto a = make_engine(config_for(2, DSRT_F32), g_world);
    train(*a, 3);
    Status s = save_checkpoint(*a, dir, "t");
    ASSERT_TRUE(s.ok()) << s.message();
    const auto want_partition = partition_bytes(*a);
    const auto want = masters(*a);
    auto b = make_engine(config_for(load_stage, DSRT_F32), g_world, shapes(), 4321);
    s = load_checkpoint(*b, dir, "t");
    checkpoint_test_hooks() = CheckpointTestHooks{};
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(bitwise_equal(want, masters(*b)));
    if (load_stage == 2) {
      EXPECT_TRUE(bitwise_equal(want_partition, partition_bytes(*b)));
      train(*a, 2);
      train(*b, 2);
      EXPECT_TRUE(bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
    }
    mpi_test::remove_shared_dir(*g_world, dir);
  }
}

TEST(MpiCheckpoint, OneDamagedShardFailsEveryRankAndChangesNothing) {
  const std::string dir = mpi_test::shared_dir(*g_world, "damage");
  checkpoint_test_hooks().block_bytes = 4096;
  auto a = make_engine(config_for(2), g_world);
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  checkpoint_test_hooks().block_bytes = 0;
  const int victim = g_world->size() - 1;
  const std::string shard = dir + "/t/" + shard_file_name(victim);
  if (g_world->rank() == 0) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kShardHeaderBytes + 5));
    f.put('\x7f');
  }
  ASSERT_TRUE(g_world->barrier().ok());
  auto b = make_engine(config_for(2), g_world, shapes(), 99);
  train(*b, 1);
  const auto before = partition_bytes(*b);
  Status s = load_checkpoint(*b, dir, "t");
  EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT) << s.message();
  EXPECT_NE(s.message().find(shard_file_name(victim)), std::string::npos) << s.message();
  EXPECT_TRUE(bitwise_equal(before, partition_bytes(*b)));
  EXPECT_EQ(b->counters().global_step, 1);
  mpi_test::remove_shared_dir(*g_world, dir);
}

TEST(MpiCheckpoint, SixteenBitModelGathersStageThreeShards) {
  const std::string dir = mpi_test::shared_dir(*g_world, "model16");
  auto a = make_engine(config_for(3, DSRT_BF16), g_world);
  train(*a, 2);
  const std::string path = dir + "/model.safetensors";
  Status s = save_16bit_model(*a, path, g_world->rank() == 0);
  ASSERT_TRUE(s.ok()) << s.message();
  File f;
  uint64_t header_len = 0, at = 0;
  if (g_world->rank() == 0) {
    ASSERT_TRUE(File::open_read(path, &f).ok());
    ASSERT_TRUE(f.read_exact(0, &header_len, 8).ok());
    at = 8 + header_len;
  }
  for (size_t t = 0; t < a->num_tensors(); ++t) {
    std::vector<uint8_t> working;
    dsrt_dtype dtype;
    ASSERT_TRUE(testing_util::read_working_values(*a, t, &working, &dtype).ok());  // collective gather at stage 3
    if (g_world->rank() == 0) {
      std::vector<uint16_t> file(static_cast<size_t>(a->tensor_numel(t)));
      ASSERT_EQ(working.size(), file.size() * 2);
      ASSERT_TRUE(f.read_exact(at, file.data(), file.size() * 2).ok());
      EXPECT_EQ(0, std::memcmp(file.data(), working.data(), file.size() * 2)) << a->tensor_name(t);
      at += file.size() * 2;
    }
  }
  mpi_test::remove_shared_dir(*g_world, dir);
}

TEST(MpiCheckpoint, NodeLocalStorageSavesAndLoads) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = mpi_test::shared_dir(*g_world, "nodelocal");
    TrainConfig config = config_for(stage);
    config.checkpoint.use_node_local_storage = true;
    auto a = make_engine(config, g_world);
    train(*a, 2);
    ASSERT_TRUE(save_checkpoint(*a, dir, "").ok());
    const auto want = partition_bytes(*a);
    auto b = make_engine(config, g_world, shapes(), 5);
    Status s = load_checkpoint(*b, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(bitwise_equal(want, partition_bytes(*b)));
    Manifest m;
    ASSERT_TRUE(read_manifest(dir + "/global_step2", &m).ok());
    EXPECT_TRUE(m.node_local);
    mpi_test::remove_shared_dir(*g_world, dir);
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_ckpt", &dsrt::g_world); }
