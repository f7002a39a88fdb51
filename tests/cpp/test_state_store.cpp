// StateStore (src/offload/state_store.h): range copies of the masters and optimizer states as fp32
// host values. bf16 storage rounds to nearest-even on the way in (checked against a bit-level
// rounding written here) and widens exactly on the way out; an offload_optimizer.ratio split
// sends [0, split) to the device part and the rest to the host buffer, and a range that crosses
// the split reads back exactly what was written.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "device/device.h"
#include "offload/state_store.h"
#include "state_store_test_util.h"

namespace dsrt {
namespace {

using state_store_test::random_values;
using state_store_test::reference_bf16;
using state_store_test::widen;

TEST(StateStore, Bf16MastersRoundOnWriteAndWidenOnRead) {
  std::unique_ptr<Device> device = device_create_cpu();
  const size_t n = 1000;
  StateStore store;
  store.set_dtypes(DSRT_BF16, DSRT_F32);
  store.set_device(device.get(), false);
  ASSERT_TRUE(device->allocate(n * 2, &store.buffer(-1)).ok());
  ASSERT_TRUE(device->allocate(n * 4, &store.buffer(0)).ok());
  std::vector<float> master = random_values(n, 11), state = random_values(n, 12);
  ASSERT_TRUE(store.copy(-1, 0, n, master.data(), true).ok());
  ASSERT_TRUE(store.copy(0, 0, n, state.data(), true).ok());
  const uint16_t *stored = store.buffer(-1).as<uint16_t>();
  size_t changed = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(stored[i], reference_bf16(master[i])) << i;
    changed += widen(stored[i]) != master[i];
  }
  EXPECT_GT(changed, n / 2);  // random fp32 values are rarely bf16 already: the rounding happened
  std::vector<float> back(300);
  ASSERT_TRUE(store.copy(-1, 500, back.size(), back.data(), false).ok());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], widen(reference_bf16(master[500 + i]))) << i;
  ASSERT_TRUE(store.copy(0, 500, back.size(), back.data(), false).ok());  // fp32 state: exact
  EXPECT_EQ(std::memcmp(back.data(), state.data() + 500, back.size() * sizeof(float)), 0);
}

TEST(StateStore, SplitSendsTheFirstElementsToTheDevicePart) {
  std::unique_ptr<Device> device = device_create_cpu();
  const size_t n = 777, split = 300;
  StateStore store;
  store.set_dtypes(DSRT_F32, DSRT_F32);
  store.set_device(device.get(), true);
  store.set_split(static_cast<int64_t>(split));
  for (int s = -1; s < 2; ++s) {
    ASSERT_TRUE(device->allocate(split * sizeof(float), &store.device_part(s)).ok());
    ASSERT_TRUE(device->allocate((n - split) * sizeof(float), &store.buffer(s)).ok());
  }
  std::vector<std::vector<float>> values;
  for (int s = -1; s < 2; ++s) {
    values.push_back(random_values(n, 20 + static_cast<uint32_t>(s + 1)));
    ASSERT_TRUE(store.copy(s, 0, n, values.back().data(), true).ok());
  }
  for (int s = -1; s < 2; ++s) {
    const std::vector<float> &v = values[static_cast<size_t>(s + 1)];
    EXPECT_EQ(std::memcmp(store.device_part(s).as<float>(), v.data(), split * sizeof(float)), 0) << s;
    EXPECT_EQ(std::memcmp(store.buffer(s).as<float>(), v.data() + split, (n - split) * sizeof(float)), 0) << s;
    for (size_t i = 0; i < n; i += 37) EXPECT_EQ(*store.at(s, static_cast<int64_t>(i)), v[i]) << s << " " << i;
    // A range across the split, written with new values and read back.
    std::vector<float> fresh = random_values(200, 40 + static_cast<uint32_t>(s + 1)), back(200);
    ASSERT_TRUE(store.copy(s, split - 100, fresh.size(), fresh.data(), true).ok());
    ASSERT_TRUE(store.copy(s, split - 100, back.size(), back.data(), false).ok());
    EXPECT_EQ(std::memcmp(back.data(), fresh.data(), back.size() * sizeof(float)), 0) << s;
    EXPECT_EQ(store.buffer(s).as<float>()[99], fresh[199]) << s;
    EXPECT_EQ(store.device_part(s).as<float>()[split - 100], fresh[0]) << s;
  }
}

}  // namespace
}  // namespace dsrt
