// frozen_lora_util.h -- a LoRA-style model for the frozen-tensor tests: a frozen base W
// (out x in) and trainable adapters A (r x in), B (out x r); y = x W^T + (x A^T) B^T, loss = mean
// over the batch of 0.5 * |y - target|^2. The host side (forward, backward in float64) is here, as
// a host would write it, reading the engine's acquired working copies.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "dsrt.h"
#include "capi/handles.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace dsrt {
namespace lora_test {

constexpr int64_t kIn = 33, kOut = 21, kRank = 4, kBatch = 3;

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v) x = dist(rng);
  return v;
}

inline std::vector<float> base_init() { return random_values(kOut * kIn, 11, 0.3f); }
inline std::vector<float> a_init() { return random_values(kRank * kIn, 12, 0.2f); }
inline std::vector<float> b_init() { return random_values(kOut * kRank, 13, 0.2f); }

// Micro-batch `index` of step `step` (the same on every world size): inputs and targets.
struct Batch {
  std::vector<double> x, target;
};
inline Batch batch(int64_t step, int index) {
  const uint32_t seed = static_cast<uint32_t>(1000 + step * 64 + index);
  Batch b;
  for (float v : random_values(kBatch * kIn, seed, 1.0f)) b.x.push_back(v);
  for (float v : random_values(kBatch * kOut, seed + 7777, 1.0f)) b.target.push_back(v);
  return b;
}

// Gradients of the batch's loss with respect to A and B, in float64, from the values w, a, b.
inline void lora_grads(const Batch &batch, const std::vector<double> &w, const std::vector<double> &a,
                       const std::vector<double> &bm, std::vector<double> *ga, std::vector<double> *gb) {
  ga->assign(static_cast<size_t>(kRank * kIn), 0.0);
  gb->assign(static_cast<size_t>(kOut * kRank), 0.0);
  for (int64_t n = 0; n < kBatch; ++n) {
    const double *x = &batch.x[static_cast<size_t>(n * kIn)];
    std::vector<double> h(static_cast<size_t>(kRank), 0.0), dy(static_cast<size_t>(kOut), 0.0);
    for (int64_t k = 0; k < kRank; ++k)
      for (int64_t i = 0; i < kIn; ++i) h[k] += a[k * kIn + i] * x[i];
    for (int64_t o = 0; o < kOut; ++o) {
      double y = 0.0;
      for (int64_t i = 0; i < kIn; ++i) y += w[o * kIn + i] * x[i];
      for (int64_t k = 0; k < kRank; ++k) y += bm[o * kRank + k] * h[k];
      dy[o] = (y - batch.target[static_cast<size_t>(n * kOut + o)]) / static_cast<double>(kBatch);
    }
    for (int64_t o = 0; o < kOut; ++o)
      for (int64_t k = 0; k < kRank; ++k) (*gb)[o * kRank + k] += dy[o] * h[k];
    for (int64_t k = 0; k < kRank; ++k) {
      double dh = 0.0;
      for (int64_t o = 0; o < kOut; ++o) dh += dy[o] * bm[o * kRank + k];
      for (int64_t i = 0; i < kIn; ++i) (*ga)[k * kIn + i] += dh * x[i];
    }
  }
}

inline TrainConfig lora_config(int stage, dsrt_dtype working = DSRT_F32) {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.steps_per_print = 0;
  c.zero.stage = stage;
  c.zero.stage3_param_persistence_threshold = 0;
  c.fp16.enabled = working == DSRT_F16;
  c.bf16_enabled = working == DSRT_BF16;
  c.effective_json = "{\"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}";
  return c;
}

struct LoraEngine {
  std::unique_ptr<dsrt_engine> handle;  // owns the engine and its tensors' C handles
  Engine *engine = nullptr;
  dsrt_tensor *base = nullptr, *a = nullptr, *b = nullptr;
};

// with_base: register the frozen base (false: the adapters only, for memory differences).
// base_trainable: register the base as a trainable tensor instead (for the frozen-flag check).
inline LoraEngine make_lora(const TrainConfig &config, std::shared_ptr<Comm> comm, bool with_base = true,
                            bool base_trainable = false, const std::vector<float> &base = base_init()) {
  LoraEngine le;
  TrainConfig c = config;
  c.world_size = comm->size();
  c.train_batch_size = c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * comm->size();
  le.handle = std::make_unique<dsrt_engine>();
  Status s = Engine::create(c, comm, &le.handle->impl);
  EXPECT_TRUE(s.ok()) << s.message();
  le.engine = le.handle->impl.get();
  if (!le.engine) return le;
  const int64_t ws[2] = {kOut, kIn}, as[2] = {kRank, kIn}, bs[2] = {kOut, kRank};
  size_t index = 0;
  if (with_base && base_trainable) {
    s = le.engine->add_param("base.weight", ws, 2, base.data(), &index);
    EXPECT_TRUE(s.ok()) << s.message();
    le.base = s.ok() ? tensor_handle(le.handle.get(), index, false) : nullptr;
  } else if (with_base) {
    s = le.engine->add_frozen_param("base.weight", ws, 2, base.data(), &index);
    EXPECT_TRUE(s.ok()) << s.message();
    le.base = s.ok() ? tensor_handle(le.handle.get(), index, true) : nullptr;
  }
  const std::vector<float> ai = a_init(), bi = b_init();
  s = le.engine->add_param("lora.A", as, 2, ai.data(), &index);
  EXPECT_TRUE(s.ok()) << s.message();
  le.a = s.ok() ? tensor_handle(le.handle.get(), index, false) : nullptr;
  s = le.engine->add_param("lora.B", bs, 2, bi.data(), &index);
  EXPECT_TRUE(s.ok()) << s.message();
  le.b = s.ok() ? tensor_handle(le.handle.get(), index, false) : nullptr;
  s = le.engine->build();
  EXPECT_TRUE(s.ok()) << s.message();
  return le;
}

// The acquired working copy of t as float64 (working dtype fp32 or 16-bit), released again.
// The acquired values, read through the engine's device (on a GPU the pointer the C API gives is
// device memory).
inline std::vector<double> acquired_values(dsrt_tensor *t) {
  void *data = nullptr;
  dsrt_dtype dtype = DSRT_F32;
  EXPECT_EQ(dsrt_tensor_acquire(t, &data, &dtype), DSRT_OK) << dsrt_last_error_message();
  const int64_t n = dsrt_tensor_numel(t);
  std::vector<uint8_t> host(static_cast<size_t>(n) * dtype_size(dtype));
  const Status copied = testing_util::copy_through_device(*t->engine, host.data(), data, host.size());
  EXPECT_TRUE(copied.ok()) << copied.message();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = to_float(host.data(), dtype, static_cast<size_t>(i));
  EXPECT_EQ(dsrt_tensor_release(t), DSRT_OK) << dsrt_last_error_message();
  return out;
}

// bytes at data (an acquired or gathered copy of t's engine: device memory on a GPU), on the host.
inline std::vector<uint8_t> device_bytes(const dsrt_tensor *t, const void *data, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  const Status s = testing_util::copy_through_device(*t->engine, host.data(), data, bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return host;
}

// Writes g into the gradient buffer through the engine's device, then marks it ready.
inline void add_grad(dsrt_tensor *t, const std::vector<double> &g) {
  void *data = nullptr;
  dsrt_dtype dtype = DSRT_F32;
  ASSERT_EQ(dsrt_tensor_grad(t, &data, &dtype), DSRT_OK) << dsrt_last_error_message();
  std::vector<uint8_t> host(static_cast<size_t>(dsrt_tensor_numel(t)) * dtype_size(dtype));
  Status s = testing_util::copy_through_device(*t->engine, host.data(), data, host.size());
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < g.size(); ++i) from_float(host.data(), dtype, i, static_cast<float>(g[i]));
  s = testing_util::copy_through_device(*t->engine, data, host.data(), host.size());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(dsrt_tensor_grad_ready(t), DSRT_OK) << dsrt_last_error_message();
}

// One training step of rank `rank` of `world` ranks at global step `step`: the host acquires the
// base (gathered at stage 3) and the adapters, computes its micro-batch's gradients, and steps.
// base_second: acquire A first, then the base, then B (so that at stage 3 the base's gather can be
// prefetched by A's acquire); the values are the same either way.
inline void train_step(LoraEngine &le, int64_t step, int rank, bool base_second = false) {
  std::vector<double> w, a;
  if (base_second) {
    a = acquired_values(le.a);
    w = acquired_values(le.base);
  } else {
    w = acquired_values(le.base);
    a = acquired_values(le.a);
  }
  const std::vector<double> b = acquired_values(le.b);
  std::vector<double> ga, gb;
  lora_grads(batch(step, rank), w, a, b, &ga, &gb);
  add_grad(le.a, ga);
  add_grad(le.b, gb);
  dsrt_step_result result;
  std::memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  Status s = le.engine->step(&result);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(result.boundary, 1);
}

// The float64 reference of `steps` steps on `world` ranks' data: AdamW on the averaged gradients
// (engine_test_util.h's RefOptimizer), the base fixed, the gradients clipped as lora_config's
// gradient_clipping says (DeepSpeed's default 1.0: coefficient 1 / (norm + 1e-6) when below 1,
// the norm over the adapters' gradients only, a frozen tensor having none).
inline void reference(int64_t steps, int world, std::vector<double> *a_out, std::vector<double> *b_out) {
  const std::vector<float> base = base_init();
  const std::vector<double> w(base.begin(), base.end());
  std::vector<testing_util::RefTensor> params(2);
  for (float v : a_init()) params[0].p.push_back(v);
  for (float v : b_init()) params[1].p.push_back(v);
  testing_util::RefOptimizer opt;
  opt.config = lora_config(0).optimizer;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<std::vector<double>> grads(2);
    grads[0].assign(params[0].p.size(), 0.0);
    grads[1].assign(params[1].p.size(), 0.0);
    for (int r = 0; r < world; ++r) {
      std::vector<double> ga, gb;
      lora_grads(batch(s, r), w, params[0].p, params[1].p, &ga, &gb);
      for (size_t i = 0; i < ga.size(); ++i) grads[0][i] += ga[i] / world;
      for (size_t i = 0; i < gb.size(); ++i) grads[1][i] += gb[i] / world;
    }
    const double clip = lora_config(0).gradient_clipping;
    if (clip > 0.0) {
      double sq = 0.0;
      for (const auto &g : grads)
        for (double x : g) sq += x * x;
      const double coefficient = clip / (std::sqrt(sq) + 1e-6);
      if (coefficient < 1.0)
        for (auto &g : grads)
          for (double &x : g) x *= coefficient;
    }
    opt.step(params, grads, opt.config.lr);
  }
  *a_out = params[0].p;
  *b_out = params[1].p;
}

inline double relative_error(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

inline std::vector<double> widened(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

inline std::vector<float> read_fp32(dsrt_tensor *t) {
  std::vector<float> out(static_cast<size_t>(dsrt_tensor_numel(t)));
  EXPECT_EQ(dsrt_tensor_read_fp32(t, out.data(), out.size()), DSRT_OK) << dsrt_last_error_message();
  return out;
}

inline dsrt_memory_stats memory_stats(const Engine &engine) {
  dsrt_memory_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  EXPECT_TRUE(engine.memory(&stats).ok());
  return stats;
}

inline uint64_t device_working_bytes(const Engine &engine) { return memory_stats(engine).working_params[DSRT_LOC_DEVICE]; }

// offload_param at stage 3: "cpu", or "nvme" into path (every non-persistent shard on NVMe).
inline void offload_params(TrainConfig *c, bool nvme, const std::string &path) {
  c->zero.offload_param.device = nvme ? OffloadDevice::Nvme : OffloadDevice::Cpu;
  if (!nvme) return;
  c->zero.offload_param.nvme_path = path;
  c->zero.offload_param.buffer_count = 3;
  c->zero.offload_param.buffer_size = 1 << 16;
  c->zero.offload_param.max_in_cpu = 0;
}

inline void expect_bitwise(const std::vector<float> &x, const std::vector<float> &y, const char *what) {
  ASSERT_EQ(x.size(), y.size()) << what;
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what;
}

}  // namespace lora_test
}  // namespace dsrt
