// test_quant_kernels.cpp -- the block quantization kernels (src/quant/) against a float64
// reference on fresh random data, on every instruction set this CPU has: the stored integers and
// scales follow DeepSpeed's symmetric formula, the round trip error of every element is within
// the format's bound, dequantization is the exact product of the stored integer and scale, and
// every ISA writes identical bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "optim/cpu_optimizer.h"
#include "quant/quantize.h"
#include "util/half.h"
#include "isa_test_util.h"

namespace dsrt {
namespace {

using isa_test::available_isas;
using isa_test::IsaGuard;

// n values of dtype whose magnitude changes from group to group (so scales differ by decades).
std::vector<uint8_t> random_values(size_t n, dsrt_dtype dtype, size_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-4.0f, 2.0f);
  std::vector<uint8_t> bytes(n * dtype_size(dtype));
  float magnitude = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % group == 0) magnitude = std::pow(10.0f, decade(rng));
    from_float(bytes.data(), dtype, i, normal(rng) * magnitude);
  }
  return bytes;
}

int stored_int(const std::vector<uint8_t> &q, size_t i, int bits) {
  if (bits == 8) return static_cast<int8_t>(q[i]);
  const uint8_t byte = q[i / 2];
  const int nibble = (i % 2 == 0) ? (byte >> 4) : (byte & 0xf);
  return nibble >= 8 ? nibble - 16 : nibble;
}

struct Case {
  dsrt_dtype dtype;
  int bits;
  size_t group;
  size_t n;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
    for (int bits : {8, 4}) {
      // Whole groups, a short last group, groups shorter than one vector, one odd-sized array
      // (4 bits: the last byte half used), and a size large enough to run on several threads.
      out.push_back({dtype, bits, 2048, 8192});
      out.push_back({dtype, bits, 512, 5000});
      out.push_back({dtype, bits, bits == 8 ? size_t{37} : size_t{6}, 1001});
      out.push_back({dtype, bits, 64, 64 * 1100 + 13});
    }
  }
  return out;
}

TEST(QuantKernels, MatchTheFloat64ReferenceOnEveryIsa) {
  IsaGuard guard;
  uint32_t seed = 20;
  for (const Case &c : cases()) {
    const QuantFormat format{c.bits, c.group};
    const std::vector<uint8_t> src = random_values(c.n, c.dtype, c.group, ++seed);
    const size_t groups = quant_groups(c.n, c.group);
    std::vector<uint8_t> first_q;
    std::vector<float> first_scales;
    std::vector<uint8_t> first_deq;
    for (const std::string &isa : available_isas()) {
      SCOPED_TRACE("isa " + isa + " dtype " + std::to_string(c.dtype) + " bits " + std::to_string(c.bits) +
                   " group " + std::to_string(c.group) + " n " + std::to_string(c.n));
      ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
      ASSERT_STREQ(quant_kernels_isa(), isa.c_str());
      std::vector<uint8_t> q(quant_value_bytes(c.n, c.bits), 0xAA);
      std::vector<float> scales(groups, -1.0f);
      ASSERT_TRUE(quantize_blocks(src.data(), c.dtype, c.n, format, q.data(), scales.data()).ok());
      std::vector<uint8_t> deq(c.n * dtype_size(c.dtype));
      ASSERT_TRUE(dequantize_blocks(q.data(), scales.data(), c.n, format, deq.data(), c.dtype).ok());

      const double levels = std::ldexp(1.0, c.bits - 1);
      // fp32 rounding of the multiplier and of x * multiplier moves an element by at most a few
      // ulps of max|x| = 2^(bits-1) * scale.
      const double slack = levels * 3e-7;
      size_t clamped = 0;
      for (size_t g = 0; g < groups; ++g) {
        const size_t begin = g * c.group, end = std::min(c.n, begin + c.group);
        double absmax = 0.0;
        for (size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(double(to_float(src.data(), c.dtype, i))));
        ASSERT_GT(absmax, 0.0);
        const double scale = scales[g];
        // The scale is max|x| / 2^(bits-1) up to fp32 rounding (of the multiplier and its inverse).
        ASSERT_NEAR(scale, absmax / levels, 3e-7 * absmax / levels) << "group " << g;
        for (size_t i = begin; i < end; ++i) {
          const double x = to_float(src.data(), c.dtype, i);
          const int qi = stored_int(q, i, c.bits);
          ASSERT_GE(qi, -levels);
          ASSERT_LE(qi, levels - 1);
          const double err = std::fabs(x - qi * scale);
          if (x / scale > levels - 0.5) {
            // The positive extreme is clamped to 2^(bits-1) - 1: at most one step off.
            ++clamped;
            ASSERT_LE(err, scale * (1 + slack)) << "element " << i;
          } else {
            ASSERT_LE(err, scale * (0.5 + slack)) << "element " << i << " x " << x << " q " << qi;
          }
          // Dequantization is the exact product of the stored integer and scale, rounded once.
          std::vector<uint8_t> expect(dtype_size(c.dtype));
          from_float(expect.data(), c.dtype, 0, static_cast<float>(double(qi) * scale));
          ASSERT_EQ(std::memcmp(expect.data(), deq.data() + i * dtype_size(c.dtype), dtype_size(c.dtype)), 0)
              << "element " << i;
        }
      }
      EXPECT_GT(clamped, 0u);  // random groups put their maximum on the positive side about half the time
      if (c.bits == 4 && c.n % 2 == 1) {
        EXPECT_EQ(q.back() & 0xf, 0);
      }
      if (first_q.empty()) {
        first_q = q;
        first_scales = scales;
        first_deq = deq;
      } else {
        EXPECT_EQ(q, first_q);
        EXPECT_EQ(std::memcmp(scales.data(), first_scales.data(), groups * sizeof(float)), 0);
        EXPECT_EQ(deq, first_deq);
      }
    }
  }
}

TEST(QuantKernels, DequantizeAddAccumulatesInFp32OnEveryIsa) {
  IsaGuard guard;
  for (int bits : {8, 4}) {
    const size_t n = 40000 + 7 * (bits == 8);
    const QuantFormat format{bits, 256};
    const std::vector<uint8_t> src = random_values(n, DSRT_F32, 256, 99 + bits);
    std::vector<uint8_t> q(quant_value_bytes(n, bits));
    std::vector<float> scales(quant_groups(n, 256));
    std::vector<float> base(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float &b : base) b = normal(rng);
    std::vector<float> first;
    for (const std::string &isa : available_isas()) {
      SCOPED_TRACE(isa);
      ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
      ASSERT_TRUE(quantize_blocks(src.data(), DSRT_F32, n, format, q.data(), scales.data()).ok());
      std::vector<float> dst = base;
      ASSERT_TRUE(dequantize_add_blocks(q.data(), scales.data(), n, format, dst.data()).ok());
      for (size_t i = 0; i < n; ++i) {
        const double expect = double(base[i]) + double(stored_int(q, i, bits)) * scales[i / 256];
        ASSERT_EQ(dst[i], static_cast<float>(static_cast<float>(double(stored_int(q, i, bits)) * scales[i / 256]) + base[i]));
        ASSERT_NEAR(dst[i], expect, 1e-6 * (std::fabs(expect) + 1.0));
      }
      if (first.empty()) {
        first = dst;
      } else {
        EXPECT_EQ(std::memcmp(first.data(), dst.data(), n * sizeof(float)), 0);
      }
    }
  }
}

TEST(QuantKernels, NonFiniteGroupsReadBackAsNanAndZeroGroupsAsZero) {
  IsaGuard guard;
  const size_t n = 96, group = 32;
  for (const std::string &isa : available_isas()) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (int bits : {8, 4}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = 0.25f * float(i % 7) - 0.5f;
      for (size_t i = 32; i < 64; ++i) x[i] = 0.0f;
      x[70] = std::numeric_limits<float>::infinity();
      std::vector<uint8_t> q(quant_value_bytes(n, bits));
      std::vector<float> scales(3);
      const QuantFormat format{bits, group};
      ASSERT_TRUE(quantize_blocks(x.data(), DSRT_F32, n, format, q.data(), scales.data()).ok());
      std::vector<float> back(n);
      ASSERT_TRUE(dequantize_blocks(q.data(), scales.data(), n, format, back.data(), DSRT_F32).ok());
      EXPECT_TRUE(std::isfinite(scales[0]));
      EXPECT_EQ(scales[1], 1.0f);
      EXPECT_TRUE(std::isnan(scales[2]));
      for (size_t i = 32; i < 64; ++i) EXPECT_EQ(back[i], 0.0f);
      for (size_t i = 64; i < 96; ++i) EXPECT_TRUE(std::isnan(back[i]));
      x[70] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_TRUE(quantize_blocks(x.data(), DSRT_F32, n, format, q.data(), scales.data()).ok());
      EXPECT_TRUE(std::isnan(scales[2]));
    }
  }
}

TEST(QuantKernels, BadArgumentsAreRefusedWithAMessage) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t q[8];
  float s[8];
  Status st = quantize_blocks(x, DSRT_F32, 8, QuantFormat{3, 4}, q, s);
  EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("8 or 4"), std::string::npos);
  EXPECT_EQ(quantize_blocks(x, DSRT_F32, 8, QuantFormat{4, 3}, q, s).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(quantize_blocks(x, DSRT_F32, 8, QuantFormat{8, 0}, q, s).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(quantize_blocks(nullptr, DSRT_F32, 8, QuantFormat{8, 4}, q, s).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(quantize_blocks(x, static_cast<dsrt_dtype>(9), 8, QuantFormat{8, 4}, q, s).code(),
            DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dequantize_blocks(q, nullptr, 8, QuantFormat{8, 4}, x, DSRT_F32).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(quantize_blocks(nullptr, DSRT_F32, 0, QuantFormat{8, 4}, nullptr, nullptr).ok());
}

// DeepSpeed's adaptive group count (partition_parameters.py, CUDAQuantizer.quantize), values
// computed with its code.
TEST(QuantKernels, QwzGroupSizeFollowsDeepSpeed) {
  EXPECT_EQ(qwz_group_size(8192), 4096u);
  EXPECT_EQ(qwz_group_size(1000000), 8000u);
  EXPECT_EQ(qwz_group_size(64000), 8000u);
  EXPECT_EQ(qwz_group_size(24), 24u);
  EXPECT_EQ(qwz_group_size(4096 * 1024), 4096u);
  EXPECT_EQ(qwz_group_size(8 * 10007), 8u);
  EXPECT_EQ(qwz_group_size(10), 10u);      // not a multiple of 8: dsrt's fallback
  EXPECT_EQ(qwz_group_size(10001), 4096u);
}

}  // namespace
}  // namespace dsrt
