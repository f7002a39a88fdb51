// engine_offload_cpu_cases.h -- offload_optimizer.device "cpu" (ZeRO-Offload) against the same
// engine without offload: the fp32 masters, the working copies and the optimizer states must be
// bitwise equal after training, and dsrt_engine_memory must place the masters, states and the
// fp32 gradient copy in host memory. Shared by the one-rank and the multi-rank tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "offload_test_util.h"

namespace dsrt {
namespace offload_cpu_test {

using namespace offload_test;

struct OffloadCpuCase {
  int stage;
  dsrt_dtype working;  // DSRT_F32, DSRT_BF16 or DSRT_F16 (fp16: dynamic loss scaling, 2 micro-steps)
  OptimizerType optimizer = OptimizerType::AdamW;
  int accumulation = 1;  // gradient_accumulation_steps (fp16 cases use 2)
  bool overlap = false;  // overlap_comm
};

inline const std::vector<std::vector<int64_t>> &offload_cpu_shapes() {
  static const std::vector<std::vector<int64_t>> shapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {1, 1}, {129}};
  return shapes;
}

inline std::vector<float> partition_state(Engine &e, int state) {
  std::vector<float> out(static_cast<size_t>(e.partitioning().partition_elems()));
  Status s = e.read_partition_state(state, 0, out.size(), out.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// On a GPU the engine without offload steps with the fused CUDA kernel and the offloaded one with
// the CPU kernel: the same formula, rounded differently (the compiler contracts a*b+c into FMAs in
// other places), so the two agree within a few fp32 ulps instead of bitwise. On the CPU device
// both run the same CPU kernel and must be bitwise equal.
inline bool optimizers_differ(Engine &e) { return e.device().type() != DSRT_DEVICE_CPU; }

// The two devices sum the gradient norm in different orders (so the clip coefficient differs in its
// last bits) and round the update differently: fp32 states and masters agree to 1e-4 after the
// test's steps, 16-bit working copies to about one ulp of their format.
inline double device_tolerance(dsrt_dtype dtype) {
  return dtype == DSRT_BF16 ? 1.0 / 128 : dtype == DSRT_F16 ? 1.0 / 1024 : 1e-4;
}

inline void expect_masters_match(Engine &reference, Engine &offloaded) {
  const auto want = read_all(reference), got = read_all(offloaded);
  if (!optimizers_differ(reference)) return expect_bitwise_equal(want, got);
  ASSERT_EQ(want.size(), got.size());
  for (size_t t = 0; t < want.size(); ++t)
    expect_close(want[t].data(), got[t].data(), want[t].size(), device_tolerance(DSRT_F32), "master");
}

inline void expect_working_copies_equal(Engine &a, Engine &b) {
  for (size_t t = 0; t < a.num_tensors(); ++t) {
    std::vector<uint8_t> wa, wb;
    dsrt_dtype da, db;
    ASSERT_TRUE(testing_util::read_working_values(a, t, &wa, &da).ok());
    ASSERT_TRUE(testing_util::read_working_values(b, t, &wb, &db).ok());
    EXPECT_EQ(da, db);
    if (!optimizers_differ(a)) {
      EXPECT_EQ(wa, wb) << "working copy of tensor " << t;
      continue;
    }
    ASSERT_EQ(wa.size(), wb.size());
    const size_t n = wa.size() / dtype_size(da);
    std::vector<float> fa(n), fb(n);
    for (size_t i = 0; i < n; ++i) {
      fa[i] = to_float(wa.data(), da, i);
      fb[i] = to_float(wb.data(), db, i);
    }
    expect_close(fa.data(), fb.data(), n, device_tolerance(da), "working copy");
  }
}

// Trains a reference and an offloaded engine on the same gradients and compares everything.
// staged: the offloaded engine copies the gradient partition into host memory and the updated
// working partition back, as on a GPU; otherwise (the CPU device's default) the optimizer reads
// the accumulator and writes the working copy in place.
inline void run_offload_cpu_case(const OffloadCpuCase &c, const std::shared_ptr<Comm> &comm, bool staged) {
  TrainConfig config = base_config(c.stage);
  config.optimizer.type = c.optimizer;
  config.bf16_enabled = c.working == DSRT_BF16;
  const bool fp16 = c.working == DSRT_F16;
  config.gradient_accumulation_steps = fp16 ? 2 : c.accumulation;
  config.zero.overlap_comm = c.overlap;
  if (fp16) config.fp16.enabled = true;
  std::unique_ptr<Engine> reference, offloaded;
  Status s = make_engine(config, comm, offload_cpu_shapes(), &reference);
  ASSERT_TRUE(s.ok()) << s.message();
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  s = make_engine(config, comm, offload_cpu_shapes(), &offloaded, true,
                  [staged](Engine &e) { return e.set_host_staging_on_cpu(staged); });
  ASSERT_TRUE(s.ok()) << s.message();
  // A GPU engine always stages through host memory: the in-place route is the CPU device's.
  if (optimizers_differ(*offloaded) && !staged) return;
  EXPECT_EQ(offloaded->host_grad_partition() != nullptr, staged);

  const int steps = fp16 ? 8 : 4 * c.accumulation;
  train(*reference, steps);
  train(*offloaded, steps);
  EXPECT_GE(offloaded->counters().applied_steps, 3);
  EXPECT_EQ(offloaded->counters().applied_steps, reference->counters().applied_steps);
  EXPECT_EQ(offloaded->counters().skipped_steps, reference->counters().skipped_steps);
  expect_masters_match(*reference, *offloaded);
  expect_working_copies_equal(*reference, *offloaded);
  for (int state = -1; state < reference->num_optimizer_states(); ++state) {
    const std::vector<float> want = partition_state(*reference, state), got = partition_state(*offloaded, state);
    if (optimizers_differ(*reference))
      expect_close(want.data(), got.data(), want.size(), device_tolerance(DSRT_F32), "state");
    else
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "state " << state;
  }
  // The weights moved (the comparison is not between two untouched engines).
  const std::vector<float> first = read_all(*offloaded)[1];
  const std::vector<float> init = gaussian(101, first.size(), 0.5f);
  size_t moved = 0;
  for (size_t i = 0; i < first.size(); ++i) moved += first[i] != init[i];
  EXPECT_GT(moved, first.size() / 2);

  // Between steps: write_fp32 and a refresh go through the host masters and the staging.
  const std::vector<float> fresh = gaussian(77, 3000, 0.3f);
  ASSERT_TRUE(reference->write_fp32(3, fresh.data(), fresh.size()).ok());
  s = offloaded->write_fp32(3, fresh.data(), fresh.size());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(reference->refresh_working_copies().ok());
  s = offloaded->refresh_working_copies();
  ASSERT_TRUE(s.ok()) << s.message();
  train(*reference, 2, 50);
  train(*offloaded, 2, 50);
  expect_masters_match(*reference, *offloaded);
  expect_working_copies_equal(*reference, *offloaded);

  // Memory: masters, states and (staged) the gradient copy on the host; the reduced partition and
  // the working copies on the device.
  dsrt_memory_stats ref_mem, mem;
  std::memset(&ref_mem, 0, sizeof ref_mem);
  std::memset(&mem, 0, sizeof mem);
  ref_mem.struct_size = mem.struct_size = sizeof mem;
  ASSERT_TRUE(reference->memory(&ref_mem).ok());
  ASSERT_TRUE(offloaded->memory(&mem).ok());
  const uint64_t part_bytes = static_cast<uint64_t>(offloaded->partitioning().partition_elems()) * sizeof(float);
  const uint64_t states = static_cast<uint64_t>(offloaded->num_optimizer_states());
  EXPECT_EQ(mem.master_params[DSRT_LOC_HOST], part_bytes);
  EXPECT_EQ(mem.master_params[DSRT_LOC_DEVICE], 0u);
  EXPECT_EQ(mem.optimizer_states[DSRT_LOC_HOST], states * part_bytes);
  EXPECT_EQ(mem.optimizer_states[DSRT_LOC_DEVICE], 0u);
  EXPECT_EQ(mem.gradients[DSRT_LOC_HOST], staged ? part_bytes : 0u);
  EXPECT_EQ(mem.gradients[DSRT_LOC_DEVICE], ref_mem.gradients[DSRT_LOC_DEVICE]);
  EXPECT_EQ(mem.working_params[DSRT_LOC_DEVICE], ref_mem.working_params[DSRT_LOC_DEVICE]);
  const uint64_t staging_bytes =
      static_cast<uint64_t>(offloaded->partitioning().partition_elems()) * dtype_size(offloaded->working_dtype());
  if (staged)
    EXPECT_GE(mem.buffers[DSRT_LOC_HOST], staging_bytes);
  else  // no staging: only Lamb's fp32 update buffer is host memory
    EXPECT_EQ(mem.buffers[DSRT_LOC_HOST], c.optimizer == OptimizerType::Lamb ? part_bytes : 0u);
  EXPECT_EQ(ref_mem.master_params[DSRT_LOC_DEVICE], part_bytes);
  EXPECT_EQ(ref_mem.master_params[DSRT_LOC_HOST] + ref_mem.optimizer_states[DSRT_LOC_HOST] +
                ref_mem.gradients[DSRT_LOC_HOST] + ref_mem.buffers[DSRT_LOC_HOST],
            0u);
}

inline std::vector<OffloadCpuCase> offload_cpu_cases() {
  std::vector<OffloadCpuCase> cases;
  for (int stage : {1, 2, 3})
    for (dsrt_dtype dt : {DSRT_F32, DSRT_BF16}) cases.push_back({stage, dt});
  cases.push_back({2, DSRT_F16});
  cases.push_back({3, DSRT_F16});
  cases.push_back({1, DSRT_BF16, OptimizerType::Lamb});
  cases.push_back({3, DSRT_F32, OptimizerType::Lamb});
  cases.push_back({2, DSRT_BF16, OptimizerType::SGD});
  // Accumulation windows, with and without overlapped reduction: the host copy of each range is
  // taken on the window's last micro-step only.
  for (int stage : {1, 2, 3}) cases.push_back({stage, DSRT_BF16, OptimizerType::AdamW, 3, true});
  cases.push_back({3, DSRT_F32, OptimizerType::AdamW, 3, false});
  return cases;
}

}  // namespace offload_cpu_test
}  // namespace dsrt
