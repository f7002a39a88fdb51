// offload_param.device "nvme" at stage 3: the 16-bit shards of non-persistent tensors live in swap
// files. Bitwise the same fp32 weights and working copies as the in-memory stage-3 engine (fp32 and
// bf16, alone and with offload_optimizer "nvme", with write_fp32 between steps), memory report,
// the buffer_size check at build, checkpoints, and the swap folder's removal. The background
// swap-in, max_in_cpu, failures and the 16-bit model save: test_offload_param_swap.cpp.
#include <gtest/gtest.h>
#include <dirent.h>

#include <cstring>

#include "ckpt/ckpt.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

void set_param_nvme(TrainConfig *c, const std::string &path, int64_t buffer_size) {
  c->zero.offload_param.device = OffloadDevice::Nvme;
  c->zero.offload_param.nvme_path = path;
  c->zero.offload_param.buffer_count = 2;
  c->zero.offload_param.buffer_size = buffer_size;
  c->zero.offload_param.max_in_cpu = 0;  // every non-persistent shard on NVMe
}

TEST(OffloadParam, NvmeMatchesInMemoryBitwise) {
  for (bool bf16 : {false, true}) {
    for (bool optimizer_nvme : {false, true}) {
      SCOPED_TRACE(Format("bf16 %d offload_optimizer nvme %d", bf16, optimizer_nvme));
      TempFolder folder;
      TrainConfig config = base_config(3);
      config.bf16_enabled = bf16;
      std::unique_ptr<Engine> reference, offloaded;
      Status s = make_engine(config, local_comm(), kShapes, &reference);
      ASSERT_TRUE(s.ok()) << s.message();
      set_param_nvme(&config, folder.path, 4096);
      if (optimizer_nvme) set_nvme(&config, folder.path, 700, 2, true);
      s = make_engine(config, local_comm(), kShapes, &offloaded);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(offloaded->param_nvme_offload());
      EXPECT_EQ(offloaded->working_copy(), nullptr);
      EXPECT_EQ(entries_in(folder.path), optimizer_nvme ? 2u : 1u);  // private swap folders
      expect_same_working_copies(*reference, *offloaded);

      train(*reference, 3);
      train(*offloaded, 3);
      EXPECT_EQ(offloaded->working_copy(), nullptr);  // written back after each step
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);

      // write_fp32 between steps reaches the swapped-out shard and the persistent gathered copy.
      for (size_t t : {size_t{3}, size_t{4}}) {
        const std::vector<float> v = gaussian(77 + static_cast<uint32_t>(t), static_cast<size_t>(kShapes[t][0]), 0.3f);
        ASSERT_TRUE(reference->write_fp32(t, v.data(), v.size()).ok());
        s = offloaded->write_fp32(t, v.data(), v.size());
        ASSERT_TRUE(s.ok()) << s.message();
      }
      expect_same_working_copies(*reference, *offloaded);
      train(*reference, 3, 10);
      train(*offloaded, 3, 10);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);
      EXPECT_EQ(offloaded->counters().applied_steps, 6);
      // Later micro-steps follow the recorded order and prefetch (swap-in included).
      EXPECT_GT(offloaded->param_coordinator()->prefetch_hits(), 0);

      dsrt_memory_stats ref_mem, mem;
      std::memset(&ref_mem, 0, sizeof ref_mem);
      std::memset(&mem, 0, sizeof mem);
      ref_mem.struct_size = mem.struct_size = sizeof mem;
      ASSERT_TRUE(reference->memory(&ref_mem).ok());
      ASSERT_TRUE(offloaded->memory(&mem).ok());
      uint64_t shard_bytes = 0;
      for (size_t t = 0; t < kShapes.size(); ++t)
        if (offloaded->tensor_numel(t) > config.zero.stage3_param_persistence_threshold)
          shard_bytes += static_cast<uint64_t>(offloaded->partitioning().shard_layout().shard_size(t)) *
                         dtype_size(offloaded->working_dtype());
      EXPECT_GT(shard_bytes, 0u);
      EXPECT_EQ(mem.working_params[DSRT_LOC_NVME], shard_bytes);
      EXPECT_EQ(mem.working_params[DSRT_LOC_DEVICE],
                ref_mem.working_params[DSRT_LOC_DEVICE] - reference->partitioning().resident_working_elems() *
                                                              dtype_size(reference->working_dtype()));
      const uint64_t swap_buffers = offloaded->param_nvme_swapper()->host_bytes();
      EXPECT_GE(swap_buffers, 2u * 4096u);
      EXPECT_EQ(mem.buffers[DSRT_LOC_HOST],
                ref_mem.buffers[DSRT_LOC_HOST] + swap_buffers +
                    (optimizer_nvme ? offloaded->nvme_swapper()->host_bytes() : 0));

      offloaded.reset();
      EXPECT_EQ(entries_in(folder.path), 0u);
    }
  }
}

TEST(OffloadParam, ShardLargerThanBufferSizeIsAConfigError) {
  TempFolder folder;
  TrainConfig config = base_config(3);
  set_param_nvme(&config, folder.path, 2500);
  std::unique_ptr<Engine> engine;
  Status s = make_engine(config, local_comm(), kShapes, &engine);
  ASSERT_EQ(s.code(), DSRT_ERR_CONFIG) << s.message();
  EXPECT_NE(s.message().find("layer3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("3000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("buffer_size (2500"), std::string::npos) << s.message();
  engine.reset();
  EXPECT_EQ(entries_in(folder.path), 0u);

  config.zero.offload_param.nvme_path.clear();
  EXPECT_EQ(Engine::create(config, local_comm(), &engine).code(), DSRT_ERR_CONFIG);
}

TEST(OffloadParam, CheckpointResumesBitwise) {
  TempFolder swap_a, swap_b, dir;
  TrainConfig config = base_config(3);
  config.bf16_enabled = true;
  set_param_nvme(&config, swap_a.path, 4096);
  std::unique_ptr<Engine> a, b;
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &a).ok());
  train(*a, 2);
  Status s = save_checkpoint(*a, dir.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  train(*a, 2, 20);
  set_param_nvme(&config, swap_b.path, 4096);
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &b, false).ok());
  s = load_checkpoint(*b, dir.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  train(*b, 2, 20);
  expect_bitwise_equal(read_all(*a), read_all(*b));
  expect_same_working_copies(*a, *b);

  ASSERT_EQ(std::system(("rm -rf '" + dir.path + "'/*").c_str()), 0);
}

}  // namespace
}  // namespace dsrt
