// test_optim_kernels.cpp -- the optimizer's building blocks on every instruction set this CPU has:
// 16-bit conversions bit for bit against util/half.h (all fp16/bf16 values, rounding ties, NaN,
// inf, subnormals), the sum of squares with its non-finite detection, accumulation, and the
// argument checks of the step entry points.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "isa_test_util.h"

namespace dsrt {
namespace {

using isa_test::available_isas;
using isa_test::IsaGuard;

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
// A million-plus odd length runs the threaded path; sanitized builds (10x slower) use a tenth.
constexpr size_t kLong = kSanitized ? 100003 : 1000003;

// Float bit patterns that stress both 16-bit roundings: every value at and around each fp16 and
// bf16 rounding tie, the special values, and random bits.
std::vector<float> tricky_floats() {
  std::vector<uint32_t> bits;
  for (uint32_t high = 0; high < (1u << 16); ++high) {  // bf16 ties: low 16 bits
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) bits.push_back(high << 16 | low);
  }
  for (uint32_t high = 0; high < (1u << 19); high += 3) {  // fp16 ties: low 13 bits
    for (uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu}) bits.push_back(high << 13 | low);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,
                           0x477ff000u, 0x477fefffu, 0x477fe000u, 0x38800000u, 0x387fffffu, 0x33000000u,
                           0x33000001u, 0x32ffffffu, 0x00000001u, 0x80000001u, 0x7f7fffffu, 0xff7fffffu}) {
    bits.push_back(special);
  }
  bits.push_back(0x7f7f8000u);  // bf16 rounds up to inf
  std::vector<float> out(bits.size() + 3);  // + 3: an odd length, so the last vector is partial
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bits_to_float(bits[i]);
  out[bits.size()] = 1.5f;
  out[bits.size() + 1] = -0.0f;
  out[bits.size() + 2] = std::numeric_limits<float>::quiet_NaN();
  return out;
}

TEST(OptimKernels, Fp32To16BitIsBitwiseHalfH) {
  IsaGuard guard;
  const std::vector<float> values = tricky_floats();
  std::vector<uint16_t> out(values.size());
  for (const std::string &isa : available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (dsrt_dtype dst : {DSRT_F16, DSRT_BF16}) {
      std::fill(out.begin(), out.end(), 0xdead);
      cpu_convert(values.data(), DSRT_F32, out.data(), dst, values.size());
      size_t mismatches = 0, first = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        uint16_t want = dst == DSRT_F16 ? float_to_fp16(values[i]) : float_to_bf16(values[i]);
        if (out[i] != want && mismatches++ == 0) first = i;
      }
      EXPECT_EQ(mismatches, 0u) << isa << " to " << dtype_name(dst) << ": first at bits 0x" << std::hex
                                << float_to_bits(values[first]) << " got 0x" << out[first] << " want 0x"
                                << (dst == DSRT_F16 ? float_to_fp16(values[first]) : float_to_bf16(values[first]));
    }
  }
}

TEST(OptimKernels, Every16BitValueDecodesBitwiseAndConvertsAcross) {
  IsaGuard guard;
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // odd length, all values
  for (size_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  std::vector<uint16_t> narrow(all.size());
  for (const std::string &isa : available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (dsrt_dtype src : {DSRT_F16, DSRT_BF16}) {
      cpu_convert(all.data(), src, wide.data(), DSRT_F32, all.size());
      size_t bad = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        float want = src == DSRT_F16 ? fp16_to_float(all[i]) : bf16_to_float(all[i]);
        bad += float_to_bits(wide[i]) != float_to_bits(want);
      }
      EXPECT_EQ(bad, 0u) << isa << " " << dtype_name(src) << " to fp32";
      const dsrt_dtype dst = src == DSRT_F16 ? DSRT_BF16 : DSRT_F16;
      cpu_convert(all.data(), src, narrow.data(), dst, all.size());
      bad = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        float f = src == DSRT_F16 ? fp16_to_float(all[i]) : bf16_to_float(all[i]);
        uint16_t want = dst == DSRT_F16 ? float_to_fp16(f) : float_to_bf16(f);
        bad += narrow[i] != want;
      }
      EXPECT_EQ(bad, 0u) << isa << " " << dtype_name(src) << " to " << dtype_name(dst);
      cpu_convert(all.data(), src, narrow.data(), src, all.size());
      EXPECT_EQ(narrow, all) << isa << " identity copy";
    }
  }
}

std::vector<uint8_t> random_data(dsrt_dtype dtype, size_t n, std::mt19937_64 &rng, std::vector<double> *values) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<uint8_t> bytes(n * dtype_size(dtype));
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    from_float(bytes.data(), dtype, i, normal(rng));
    (*values)[i] = to_float(bytes.data(), dtype, i);
  }
  return bytes;
}

TEST(OptimKernels, SumSquaresMatchesFloat64AndFindsNonFinite) {
  IsaGuard guard;
  std::mt19937_64 rng(11);
  for (const std::string &isa : available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
      for (size_t n : {size_t{1}, size_t{7}, size_t{33}, kLong}) {
        std::vector<double> values;
        std::vector<uint8_t> data = random_data(dtype, n, rng, &values);
        const float scale = 0.25f;
        long double want = 0;
        for (double v : values) want += static_cast<long double>(v * scale) * (v * scale);
        bool nonfinite = true;
        const double got = cpu_sum_squares(data.data(), dtype, n, scale, &nonfinite);
        EXPECT_FALSE(nonfinite) << isa << " " << dtype_name(dtype) << " n=" << n;
        EXPECT_NEAR(got, static_cast<double>(want), 1e-12 * static_cast<double>(want))
            << isa << " " << dtype_name(dtype) << " n=" << n;

        // inf, -inf and nan at the first, a middle and the last (tail) element.
        for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
          for (size_t at : {size_t{0}, n / 2, n - 1}) {
            std::vector<uint8_t> copy = data;
            from_float(copy.data(), dtype, at, bad);
            bool flag = false;
            (void)cpu_sum_squares(copy.data(), dtype, n, scale, &flag);
            EXPECT_TRUE(flag) << isa << " " << dtype_name(dtype) << " n=" << n << " value " << bad << " at " << at;
          }
        }
      }
    }
    // The same data gives the same bits every time (chunks are summed in a fixed order).
    {
      std::vector<double> values;
      std::vector<uint8_t> data = random_data(DSRT_F32, kLong, rng, &values);
      bool flag = false;
      const double first = cpu_sum_squares(data.data(), DSRT_F32, kLong, 1.0f, &flag);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(first, cpu_sum_squares(data.data(), DSRT_F32, kLong, 1.0f, &flag)) << isa << " run " << k;
      }
    }
    // Large finite values are not mistaken for overflow: their squares fit in double.
    std::vector<float> big(9, 3.0e38f);
    bool flag = true;
    const double s = cpu_sum_squares(big.data(), DSRT_F32, big.size(), 1.0f, &flag);
    EXPECT_FALSE(flag) << isa;
    const double each = static_cast<double>(3.0e38f);
    EXPECT_NEAR(s, 9 * each * each, 1e-12 * 9 * each * each) << isa;
  }
  bool flag = true;
  EXPECT_EQ(cpu_sum_squares(nullptr, DSRT_F32, 0, 1.0f, &flag), 0.0);
  EXPECT_FALSE(flag);
}

TEST(OptimKernels, AccumulateMatchesFloat64) {
  IsaGuard guard;
  std::mt19937_64 rng(12);
  for (const std::string &isa : available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
      for (size_t n : {size_t{1}, size_t{7}, kLong}) {
        std::vector<double> values, base;
        std::vector<uint8_t> src = random_data(dtype, n, rng, &values);
        std::vector<uint8_t> dst_bytes = random_data(DSRT_F32, n, rng, &base);
        std::vector<float> dst(n);
        std::memcpy(dst.data(), dst_bytes.data(), n * 4);
        const float scale = 1.0f / 3.0f;
        cpu_accumulate(dst.data(), src.data(), dtype, n, scale);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double want = base[i] + values[i] * static_cast<double>(scale);
          // one fp32 rounding of the sum, or two when the multiply is not fused
          bad += !(std::fabs(dst[i] - want) <= 1.2e-7 * (std::fabs(base[i]) + std::fabs(values[i] * scale)));
        }
        EXPECT_EQ(bad, 0u) << isa << " " << dtype_name(dtype) << " n=" << n;
      }
    }
  }
}

TEST(OptimKernels, StepArgumentErrorsNameTheProblem) {
  std::vector<float> p(8, 1.0f), g(8, 0.5f), m(8, 0.0f), v(8, 0.0f), u(8);
  OptimizerConfig config;
  OptimizerHyper h = make_optimizer_hyper(config, 1e-3, 1);
  OptimizerSlice s;
  s.master = p.data();
  s.grad = g.data();
  s.state0 = m.data();
  s.state1 = v.data();
  s.n = p.size();
  EXPECT_TRUE(cpu_optimizer_step(h, s, 1.0f).ok());

  OptimizerSlice no_master = s;
  no_master.master = nullptr;
  Status st = cpu_optimizer_step(h, no_master, 1.0f);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("master"), std::string::npos) << st.message();

  OptimizerSlice no_v = s;
  no_v.state1 = nullptr;
  st = cpu_optimizer_step(h, no_v, 1.0f);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("state1"), std::string::npos) << st.message();

  st = cpu_optimizer_step(h, s, std::numeric_limits<float>::infinity());
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("grad_scale"), std::string::npos) << st.message();

  OptimizerHyper step0 = h;
  step0.step = 0;
  EXPECT_EQ(cpu_optimizer_step(step0, s, 1.0f).code(), DSRT_ERR_INVALID_ARGUMENT);

  OptimizerSlice bad_dtype = s;
  bad_dtype.grad_dtype = static_cast<dsrt_dtype>(3);  // in the enum's range (UBSan), but no dtype
  EXPECT_EQ(cpu_optimizer_step(h, bad_dtype, 1.0f).code(), DSRT_ERR_INVALID_ARGUMENT);

  OptimizerHyper lamb = h;
  lamb.type = OptimizerType::Lamb;
  st = cpu_optimizer_step(lamb, s, 1.0f);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("cpu_lamb_phase1"), std::string::npos) << st.message();
  double p_sq = 0, u_sq = 0;
  EXPECT_EQ(cpu_lamb_phase1(lamb, s, 1.0f, nullptr, &p_sq, &u_sq).code(), DSRT_ERR_INVALID_ARGUMENT);
  OptimizerSlice bf16_working = s;
  std::vector<uint16_t> w16(16);
  bf16_working.working = u.data();
  bf16_working.working_dtype = DSRT_BF16;
  EXPECT_EQ(cpu_lamb_phase1(lamb, bf16_working, 1.0f, u.data(), &p_sq, &u_sq).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cpu_lamb_phase2(lamb, s, u.data(), -1.0, 1.0).code(), DSRT_ERR_INVALID_ARGUMENT);

  OptimizerHyper onebit = h;
  onebit.type = OptimizerType::OneBitAdam;
  EXPECT_EQ(cpu_optimizer_step(onebit, s, 1.0f).code(), DSRT_ERR_UNSUPPORTED);

  OptimizerHyper nesterov = h;
  nesterov.type = OptimizerType::SGD;
  nesterov.nesterov = true;
  nesterov.momentum = 0.9f;
  nesterov.dampening = 0.1f;
  st = cpu_optimizer_step(nesterov, s, 1.0f);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("dampening"), std::string::npos) << st.message();

  OptimizerHyper sgd = h;
  sgd.type = OptimizerType::SGD;
  OptimizerSlice stateless = s;
  stateless.state0 = stateless.state1 = nullptr;
  EXPECT_TRUE(cpu_optimizer_step(sgd, stateless, 1.0f).ok());  // plain SGD keeps no state
  sgd.momentum = 0.9f;
  EXPECT_EQ(cpu_optimizer_step(sgd, stateless, 1.0f).code(), DSRT_ERR_INVALID_ARGUMENT);

  OptimizerSlice empty = no_master;
  empty.n = 0;
  EXPECT_TRUE(cpu_optimizer_step(h, empty, 1.0f).ok());  // nothing to do, nothing read
}

TEST(OptimKernels, HyperAndStateCountFollowConfig) {
  OptimizerConfig c;
  c.type = OptimizerType::AdamW;
  c.adam_w_mode = false;  // ignored for AdamW: DeepSpeed always decouples it
  c.beta1 = 0.8;
  c.weight_decay = 0.1;
  OptimizerHyper h = make_optimizer_hyper(c, 0.5, 7);
  EXPECT_TRUE(h.adam_w_mode);
  EXPECT_EQ(h.type, OptimizerType::AdamW);
  EXPECT_FLOAT_EQ(h.lr, 0.5f);
  EXPECT_FLOAT_EQ(h.beta1, 0.8f);
  EXPECT_FLOAT_EQ(h.weight_decay, 0.1f);
  EXPECT_EQ(h.step, 7);
  c.type = OptimizerType::Adam;
  EXPECT_FALSE(make_optimizer_hyper(c, 0.5, 1).adam_w_mode);
  EXPECT_EQ(optimizer_state_count(c), 2);
  c.type = OptimizerType::Lamb;
  EXPECT_EQ(optimizer_state_count(c), 2);
  c.type = OptimizerType::SGD;
  EXPECT_EQ(optimizer_state_count(c), 0);
  c.momentum = 0.9;
  EXPECT_EQ(optimizer_state_count(c), 1);
  c.type = OptimizerType::Lion;
  EXPECT_EQ(optimizer_state_count(c), 1);
  c.type = OptimizerType::Adagrad;
  c.initial_accumulator_value = 0.25;
  EXPECT_EQ(optimizer_state_count(c), 1);
  EXPECT_FLOAT_EQ(optimizer_state_initial_value(c, 0), 0.25f);
  c.type = OptimizerType::Adam;
  EXPECT_FLOAT_EQ(optimizer_state_initial_value(c, 0), 0.0f);
}

}  // namespace
}  // namespace dsrt

namespace dsrt {
namespace {

// Arrays for a batch of slices of assorted sizes (tiny ones like biases next to large ones).
struct Batch {
  std::vector<size_t> sizes{1, 7, 100, 40000, 3, 100003, 64};
  std::vector<std::vector<float>> p, g, m, v, u;
  std::vector<std::vector<uint16_t>> w;
  explicit Batch(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t n : sizes) {
      auto fill = [&](float scale) {
        std::vector<float> x(n);
        for (auto &e : x) e = normal(rng) * scale;
        return x;
      };
      p.push_back(fill(1.0f));
      g.push_back(fill(0.1f));
      m.push_back(fill(0.01f));
      std::vector<float> vv = fill(0.01f);
      for (auto &e : vv) e = e * e;
      v.push_back(vv);
      u.push_back(std::vector<float>(n));
      w.push_back(std::vector<uint16_t>(n));
    }
  }
  std::vector<OptimizerSlice> slices() {
    std::vector<OptimizerSlice> out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      OptimizerSlice s;
      s.master = p[i].data();
      s.grad = g[i].data();
      s.state0 = m[i].data();
      s.state1 = v[i].data();
      s.working = w[i].data();
      s.working_dtype = DSRT_BF16;
      s.n = sizes[i];
      out.push_back(s);
    }
    return out;
  }
};

TEST(OptimBatch, ManySlicesMatchOneAtATimeBitwise) {
  OptimizerConfig config;
  config.type = OptimizerType::AdamW;
  config.weight_decay = 0.1;
  Batch one(5), many(5);
  for (int step = 1; step <= 2; ++step) {
    const OptimizerHyper h = make_optimizer_hyper(config, 1e-2, step);
    for (const OptimizerSlice &s : one.slices()) ASSERT_TRUE(cpu_optimizer_step(h, s, 0.5f).ok());
    std::vector<OptimizerSlice> all = many.slices();
    ASSERT_TRUE(cpu_optimizer_step_many(h, all.data(), all.size(), 0.5f).ok());
  }
  for (size_t i = 0; i < one.sizes.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(one.p[i].data(), many.p[i].data(), one.sizes[i] * 4)) << "slice " << i;
    EXPECT_EQ(0, std::memcmp(one.v[i].data(), many.v[i].data(), one.sizes[i] * 4)) << "slice " << i;
    EXPECT_EQ(one.w[i], many.w[i]) << "slice " << i;
  }
}

TEST(OptimBatch, LambManyMatchesOneAtATime) {
  OptimizerConfig config;
  config.type = OptimizerType::Lamb;
  config.weight_decay = 0.01;
  Batch one(6), many(6);
  const size_t k = one.sizes.size();
  const OptimizerHyper h = make_optimizer_hyper(config, 1e-2, 3);
  std::vector<double> p_one(k, 0.0), u_one(k, 0.0), p_many(k, 0.0), u_many(k, 0.0);
  std::vector<OptimizerSlice> s1 = one.slices(), s2 = many.slices();
  std::vector<float *> updates;
  for (size_t i = 0; i < k; ++i) {
    ASSERT_TRUE(cpu_lamb_phase1(h, s1[i], 1.0f, one.u[i].data(), &p_one[i], &u_one[i]).ok());
    updates.push_back(many.u[i].data());
  }
  ASSERT_TRUE(cpu_lamb_phase1_many(h, s2.data(), k, 1.0f, updates.data(), p_many.data(), u_many.data()).ok());
  std::vector<double> pn(k), un(k);
  std::vector<const float *> cupdates(updates.begin(), updates.end());
  for (size_t i = 0; i < k; ++i) {
    EXPECT_NEAR(p_one[i], p_many[i], 1e-12 * p_one[i]) << "slice " << i;  // summed in other pieces
    EXPECT_NEAR(u_one[i], u_many[i], 1e-12 * u_one[i]) << "slice " << i;
    EXPECT_EQ(one.u[i], many.u[i]) << "slice " << i;
    pn[i] = std::sqrt(p_one[i]);
    un[i] = std::sqrt(u_one[i]);
    ASSERT_TRUE(cpu_lamb_phase2(h, s1[i], one.u[i].data(), pn[i], un[i]).ok());
  }
  ASSERT_TRUE(cpu_lamb_phase2_many(h, s2.data(), k, cupdates.data(), pn.data(), un.data()).ok());
  for (size_t i = 0; i < k; ++i) {
    EXPECT_EQ(0, std::memcmp(one.p[i].data(), many.p[i].data(), one.sizes[i] * 4)) << "slice " << i;
    EXPECT_EQ(one.w[i], many.w[i]) << "slice " << i;
  }
}

TEST(OptimBatch, ABadSliceIsNamedAndNothingIsUpdated) {
  OptimizerConfig config;
  Batch batch(7);
  std::vector<OptimizerSlice> slices = batch.slices();
  slices[2].state1 = nullptr;
  const std::vector<float> before = batch.p[0];
  Status st = cpu_optimizer_step_many(make_optimizer_hyper(config, 1e-2, 1), slices.data(), slices.size(), 1.0f);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("slice 2"), std::string::npos) << st.message();
  EXPECT_EQ(batch.p[0], before);
  EXPECT_EQ(cpu_optimizer_step_many(make_optimizer_hyper(config, 1e-2, 1), nullptr, 3, 1.0f).code(),
            DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(cpu_optimizer_step_many(make_optimizer_hyper(config, 1e-2, 1), nullptr, 0, 1.0f).ok());
}

}  // namespace
}  // namespace dsrt
