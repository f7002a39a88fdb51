// StateStore with offload_optimizer "nvme" (src/offload/state_store.h, nvme_states.h): the store
// allocates no state buffer, initialize() creates the sub-groups with the initial masters (zeros
// where a piece has none) and states, copy() reaches them across sub-group boundaries (bf16 storage
// rounds to nearest-even on the way in, checked against a bit-level rounding written here), the
// sub-group cut follows sub_group_size (0: one per piece) and the optimizer pass visits the
// sub-groups from the one asked for, each with its master and states. Also the host staging the
// offloaded step needs: a zeroed pinned gradient partition and a working-dtype staging.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "device/device.h"
#include "offload/state_store.h"
#include "state_store_test_util.h"
#include "test_aio_util.h"

namespace dsrt {
namespace {

using testing_aio::ScratchDir;

using state_store_test::random_values;
using state_store_test::reference_bf16;
using state_store_test::widen;

// A 1000-element partition in three pieces; the middle one has no initial values (zeros).
struct Fixture {
  std::unique_ptr<Device> device = device_create_cpu();
  ScratchDir nvme{"state-store-nvme"};
  std::vector<float> first = random_values(300, 1), last = random_values(450, 2);
  std::vector<StatePiece> pieces{{0, 300, first.data()}, {300, 250, nullptr}, {550, 450, last.data()}};

  StateStoreLayout layout(int64_t sub_group_size) const {
    StateStoreLayout l;
    l.partition_elems = 1000;
    l.num_states = 2;
    l.state_initial[0] = 0.0f;
    l.state_initial[1] = 0.25f;
    l.on_nvme = true;
    l.nvme.sub_group_size = sub_group_size;
    l.nvme.swapper.aio.block_size = 64 * 1024;
    l.nvme.swapper.offload.device = OffloadDevice::Nvme;
    l.nvme.swapper.offload.nvme_path = nvme.path();
    l.nvme.swapper.offload.buffer_count = 2;
    return l;
  }
  float initial_master(size_t i) const { return i < 300 ? first[i] : i < 550 ? 0.0f : last[i - 550]; }
};

TEST(StateStoreNvme, InitialValuesAndRangesAcrossSubGroups) {
  Fixture f;
  StateStore store;
  ASSERT_TRUE(store.allocate(f.device.get(), f.layout(128)).ok());
  EXPECT_EQ(store.nvme(), nullptr);  // created with the initial values
  Status status = store.initialize(f.pieces);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_NE(store.nvme(), nullptr);
  EXPECT_EQ(store.buffer(-1).bytes(), 0u);
  EXPECT_EQ(store.buffer(0).bytes(), 0u);
  EXPECT_EQ(store.host_grads().bytes(), 0u);
  EXPECT_EQ(store.nvme()->grad_swap(), nullptr);
  // 128-element sub-groups: 7 full ones and one of 104.
  ASSERT_EQ(store.nvme()->sub_groups(), 8u);
  EXPECT_EQ(store.nvme()->group_begin(7), 896);
  EXPECT_EQ(store.nvme()->group_end(7), 1000);

  std::vector<float> master(1000), v(1000);
  ASSERT_TRUE(store.copy(-1, 0, 1000, master.data(), false).ok());
  ASSERT_TRUE(store.copy(1, 0, 1000, v.data(), false).ok());
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(master[i], f.initial_master(i)) << i;
    ASSERT_EQ(v[i], 0.25f) << i;
  }
  // A range over four sub-groups, written then read back in a range that starts inside it.
  std::vector<float> values = random_values(400, 3);
  ASSERT_TRUE(store.copy(0, 100, values.size(), values.data(), true).ok());
  std::vector<float> back(500);
  ASSERT_TRUE(store.copy(0, 50, back.size(), back.data(), false).ok());
  for (size_t i = 0; i < back.size(); ++i) {
    const size_t at = 50 + i;
    ASSERT_EQ(back[i], at >= 100 && at < 500 ? values[at - 100] : 0.0f) << at;
  }
}

TEST(StateStoreNvme, Bf16MastersRoundOnTheWayInAndPiecesCutTheSubGroups) {
  Fixture f;
  StateStore store;
  store.set_dtypes(DSRT_BF16, DSRT_F32);
  ASSERT_TRUE(store.allocate(f.device.get(), f.layout(0)).ok());
  Status status = store.initialize(f.pieces);
  ASSERT_TRUE(status.ok()) << status.message();
  // sub_group_size 0: one sub-group per piece.
  ASSERT_EQ(store.nvme()->sub_groups(), 3u);
  EXPECT_EQ(store.nvme()->group_begin(1), 300);
  EXPECT_EQ(store.nvme()->group_begin(2), 550);
  std::vector<float> master(1000);
  ASSERT_TRUE(store.copy(-1, 0, 1000, master.data(), false).ok());
  size_t changed = 0;
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(master[i], widen(reference_bf16(f.initial_master(i)))) << i;
    changed += master[i] != f.initial_master(i);
  }
  EXPECT_GT(changed, 500u);  // random fp32 values are rarely bf16 already: the rounding happened
}

TEST(StateStoreNvme, OptimizerPassVisitsSubGroupsFromTheOneAsked) {
  Fixture f;
  StateStore store;
  ASSERT_TRUE(store.allocate(f.device.get(), f.layout(256)).ok());
  ASSERT_TRUE(store.initialize(f.pieces).ok());
  NvmeStates &nvme = *store.nvme();
  ASSERT_EQ(nvme.sub_groups(), 4u);
  std::vector<size_t> seen;
  // Adds g + 1 to the masters of every sub-group visited (from sub-group 1 on).
  auto step = [&](size_t g, const SubGroupView &view) -> Status {
    seen.push_back(g);
    EXPECT_EQ(view.data.size(), 3u);  // master, m, v
    EXPECT_EQ(static_cast<int64_t>(view.count_f32(0)), nvme.group_end(g) - nvme.group_begin(g));
    for (uint64_t k = 0; k < view.count_f32(0); ++k) view.f32(0)[k] += static_cast<float>(g + 1);
    return Status::Ok();
  };
  SubGroupPipelineStats stats;
  Status status = nvme.run_pass(1, step, &stats);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(seen, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(stats.committed, 3u);
  std::vector<float> master(1000);
  ASSERT_TRUE(store.copy(-1, 0, 1000, master.data(), false).ok());
  for (size_t i = 0; i < 1000; ++i) {
    const size_t g = i / 256;
    ASSERT_EQ(master[i], g == 0 ? f.initial_master(i) : f.initial_master(i) + static_cast<float>(g + 1)) << i;
  }
}

TEST(StateStore, AllocatesTheOffloadedStepsHostStaging) {
  std::unique_ptr<Device> device = device_create_cpu();
  StateStoreLayout l;
  l.partition_elems = 777;
  l.num_states = 1;
  l.state_initial[0] = 0.5f;
  l.offloaded = true;
  l.pin_memory = false;
  l.stage_grads = true;
  l.stage_working = true;
  l.working_dtype = DSRT_F16;
  StateStore store;
  ASSERT_TRUE(store.allocate(device.get(), l).ok());
  EXPECT_TRUE(store.offloaded());
  ASSERT_EQ(store.host_grads().bytes(), 777u * sizeof(float));
  EXPECT_EQ(store.host_working().bytes(), 777u * 2);
  for (size_t i = 0; i < 777; ++i) ASSERT_EQ(store.host_grads().as<float>()[i], 0.0f) << i;
  ASSERT_EQ(store.buffer(0).bytes(), 777u * sizeof(float));
  for (size_t i = 0; i < 777; ++i) ASSERT_EQ(store.buffer(0).as<float>()[i], 0.5f) << i;
  // Initial masters from the pieces, the rest zero.
  std::vector<float> init = random_values(100, 4);
  ASSERT_TRUE(store.initialize({StatePiece{600, 100, init.data()}}).ok());
  std::vector<float> master(777);
  ASSERT_TRUE(store.copy(-1, 0, 777, master.data(), false).ok());
  for (size_t i = 0; i < 777; ++i) ASSERT_EQ(master[i], i >= 600 && i < 700 ? init[i - 600] : 0.0f) << i;
}

}  // namespace
}  // namespace dsrt
