// The summation order of the CUDA sum of squares (modelled on the host by cuda_norm_order.h, which
// test_cuda_kernels checks bitwise against the GPU) makes the clipping norm independent of where
// the partition is cut: the sum over any cut, added over the ranks in double, agrees with the
// whole array's to double rounding, and the fp32 clip coefficient the engine steps with is the same
// bits. This is what makes MiCS bitwise plain ZeRO-3 on a GPU (the 2026-11-25 H200 run failed it
// with fp32 chunk sums). Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_norm_order.h"
#include "optim/cpu_optimizer.h"

namespace dsrt {
namespace {

std::vector<float> spread_values(std::mt19937 &rng, size_t n) {
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-12, 6);
  std::vector<float> x(n);
  for (float &v : x) v = std::ldexp(mant(rng), expo(rng));
  return x;
}

// The engine's clip: grad_scale = unscale * clip / (norm + 1e-6), rounded to float once.
float clip_scale(double norm_sq, double unscale, double clip) {
  const double norm = std::sqrt(norm_sq);
  double scale = unscale;
  const double coefficient = clip / (norm + 1e-6);
  if (coefficient < 1.0) scale *= coefficient;
  return static_cast<float>(scale);
}

// The norm of x cut at `cuts` (ascending, inside x), each piece summed as its own tensor (a
// rank's partition: an allocation of its own, so 16-byte aligned) and the pieces added in order.
double cut_norm(const std::vector<float> &x, const std::vector<size_t> &cuts, float scale) {
  double total = 0.0;
  size_t begin = 0;
  for (size_t k = 0; k <= cuts.size(); ++k) {
    const size_t end = k < cuts.size() ? cuts[k] : x.size();
    total += cuda_norm_order::sum_squares(x.data() + begin, DSRT_F32, end - begin, scale, true);
    begin = end;
  }
  return total;
}

TEST(CudaNormOrder, ModelAgreesWithTheCpuSum) {
  std::mt19937 rng(20261126);
  const size_t sizes[] = {1, 7, 8, 2049, 65536, 65537, 3 * 65536 + 12345};
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
    for (size_t n : sizes) {
      std::vector<float> values = spread_values(rng, n);
      std::vector<uint16_t> half(n);
      const void *data = values.data();
      if (dtype != DSRT_F32) {
        for (size_t i = 0; i < n; ++i) half[i] = dtype == DSRT_F16 ? float_to_fp16(values[i]) : float_to_bf16(values[i]);
        data = half.data();
      }
      for (bool vector_path : {true, false}) {
        const double model = cuda_norm_order::sum_squares(data, dtype, n, 0.375f, vector_path);
        bool nonfinite = true;
        const double cpu = cpu_sum_squares(data, dtype, n, 0.375f, &nonfinite);
        EXPECT_FALSE(nonfinite);
        EXPECT_GT(cpu, 0.0);
        EXPECT_NEAR(model, cpu, 1e-14 * cpu) << "n " << n << " dtype " << static_cast<int>(dtype) << " vector " << vector_path;
      }
    }
  }
}

TEST(CudaNormOrder, NormIsPartitionInvariant) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const size_t n = 5 * 65536 + 4097 * seed;
    const std::vector<float> x = spread_values(rng, n);
    const float unscale = 1.0f / 1024.0f;
    const double whole = cut_norm(x, {}, unscale);
    ASSERT_GT(whole, 0.0);
    // Clip at half the norm, so the coefficient is in play.
    const double clip = 0.5 * std::sqrt(whole);
    const float want = clip_scale(whole, unscale, clip);
    std::vector<std::vector<size_t>> cuts;
    for (size_t parts : {2, 3, 4, 8}) {  // equal partitions (ZeRO-3 and MiCS groups of any size)
      std::vector<size_t> c;
      for (size_t k = 1; k < parts; ++k) c.push_back(n * k / parts);
      cuts.push_back(c);
    }
    std::uniform_int_distribution<size_t> at(1, n - 1);
    for (int r = 0; r < 8; ++r) {  // cut anywhere, chunk boundaries or not
      std::vector<size_t> c;
      for (int k = 0; k < 1 + r % 4; ++k) c.push_back(at(rng));
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      cuts.push_back(c);
    }
    for (const std::vector<size_t> &c : cuts) {
      const double got = cut_norm(x, c, unscale);
      EXPECT_NEAR(got, whole, 4e-15 * whole) << c.size() + 1 << " pieces";
      EXPECT_EQ(clip_scale(got, unscale, clip), want) << c.size() + 1 << " pieces";
    }
  }
}

}  // namespace
}  // namespace dsrt
