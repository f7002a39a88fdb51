// ZeRO-Offload++ (offload_optimizer.ratio < 1, device "cpu", stage 3): the first floor((1 - ratio)
// * sub-groups) sub-groups of the partition keep their masters and states on the device and are
// stepped by the device backend, the rest on the host by the CPU optimizer, both at once. On the
// CPU device: weights and working copies bitwise those of ratio 1 (everything on the host) and of
// ratio 0, for fp32 and bf16, with gradient accumulation and clipping; dsrt_engine_memory puts
// exactly the device sub-groups' masters and states under the device; checkpoints round-trip
// between ratios; the configurations DeepSpeed refuses, or dsrt does not implement, are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

// Partition (one rank): 7 + 1000 + 33*65 + 3000 + 5 + 129 elements (padding aside).
const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

TrainConfig ratio_config(double ratio, bool bf16, int accumulation) {
  TrainConfig c = base_config(3);
  c.bf16_enabled = bf16;
  c.gradient_accumulation_steps = accumulation;
  c.zero.offload_optimizer.device = OffloadDevice::Cpu;
  c.zero.offload_optimizer.ratio = ratio;
  c.zero.sub_group_size = 1000;
  return c;
}

dsrt_memory_stats memory_of(const Engine &e) {
  dsrt_memory_stats m;
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  EXPECT_TRUE(e.memory(&m).ok());
  return m;
}

TEST(OffloadRatio, BitwiseEqualToRatioOneAndZero) {
  for (bool bf16 : {false, true}) {
    for (int accumulation : {1, 2}) {
      SCOPED_TRACE(Format("bf16 %d accumulation %d", bf16, accumulation));
      std::unique_ptr<Engine> all_host, half, third, all_device;
      ASSERT_TRUE(make_engine(ratio_config(1.0, bf16, accumulation), local_comm(), kShapes, &all_host).ok());
      Status s = make_engine(ratio_config(0.5, bf16, accumulation), local_comm(), kShapes, &half);
      ASSERT_TRUE(s.ok()) << s.message();
      TrainConfig per_param = ratio_config(0.3, bf16, accumulation);
      per_param.zero.sub_group_size = 0;  // one sub-group per parameter piece
      ASSERT_TRUE(make_engine(per_param, local_comm(), kShapes, &third).ok());
      ASSERT_TRUE(make_engine(ratio_config(0.0, bf16, accumulation), local_comm(), kShapes, &all_device).ok());
      for (Engine *e : {all_host.get(), half.get(), third.get(), all_device.get()}) train(*e, 3 * accumulation);
      const auto reference = read_all(*all_host);
      for (Engine *e : {half.get(), third.get(), all_device.get()}) {
        expect_bitwise_equal(reference, read_all(*e));
        expect_same_working_copies(*all_host, *e);
      }
      // The weights moved: the comparison is not of untouched values.
      std::unique_ptr<Engine> fresh;
      ASSERT_TRUE(make_engine(ratio_config(1.0, bf16, accumulation), local_comm(), kShapes, &fresh).ok());
      EXPECT_NE(std::memcmp(read_all(*fresh)[3].data(), reference[3].data(), reference[3].size() * sizeof(float)), 0);
    }
  }
}

TEST(OffloadRatio, MemoryPutsTheDeviceSubGroupsOnTheDevice) {
  std::unique_ptr<Engine> all_host, half, all_device;
  ASSERT_TRUE(make_engine(ratio_config(1.0, false, 1), local_comm(), kShapes, &all_host).ok());
  ASSERT_TRUE(make_engine(ratio_config(0.5, false, 1), local_comm(), kShapes, &half).ok());
  ASSERT_TRUE(make_engine(ratio_config(0.0, false, 1), local_comm(), kShapes, &all_device).ok());
  const int64_t part = half->partitioning().partition_elems();
  const int64_t groups = (part + 999) / 1000;
  const int64_t device_groups = groups / 2;  // floor((1 - 0.5) * groups)
  const uint64_t device_elems = static_cast<uint64_t>(device_groups * 1000);
  const uint64_t host_elems = static_cast<uint64_t>(part) - device_elems;
  ASSERT_GE(groups, 4);
  const dsrt_memory_stats h = memory_of(*half), one = memory_of(*all_host), zero = memory_of(*all_device);
  EXPECT_EQ(h.master_params[DSRT_LOC_DEVICE], device_elems * 4);
  EXPECT_EQ(h.master_params[DSRT_LOC_HOST], host_elems * 4);
  EXPECT_EQ(h.optimizer_states[DSRT_LOC_DEVICE], 2 * device_elems * 4);  // AdamW: m and v
  EXPECT_EQ(h.optimizer_states[DSRT_LOC_HOST], 2 * host_elems * 4);
  EXPECT_EQ(one.master_params[DSRT_LOC_DEVICE], 0u);
  EXPECT_EQ(one.master_params[DSRT_LOC_HOST], static_cast<uint64_t>(part) * 4);
  EXPECT_EQ(zero.master_params[DSRT_LOC_HOST], 0u);
  EXPECT_EQ(zero.master_params[DSRT_LOC_DEVICE], static_cast<uint64_t>(part) * 4);
  EXPECT_EQ(zero.optimizer_states[DSRT_LOC_DEVICE], static_cast<uint64_t>(part) * 8);
  // Gradients: ratio 1 on the CPU device steps in place (no host copy); a split keeps the staged
  // route, whose host half reads a host copy of the whole gradient partition.
  EXPECT_EQ(one.gradients[DSRT_LOC_HOST], 0u);
  EXPECT_EQ(h.gradients[DSRT_LOC_HOST], static_cast<uint64_t>(part) * 4);
  // The working copies are as with ratio 1.
  EXPECT_EQ(h.working_params[DSRT_LOC_DEVICE], one.working_params[DSRT_LOC_DEVICE]);
  // The split is not exposed as one host array.
  EXPECT_EQ(half->master_partition(), nullptr);
  EXPECT_NE(all_host->master_partition(), nullptr);
}

TEST(OffloadRatio, CheckpointsRoundTripAcrossRatios) {
  const std::string dir = testing::TempDir() + "dsrt_offload_ratio_" + std::to_string(::getpid());
  (void)remove_tree(dir);
  std::unique_ptr<Engine> a, reference;
  ASSERT_TRUE(make_engine(ratio_config(0.5, true, 1), local_comm(), kShapes, &a).ok());
  ASSERT_TRUE(make_engine(ratio_config(1.0, true, 1), local_comm(), kShapes, &reference).ok());
  train(*a, 2);
  train(*reference, 2);
  Status s = save_checkpoint(*a, dir, "t");
  ASSERT_TRUE(s.ok()) << s.message();
  train(*a, 2, 10);
  train(*reference, 2, 10);
  expect_bitwise_equal(read_all(*reference), read_all(*a));
  for (double ratio : {0.5, 1.0, 0.25}) {
    SCOPED_TRACE(Format("loaded at ratio %g", ratio));
    std::unique_ptr<Engine> b;
    ASSERT_TRUE(make_engine(ratio_config(ratio, true, 1), local_comm(), kShapes, &b, false).ok());
    s = load_checkpoint(*b, dir, "t");
    ASSERT_TRUE(s.ok()) << s.message();
    train(*b, 2, 10);
    expect_bitwise_equal(read_all(*a), read_all(*b));
    expect_same_working_copies(*a, *b);
  }
  (void)remove_tree(dir);
}

TEST(OffloadRatio, RefusedWhereDeepSpeedRefusesOrDsrtDoesNotImplement) {
  std::unique_ptr<Engine> e;
  TrainConfig c = ratio_config(0.5, false, 1);
  c.zero.stage = 2;
  Status s = Engine::create(c, local_comm(), &e);
  EXPECT_EQ(s.code(), DSRT_ERR_CONFIG);
  EXPECT_NE(s.message().find("offload_optimizer.ratio"), std::string::npos) << s.message();
  c = ratio_config(0.5, false, 1);
  c.optimizer.type = OptimizerType::Lamb;
  s = Engine::create(c, local_comm(), &e);
  EXPECT_EQ(s.code(), DSRT_ERR_UNSUPPORTED);
  EXPECT_NE(s.message().find("Lamb"), std::string::npos) << s.message();
  c = ratio_config(0.5, false, 1);
  c.zero.offload_optimizer.device = OffloadDevice::Nvme;
  c.zero.offload_optimizer.nvme_path = testing::TempDir();
  s = Engine::create(c, local_comm(), &e);
  EXPECT_EQ(s.code(), DSRT_ERR_UNSUPPORTED);
  EXPECT_NE(s.message().find("nvme"), std::string::npos) << s.message();
  // Lamb at ratio 1 is fine (the whole optimizer on the host).
  c = ratio_config(1.0, false, 1);
  c.optimizer.type = OptimizerType::Lamb;
  EXPECT_TRUE(Engine::create(c, local_comm(), &e).ok());
}

}  // namespace
}  // namespace dsrt
