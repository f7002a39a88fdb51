// test_optim_steps.cpp -- every optimizer x gradient dtype x working-copy dtype x instruction set
// against a float64 recomputation of the documented formulas (torch.optim / DeepSpeed), over
// several steps on fresh random data, at lengths that hit the vector tails and the threaded path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "optim/cpu_optimizer.h"
#include "util/aligned_buffer.h"
#include "util/half.h"
#include "isa_test_util.h"

namespace dsrt {
namespace {

using isa_test::available_isas;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr int kSteps = 3;

struct Case {
  std::string name;
  OptimizerConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const std::string &name, OptimizerType type, auto tweak) {
    Case c;
    c.name = name;
    c.config.type = type;
    c.config.lr = 1e-2;
    tweak(c.config);
    out.push_back(c);
  };
  add("adamw", OptimizerType::AdamW, [](OptimizerConfig &c) { c.weight_decay = 0.1; });
  add("adam_l2", OptimizerType::Adam, [](OptimizerConfig &c) {
    c.adam_w_mode = false;
    c.weight_decay = 0.05;
    c.eps = 1e-6;
  });
  add("adam_as_adamw_no_bias_correction", OptimizerType::Adam, [](OptimizerConfig &c) {
    c.bias_correction = false;
    c.weight_decay = 0.02;
    c.beta1 = 0.8;
    c.beta2 = 0.99;
  });
  add("sgd", OptimizerType::SGD, [](OptimizerConfig &) {});
  add("sgd_momentum_dampening_wd", OptimizerType::SGD, [](OptimizerConfig &c) {
    c.momentum = 0.9;
    c.dampening = 0.3;
    c.weight_decay = 0.01;
  });
  add("sgd_nesterov", OptimizerType::SGD, [](OptimizerConfig &c) {
    c.momentum = 0.8;
    c.nesterov = true;
    c.weight_decay = 0.02;
  });
  add("adagrad", OptimizerType::Adagrad, [](OptimizerConfig &c) {
    c.eps = 1e-10;
    c.weight_decay = 0.01;
    c.initial_accumulator_value = 0.1;
  });
  add("lion", OptimizerType::Lion, [](OptimizerConfig &c) {
    c.lr = 1e-3;
    c.beta2 = 0.99;
    c.weight_decay = 0.1;
  });
  add("lamb", OptimizerType::Lamb, [](OptimizerConfig &c) {
    c.weight_decay = 0.01;
    c.max_coeff = 10.0;
    c.min_coeff = 0.01;
  });
  add("lamb_clamped_no_bias_correction", OptimizerType::Lamb, [](OptimizerConfig &c) {
    c.bias_correction = false;
    c.max_coeff = 0.3;  // forces the clamp: |p|/|u| is about 0.6 here
    c.min_coeff = 0.01;
  });
  return out;
}

// The float64 reference state of one tensor.
struct Reference {
  std::vector<double> p, s0, s1;
  // The same recurrences over absolute values: fp32 rounding error is bounded relative to these,
  // not to the (possibly cancelling) states themselves.
  std::vector<double> s0_abs;
  std::vector<char> ambiguous;  // Lion: sign(c) too close to 0 to decide in float
};

float round_to(dsrt_dtype dtype, float x) {
  if (dtype == DSRT_F16) return fp16_to_float(float_to_fp16(x));
  if (dtype == DSRT_BF16) return bf16_to_float(float_to_bf16(x));
  return x;
}

void reference_step(const OptimizerHyper &h, const OptimizerConfig &config, const std::vector<float> &grad,
                    double grad_scale, Reference *r) {
  const size_t n = grad.size();
  const double lr = h.lr, wd = h.weight_decay, b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  const double t = static_cast<double>(h.step);
  switch (config.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: {
      const bool decoupled = h.adam_w_mode;
      const double bc1 = h.bias_correction ? 1 - std::pow(b1, t) : 1;
      const double bc2 = h.bias_correction ? 1 - std::pow(b2, t) : 1;
      for (size_t i = 0; i < n; ++i) {
        double g = grad[i] * grad_scale;
        if (!decoupled) g += wd * r->p[i];
        r->s0_abs[i] = b1 * r->s0_abs[i] + (1 - b1) * (std::fabs(grad[i] * grad_scale) + std::fabs(wd * r->p[i]));
        r->s0[i] = b1 * r->s0[i] + (1 - b1) * g;
        r->s1[i] = b2 * r->s1[i] + (1 - b2) * g * g;
        const double denom = std::sqrt(r->s1[i]) / std::sqrt(bc2) + eps;
        if (decoupled) r->p[i] *= 1 - lr * wd;
        r->p[i] -= lr / bc1 * r->s0[i] / denom;
      }
      break;
    }
    case OptimizerType::SGD:
      for (size_t i = 0; i < n; ++i) {
        double d = grad[i] * grad_scale + wd * r->p[i];
        if (h.momentum != 0) {
          const double d_abs = std::fabs(grad[i] * grad_scale) + std::fabs(wd * r->p[i]);
          r->s0_abs[i] = h.step == 1 ? d_abs : h.momentum * r->s0_abs[i] + (1 - static_cast<double>(h.dampening)) * d_abs;
          r->s0[i] = h.step == 1 ? d : h.momentum * r->s0[i] + (1 - static_cast<double>(h.dampening)) * d;
          d = h.nesterov ? d + h.momentum * r->s0[i] : r->s0[i];
        }
        r->p[i] -= lr * d;
      }
      break;
    case OptimizerType::Adagrad:
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * grad_scale + wd * r->p[i];
        r->s0[i] += g * g;
        r->p[i] -= lr * g / (std::sqrt(r->s0[i]) + eps);
      }
      break;
    case OptimizerType::Lion:
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * grad_scale;
        const double c = b1 * r->s0[i] + (1 - b1) * g;
        r->ambiguous[i] = std::fabs(c) < 1e-5 * (std::fabs(b1 * r->s0[i]) + std::fabs((1 - b1) * g));
        const double sign = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
        r->p[i] = r->p[i] * (1 - lr * wd) - lr * sign;
        r->s0[i] = b2 * r->s0[i] + (1 - b2) * g;
        r->s0_abs[i] = b2 * r->s0_abs[i] + (1 - b2) * std::fabs(g);
      }
      break;
    case OptimizerType::Lamb: {
      std::vector<double> u(n);
      double p_sq = 0, u_sq = 0;
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * grad_scale;
        r->s0[i] = b1 * r->s0[i] + (1 - b1) * g;
        r->s0_abs[i] = b1 * r->s0_abs[i] + (1 - b1) * std::fabs(g);
        r->s1[i] = b2 * r->s1[i] + (1 - b2) * g * g;
        u[i] = r->s0[i] / (std::sqrt(r->s1[i]) + eps) + wd * r->p[i];
        p_sq += r->p[i] * r->p[i];
        u_sq += u[i] * u[i];
      }
      double trust = 1;
      if (p_sq > 0 && u_sq > 0) {
        trust = std::sqrt(p_sq) / std::sqrt(u_sq);
        trust = std::min<double>(std::max<double>(trust, h.min_coeff), h.max_coeff);
      }
      const double step_size =
          h.bias_correction ? lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)) : lr;
      for (size_t i = 0; i < n; ++i) r->p[i] -= step_size * trust * u[i];
      break;
    }
    case OptimizerType::OneBitAdam:
    case OptimizerType::ZeroOneAdam:
    case OptimizerType::OneBitLamb: break;
  }
}

double norm_diff(const std::vector<float> &got, const std::vector<double> &want, const std::vector<char> *skip) {
  double d = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (skip && (*skip)[i]) continue;
    d += (got[i] - want[i]) * (got[i] - want[i]);
  }
  return std::sqrt(d);
}
double norm_of(const std::vector<double> &x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// Runs kSteps steps of one case in one configuration; returns a failure description or "".
std::string run_case(const Case &c, const std::string &isa, dsrt_dtype grad_dtype, int working_kind, size_t n,
                     uint64_t seed) {
  if (!cpu_optimizer_set_isa(isa.c_str()).ok()) return "cannot select " + isa;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // fp16 gradients carry a loss scale the step removes through grad_scale.
  const float loss_scale = grad_dtype == DSRT_F16 ? 1024.0f : 1.0f;
  const float grad_scale = 1.0f / loss_scale * 0.5f;

  const int states = optimizer_state_count(c.config);
  std::vector<float> p(n), s0(n, optimizer_state_initial_value(c.config, 0)), s1(n, 0.0f), p_initial(n);
  for (auto &x : p) x = uniform(rng);
  p_initial = p;
  Reference ref;
  ref.p.assign(p.begin(), p.end());
  ref.s0.assign(s0.begin(), s0.end());
  ref.s1.assign(n, 0.0);
  ref.s0_abs.assign(n, std::fabs(static_cast<double>(s0[0])));
  ref.ambiguous.assign(n, 0);

  // The working copy 4096-aligned, or one element off: the kernels store it non-temporally only
  // when aligned, and both paths must write the same bits.
  AlignedBuffer working_storage;
  if (!working_storage.allocate((n + 1) * 2)) return "out of memory";
  uint16_t *const working16 = working_storage.as<uint16_t>() + ((seed >> 1) & 1);
  std::vector<uint16_t> grad16(n);
  std::vector<float> grad32(n), grad_values(n), working32(n), update(n);
  std::vector<char> skip(n, 0);
  for (int step = 1; step <= kSteps; ++step) {
    for (size_t i = 0; i < n; ++i) {
      const float g = round_to(grad_dtype, normal(rng) * loss_scale);
      grad_values[i] = g;
      grad32[i] = g;
      grad16[i] = grad_dtype == DSRT_F16 ? float_to_fp16(g) : float_to_bf16(g);
    }
    OptimizerHyper h = make_optimizer_hyper(c.config, c.config.lr, step);
    OptimizerSlice slice;
    slice.master = p.data();
    slice.grad = grad_dtype == DSRT_F32 ? static_cast<const void *>(grad32.data()) : grad16.data();
    slice.grad_dtype = grad_dtype;
    slice.state0 = states >= 1 ? s0.data() : nullptr;
    slice.state1 = states >= 2 ? s1.data() : nullptr;
    if (working_kind >= 0) {
      slice.working_dtype = static_cast<dsrt_dtype>(working_kind);
      slice.working = working_kind == DSRT_F32 ? static_cast<void *>(working32.data()) : working16;
    }
    slice.n = n;
    if (c.config.type == OptimizerType::Lamb) {
      // Two partitions, as two ranks would hold them; their sums add up to the tensor's.
      double p_sq = 0, u_sq = 0;
      const size_t half = n / 2;
      OptimizerSlice a = slice, b = slice;
      a.n = half;
      b.n = n - half;
      b.master += half;
      b.grad = static_cast<const char *>(slice.grad) + half * dtype_size(grad_dtype);
      b.state0 += half;
      b.state1 += half;
      if (b.working) b.working = static_cast<char *>(slice.working) + half * dtype_size(slice.working_dtype);
      Status s1st = cpu_lamb_phase1(h, a, grad_scale, update.data(), &p_sq, &u_sq);
      Status s2nd = cpu_lamb_phase1(h, b, grad_scale, update.data() + half, &p_sq, &u_sq);
      if (!s1st.ok() || !s2nd.ok()) return "phase1: " + s1st.message() + s2nd.message();
      Status s3 = cpu_lamb_phase2(h, a, update.data(), std::sqrt(p_sq), std::sqrt(u_sq));
      Status s4 = cpu_lamb_phase2(h, b, update.data() + half, std::sqrt(p_sq), std::sqrt(u_sq));
      if (!s3.ok() || !s4.ok()) return "phase2: " + s3.message() + s4.message();
    } else {
      Status s = cpu_optimizer_step(h, slice, grad_scale);
      if (!s.ok()) return "step failed: " + s.message();
    }
    reference_step(h, c.config, grad_values, grad_scale, &ref);

    // The working copy is exactly cast(master), bit for bit with util/half.h.
    for (size_t i = 0; working_kind >= 0 && i < n; ++i) {
      bool same = working_kind == DSRT_F32 ? float_to_bits(working32[i]) == float_to_bits(p[i])
                  : working_kind == DSRT_F16 ? working16[i] == float_to_fp16(p[i])
                                             : working16[i] == float_to_bf16(p[i]);
      if (!same) return "working copy differs from cast(master) at " + std::to_string(i);
    }
    // Errors are measured against the size of the change the optimizer made, which is far
    // stricter than against the parameter itself.
    std::vector<double> change(n);
    for (size_t i = 0; i < n; ++i) change[i] = ref.p[i] - p_initial[i];
    for (size_t i = 0; i < n; ++i) skip[i] = skip[i] || ref.ambiguous[i];
    // Allowed: a small fraction of the change, plus the fp32 rounding of the stored master
    // (half an ulp, 6e-8 of |p|, per step), which dominates where the change itself is tiny.
    const double p_err = norm_diff(p, ref.p, &skip);
    const double p_allowed = 2e-5 * norm_of(change) + step * 6e-8 * norm_of(ref.p);
    if (!(p_err <= p_allowed)) {
      return "step " + std::to_string(step) + ": master error " + std::to_string(p_err / norm_of(change)) +
             " of the change (allowed " + std::to_string(p_allowed / norm_of(change)) + ")";
    }
    if (states >= 1) {
      const double e = norm_diff(s0, ref.s0, nullptr) /
                       norm_of(c.config.type == OptimizerType::Adagrad ? ref.s0 : ref.s0_abs);
      if (!(e <= 2e-6)) return "step " + std::to_string(step) + ": state0 relative error " + std::to_string(e);
    }
    if (states >= 2) {
      const double e = norm_diff(s1, ref.s1, nullptr) / norm_of(ref.s1);
      if (!(e <= 2e-6)) return "step " + std::to_string(step) + ": state1 relative error " + std::to_string(e);
    }
    // Lion elements whose sign was a coin flip: continue from the kernel's value.
    for (size_t i = 0; i < n; ++i) {
      if (ref.ambiguous[i]) ref.p[i] = p[i];
    }
  }
  return "";
}

const char *working_name(int kind) { return kind < 0 ? "none" : dtype_name(static_cast<dsrt_dtype>(kind)); }

TEST(OptimSteps, EveryOptimizerDtypeAndIsaMatchesFloat64) {
  const char *original = cpu_optimizer_isa();
  const std::string restore = original;
  const dsrt_dtype grads[] = {DSRT_F32, DSRT_F16, DSRT_BF16};
  const int workings[] = {-1, DSRT_F32, DSRT_F16, DSRT_BF16};
  uint64_t seed = 1;
  for (const Case &c : cases()) {
    for (const std::string &isa : available_isas()) {
      for (dsrt_dtype g : grads) {
        for (int w : workings) {
          for (size_t n : {size_t{1}, size_t{7}, size_t{4099}}) {
            std::string failure = run_case(c, isa, g, w, n, seed++);
            EXPECT_EQ(failure, "") << c.name << " isa=" << isa << " grad=" << dtype_name(g)
                                   << " working=" << working_name(w) << " n=" << n;
          }
        }
      }
    }
  }
  ASSERT_TRUE(cpu_optimizer_set_isa(restore.c_str()).ok());
}

// Long odd lengths run the OpenMP chunks and the tail of the last chunk.
TEST(OptimSteps, LongOddLengthThreaded) {
  const std::string restore = cpu_optimizer_isa();
  uint64_t seed = 1000;
  for (const Case &c : cases()) {
    for (const std::string &isa : available_isas()) {
      if (kSanitized && isa != restore) continue;
      // The full million on the ISA training uses; a tenth (still several threads' chunks) on the others.
      const size_t n = (isa == restore && !kSanitized) ? 1000003 : 100003;
      // Alternate the dtype pairs across cases to keep the run short.
      const bool fp16_grads = (seed++ % 2) == 0;
      const dsrt_dtype grad = fp16_grads ? DSRT_F16 : DSRT_F32;
      const int working = fp16_grads ? DSRT_BF16 : DSRT_F16;
      std::string failure = run_case(c, isa, grad, working, n, seed);
      EXPECT_EQ(failure, "") << c.name << " isa=" << isa << " grad=" << dtype_name(grad)
                             << " working=" << working_name(working) << " n=" << n;
    }
  }
  ASSERT_TRUE(cpu_optimizer_set_isa(restore.c_str()).ok());
}

// An fp32 working copy over long ranges is stored non-temporally (kernels_body.inl): still exactly
// the master, and the update still matches float64, on every ISA, whole and split into chunks.
TEST(OptimSteps, LongFp32WorkingCopyIsTheMaster) {
  const std::string restore = cpu_optimizer_isa();
  uint64_t seed = 2000;
  for (const Case &c : cases()) {
    for (const std::string &isa : available_isas()) {
      if (kSanitized && isa != restore) continue;
      const size_t n = kSanitized ? 70001 : 300007;
      std::string failure = run_case(c, isa, DSRT_F32, DSRT_F32, n, seed++);
      EXPECT_EQ(failure, "") << c.name << " isa=" << isa << " n=" << n;
    }
  }
  ASSERT_TRUE(cpu_optimizer_set_isa(restore.c_str()).ok());
}

TEST(OptimSteps, IsaChoiceIsReported) {
  const std::string isa = cpu_optimizer_isa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "scalar") << isa;
  EXPECT_TRUE(cpu_optimizer_isa_available("scalar"));
  EXPECT_FALSE(cpu_optimizer_isa_available("sse9"));
  Status bad = cpu_optimizer_set_isa("sse9");
  EXPECT_EQ(bad.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("avx512, avx2 or scalar"), std::string::npos) << bad.message();
  EXPECT_EQ(cpu_optimizer_isa(), isa);
}

}  // namespace
}  // namespace dsrt
