// bf16_master_cases.h -- DeepSpeed's lower-memory bf16 mode (bf16.bf16_master_weights_and_grads,
// bf16.bf16_optimizer_states) against a float64 recomputation of AdamW written here: the same
// seeded gradients, the update in double, and every stored master (and, with bf16 states, every
// stored moment) rounded to the nearest bf16 after each step. Shared by the one-rank test and the
// multi-rank test (tests/mpi/mpi_bf16_master.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "offload_test_util.h"
#include "util/half.h"

namespace dsrt {
namespace bf16_master_test {

using namespace offload_test;

struct Bf16MasterCase {
  int stage;
  bool bf16_states;        // bf16.bf16_optimizer_states
  OffloadDevice offload;   // offload_optimizer.device
  OffloadDevice param = OffloadDevice::None;  // offload_param.device (stage 3)
};

inline const std::vector<std::vector<int64_t>> &bf16_shapes() {
  static const std::vector<std::vector<int64_t>> shapes = {{7}, {1000}, {33, 65}, {129}, {1, 1}};
  return shapes;
}

inline TrainConfig bf16_master_config(const Bf16MasterCase &c) {
  TrainConfig config = base_config(c.stage);
  config.bf16_enabled = true;
  config.bf16_master_weights = true;
  config.bf16_optimizer_states = c.bf16_states;
  config.zero.offload_optimizer.device = c.offload;
  config.zero.offload_param.device = c.param;
  config.gradient_clipping = 0.0;  // the recomputation below has no clipping
  // Gradients reduced in fp32: the mean of the ranks' bf16 gradients is then exact, so the
  // reference sees exactly the gradient the optimizer sees.
  config.has_communication_data_type = true;
  config.communication_data_type = DSRT_F32;
  return config;
}

inline double round_bf16(double x) { return static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(x)))); }

// The float64 AdamW of DeepSpeed's CPU Adam (decoupled decay, bias correction) over every element
// of every tensor, with bf16 storage of the master (round_master) and of the moments (round_states).
struct Reference {
  std::vector<std::vector<double>> p, m, v;
  void init(const std::vector<std::vector<int64_t>> &shapes, bool round_master) {
    for (size_t t = 0; t < shapes.size(); ++t) {
      const size_t n = static_cast<size_t>(numel_of(shapes[t]));
      const std::vector<float> x = gaussian(100 + static_cast<uint32_t>(t), n, 0.5f);
      p.emplace_back(n);
      for (size_t i = 0; i < n; ++i) p[t][i] = round_master ? round_bf16(x[i]) : x[i];
      m.emplace_back(n, 0.0);
      v.emplace_back(n, 0.0);
    }
  }
  void step(const TrainConfig &config, int world, uint32_t seed, int64_t step_number, bool round_master,
            bool round_states) {
    const OptimizerConfig &o = config.optimizer;
    const double b1 = o.beta1, b2 = o.beta2, lr = o.lr, wd = o.weight_decay, eps = o.eps;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step_number));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step_number));
    for (size_t t = 0; t < p.size(); ++t) {
      const size_t n = p[t].size();
      std::vector<double> g(n, 0.0);
      for (int r = 0; r < world; ++r) {
        // The host writes each rank's gradient into a bf16 buffer (host_micro_step).
        const std::vector<float> gr =
            gaussian(seed * 7919u + static_cast<uint32_t>(r) * 131u + static_cast<uint32_t>(t), n, 0.1f);
        for (size_t i = 0; i < n; ++i) g[i] += round_bf16(gr[i]);
      }
      for (size_t i = 0; i < n; ++i) {
        const double gi = g[i] / world;
        double mi = b1 * m[t][i] + (1.0 - b1) * gi;
        double vi = b2 * v[t][i] + (1.0 - b2) * gi * gi;
        const double denom = std::sqrt(vi) / std::sqrt(bc2) + eps;
        double pi = p[t][i] * (1.0 - lr * wd) - lr / bc1 * mi / denom;
        if (round_states) {
          mi = round_bf16(mi);
          vi = round_bf16(vi);
        }
        if (round_master) pi = round_bf16(pi);
        p[t][i] = pi;
        m[t][i] = mi;
        v[t][i] = vi;
      }
    }
  }
};

inline bool is_bf16_value(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return (bits & 0xffffu) == 0;
}

// Trains `steps` steps and compares the engine's masters (and states) with the bf16 reference;
// also checks that they are far from an fp32-master recomputation (the rounding is real).
inline void run_bf16_master_case(const Bf16MasterCase &c, const std::shared_ptr<Comm> &comm, int steps = 10) {
  TempFolder swap;  // NVMe cases: outlives the engine, which leaves it empty
  TrainConfig config = bf16_master_config(c);
  if (c.offload == OffloadDevice::Nvme) {
    ASSERT_FALSE(swap.path.empty());
    set_nvme(&config, swap.path, 1000, 2, true);
  }
  std::unique_ptr<Engine> engine;
  Status s = make_engine(config, comm, bf16_shapes(), &engine);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(engine->master_dtype(), DSRT_BF16);
  EXPECT_EQ(engine->state_dtype(), c.bf16_states ? DSRT_BF16 : DSRT_F32);
  EXPECT_EQ(engine->master_partition(), nullptr);  // no fp32 master to point at

  Reference want, fp32_master;
  want.init(bf16_shapes(), true);
  fp32_master.init(bf16_shapes(), false);
  const int world = engine->world_size();
  for (int step = 1; step <= steps; ++step) {
    train(*engine, 1, static_cast<uint32_t>(step));
    want.step(config, world, static_cast<uint32_t>(step), step, true, c.bf16_states);
    fp32_master.step(config, world, static_cast<uint32_t>(step), step, false, false);
  }
  ASSERT_EQ(engine->counters().applied_steps, steps);

  const std::vector<std::vector<float>> got = read_all(*engine);
  double diff_sq = 0, moved_sq = 0, fp32_diff_sq = 0;
  size_t total = 0, differing = 0, not_bf16 = 0;
  for (size_t t = 0; t < got.size(); ++t) {
    const std::vector<float> init = gaussian(100 + static_cast<uint32_t>(t), got[t].size(), 0.5f);
    for (size_t i = 0; i < got[t].size(); ++i) {
      const double x = got[t][i];
      diff_sq += (x - want.p[t][i]) * (x - want.p[t][i]);
      fp32_diff_sq += (x - fp32_master.p[t][i]) * (x - fp32_master.p[t][i]);
      moved_sq += (want.p[t][i] - init[i]) * (want.p[t][i] - init[i]);
      differing += x != want.p[t][i];
      not_bf16 += !is_bf16_value(got[t][i]);
      ++total;
    }
  }
  EXPECT_EQ(not_bf16, 0u) << "every master must be a bf16 value";
  // fp32 arithmetic against float64 flips a rounding now and then (one bf16 ulp, which later steps
  // carry on); everything else is equal.
  EXPECT_LT(differing, total / 100) << differing << " of " << total << " masters differ from the float64 reference";
  const double rel = std::sqrt(diff_sq / moved_sq), rel_fp32 = std::sqrt(fp32_diff_sq / moved_sq);
  EXPECT_LT(rel, 0.02) << "relative error of the trajectory against the bf16 reference";
  std::printf("bf16 masters: %zu of %zu differ from the float64 bf16 reference; relative error %.2e against it, "
              "%.2e against fp32 masters\n", differing, total, rel, rel_fp32);
  EXPECT_GT(rel_fp32, 5 * rel) << "the masters look like fp32 masters: bf16 rounding is not applied";

  // The states, in partition coordinates, against the reference's moments.
  for (int state = 0; state < engine->num_optimizer_states(); ++state) {
    std::vector<float> part(static_cast<size_t>(engine->partitioning().partition_elems()));
    s = engine->read_partition_state(state, 0, part.size(), part.data());
    ASSERT_TRUE(s.ok()) << s.message();
    double err = 0, norm = 0;
    size_t off_grid = 0;
    for (const OwnedSegment &seg : engine->partitioning().owned_segments(engine->rank())) {
      const std::vector<double> &ref = state == 0 ? want.m[seg.tensor] : want.v[seg.tensor];
      for (int64_t k = 0; k < seg.count; ++k) {
        const double x = part[static_cast<size_t>(seg.part_offset + k)], y = ref[static_cast<size_t>(seg.tensor_begin + k)];
        err += (x - y) * (x - y);
        norm += y * y;
        off_grid += !is_bf16_value(static_cast<float>(x));
      }
    }
    EXPECT_GT(norm, 0.0);
    EXPECT_LT(std::sqrt(err / norm), 0.02) << "state " << state;
    if (c.bf16_states) {
      EXPECT_EQ(off_grid, 0u) << "state " << state << " must hold bf16 values";
    } else {
      EXPECT_GT(off_grid, 0u) << "state " << state << " should be fp32 (not rounded)";
    }
  }

  // Memory: 2 bytes per partition element for the master, 2 or 4 per state.
  dsrt_memory_stats mem;
  std::memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  ASSERT_TRUE(engine->memory(&mem).ok());
  const uint64_t part = static_cast<uint64_t>(engine->partitioning().partition_elems());
  const int loc = c.offload == OffloadDevice::Cpu ? DSRT_LOC_HOST
                  : c.offload == OffloadDevice::Nvme ? DSRT_LOC_NVME
                                                     : DSRT_LOC_DEVICE;
  EXPECT_EQ(mem.master_params[loc], part * 2);
  EXPECT_EQ(mem.optimizer_states[loc], part * (c.bf16_states ? 2u : 4u) * 2u);
}

inline std::vector<Bf16MasterCase> bf16_master_cases() {
  std::vector<Bf16MasterCase> cases;
  for (int stage : {1, 2, 3}) {
    cases.push_back({stage, true, OffloadDevice::None});  // FusedAdam's path: bf16 states on the device
    cases.push_back({stage, false, OffloadDevice::Cpu});  // ZeRO-Offload, CPU Adam with fp32 moments
  }
  cases.push_back({2, true, OffloadDevice::Cpu});  // ZeRO-Offload, CPU Adam with bf16 moments
  cases.push_back({3, true, OffloadDevice::Cpu});
  cases.push_back({3, true, OffloadDevice::Cpu, OffloadDevice::Cpu});  // and the parameters offloaded
  // ZeRO-Infinity: bf16 arrays in the swap files (DeepSpeed: stage 3; dsrt runs NVMe at 1-2 too).
  cases.push_back({3, false, OffloadDevice::Nvme});
  cases.push_back({3, true, OffloadDevice::Nvme});
  cases.push_back({1, true, OffloadDevice::Nvme});
  return cases;
}

}  // namespace bf16_master_test
}  // namespace dsrt
