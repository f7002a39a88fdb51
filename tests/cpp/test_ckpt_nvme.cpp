// Checkpoints of engines whose optimizer states live in NVMe swap files: save streams them out
// through read_partition_state, load verifies everything before writing through
// write_partition_state, and the result continues training bitwise like an uninterrupted run, also
// across NVMe and in-memory engines.
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "aio/aio_testing.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "ckpt_test_util.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using ckpt_test::config_for;
using ckpt_test::make_engine;
using ckpt_test::partition_bytes;
using ckpt_test::scratch_dir;
using ckpt_test::shapes;
using ckpt_test::train;
using offload_test::expect_bitwise_equal;
using offload_test::read_all;
using offload_test::TempFolder;

TrainConfig nvme_config(int stage, const TempFolder &folder) {
  TrainConfig c = config_for(stage);
  offload_test::set_nvme(&c, folder.path, 700, 2, true);
  return c;
}

void expect_same_counters(const Engine &a, const Engine &b) {
  EXPECT_EQ(a.counters().global_step, b.counters().global_step);
  EXPECT_EQ(a.counters().applied_steps, b.counters().applied_steps);
  EXPECT_EQ(a.counters().skipped_steps, b.counters().skipped_steps);
  EXPECT_EQ(a.scheduler_iteration(), b.scheduler_iteration());
}

// Small blocks so a save streams each segment in several chunks.
struct SmallBlocks {
  SmallBlocks() { checkpoint_test_hooks().block_bytes = 4096; }
  ~SmallBlocks() { checkpoint_test_hooks().block_bytes = 0; }
};

TEST(CheckpointNvme, ResumesBitwiseAtEveryStage) {
  for (int stage : {1, 2, 3}) {
    for (bool small_blocks : {false, true}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (small_blocks ? " 4 KiB blocks" : " 1 MiB blocks"));
      const std::string dir = scratch_dir("nvme_resume");
      TempFolder swap_a, swap_b;
      std::unique_ptr<Engine> a = make_engine(nvme_config(stage, swap_a));
      ASSERT_TRUE(a && a->nvme_offload());
      train(*a, 3);
      {
        std::unique_ptr<SmallBlocks> blocks;
        if (small_blocks) blocks = std::make_unique<SmallBlocks>();
        Status s = save_checkpoint(*a, dir, "");
        ASSERT_TRUE(s.ok()) << s.message();
      }
      train(*a, 3);

      std::unique_ptr<Engine> b = make_engine(nvme_config(stage, swap_b), nullptr, shapes(), 999);
      ASSERT_TRUE(b && b->nvme_offload());
      Status s = load_checkpoint(*b, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(b->counters().global_step, 3);
      train(*b, 3);
      expect_bitwise_equal(read_all(*a), read_all(*b));
      EXPECT_TRUE(ckpt_test::bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
      expect_same_counters(*a, *b);
      EXPECT_TRUE(remove_tree(dir).ok());
    }
  }
}

// Save from one kind of engine, load into the other: both continue like the uninterrupted run.
// A GPU engine's route (host gradient copy and host working staging), forced on the CPU device:
// restoring reads the masters from the swap files, not from an in-memory master buffer (which an
// NVMe engine does not have; the 2026-11-25 H200 run failed here with "host convert: NULL src or
// dst"). The staged engine then trains on bitwise like an uninterrupted run.
TEST(CheckpointNvme, ResumesBitwiseOnTheStagedRoute) {
  auto staged = [](Engine &e) { return e.set_host_staging_on_cpu(true); };
  for (int stage : {1, 2, 3}) {
    for (dsrt_dtype working : {DSRT_F32, DSRT_BF16}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (working == DSRT_BF16 ? " bf16" : " fp32"));
      const std::string dir = scratch_dir("nvme_staged");
      TempFolder swap_a, swap_b;
      TrainConfig c = config_for(stage, working);
      offload_test::set_nvme(&c, swap_a.path, 700, 2, true);
      std::unique_ptr<Engine> a = make_engine(c, nullptr, shapes(), 7, staged);
      ASSERT_TRUE(a && a->nvme_offload());
      train(*a, 3);
      Status s = save_checkpoint(*a, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      train(*a, 3);

      offload_test::set_nvme(&c, swap_b.path, 700, 2, true);
      std::unique_ptr<Engine> b = make_engine(c, nullptr, shapes(), 999, staged);
      ASSERT_TRUE(b && b->nvme_offload());
      s = load_checkpoint(*b, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      // refresh_working_copies on its own reads the swap files too.
      s = b->refresh_working_copies();
      ASSERT_TRUE(s.ok()) << s.message();
      train(*b, 3);
      expect_bitwise_equal(read_all(*a), read_all(*b));
      EXPECT_TRUE(ckpt_test::bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
      expect_same_counters(*a, *b);
      EXPECT_TRUE(remove_tree(dir).ok());
    }
  }
}

TEST(CheckpointNvme, MovesBetweenNvmeAndMemory) {
  for (int stage : {1, 3}) {
    for (bool from_nvme : {true, false}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (from_nvme ? " NVMe -> memory" : " memory -> NVMe"));
      const std::string dir = scratch_dir("nvme_move");
      TempFolder swap_a, swap_b;
      std::unique_ptr<Engine> a = make_engine(from_nvme ? nvme_config(stage, swap_a) : config_for(stage));
      ASSERT_TRUE(a);
      ASSERT_EQ(a->nvme_offload(), from_nvme);
      train(*a, 2);
      Status s = save_checkpoint(*a, dir, "t");
      ASSERT_TRUE(s.ok()) << s.message();
      train(*a, 3);

      std::unique_ptr<Engine> b =
          make_engine(from_nvme ? config_for(stage) : nvme_config(stage, swap_b), nullptr, shapes(), 31337);
      ASSERT_TRUE(b);
      ASSERT_EQ(b->nvme_offload(), !from_nvme);
      s = load_checkpoint(*b, dir, "t");
      ASSERT_TRUE(s.ok()) << s.message();
      train(*b, 3);
      expect_bitwise_equal(read_all(*a), read_all(*b));
      EXPECT_TRUE(ckpt_test::bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
      expect_same_counters(*a, *b);
      EXPECT_TRUE(remove_tree(dir).ok());
    }
  }
}

void flip_byte(const std::string &path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// A damaged block anywhere (here in the last optimizer state, read last) is found before any
// state is written into the swap files: the engine keeps its weights, states and counters.
TEST(CheckpointNvme, DamagedShardChangesNothing) {
  for (int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = scratch_dir("nvme_damage");
    TempFolder swap_a, swap_b;
    std::unique_ptr<Engine> a = make_engine(nvme_config(stage, swap_a));
    ASSERT_TRUE(a);
    train(*a, 2);
    {
      SmallBlocks blocks;
      Status s = save_checkpoint(*a, dir, "t");
      ASSERT_TRUE(s.ok()) << s.message();
    }
    const std::string shard = join_file_path(join_file_path(dir, "t"), shard_file_name(0));
    uint64_t elems = 0;
    for (const OwnedSegment &seg : a->partitioning().owned_segments(0)) elems += static_cast<uint64_t>(seg.count);
    const uint64_t data_bytes = static_cast<uint64_t>(1 + a->num_optimizer_states()) * elems * sizeof(float);
    ASSERT_GT(data_bytes, 100u);
    flip_byte(shard, kShardHeaderBytes + data_bytes - 100);

    std::unique_ptr<Engine> b = make_engine(nvme_config(stage, swap_b), nullptr, shapes(), 4242);
    ASSERT_TRUE(b && b->nvme_offload());
    train(*b, 1);
    const auto weights = read_all(*b);
    const auto states = partition_bytes(*b);
    Status s = load_checkpoint(*b, dir, "t");
    EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT) << s.message();
    EXPECT_NE(s.message().find(shard_file_name(0)), std::string::npos) << s.message();
    expect_bitwise_equal(weights, read_all(*b));
    EXPECT_TRUE(ckpt_test::bitwise_equal(states, partition_bytes(*b)));
    EXPECT_EQ(b->counters().global_step, 1);
    // The engine is still usable and still trains.
    train(*b, 1);
    EXPECT_EQ(b->counters().global_step, 2);
    EXPECT_TRUE(remove_tree(dir).ok());
  }
}

// A step that failed writing swap files leaves some sub-groups updated and the rest not: a save
// then is refused (nothing is written) until the retried step completes it.
TEST(CheckpointNvme, RefusesToSaveAHalfAppliedStep) {
  const std::string dir = scratch_dir("nvme_pending");
  TempFolder swap;
  std::unique_ptr<Engine> a = make_engine(nvme_config(1, swap));
  ASSERT_TRUE(a && a->nvme_offload());
  train(*a, 2);
  for (size_t k = a->num_tensors(); k-- > 0;) ASSERT_TRUE(a->grad_ready(k).ok());
  aio_testing_fail_request(a->nvme_swapper()->aio(), 3, EIO);
  ASSERT_EQ(a->step(nullptr).code(), DSRT_ERR_IO);
  Status s = save_checkpoint(*a, dir, "t");
  EXPECT_EQ(s.code(), DSRT_ERR_STATE) << s.message();
  EXPECT_NE(s.message().find("retry"), std::string::npos) << s.message();
  EXPECT_FALSE(path_exists(join_file_path(dir, "t")));
  ASSERT_TRUE(a->step(nullptr).ok());
  s = save_checkpoint(*a, dir, "t");
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(remove_tree(dir).ok());
}

// A load whose writes into the swap files fail half-way (a full swap disk) leaves some sub-groups
// with the checkpoint's values and the rest with the old ones. The engine must not go on training
// on that mix: every call fails with DSRT_ERR_STATE until a load succeeds, and a successful load
// then gives exactly the checkpoint's state.
TEST(CheckpointNvme, AHalfDoneLoadMakesTheEngineUnusableUntilALoadSucceeds) {
  const std::string dir = scratch_dir("nvme_half_load");
  TempFolder swap_a, swap_b;
  std::unique_ptr<Engine> a = make_engine(nvme_config(2, swap_a));
  ASSERT_TRUE(a && a->nvme_offload());
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  const auto saved = partition_bytes(*a);
  std::unique_ptr<Engine> b = make_engine(nvme_config(2, swap_b), nullptr, shapes(), 4242);
  ASSERT_TRUE(b && b->nvme_offload());
  train(*b, 1);
  // The staging reads come first; a write request of the commit fails.
  aio_testing_fail_request(b->nvme_swapper()->aio(), 40, ENOSPC);
  Status s = load_checkpoint(*b, dir, "t");
  ASSERT_EQ(s.code(), DSRT_ERR_IO) << s.message();
  ASSERT_NE(s.message().find("restoring the engine"), std::string::npos) << s.message();
  for (const Status &refused :
       {b->step(nullptr), save_checkpoint(*b, dir, "u"), b->read_partition_state(-1, 0, 1, nullptr)}) {
    EXPECT_EQ(refused.code(), DSRT_ERR_STATE) << refused.message();
    EXPECT_NE(refused.message().find("until a checkpoint load succeeds"), std::string::npos) << refused.message();
  }
  EXPECT_FALSE(path_exists(join_file_path(dir, "u")));
  // A load that fails before changing anything keeps the engine unusable.
  EXPECT_EQ(load_checkpoint(*b, dir, "missing").code(), DSRT_ERR_CHECKPOINT);
  EXPECT_EQ(b->step(nullptr).code(), DSRT_ERR_STATE);
  Status again = load_checkpoint(*b, dir, "t");
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_TRUE(ckpt_test::bitwise_equal(saved, partition_bytes(*b)));
  EXPECT_EQ(b->counters().global_step, a->counters().global_step);
  train(*b, 1);
  train(*a, 1);
  EXPECT_TRUE(ckpt_test::bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
  EXPECT_TRUE(remove_tree(dir).ok());
}

}  // namespace
}  // namespace dsrt
