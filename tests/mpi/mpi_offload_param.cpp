// dsrt-mpi-ranks: 2 3
// offload_param.device "nvme" across ranks: each rank's working shards in its own swap folder give
// bitwise the fp32 weights and gathered working copies of the in-memory stage-3 engine (uneven
// shards at 3 ranks), with and without offload_optimizer "nvme". offload_param.device "cpu" (every
// rank's shards in pinned host memory) likewise, with gradient accumulation, write_fp32 and the
// 16-bit model file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "../cpp/offload_test_util.h"
#include "ckpt/ckpt.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace offload_test;

std::shared_ptr<Comm> g_world;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

TEST(MpiOffloadParam, NvmeMatchesInMemoryBitwise) {
  for (bool bf16 : {false, true}) {
    for (bool optimizer_nvme : {false, true}) {
      SCOPED_TRACE(Format("bf16 %d offload_optimizer nvme %d", bf16, optimizer_nvme));
      TempFolder folder;
      TrainConfig config = base_config(3);
      config.bf16_enabled = bf16;
      std::unique_ptr<Engine> reference, offloaded;
      Status s = make_engine(config, g_world, kShapes, &reference);
      ASSERT_TRUE(s.ok()) << s.message();
      config.zero.offload_param.device = OffloadDevice::Nvme;
      config.zero.offload_param.nvme_path = folder.path;
      config.zero.offload_param.buffer_count = 3;
      config.zero.offload_param.buffer_size = 2000;
      config.zero.offload_param.max_in_cpu = 0;
      if (optimizer_nvme) set_nvme(&config, folder.path, 500, 2, true);
      s = make_engine(config, g_world, kShapes, &offloaded);
      ASSERT_TRUE(s.ok()) << s.message();
      train(*reference, 4);
      train(*offloaded, 4);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);
      EXPECT_GT(offloaded->param_coordinator()->prefetch_hits(), 0);
      offloaded.reset();
      ASSERT_TRUE(g_world->barrier().ok());
    }
  }
}

TEST(MpiOffloadParam, MaxInCpuSplitsShardsBetweenHostAndNvme) {
  // Shards per rank: layer1 ceil(1000/W), layer2 ceil(2145/W), layer3 ceil(3000/W), layer5 ceil(129/W).
  TrainConfig reference_config = base_config(3);
  reference_config.bf16_enabled = true;
  std::unique_ptr<Engine> probe;
  ASSERT_TRUE(make_engine(reference_config, g_world, kShapes, &probe).ok());
  const ShardLayout &layout = probe->partitioning().shard_layout();
  auto bytes = [&](size_t t) { return static_cast<uint64_t>(layout.shard_size(t)) * 2; };
  const uint64_t all = bytes(1) + bytes(2) + bytes(3) + bytes(5);
  struct Case {
    int64_t max_in_cpu;
    uint64_t on_nvme;
  };
  const std::vector<Case> cases = {{0, all}, {1000000000, 0}, {layout.shard_size(1) + 100, all - bytes(1)}};
  probe.reset();
  for (const Case &k : cases) {
    SCOPED_TRACE(Format("max_in_cpu %lld", static_cast<long long>(k.max_in_cpu)));
    TempFolder folder;
    std::unique_ptr<Engine> reference, offloaded;
    ASSERT_TRUE(make_engine(reference_config, g_world, kShapes, &reference).ok());
    TrainConfig config = reference_config;
    config.zero.offload_param.device = OffloadDevice::Nvme;
    config.zero.offload_param.nvme_path = folder.path;
    config.zero.offload_param.buffer_count = 2;
    config.zero.offload_param.buffer_size = 2000;
    config.zero.offload_param.max_in_cpu = k.max_in_cpu;
    Status s = make_engine(config, g_world, kShapes, &offloaded);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(offloaded->param_nvme_shard_bytes(), k.on_nvme);
    EXPECT_EQ(offloaded->param_nvme_swapper()->nvme_bytes(), k.on_nvme);
    EXPECT_GE(offloaded->param_nvme_resident_bytes(), all - k.on_nvme);
    train(*reference, 3);
    train(*offloaded, 3);
    expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    offloaded.reset();
    ASSERT_TRUE(g_world->barrier().ok());
  }
}


std::string file_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(MpiOffloadParam, CpuMatchesInMemoryBitwise) {
  for (bool bf16 : {false, true}) {
    for (int accumulation : {1, 2}) {
      SCOPED_TRACE(Format("bf16 %d gradient_accumulation_steps %d", bf16, accumulation));
      TrainConfig config = base_config(3);
      config.bf16_enabled = bf16;
      config.gradient_accumulation_steps = accumulation;
      std::unique_ptr<Engine> reference, offloaded;
      Status s = make_engine(config, g_world, kShapes, &reference);
      ASSERT_TRUE(s.ok()) << s.message();
      config.zero.offload_param.device = OffloadDevice::Cpu;
      s = make_engine(config, g_world, kShapes, &offloaded);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(offloaded->param_offload());
      EXPECT_EQ(offloaded->working_copy(), nullptr);
      train(*reference, 3 * accumulation);
      train(*offloaded, 3 * accumulation);
      EXPECT_EQ(offloaded->counters().applied_steps, 3);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);
      const std::vector<float> v = gaussian(91, 3000, 0.3f);  // layer3: every rank holds a piece
      ASSERT_TRUE(reference->write_fp32(3, v.data(), v.size()).ok());
      ASSERT_TRUE(offloaded->write_fp32(3, v.data(), v.size()).ok());
      train(*reference, accumulation, 30);
      train(*offloaded, accumulation, 30);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);
      EXPECT_GT(offloaded->param_coordinator()->prefetch_hits(), 0);

      // This rank's non-persistent shards are reported under host memory.
      dsrt_memory_stats mem;
      std::memset(&mem, 0, sizeof mem);
      mem.struct_size = sizeof mem;
      ASSERT_TRUE(offloaded->memory(&mem).ok());
      uint64_t shard_bytes = 0, packed_bytes = 0;
      for (size_t t : {size_t{1}, size_t{2}, size_t{3}, size_t{5}}) {
        const uint64_t bytes = static_cast<uint64_t>(offloaded->partitioning().shard_layout().shard_size(t)) *
                               dtype_size(offloaded->working_dtype());
        shard_bytes += bytes;
        packed_bytes += (bytes + 63) / 64 * 64;
      }
      // On the CPU device they are kept in the working layout (the step writes them in place):
      // this rank's whole working partition, persistent tensors' slots and shard padding included.
      // On a GPU the shards are packed one after another, each on a 64-byte boundary (copied to
      // the device's working copy before the gathers).
      const uint64_t layout_bytes = static_cast<uint64_t>(offloaded->partitioning().resident_working_elems()) *
                                    dtype_size(offloaded->working_dtype());
      // With fp32 working shards on the CPU device that layout is the masters' own: the kept shards
      // are the masters, and no host memory is counted for them beside the masters.
      EXPECT_EQ(offloaded->working_shards_are_masters(), !bf16 && offloaded->device().type() == DSRT_DEVICE_CPU);
      if (offloaded->working_shards_are_masters()) {
        EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], 0u);
        EXPECT_EQ(mem.master_params[DSRT_LOC_DEVICE], layout_bytes);
      } else {
        EXPECT_GE(mem.working_params[DSRT_LOC_HOST], shard_bytes);
        if (offloaded->device().type() == DSRT_DEVICE_CPU)
          EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], (layout_bytes + 63) / 64 * 64);
        else
          EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], packed_bytes);
      }
      EXPECT_EQ(mem.working_params[DSRT_LOC_NVME], 0u);

      // The 16-bit model gathered from host shards is the in-memory engine's, byte for byte.
      if (bf16 && accumulation == 2) {
        uint64_t pid = static_cast<uint64_t>(::getpid());  // one file name for all ranks: rank 0's pid
        ASSERT_TRUE(g_world->broadcast_bytes(&pid, sizeof pid, 0).ok());
        const std::string path = ::testing::TempDir() + "/dsrt-mpi-offload-param-cpu-" + std::to_string(pid);
        const std::string a = path + ".reference.safetensors", b = path + ".offload.safetensors";
        ASSERT_TRUE(save_16bit_model(*reference, a, g_world->rank() == 0).ok());
        s = save_16bit_model(*offloaded, b, g_world->rank() == 0);
        ASSERT_TRUE(s.ok()) << s.message();
        if (g_world->rank() == 0) {
          const std::string ra = file_bytes(a);
          EXPECT_GT(ra.size(), 2u * 6000u);
          EXPECT_TRUE(ra == file_bytes(b)) << "the 16-bit model files differ";
          std::remove(a.c_str());
          std::remove(b.c_str());
        }
        ASSERT_TRUE(g_world->barrier().ok());
      }
      offloaded.reset();
      ASSERT_TRUE(g_world->barrier().ok());
    }
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_offload_param", &dsrt::g_world); }
