// Checkpoints of engines whose states have no host pointer (master_partition() and
// optimizer_state() are nullptr when they live in GPU memory): save streams them out through
// read_partition_state in block-sized chunks, load writes them through write_partition_state.
// The test hook states_without_host_pointer makes the CPU device take that path, so the same code
// a GPU runs is checked here against the pointer path: the states round-trip bitwise in both
// directions, at every stage, with chunks smaller than a segment, and training continues bitwise.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckpt/shard_file.h"
#include "ckpt_test_util.h"

namespace dsrt {
namespace {

using namespace ckpt_test;

// Sets the hook (and optionally small blocks) for its lifetime.
struct NoHostPointer {
  explicit NoHostPointer(bool on, uint64_t block_bytes = 0) {
    checkpoint_test_hooks().states_without_host_pointer = on;
    checkpoint_test_hooks().block_bytes = block_bytes;
  }
  ~NoHostPointer() { checkpoint_test_hooks() = CheckpointTestHooks{}; }
};

TEST(CheckpointDeviceStates, RoundTripsThroughPartitionStateCopies) {
  for (int stage = 0; stage <= 3; ++stage) {
    // 4 KiB blocks: the 3000-element tensor is streamed in several chunks, and chunks end inside
    // segments; 1 MiB: one chunk per segment.
    for (uint64_t block : {uint64_t{4096}, uint64_t{0}}) {
      for (bool save_without : {true, false}) {
        SCOPED_TRACE("stage " + std::to_string(stage) + (block ? ", 4 KiB blocks" : ", 1 MiB blocks") +
                     (save_without ? ", saved through read_partition_state" : ", loaded through write_partition_state"));
        const std::string dir = scratch_dir("device_states");
        auto a = make_engine(config_for(stage));
        train(*a, 3);
        {
          NoHostPointer hook(save_without, block);
          Status s = save_checkpoint(*a, dir, "t");
          ASSERT_TRUE(s.ok()) << s.message();
        }
        const auto want = partition_bytes(*a);
        ASSERT_EQ(want.size(), 3u);  // master, exp_avg, exp_avg_sq
        auto b = make_engine(config_for(stage), nullptr, shapes(), 1234);
        ASSERT_FALSE(bitwise_equal(want, partition_bytes(*b)));
        {
          NoHostPointer hook(!save_without, block);
          Status s = load_checkpoint(*b, dir, "t");
          ASSERT_TRUE(s.ok()) << s.message();
        }
        EXPECT_TRUE(bitwise_equal(want, partition_bytes(*b)));
        EXPECT_TRUE(bitwise_equal(masters(*a), masters(*b)));
        EXPECT_EQ(a->counters().global_step, b->counters().global_step);
        train(*a, 2);
        train(*b, 2);
        EXPECT_TRUE(bitwise_equal(partition_bytes(*a), partition_bytes(*b)));
        EXPECT_TRUE(remove_tree(dir).ok());
      }
    }
  }
}

// The shard written through read_partition_state holds the same data as the pointer path's: a
// checkpoint saved both ways loads into two engines that agree, and each equals the source.
TEST(CheckpointDeviceStates, BothSavePathsWriteTheSameStates) {
  const std::string dir = scratch_dir("device_states_same");
  auto a = make_engine(config_for(2, DSRT_F32));
  train(*a, 2);
  {
    NoHostPointer hook(true, 4096);
    ASSERT_TRUE(save_checkpoint(*a, dir, "through_copies").ok());
  }
  {
    NoHostPointer hook(false, 4096);
    ASSERT_TRUE(save_checkpoint(*a, dir, "through_pointers").ok());
  }
  const auto want = partition_bytes(*a);
  for (const char *tag : {"through_copies", "through_pointers"}) {
    SCOPED_TRACE(tag);
    auto b = make_engine(config_for(1, DSRT_F32), nullptr, shapes(), 99);
    Status s = load_checkpoint(*b, dir, tag);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(bitwise_equal(want, partition_bytes(*b)));
  }
  EXPECT_TRUE(remove_tree(dir).ok());
}

}  // namespace
}  // namespace dsrt
