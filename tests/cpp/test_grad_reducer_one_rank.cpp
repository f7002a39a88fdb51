// The stage-3 gradient reducer on one rank accumulates each tensor straight from its slice of the
// bucket buffer (no rearranged copy, no collective). Checked against the accumulated sums computed
// here from the same random gradients, and against the rearranging route (which a prescale other
// than 1 takes; 2 scales every value and sum exactly), bit for bit: tensors whose sizes are not multiples of the buffer
// alignment, several tensors per bucket and a tensor larger than the bucket, gradient
// accumulation, a tensor handed out but never made ready (zero), with and without overlap_comm.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "optim/optimizer_backend.h"
#include "zero/grad_reducer.h"
#include "zero/partition.h"

namespace dsrt {
namespace {

const std::vector<int64_t> kNumels = {37, 5, 700, 16, 1234, 3};
constexpr int kMicroSteps = 3;
constexpr size_t kUnready = 3;  // handed out on the second micro-step, never signalled ready

struct Reduced {
  std::vector<float> partition;  // grad_partition() after the window
  std::vector<std::pair<int64_t, int64_t>> final_ranges;
};

// grads[m][t]: micro-step m's gradient of tensor t.
Reduced reduce(const Partitioning &part, const std::vector<std::vector<std::vector<float>>> &grads, bool overlap,
           bool rearrange) {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  std::shared_ptr<Device> device(device_create_cpu());
  std::unique_ptr<OptimizerBackend> backend = optimizer_backend_host();
  Reduced run;
  ReducerOptions options;
  options.bucket_elems = 800;
  options.overlap_comm = overlap;
  options.accumulation_steps = kMicroSteps;
  // A prescale of 2 (exact) takes the rearranging route; 1 the in-place one.
  options.predivide_factor = rearrange ? 0.5 : 1.0;
  options.on_final_range = [&run](int64_t offset, int64_t count) {
    run.final_ranges.emplace_back(offset, count);
    return Status::Ok();
  };
  GradReducer reducer;
  Status s = reducer.init(&part, comm.get(), device.get(), backend.get(), options);
  EXPECT_TRUE(s.ok()) << s.message();
  for (int m = 0; m < kMicroSteps; ++m) {
    for (size_t k = part.num_tensors(); k-- > 0;) {
      void *buffer = nullptr;
      s = reducer.grad(k, &buffer);
      EXPECT_TRUE(s.ok()) << s.message();
      if (k == kUnready && m == 1) {
        std::memset(buffer, 0x7f, static_cast<size_t>(part.numel(k)) * sizeof(float));  // garbage: must read as zero
        continue;
      }
      std::memcpy(buffer, grads[m][k].data(), grads[m][k].size() * sizeof(float));
      s = reducer.ready(k);
      EXPECT_TRUE(s.ok()) << s.message();
    }
    s = reducer.finish_micro_step();
    EXPECT_TRUE(s.ok()) << s.message();
  }
  const float *g = reducer.grad_partition();
  run.partition.assign(g, g + part.partition_elems());
  return run;
}

TEST(GradReducerOneRank, Stage3AccumulatesFromTheBucketBufferInPlace) {
  Partitioning part;
  ASSERT_TRUE(part.build(kNumels, 3, 1).ok());
  std::mt19937 rng(18);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<std::vector<float>>> grads(kMicroSteps);
  for (auto &step : grads)
    for (int64_t n : kNumels) {
      std::vector<float> g(static_cast<size_t>(n));
      for (float &x : g) x = normal(rng);
      step.push_back(g);
    }
  // The window's sums as the reducer forms them: written on the first micro-step, then fp32 adds.
  std::vector<float> want(static_cast<size_t>(part.partition_elems()), 0.0f);
  for (size_t t = 0; t < kNumels.size(); ++t)
    for (int64_t i = 0; i < kNumels[t]; ++i) {
      float sum = grads[0][t][i];
      for (int m = 1; m < kMicroSteps; ++m) sum += (t == kUnready && m == 1) ? 0.0f : grads[m][t][i];
      want[static_cast<size_t>(part.shard_layout().shard_offset(t) + i)] = sum;
    }
  for (bool overlap : {false, true}) {
    const Reduced in_place = reduce(part, grads, overlap, false);
    const Reduced rearranged = reduce(part, grads, overlap, true);
    ASSERT_EQ(in_place.partition.size(), want.size());
    EXPECT_EQ(0, std::memcmp(in_place.partition.data(), want.data(), want.size() * sizeof(float)))
        << "overlap_comm " << overlap;
    std::vector<float> halved = rearranged.partition;
    for (float &x : halved) x *= 0.5f;
    EXPECT_EQ(0, std::memcmp(in_place.partition.data(), halved.data(), want.size() * sizeof(float)))
        << "overlap_comm " << overlap;
    // Every tensor's range is delivered final once, on the last micro-step.
    EXPECT_EQ(in_place.final_ranges.size(), kNumels.size());
    int64_t delivered = 0;
    for (const auto &range : in_place.final_ranges) delivered += range.second;
    int64_t total = 0;
    for (int64_t n : kNumels) total += n;
    EXPECT_EQ(delivered, total);
    EXPECT_EQ(in_place.final_ranges, rearranged.final_ranges);
  }
}

}  // namespace
}  // namespace dsrt
