// comm_reduce.cu -- see comm_reduce.h: the fp32 reduction of the blocks an all-to-all gathered.
#include "cuda/comm_reduce.h"
#include "cuda/cuda_common.cuh"

namespace dsrt {
namespace cuda_kernels {
namespace {

__device__ inline float combine(float acc, float x, int op) {
  if (op == 0) return acc + x;
  // NaN wins on either side, so an overflow check built on max or min sees it.
  if (isnan(acc)) return acc;
  if (isnan(x)) return x;
  return op == 1 ? fmaxf(acc, x) : fminf(acc, x);
}

__global__ void __launch_bounds__(kThreads) reduce_rank_blocks_kernel(void *dst, const void *own, const char *peers,
                                                                      int me, int ranks, size_t n, int dtype, int op) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t block_bytes = n * (dtype == DSRT_F32 ? 4 : 2);
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      const void *src = r == me ? own : peers + static_cast<size_t>(r < me ? r : r - 1) * block_bytes;
      const float x = load_one(src, dtype, i);
      acc = r == 0 ? x : combine(acc, x, op);
    }
    store_one(dst, dtype, i, acc);
  }
}

}  // namespace
}  // namespace cuda_kernels

Status cuda_reduce_rank_blocks(void *dst, const void *own, const void *peers, int me, int ranks, size_t n,
                               dsrt_dtype dtype, int op, void *stream) {
  if (dtype != DSRT_F32 && dtype != DSRT_F16 && dtype != DSRT_BF16)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_reduce_rank_blocks: dtype %d is not fp32, fp16 or bf16",
                 static_cast<int>(dtype));
  if (op < 0 || op > 2) return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_reduce_rank_blocks: op %d", op);
  if (ranks < 1 || me < 0 || me >= ranks)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_reduce_rank_blocks: rank %d of %d", me, ranks);
  if (n == 0) return Status::Ok();
  if (dst == nullptr || own == nullptr || (ranks > 1 && peers == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_reduce_rank_blocks: NULL buffer for %zu elements", n);
  using namespace cuda_kernels;
  cuda_kernels::reduce_rank_blocks_kernel<<<grid_for(n * kVec), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      dst, own, static_cast<const char *>(peers), me, ranks, n, dtype, op);
  DSRT_CUDA_CHECK_LAUNCH("cuda_reduce_rank_blocks");
  return Status::Ok();
}

}  // namespace dsrt
