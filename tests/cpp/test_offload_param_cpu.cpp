// offload_param.device "cpu" at stage 3: the working shards of non-persistent tensors live in pinned
// host memory between steps and the device working shards exist only while a step rewrites them.
// Bitwise the same fp32 weights and gathered working copies as the in-memory stage-3 engine (fp32
// and bf16, with and without gradient accumulation, with write_fp32 between steps), the memory
// report (shards under host), and checkpoints and 16-bit model files identical to the in-memory
// engine's, loadable across the two.
#include <gtest/gtest.h>
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "ckpt/ckpt.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

dsrt_memory_stats memory_of(const Engine &e) {
  dsrt_memory_stats m;
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  EXPECT_TRUE(e.memory(&m).ok());
  return m;
}

TEST(OffloadParamCpu, MatchesInMemoryBitwise) {
  for (bool bf16 : {false, true}) {
    for (int accumulation : {1, 3}) {
      SCOPED_TRACE(Format("bf16 %d gradient_accumulation_steps %d", bf16, accumulation));
      TrainConfig config = base_config(3);
      config.bf16_enabled = bf16;
      config.gradient_accumulation_steps = accumulation;
      std::unique_ptr<Engine> reference, offloaded;
      Status s = make_engine(config, local_comm(), kShapes, &reference);
      ASSERT_TRUE(s.ok()) << s.message();
      config.zero.offload_param.device = OffloadDevice::Cpu;
      s = make_engine(config, local_comm(), kShapes, &offloaded);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(offloaded->param_offload());
      EXPECT_FALSE(offloaded->param_nvme_offload());
      EXPECT_FALSE(reference->param_offload());
      EXPECT_EQ(offloaded->working_copy(), nullptr);
      expect_same_working_copies(*reference, *offloaded);

      train(*reference, 3 * accumulation);
      train(*offloaded, 3 * accumulation);
      EXPECT_EQ(offloaded->working_copy(), nullptr);  // between steps only the host shards (written in place)
      EXPECT_EQ(offloaded->counters().applied_steps, 3);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);

      // write_fp32 between steps reaches the host shard (layer3) and the persistent gathered copy (layer4).
      for (size_t t : {size_t{3}, size_t{4}}) {
        const std::vector<float> v = gaussian(77 + static_cast<uint32_t>(t), static_cast<size_t>(kShapes[t][0]), 0.3f);
        ASSERT_TRUE(reference->write_fp32(t, v.data(), v.size()).ok());
        s = offloaded->write_fp32(t, v.data(), v.size());
        ASSERT_TRUE(s.ok()) << s.message();
      }
      expect_same_working_copies(*reference, *offloaded);
      train(*reference, 2 * accumulation, 10);
      train(*offloaded, 2 * accumulation, 10);
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
      expect_same_working_copies(*reference, *offloaded);
      EXPECT_EQ(offloaded->counters().applied_steps, 5);
      EXPECT_GT(offloaded->param_coordinator()->prefetch_hits(), 0);
      EXPECT_EQ(offloaded->param_coordinator()->swap_in_stats().reads_on_demand, 0);  // nothing is read

      // Memory: the non-persistent shards under host, kept in the working layout on the CPU device
      // (the step writes them in place: the whole working partition, persistent tensors' slots and
      // shard padding included), the device working shards gone, no NVMe, buffers as in memory.
      const dsrt_memory_stats ref_mem = memory_of(*reference), mem = memory_of(*offloaded);
      uint64_t shard_bytes = 0;
      size_t shards = 0;
      for (size_t t = 0; t < kShapes.size(); ++t)
        if (offloaded->tensor_numel(t) > config.zero.stage3_param_persistence_threshold) {
          shard_bytes += static_cast<uint64_t>(offloaded->partitioning().shard_layout().shard_size(t)) *
                         dtype_size(offloaded->working_dtype());
          ++shards;
        }
      EXPECT_EQ(shards, 4u);
      const uint64_t layout_bytes = static_cast<uint64_t>(offloaded->partitioning().resident_working_elems()) *
                                    dtype_size(offloaded->working_dtype());
      // fp32: that layout is the masters' own, so the kept shards are the masters (nothing beside
      // them under host; the gathered views below point into them).
      EXPECT_EQ(offloaded->working_shards_are_masters(), !bf16);
      EXPECT_FALSE(reference->working_shards_are_masters());
      if (bf16) {
        EXPECT_GE(mem.working_params[DSRT_LOC_HOST], shard_bytes);
        EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], (layout_bytes + 63) / 64 * 64);
      } else {
        EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], 0u);
        EXPECT_EQ(mem.master_params[DSRT_LOC_DEVICE], layout_bytes);
        EXPECT_EQ(mem.master_params[DSRT_LOC_DEVICE], ref_mem.master_params[DSRT_LOC_DEVICE]);
      }
      EXPECT_EQ(mem.working_params[DSRT_LOC_HOST], offloaded->param_nvme_resident_bytes());
      EXPECT_EQ(ref_mem.working_params[DSRT_LOC_HOST], 0u);
      EXPECT_EQ(mem.working_params[DSRT_LOC_NVME], 0u);
      // A tensor gathered at one rank is the host shard itself (no copy): not counted again.
      uint64_t views = 0;
      for (size_t t = 0; t < kShapes.size(); ++t)
        if (!offloaded->param_coordinator()->persistent(t) && offloaded->param_coordinator()->gathered_data(t) != nullptr)
          views += static_cast<uint64_t>(offloaded->partitioning().shard_layout().shard_size(t)) *
                   dtype_size(offloaded->working_dtype());
      EXPECT_EQ(mem.working_params[DSRT_LOC_DEVICE],
                ref_mem.working_params[DSRT_LOC_DEVICE] - views -
                    reference->partitioning().resident_working_elems() * dtype_size(reference->working_dtype()));
      EXPECT_EQ(mem.buffers[DSRT_LOC_HOST], ref_mem.buffers[DSRT_LOC_HOST]);
      EXPECT_EQ(mem.master_params[DSRT_LOC_DEVICE], ref_mem.master_params[DSRT_LOC_DEVICE]);
    }
  }
}

TEST(OffloadParamCpu, WithOffloadOptimizerCpuMatchesInMemory) {
  TrainConfig config = base_config(3);
  for (bool bf16 : {true, false}) {  // fp32: the kept shards are the (pinned host) masters themselves
    SCOPED_TRACE(Format("bf16 %d", bf16));
    config.bf16_enabled = bf16;
    config.gradient_accumulation_steps = 2;
    config.zero.offload_optimizer.device = OffloadDevice::Cpu;
    config.zero.offload_param.device = OffloadDevice::None;
    std::unique_ptr<Engine> reference, offloaded;
    ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &reference).ok());
    config.zero.offload_param.device = OffloadDevice::Cpu;
    Status s = make_engine(config, local_comm(), kShapes, &offloaded);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(offloaded->working_shards_are_masters(), !bf16);
    train(*reference, 6);
    train(*offloaded, 6);
    expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    expect_same_working_copies(*reference, *offloaded);
    // write_fp32 between steps: the master and the kept shard (one array when they are the same).
    const std::vector<float> v = gaussian(91, static_cast<size_t>(kShapes[3][0]), 0.3f);
    ASSERT_TRUE(reference->write_fp32(3, v.data(), v.size()).ok());
    ASSERT_TRUE(offloaded->write_fp32(3, v.data(), v.size()).ok());
    train(*reference, 2, 30);
    train(*offloaded, 2, 30);
    expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    // refresh_working_copies (as after loading masters) goes through the host shards too.
    ASSERT_TRUE(reference->refresh_working_copies().ok());
    s = offloaded->refresh_working_copies();
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(offloaded->working_copy(), nullptr);
    expect_same_working_copies(*reference, *offloaded);
  }
}

std::string file_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Regular files under dir (recursively), relative paths sorted.
void list_files(const std::string &dir, const std::string &prefix, std::vector<std::string> *out) {
  DIR *d = opendir((dir + "/" + prefix).c_str());
  if (d == nullptr) return;
  while (dirent *e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    DIR *sub = opendir((dir + "/" + rel).c_str());
    if (sub != nullptr) {
      closedir(sub);
      list_files(dir, rel, out);
    } else {
      out->push_back(rel);
    }
  }
  closedir(d);
  std::sort(out->begin(), out->end());
}

TEST(OffloadParamCpu, CheckpointsAndSixteenBitModelMatchInMemory) {
  TempFolder dir_a, dir_b;
  TrainConfig config = base_config(3);
  config.bf16_enabled = true;
  std::unique_ptr<Engine> reference, offloaded;
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &reference).ok());
  TrainConfig offload_config = config;
  offload_config.zero.offload_param.device = OffloadDevice::Cpu;
  ASSERT_TRUE(make_engine(offload_config, local_comm(), kShapes, &offloaded).ok());
  train(*reference, 2);
  train(*offloaded, 2);
  Status s = save_checkpoint(*reference, dir_a.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  s = save_checkpoint(*offloaded, dir_b.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  s = save_16bit_model(*reference, dir_a.path + "/model.safetensors", true);
  ASSERT_TRUE(s.ok()) << s.message();
  s = save_16bit_model(*offloaded, dir_b.path + "/model.safetensors", true);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(offloaded->working_copy(), nullptr);

  // The model files are identical; so are the checkpoints, but for each save's random save_id (in
  // the manifest and in the shard files' 4096-byte headers) and the manifest's checksum.
  const std::string model = file_bytes(dir_a.path + "/model.safetensors");
  EXPECT_GT(model.size(), 2u * (7 + 1000 + 33 * 65 + 3000 + 5 + 129));
  EXPECT_TRUE(model == file_bytes(dir_b.path + "/model.safetensors")) << "the 16-bit model files differ";
  std::vector<std::string> files_a, files_b;
  list_files(dir_a.path, "", &files_a);
  list_files(dir_b.path, "", &files_b);
  EXPECT_EQ(files_a, files_b);
  const std::regex save_id("\"save_id\":\\s*\"[0-9a-f]+\"");
  size_t shards = 0;
  for (const std::string &f : files_a) {
    std::string a = file_bytes(dir_a.path + "/" + f), b = file_bytes(dir_b.path + "/" + f);
    if (f.size() > 6 && f.compare(f.size() - 6, 6, ".shard") == 0) {
      ASSERT_GT(a.size(), 4096u);
      a.erase(0, 4096);
      b.erase(0, 4096);
      ++shards;
    } else if (f.find("manifest.json") != std::string::npos) {
      a = std::regex_replace(a, save_id, "");
      b = std::regex_replace(b, save_id, "");
    } else if (f.find("manifest.crc32c") != std::string::npos) {
      continue;
    }
    EXPECT_TRUE(a == b) << f << " differs from the in-memory engine's";
  }
  EXPECT_EQ(shards, 1u);

  // Each engine resumes from the other's checkpoint and trains on bitwise as the other.
  std::unique_ptr<Engine> from_memory, from_offload;
  ASSERT_TRUE(make_engine(offload_config, local_comm(), kShapes, &from_memory, false).ok());
  s = load_checkpoint(*from_memory, dir_a.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &from_offload, false).ok());
  s = load_checkpoint(*from_offload, dir_b.path, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(from_memory->working_copy(), nullptr);
  expect_same_working_copies(*reference, *from_memory);
  for (Engine *e : {reference.get(), offloaded.get(), from_memory.get(), from_offload.get()}) train(*e, 2, 20);
  const auto expected = read_all(*reference);
  expect_bitwise_equal(expected, read_all(*offloaded));
  expect_bitwise_equal(expected, read_all(*from_memory));
  expect_bitwise_equal(expected, read_all(*from_offload));
  expect_same_working_copies(*reference, *from_memory);

  for (const std::string &d : {dir_a.path, dir_b.path})
    ASSERT_EQ(std::system(("rm -rf '" + d + "'/*").c_str()), 0);
}

}  // namespace
}  // namespace dsrt
