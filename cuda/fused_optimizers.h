// fused_optimizers.h -- launchers of the CUDA optimizer, norm, cast and accumulation kernels,
// callable from plain C++ (no CUDA headers): device pointers in, a cudaStream_t passed as void*
// (nullptr: the default stream). Every launcher checks its arguments, enqueues on the stream and
// checks the launch; none synchronizes. Built only when CUDA is on (DSRT_HAVE_CUDA).
//
// The optimizer launchers have exactly the meaning of src/optim/cpu_optimizer.h: the same
// OptimizerHyper and OptimizerSlice (with device pointers), the same grad_scale folding (1 /
// loss scale, averaging, clipping coefficient), the same per-step constants folded in double and
// rounded to float once, and the same float operation order (explicit fused multiply-adds), so
// fp32 results match the CPU kernels to rounding.
//
// Many tensors go to one launch through a chunk list (65536-element chunks; up to 320 tensors per
// launch, more launches as needed); 16-byte accesses where every array of a tensor is 16-byte
// aligned at the same element (views at one offset into aligned buffers: a few elements one at a
// time first), element accesses otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

// The CPU kernels' argument structs (src/optim/cpu_optimizer.h), by reference only: the launchers'
// interface stays free of the optimizer layer and of the config; the .cu that reads them includes
// their definitions.
struct OptimizerHyper;
struct OptimizerSlice;

// Adam/AdamW, SGD, Adagrad and Lion over count slices (device pointers). INVALID_ARGUMENT as the
// CPU version; every slice is checked before anything is enqueued.
Status cuda_optimizer_step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                                float grad_scale, void *stream);

// Scratch that the reductions below need for count tensors of the given sizes (double partial sums
// per chunk, reduced in a fixed order: results do not depend on scheduling).
size_t cuda_reduction_workspace_bytes(const size_t *sizes, size_t count);

// Lamb phase 1: updates[i] (device, fp32, n_i) receives the Adam-style update; param_sq[i] and
// update_sq[i] (device doubles) are ADDED this slice's sums of squares, as on the CPU.
Status cuda_lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                             float grad_scale, float *const *updates, double *param_sq, double *update_sq,
                             void *workspace, size_t workspace_bytes, void *stream);
// Lamb phase 2 with per-tensor norms read on the device (param_norms[i], update_norms[i]: device
// doubles, e.g. after an all-reduce), so no host round trip between the phases.
Status cuda_lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                             const float *const *updates, const double *param_norms, const double *update_norms,
                             void *stream);

// One tensor of a reduction: count elements of dtype at data (device).
struct CudaTensorRef {
  const void *data = nullptr;
  dsrt_dtype dtype = DSRT_F32;
  size_t n = 0;
};

// Sum of squares of data*scale per tensor (the squares of data summed in double in a fixed order,
// then times scale twice, as cpu_sum_squares; the order is modelled in tests/cpp/cuda_norm_order.h)
// written to out[i] (device doubles), and *nonfinite (device int) set to 1 when any
// element is inf or nan, else 0: the fused unscale + overflow check and the clipping norm in one
// read of the gradients.
Status cuda_sum_squares_many(const CudaTensorRef *tensors, size_t count, float scale, double *out, int *nonfinite,
                             void *workspace, size_t workspace_bytes, void *stream);

// dst[i] = cast(src[i]) between fp32/fp16/bf16 (round-to-nearest-even as src/util/half.h).
Status cuda_convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n, void *stream);

// dst[i] = cast(src[i] * scale), the product in fp32 (the gradient reducer's prescaled send buffers);
// in place (src == dst) is allowed when both dtypes are the same.
Status cuda_convert_scaled(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n,
                           float scale, void *stream);

// dst[i] += src[i] * scale, dst fp32.
Status cuda_accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale, void *stream);

// How the element-wise optimizer kernels are launched (process-wide; the benchmark measures each
// setting in one run): blocks_per_chunk blocks share each 65536-element chunk (a power of two, 1 to
// 32), unroll (1 or 2) groups of 8 elements per thread loaded before use, and the evict-first
// cache hints on every load and store. Results do not depend on the setting (every element's
// arithmetic is the same). unroll and streaming_hints apply to Adam/AdamW; SGD, Adagrad, Lion and
// Lamb phase 2 are built with the default's; Lamb phase 1 keeps one block per chunk, unroll 1 and
// plain accesses (its partial sums are per chunk, in a fixed order). INVALID_ARGUMENT for a value
// out of range.
struct CudaStepLaunch {
  int blocks_per_chunk = 1;
  int unroll = 1;
  bool streaming_hints = false;
};
CudaStepLaunch cuda_step_launch_default();
CudaStepLaunch cuda_step_launch();
Status cuda_set_step_launch(const CudaStepLaunch &launch);

// Lowers the per-launch chunk-list limits (at most kMaxTensors tensors and kMaxBlocks chunks, see
// cuda/chunk_list.h) so that tests split launches with small data; setting those restores them.
// Process-wide.
Status cuda_set_launch_limits(int max_tensors, int max_blocks);

}  // namespace dsrt
