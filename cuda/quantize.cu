// quantize.cu -- see quantize.h: one thread block per group finds max|x| (and whether the group
// holds inf or NaN), then writes the group's integers; dequantization runs a grid-stride loop
// over bytes. The arithmetic is the CPU kernels' (src/quant/quant_body.inl) with explicit
// round-to-nearest operations, so no contraction changes a result.
#include <cfloat>

#include "cuda/cuda_common.cuh"
#include "cuda/quantize.h"

namespace dsrt {
namespace cuda_kernels {
namespace {

__global__ void __launch_bounds__(kThreads) quantize_kernel(const void *src, int dtype, size_t n, int bits,
                                                             size_t group, uint8_t *q, float *scales) {
  __shared__ float max_part[kThreads];
  __shared__ int bad_part[kThreads];
  const size_t g = blockIdx.x;
  const size_t begin = g * group;
  const size_t end = begin + group < n ? begin + group : n;
  float m = 0.0f;
  int bad = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float x = load_one(src, dtype, i);
    if (!isfinite(x)) bad = 1;
    m = fmaxf(m, fabsf(x));
  }
  max_part[threadIdx.x] = m;
  bad_part[threadIdx.x] = bad;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      max_part[threadIdx.x] = fmaxf(max_part[threadIdx.x], max_part[threadIdx.x + stride]);
      bad_part[threadIdx.x] |= bad_part[threadIdx.x + stride];
    }
    __syncthreads();
  }
  const float absmax = max_part[0];
  const float levels = static_cast<float>(1 << (bits - 1));
  const bool zero = bad_part[0] != 0 || absmax < 0x1p-118f;
  const float multiplier = zero ? 1.0f : __fdiv_rn(levels, absmax);
  if (threadIdx.x == 0) scales[g] = bad_part[0] ? __int_as_float(0x7fc00000) : (zero ? 1.0f : __fdiv_rn(1.0f, multiplier));
  const float qmax = levels - 1.0f, qmin = -levels;
  auto quantize_one = [&](size_t i) -> int {
    if (zero || i >= end) return 0;
    const float r = fminf(fmaxf(__fmul_rn(load_one(src, dtype, i), multiplier), qmin), qmax);
    return __float2int_rn(r);
  };
  if (bits == 8) {
    for (size_t i = begin + threadIdx.x; i < end; i += kThreads) q[i] = static_cast<uint8_t>(static_cast<int8_t>(quantize_one(i)));
  } else {
    // begin is even (4-bit groups are even); element 2j in the high nibble.
    for (size_t i = begin + 2 * threadIdx.x; i < end; i += 2 * kThreads) {
      const unsigned hi = static_cast<unsigned>(quantize_one(i)) & 0xfu;
      const unsigned lo = static_cast<unsigned>(quantize_one(i + 1)) & 0xfu;
      q[i / 2] = static_cast<uint8_t>((hi << 4) | lo);
    }
  }
}

__device__ inline void put(void *dst, int dtype, bool accumulate, size_t i, float v) {
  if (accumulate) {
    float *d = static_cast<float *>(dst);
    d[i] = __fadd_rn(d[i], v);
  } else {
    store_one(dst, dtype, i, v);
  }
}

__global__ void __launch_bounds__(kThreads) dequantize_kernel(const uint8_t *q, const float *scales, size_t n, int bits,
                                                               size_t group, void *dst, int dtype, bool accumulate) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t bytes = bits == 8 ? n : (n + 1) / 2;
  for (size_t b = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; b < bytes; b += stride) {
    if (bits == 8) {
      put(dst, dtype, accumulate, b, __fmul_rn(static_cast<float>(static_cast<int8_t>(q[b])), scales[b / group]));
    } else {
      const int8_t byte = static_cast<int8_t>(q[b]);
      const size_t i = 2 * b;
      put(dst, dtype, accumulate, i, __fmul_rn(static_cast<float>(byte >> 4), scales[i / group]));
      if (i + 1 < n)
        put(dst, dtype, accumulate, i + 1,
            __fmul_rn(static_cast<float>(static_cast<int8_t>(byte << 4) >> 4), scales[(i + 1) / group]));
    }
  }
}

Status check_format(const char *what, size_t n, int bits, size_t group, dsrt_dtype dtype) {
  if (bits != 8 && bits != 4) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: %d bits is not supported; use 8 or 4", what, bits);
  if (group == 0 || (bits == 4 && group % 2 != 0))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: group size %zu (must be at least 1, and even for 4 bits)", what, group);
  if (dtype != DSRT_F32 && dtype != DSRT_F16 && dtype != DSRT_BF16)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: dtype %d is not fp32, fp16 or bf16", what, static_cast<int>(dtype));
  if (n / group >= 0x7fffffffu) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: %zu groups are too many for one launch", what, n / group);
  return Status::Ok();
}

}  // namespace
}  // namespace cuda_kernels

Status cuda_quantize_blocks(const void *src, dsrt_dtype dtype, size_t n, int bits, size_t group, uint8_t *q,
                            float *scales, void *stream) {
  DSRT_RETURN_IF_ERROR(cuda_kernels::check_format("cuda_quantize_blocks", n, bits, group, dtype));
  if (n == 0) return Status::Ok();
  if (src == nullptr || q == nullptr || scales == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_quantize_blocks: NULL buffer for %zu elements", n);
  const unsigned groups = static_cast<unsigned>((n + group - 1) / group);
  cuda_kernels::quantize_kernel<<<groups, cuda_kernels::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, dtype, n, bits, group, q, scales);
  DSRT_CUDA_CHECK_LAUNCH("cuda_quantize_blocks");
  return Status::Ok();
}

Status cuda_dequantize_blocks(const uint8_t *q, const float *scales, size_t n, int bits, size_t group, void *dst,
                              dsrt_dtype dtype, bool accumulate, void *stream) {
  if (accumulate && dtype != DSRT_F32)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_dequantize_blocks: accumulation needs an fp32 destination");
  DSRT_RETURN_IF_ERROR(cuda_kernels::check_format("cuda_dequantize_blocks", n, bits, group, dtype));
  if (n == 0) return Status::Ok();
  if (q == nullptr || scales == nullptr || dst == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_dequantize_blocks: NULL buffer for %zu elements", n);
  const size_t bytes = bits == 8 ? n : (n + 1) / 2;
  cuda_kernels::dequantize_kernel<<<cuda_kernels::grid_for(bytes), cuda_kernels::kThreads, 0,
                                    static_cast<cudaStream_t>(stream)>>>(q, scales, n, bits, group, dst, dtype,
                                                                         accumulate);
  DSRT_CUDA_CHECK_LAUNCH("cuda_dequantize_blocks");
  return Status::Ok();
}

}  // namespace dsrt
