// test_cuda_quantize.cpp -- the CUDA block quantization kernels (cuda/quantize.h) against the CPU
// kernels (src/quant/quantize.h, themselves tested against a float64 reference): the same bytes,
// scales and dequantized values on fresh random data. Without a GPU the GPU test skips; the
// launchers' argument checks run in any CUDA build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsrt.h"
#include "quant/quantize.h"
#include "util/half.h"
#ifdef DSRT_HAVE_CUDA
#include "cuda/quantize.h"
#include "cuda_test_device.h"
#include "device/cuda_device.h"
#endif

namespace dsrt {
namespace {

#ifdef DSRT_HAVE_CUDA
using cuda_test::check;
using cuda_test::gpu;

TEST(CudaQuantize, MatchesTheCpuKernelsByteForByte) {
  if (!dsrt_has_feature("cuda")) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
    for (int bits : {8, 4}) {
      for (size_t group : {size_t(4096), size_t(6)}) {
        const size_t n = 100003;
        std::vector<uint8_t> src(n * dtype_size(dtype));
        for (size_t i = 0; i < n; ++i) from_float(src.data(), dtype, i, normal(rng) * float(1 + i % 97));
        const QuantFormat format{bits, group};
        const size_t qbytes = quant_value_bytes(n, bits), groups = quant_groups(n, group);
        std::vector<uint8_t> q(qbytes), q_gpu(qbytes);
        std::vector<float> scales(groups), scales_gpu(groups), acc(n, 0.5f), acc_gpu(n);
        std::vector<uint8_t> deq(src.size()), deq_gpu(src.size());
        check(quantize_blocks(src.data(), dtype, n, format, q.data(), scales.data()));
        check(dequantize_blocks(q.data(), scales.data(), n, format, deq.data(), dtype));
        check(dequantize_add_blocks(q.data(), scales.data(), n, format, acc.data()));
        DeviceBuffer d_src, d_q, d_s, d_deq, d_acc;
        check(gpu().allocate(src.size(), &d_src, false));
        check(gpu().allocate(qbytes, &d_q, false));
        check(gpu().allocate(groups * 4, &d_s, false));
        check(gpu().allocate(src.size(), &d_deq, false));
        check(gpu().allocate(n * 4, &d_acc, false));
        std::vector<float> half(n, 0.5f);
        check(gpu().copy(d_src.data(), src.data(), src.size(), nullptr));
        check(gpu().copy(d_acc.data(), half.data(), n * 4, nullptr));
        check(cuda_quantize_blocks(d_src.data(), dtype, n, bits, group, d_q.as<uint8_t>(), d_s.as<float>(), nullptr));
        check(cuda_dequantize_blocks(d_q.as<uint8_t>(), d_s.as<float>(), n, bits, group, d_deq.data(), dtype, false,
                                     nullptr));
        check(cuda_dequantize_blocks(d_q.as<uint8_t>(), d_s.as<float>(), n, bits, group, d_acc.data(), DSRT_F32, true,
                                     nullptr));
        check(gpu().copy(q_gpu.data(), d_q.data(), qbytes, nullptr));
        check(gpu().copy(scales_gpu.data(), d_s.data(), groups * 4, nullptr));
        check(gpu().copy(deq_gpu.data(), d_deq.data(), src.size(), nullptr));
        check(gpu().copy(acc_gpu.data(), d_acc.data(), n * 4, nullptr));
        check(gpu().synchronize(nullptr));
        SCOPED_TRACE("dtype " + std::to_string(dtype) + " bits " + std::to_string(bits) + " group " +
                     std::to_string(group));
        EXPECT_EQ(q, q_gpu);
        EXPECT_EQ(std::memcmp(scales.data(), scales_gpu.data(), groups * 4), 0);
        EXPECT_EQ(deq, deq_gpu);
        EXPECT_EQ(std::memcmp(acc.data(), acc_gpu.data(), n * 4), 0);
      }
    }
  }
}

TEST(CudaQuantize, LaunchersRefuseBadArguments) {
  uint8_t q[4] = {};
  float s[4] = {};
  EXPECT_EQ(cuda_quantize_blocks(q, DSRT_F32, 4, 3, 2, q, s, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_quantize_blocks(q, DSRT_F32, 4, 4, 3, q, s, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_quantize_blocks(nullptr, DSRT_F32, 4, 8, 2, q, s, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_dequantize_blocks(q, s, 4, 8, 2, q, DSRT_F16, true, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(cuda_quantize_blocks(nullptr, DSRT_F32, 0, 8, 2, nullptr, nullptr, nullptr).ok());
}
#else
TEST(CudaQuantize, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace dsrt
