// cuda_common.cuh -- what every dsrt kernel file shares: the checking macro that turns a failed
// CUDA call into a dsrt::Status, 16-byte vector loads/stores of 8 elements, and fp16/bf16
// conversions that round exactly as src/util/half.h does (round-to-nearest-even, NaN stays NaN
// with the same bit pattern, overflow gives inf), so GPU and CPU results agree bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dsrt.h"
#include "util/status.h"

// A failed CUDA call returns DSRT_ERR_DEVICE naming the call, where it was made and CUDA's words.
#define DSRT_CUDA_CHECK(call)                                                                       \
  do {                                                                                              \
    cudaError_t dsrt_cuda_err_ = (call);                                                            \
    if (dsrt_cuda_err_ != cudaSuccess) {                                                            \
      return ::dsrt::Error(DSRT_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__, \
                           cudaGetErrorString(dsrt_cuda_err_), cudaGetErrorName(dsrt_cuda_err_));   \
    }                                                                                               \
  } while (0)

// After a launch (llm.c's habit): a bad configuration shows up here, not at the next sync.
#define DSRT_CUDA_CHECK_LAUNCH(what)                                                                 \
  do {                                                                                              \
    cudaError_t dsrt_cuda_err_ = cudaGetLastError();                                                \
    if (dsrt_cuda_err_ != cudaSuccess) {                                                            \
      return ::dsrt::Error(DSRT_ERR_DEVICE, "launching %s failed: %s (%s)", what,                   \
                           cudaGetErrorString(dsrt_cuda_err_), cudaGetErrorName(dsrt_cuda_err_));   \
    }                                                                                               \
  } while (0)

namespace dsrt {
namespace cuda_kernels {

// Elements per thread per iteration: 8 x 16-bit = one 16-byte access, 8 x fp32 = two.
constexpr int kVec = 8;
constexpr int kThreads = 256;

__host__ __device__ inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__device__ inline float dev_bf16_to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ inline uint16_t dev_float_to_bf16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

__device__ inline float dev_fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -value : value;
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ inline uint16_t dev_float_to_fp16(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs_bits < 0x38800000u) {
    const float magnitude = __uint_as_float(abs_bits) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(magnitude)));
  }
  const uint32_t rounding = 0xfffu + ((abs_bits >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((abs_bits - 0x38000000u + rounding) >> 13));
}

__device__ inline float load_one(const void *base, int dtype, size_t i) {
  if (dtype == DSRT_F16) return dev_fp16_to_float(static_cast<const uint16_t *>(base)[i]);
  if (dtype == DSRT_BF16) return dev_bf16_to_float(static_cast<const uint16_t *>(base)[i]);
  return static_cast<const float *>(base)[i];
}

__device__ inline void store_one(void *base, int dtype, size_t i, float x) {
  if (dtype == DSRT_F16) static_cast<uint16_t *>(base)[i] = dev_float_to_fp16(x);
  else if (dtype == DSRT_BF16) static_cast<uint16_t *>(base)[i] = dev_float_to_bf16(x);
  else static_cast<float *>(base)[i] = x;
}

// Eight consecutive elements starting at i (a multiple of 8, the base 16-byte aligned).
__device__ inline void load8(const void *base, int dtype, size_t i, float out[kVec]) {
  if (dtype == DSRT_F32) {
    const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(base) + i);
    const float4 a = p[0], b = p[1];
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
    return;
  }
  const uint4 raw = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(base) + i);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(words[k] & 0xffffu), hi = static_cast<uint16_t>(words[k] >> 16);
    out[2 * k] = dtype == DSRT_F16 ? dev_fp16_to_float(lo) : dev_bf16_to_float(lo);
    out[2 * k + 1] = dtype == DSRT_F16 ? dev_fp16_to_float(hi) : dev_bf16_to_float(hi);
  }
}

__device__ inline void store8(void *base, int dtype, size_t i, const float x[kVec]) {
  if (dtype == DSRT_F32) {
    float4 *p = reinterpret_cast<float4 *>(static_cast<float *>(base) + i);
    __stwb(p, make_float4(x[0], x[1], x[2], x[3]));
    __stwb(p + 1, make_float4(x[4], x[5], x[6], x[7]));
    return;
  }
  auto pack = [&](int k) -> uint32_t {
    const uint16_t lo = dtype == DSRT_F16 ? dev_float_to_fp16(x[2 * k]) : dev_float_to_bf16(x[2 * k]);
    const uint16_t hi = dtype == DSRT_F16 ? dev_float_to_fp16(x[2 * k + 1]) : dev_float_to_bf16(x[2 * k + 1]);
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  };
  // The intrinsic keeps this one 16-byte store: a plain struct store was split into four 4-byte
  // stores inside the optimizer kernels.
  __stwb(reinterpret_cast<uint4 *>(static_cast<uint16_t *>(base) + i), make_uint4(pack(0), pack(1), pack(2), pack(3)));
}

// The same 8-element accesses in two steps, so that a kernel issues the loads of all its arrays
// before it waits for any (load8 converts 16-bit data right after its load, which stalls the
// next array's load behind it): load_raw8 only loads (fp32: both halves; 16-bit: the first),
// unpack8 converts. STREAM: the evict-first cache hints (ld.global.cs, st.global.cs) for data read
// and written once, else plain loads and write-back stores (as load8/store8).
struct Raw8 {
  uint4 a, b;
};

template <bool STREAM>
__device__ inline uint4 load16(const void *p) {
  if constexpr (STREAM) return __ldcs(static_cast<const uint4 *>(p));
  else return *static_cast<const uint4 *>(p);
}

template <bool STREAM>
__device__ inline void store16(void *p, uint4 v) {
  if constexpr (STREAM) __stcs(static_cast<uint4 *>(p), v);
  else __stwb(static_cast<uint4 *>(p), v);
}

template <bool STREAM>
__device__ inline void load_raw8(const void *base, int dtype, size_t i, Raw8 &r) {
  if (dtype == DSRT_F32) {
    const float *f = static_cast<const float *>(base) + i;
    r.a = load16<STREAM>(f);
    r.b = load16<STREAM>(f + 4);
  } else {
    r.a = load16<STREAM>(static_cast<const uint16_t *>(base) + i);
  }
}

__device__ inline void unpack8(const Raw8 &r, int dtype, float out[kVec]) {
  if (dtype == DSRT_F32) {
    out[0] = __uint_as_float(r.a.x); out[1] = __uint_as_float(r.a.y);
    out[2] = __uint_as_float(r.a.z); out[3] = __uint_as_float(r.a.w);
    out[4] = __uint_as_float(r.b.x); out[5] = __uint_as_float(r.b.y);
    out[6] = __uint_as_float(r.b.z); out[7] = __uint_as_float(r.b.w);
    return;
  }
  const uint32_t words[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(words[k] & 0xffffu), hi = static_cast<uint16_t>(words[k] >> 16);
    out[2 * k] = dtype == DSRT_F16 ? dev_fp16_to_float(lo) : dev_bf16_to_float(lo);
    out[2 * k + 1] = dtype == DSRT_F16 ? dev_fp16_to_float(hi) : dev_bf16_to_float(hi);
  }
}

// store8 with the cache hint chosen (the same rounding).
template <bool STREAM>
__device__ inline void store8_hinted(void *base, int dtype, size_t i, const float x[kVec]) {
  if (dtype == DSRT_F32) {
    float *f = static_cast<float *>(base) + i;
    store16<STREAM>(f, make_uint4(__float_as_uint(x[0]), __float_as_uint(x[1]), __float_as_uint(x[2]), __float_as_uint(x[3])));
    store16<STREAM>(f + 4, make_uint4(__float_as_uint(x[4]), __float_as_uint(x[5]), __float_as_uint(x[6]), __float_as_uint(x[7])));
    return;
  }
  auto pack = [&](int k) -> uint32_t {
    const uint16_t lo = dtype == DSRT_F16 ? dev_float_to_fp16(x[2 * k]) : dev_float_to_bf16(x[2 * k]);
    const uint16_t hi = dtype == DSRT_F16 ? dev_float_to_fp16(x[2 * k + 1]) : dev_float_to_bf16(x[2 * k + 1]);
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  };
  store16<STREAM>(static_cast<uint16_t *>(base) + i, make_uint4(pack(0), pack(1), pack(2), pack(3)));
}

// Sum over the block in a fixed tree (shuffles, then one warp over the warp sums), in double: the
// same inputs give the same bits on every run, and the reductions' partial sums (squares of
// floats are exact in double) carry double rounding only, as the CPU's per-chunk sums do.
// Every thread of the block must call it; thread 0 gets the result.
__device__ inline double block_sum_f64(double x) {
  __shared__ double warp_sums[32];
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  x = lane < warps ? warp_sums[lane] : 0.0;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, capped so that tiny
// launches do not start idle blocks.
inline unsigned grid_for(size_t n, unsigned max_blocks = 132 * 8) {
  const size_t per_block = static_cast<size_t>(kThreads) * kVec;
  size_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

}  // namespace cuda_kernels
}  // namespace dsrt
