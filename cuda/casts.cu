// casts.cu -- dtype conversion between fp32, fp16 and bf16 (round-to-nearest-even, as the CPU).
#include "cuda/cuda_common.cuh"
#include "cuda/fused_optimizers.h"

namespace dsrt {
namespace cuda_kernels {
namespace {

// One kernel for every pair: the dtypes are uniform across the grid, so the branches in
// load8/store8 cost nothing next to the memory traffic and keep the build to one instantiation.
// scale != 1 multiplies each value (in fp32) before the store: dst = cast(src * scale).
__global__ void __launch_bounds__(kThreads) convert_kernel(const void *src, int src_dtype, void *dst, int dst_dtype,
                                                           size_t n, int vector_ok, float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t tid = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  size_t scalar_from = 0;
  if (vector_ok) {
    const size_t vec_n = n / kVec * kVec;
    for (size_t i = tid * kVec; i < vec_n; i += stride * kVec) {
      float x[kVec];
      load8(src, src_dtype, i, x);
      if (scale != 1.0f) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) x[k] = x[k] * scale;
      }
      store8(dst, dst_dtype, i, x);
    }
    scalar_from = vec_n;
  }
  for (size_t i = scalar_from + tid; i < n; i += stride) {
    const float x = load_one(src, src_dtype, i);
    store_one(dst, dst_dtype, i, scale != 1.0f ? x * scale : x);
  }
}

}  // namespace
}  // namespace cuda_kernels

using namespace cuda_kernels;

Status cuda_convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n, void *stream) {
  return cuda_convert_scaled(src, src_dtype, dst, dst_dtype, n, 1.0f, stream);
}

Status cuda_convert_scaled(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n,
                           float scale, void *stream) {
  auto valid = [](dsrt_dtype d) { return d == DSRT_F32 || d == DSRT_F16 || d == DSRT_BF16; };
  if (!valid(src_dtype) || !valid(dst_dtype)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_convert: dtypes %d -> %d; each must be fp32, fp16 or bf16",
                 static_cast<int>(src_dtype), static_cast<int>(dst_dtype));
  }
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_convert: NULL src or dst for %zu elements", n);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (src_dtype == dst_dtype && scale == 1.0f) {
    if (src != dst) DSRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * (src_dtype == DSRT_F32 ? 4 : 2), cudaMemcpyDeviceToDevice, s));
    return Status::Ok();
  }
  const int vector_ok = aligned16(src) && aligned16(dst) ? 1 : 0;
  convert_kernel<<<grid_for(n), kThreads, 0, s>>>(src, src_dtype, dst, dst_dtype, n, vector_ok, scale);
  DSRT_CUDA_CHECK_LAUNCH("cuda_convert");
  return Status::Ok();
}

}  // namespace dsrt
