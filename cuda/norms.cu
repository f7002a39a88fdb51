// norms.cu -- multi-tensor sum of squares with the non-finite check (one read of the gradients
// gives the clipping norm and the overflow flag), and the fixed-order reduction of per-chunk
// partial sums into per-tensor doubles that Lamb phase 1 shares. Everything is summed in double:
// each square of a float is exact in double, a chunk's sum (per-thread strides, then a fixed tree)
// and the per-tensor sum of the chunks (fixed strides and tree) round in double only, as the CPU's
// chunk sums (src/optim/kernels_body.inl) do. So the clipping norm of a partition cut anywhere,
// summed over the ranks in double, agrees with the norm of the whole to double rounding (about
// 1e-16 relative), far below the fp32 clip coefficient the step uses: MiCS and plain ZeRO-3 (or any
// other partition count) step bitwise alike on a GPU as they do on the CPU. fp32 chunk sums gave
// 1e-7-relative differences, enough to change the clip coefficient's float (2026-11-25 H200 run).
// tests/cpp/cuda_norm_order.h is the host model of this exact order (checked bitwise on a GPU).
#include <vector>

#include "cuda/fused_optimizers.h"
#include "cuda/multi_tensor.cuh"

namespace dsrt {
namespace cuda_kernels {
namespace {

struct NormConsts {
  double *partials;
  int *nonfinite;
};

__global__ void __launch_bounds__(kThreads) sum_squares_kernel(const ChunkList list, const NormConsts c) {
  size_t chunk = 0;
  const TensorEntry &e = block_entry(list, &chunk);
  const size_t begin = chunk * kChunk;
  const size_t end = begin + kChunk < e.n ? begin + kChunk : e.n;
  double acc = 0.0;  // the squares of x, unscaled: the scale is applied to the total, as on the CPU
  bool bad = false;
  size_t scalar_from = begin;
  if (e.vector_ok) {
    const size_t vec_end = begin + (end - begin) / kVec * kVec;
    for (size_t i = begin + threadIdx.x * kVec; i < vec_end; i += kThreads * kVec) {
      float x[kVec];
      load8(e.grad, e.grad_dtype, i, x);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        bad |= !isfinite(x[k]);
        const double y = x[k];
        acc = fma(y, y, acc);
      }
    }
    scalar_from = vec_end;
  }
  for (size_t i = scalar_from + threadIdx.x; i < end; i += kThreads) {
    const float x = load_one(e.grad, e.grad_dtype, i);
    bad |= !isfinite(x);
    const double y = x;
    acc = fma(y, y, acc);
  }
  if (bad) atomicOr(c.nonfinite, 1);  // the value, not the order, is what counts
  const double total = block_sum_f64(acc);
  if (threadIdx.x == 0) c.partials[e.partial_base + chunk] = total;
}

constexpr int kMaxReduce = 160;

struct ReduceList {
  size_t base[kMaxReduce];
  int chunks[kMaxReduce];
  int out_index[kMaxReduce];
};

// One block per tensor: each thread sums a fixed stride of the partials in double, then a fixed
// tree over the block. out_a receives the sum times scale times scale (cpu_sum_squares' order).
__global__ void __launch_bounds__(kThreads) reduce_kernel(const ReduceList list, const double *partials_a,
                                                          const double *partials_b, double *out_a, double *out_b,
                                                          int accumulate, double scale) {
  __shared__ double sa[kThreads], sb[kThreads];
  const size_t base = list.base[blockIdx.x];
  const int chunks = list.chunks[blockIdx.x];
  double a = 0.0, b = 0.0;
  for (int k = threadIdx.x; k < chunks; k += kThreads) {
    a += partials_a[base + k];
    if (partials_b) b += partials_b[base + k];
  }
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      sa[threadIdx.x] += sa[threadIdx.x + half];
      sb[threadIdx.x] += sb[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int o = list.out_index[blockIdx.x];
    const double a_total = sa[0] * scale * scale;
    out_a[o] = accumulate ? out_a[o] + a_total : a_total;
    if (out_b) out_b[o] = accumulate ? out_b[o] + sb[0] : sb[0];
  }
}

}  // namespace

Status reduce_partials(const double *partials_a, const double *partials_b, const TensorEntry *entries, size_t count,
                       double *out_a, double *out_b, bool accumulate, cudaStream_t stream, double scale_a) {
  ReduceList list;
  int used = 0;
  auto flush = [&]() -> Status {
    if (used == 0) return Status::Ok();
    reduce_kernel<<<used, kThreads, 0, stream>>>(list, partials_a, partials_b, out_a, out_b, accumulate ? 1 : 0,
                                                  scale_a);
    DSRT_CUDA_CHECK_LAUNCH("reduce_partials");
    used = 0;
    return Status::Ok();
  };
  for (size_t t = 0; t < count; ++t) {
    if (entries[t].n == 0) {
      if (!accumulate) {  // an empty tensor's sum is 0
        DSRT_CUDA_CHECK(cudaMemsetAsync(out_a + t, 0, sizeof(double), stream));
        if (out_b) DSRT_CUDA_CHECK(cudaMemsetAsync(out_b + t, 0, sizeof(double), stream));
      }
      continue;
    }
    list.base[used] = entries[t].partial_base;
    list.chunks[used] = static_cast<int>(chunks_of(entries[t].n));
    list.out_index[used] = static_cast<int>(t);
    if (++used == kMaxReduce) DSRT_RETURN_IF_ERROR(flush());
  }
  return flush();
}

}  // namespace cuda_kernels

using namespace cuda_kernels;

Status cuda_sum_squares_many(const CudaTensorRef *tensors, size_t count, float scale, double *out, int *nonfinite,
                             void *workspace, size_t workspace_bytes, void *stream) {
  if (count == 0) return Status::Ok();
  if (tensors == nullptr || out == nullptr || nonfinite == nullptr) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_sum_squares_many: tensors, out and nonfinite must not be NULL");
  }
  std::vector<TensorEntry> entries(count);
  for (size_t i = 0; i < count; ++i) {
    const CudaTensorRef &t = tensors[i];
    if (t.n > 0 && t.data == nullptr) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_sum_squares_many: tensor %zu has %zu elements and a NULL pointer", i, t.n);
    }
    if (t.dtype != DSRT_F32 && t.dtype != DSRT_F16 && t.dtype != DSRT_BF16) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_sum_squares_many: tensor %zu: dtype %d is not fp32, fp16 or bf16", i,
                   static_cast<int>(t.dtype));
    }
    entries[i] = TensorEntry{};
    entries[i].grad = t.data;
    entries[i].grad_dtype = static_cast<int8_t>(t.dtype);
    entries[i].working_dtype = -1;
    entries[i].n = t.n;
    entries[i].vector_ok = aligned16(t.data) ? 1 : 0;
  }
  const size_t slots = assign_partials(entries.data(), count);
  if (slots > 0 && (workspace == nullptr || workspace_bytes < slots * sizeof(double))) {
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "cuda_sum_squares_many: the workspace holds %zu bytes; %zu are needed (cuda_reduction_workspace_bytes)",
                 workspace ? workspace_bytes : 0, slots * sizeof(double));
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  DSRT_CUDA_CHECK(cudaMemsetAsync(nonfinite, 0, sizeof(int), s));
  NormConsts c{static_cast<double *>(workspace), nonfinite};
  DSRT_RETURN_IF_ERROR(for_each_chunk_list(entries.data(), count, [&](const ChunkList &list, int blocks) {
    sum_squares_kernel<<<blocks, kThreads, 0, s>>>(list, c);
    DSRT_CUDA_CHECK_LAUNCH("sum_squares");
    return Status::Ok();
  }));
  return reduce_partials(c.partials, nullptr, entries.data(), count, out, nullptr, false, s, scale);
}

}  // namespace dsrt
