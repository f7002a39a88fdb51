// engine_test_util.h -- shared helpers for the engine tests: a float64 reference of the step
// pipeline (accumulation average, norm, clipping, every optimizer) and a driver that feeds the
// same random gradients to an Engine and to the reference.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "config/train_config.h"
#include "engine/engine.h"
#include "util/half.h"

namespace dsrt {
namespace testing_util {

inline double round_to(dsrt_dtype dtype, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DSRT_F16: return fp16_to_float(float_to_fp16(f));
    case DSRT_BF16: return bf16_to_float(float_to_bf16(f));
    default: return f;
  }
}

// Float64 model of one tensor's optimizer state, following DeepSpeed's optimizers:
// Adam/AdamW (CPU Adam, bias-corrected, decoupled decay for AdamW or adam_w_mode), torch SGD
// (momentum, dampening, nesterov, L2 decay), Adagrad (L2 decay), Lion, and FusedLamb.
struct RefTensor {
  std::vector<double> p, m, v;
};

struct RefOptimizer {
  OptimizerConfig config;
  int64_t steps = 0;

  static double bias_correction(double beta, int64_t step) { return 1.0 - std::pow(beta, static_cast<double>(step)); }

  void step(std::vector<RefTensor> &tensors, const std::vector<std::vector<double>> &grads, double lr) {
    ++steps;
    const double b1 = config.beta1, b2 = config.beta2, eps = config.eps, wd = config.weight_decay;
    for (size_t t = 0; t < tensors.size(); ++t) {
      RefTensor &rt = tensors[t];
      const size_t n = rt.p.size();
      if (rt.m.empty()) {
        rt.m.assign(n, config.type == OptimizerType::Adagrad ? config.initial_accumulator_value : 0.0);
        rt.v.assign(n, 0.0);
      }
      switch (config.type) {
        case OptimizerType::Adam:
        case OptimizerType::AdamW: {
          const bool decoupled = config.type == OptimizerType::AdamW || config.adam_w_mode;
          const double bc1 = config.bias_correction ? bias_correction(b1, steps) : 1.0;
          const double bc2 = config.bias_correction ? bias_correction(b2, steps) : 1.0;
          for (size_t i = 0; i < n; ++i) {
            double g = grads[t][i];
            if (!decoupled) g += wd * rt.p[i];
            rt.m[i] = b1 * rt.m[i] + (1 - b1) * g;
            rt.v[i] = b2 * rt.v[i] + (1 - b2) * g * g;
            const double denom = std::sqrt(rt.v[i]) / std::sqrt(bc2) + eps;
            if (decoupled) rt.p[i] *= 1 - lr * wd;
            rt.p[i] -= lr / bc1 * rt.m[i] / denom;
          }
          break;
        }
        case OptimizerType::SGD:
          for (size_t i = 0; i < n; ++i) {
            double g = grads[t][i] + wd * rt.p[i];
            if (config.momentum != 0.0) {
              rt.m[i] = steps == 1 ? g : config.momentum * rt.m[i] + (1 - config.dampening) * g;
              g = config.nesterov ? g + config.momentum * rt.m[i] : rt.m[i];
            }
            rt.p[i] -= lr * g;
          }
          break;
        case OptimizerType::Adagrad:
          for (size_t i = 0; i < n; ++i) {
            const double g = grads[t][i] + wd * rt.p[i];
            rt.m[i] += g * g;
            rt.p[i] -= lr * g / (std::sqrt(rt.m[i]) + eps);
          }
          break;
        case OptimizerType::Lion:
          for (size_t i = 0; i < n; ++i) {
            const double g = grads[t][i];
            const double c = b1 * rt.m[i] + (1 - b1) * g;
            const double sign = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
            rt.p[i] = rt.p[i] * (1 - lr * wd) - lr * sign;
            rt.m[i] = b2 * rt.m[i] + (1 - b2) * g;
          }
          break;
        case OptimizerType::Lamb: {
          std::vector<double> u(n);
          double p_sq = 0, u_sq = 0;
          for (size_t i = 0; i < n; ++i) {
            const double g = grads[t][i];
            rt.m[i] = b1 * rt.m[i] + (1 - b1) * g;
            rt.v[i] = b2 * rt.v[i] + (1 - b2) * g * g;
            u[i] = rt.m[i] / (std::sqrt(rt.v[i]) + eps) + wd * rt.p[i];
            p_sq += rt.p[i] * rt.p[i];
            u_sq += u[i] * u[i];
          }
          double trust = 1.0;
          if (p_sq > 0 && u_sq > 0) trust = std::min(config.max_coeff, std::max(config.min_coeff, std::sqrt(p_sq / u_sq)));
          double step_size = lr;
          if (config.bias_correction) step_size = lr * std::sqrt(bias_correction(b2, steps)) / bias_correction(b1, steps);
          for (size_t i = 0; i < n; ++i) rt.p[i] -= step_size * trust * u[i];
          break;
        }
        case OptimizerType::OneBitAdam:
        case OptimizerType::ZeroOneAdam:
        case OptimizerType::OneBitLamb: break;
      }
    }
  }
};

// The float64 reference of the whole boundary: average, norm, clipping, optimizer.
struct RefPipeline {
  TrainConfig config;
  std::vector<RefTensor> tensors;
  std::vector<std::vector<double>> accum;
  RefOptimizer optimizer;
  int64_t micro = 0;
  double last_norm = 0;

  RefPipeline(const TrainConfig &c, const std::vector<std::vector<float>> &init) : config(c) {
    optimizer.config = c.optimizer;
    for (const auto &values : init) {
      RefTensor rt;
      rt.p.assign(values.begin(), values.end());
      tensors.push_back(rt);
      accum.emplace_back(values.size(), 0.0);
    }
  }
  // grads: the rank-averaged, unscaled gradient of this micro-step.
  void micro_step(const std::vector<std::vector<double>> &grads, double lr) {
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t i = 0; i < grads[t].size(); ++i) accum[t][i] += grads[t][i];
    if (++micro < config.gradient_accumulation_steps) return;
    micro = 0;
    double sq = 0;
    for (auto &a : accum)
      for (double &x : a) {
        x /= static_cast<double>(config.gradient_accumulation_steps);
        sq += x * x;
      }
    last_norm = std::sqrt(sq);
    if (config.gradient_clipping > 0) {
      const double coefficient = config.gradient_clipping / (last_norm + 1e-6);
      if (coefficient < 1)
        for (auto &a : accum)
          for (double &x : a) x *= coefficient;
    }
    optimizer.step(tensors, accum, lr);
    for (auto &a : accum) std::fill(a.begin(), a.end(), 0.0);
  }
};

inline double relative_error(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline std::vector<float> random_values(std::mt19937 &rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float &x : out) x = dist(rng);
  return out;
}

// Writes value * loss_scale into a gradient buffer of the working dtype (adding, as the host does).
inline void add_grad(void *buffer, dsrt_dtype dtype, const std::vector<double> &values, double loss_scale) {
  for (size_t i = 0; i < values.size(); ++i)
    from_float(buffer, dtype, i, to_float(buffer, dtype, i) + static_cast<float>(values[i] * loss_scale));
}

// Tests read engine state only through these two, never through master_partition(),
// optimizer_state() or an acquired pointer, so they hold whether the states and working copies
// live in host memory, GPU memory or NVMe swap files.

// This rank's partition states as the engine reads them back: [0] the fp32 masters, then every
// optimizer state, partition_elems() floats each.
inline Status read_partition_states(Engine &engine, std::vector<std::vector<float>> *out) {
  const size_t n = static_cast<size_t>(engine.partitioning().partition_elems());
  out->clear();
  for (int state = -1; state < engine.num_optimizer_states(); ++state) {
    out->emplace_back(n);
    DSRT_RETURN_IF_ERROR(engine.read_partition_state(state, 0, n, out->back().data()));
  }
  return Status::Ok();
}

// Copies bytes between host memory and memory of the engine's device (either side may be either),
// waiting for the copy: tests read and write GPU buffers with it as they do host buffers.
inline Status copy_through_device(const Engine &engine, void *dst, const void *src, size_t bytes) {
  Device &device = const_cast<Device &>(engine.device());
  DSRT_RETURN_IF_ERROR(device.copy(dst, src, bytes, nullptr));
  return device.synchronize(nullptr);
}

// The working values the host sees for tensor t (numel elements of *dtype, as bytes): acquire,
// a copy through the engine's device into host memory, release. Collective at stage 3.
inline Status read_working_values(Engine &engine, size_t t, std::vector<uint8_t> *out, dsrt_dtype *dtype) {
  void *data = nullptr;
  DSRT_RETURN_IF_ERROR(engine.acquire(t, &data, dtype));
  out->assign(static_cast<size_t>(engine.tensor_numel(t)) * dtype_size(*dtype), 0);
  const Status copied = copy_through_device(engine, out->data(), data, out->size());
  const Status released = engine.release(t);
  DSRT_RETURN_IF_ERROR(copied);
  return released;
}

// Lets fn(void *values, dsrt_dtype dtype) change tensor t's gradient buffer (grad(), numel
// elements) in host memory: the buffer is copied out through the engine's device and back, so
// the host code works whether the buffer is in host or GPU memory.
template <class Fn>
inline Status update_grad(Engine &engine, size_t t, Fn fn) {
  void *buffer = nullptr;
  dsrt_dtype dtype;
  DSRT_RETURN_IF_ERROR(engine.grad(t, &buffer, &dtype));
  std::vector<uint8_t> host(static_cast<size_t>(engine.tensor_numel(t)) * dtype_size(dtype));
  DSRT_RETURN_IF_ERROR(copy_through_device(engine, host.data(), buffer, host.size()));
  fn(static_cast<void *>(host.data()), dtype);
  return copy_through_device(engine, buffer, host.data(), host.size());
}

}  // namespace testing_util
}  // namespace dsrt
