// multi_tensor.cuh -- the chunk list: many tensors updated by one kernel launch. The layout and
// the host's planning are in chunk_list.h (plain C++, checked by CPU tests); this adds the launch
// limits in force and the reductions' helpers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chunk_list.h"
#include "cuda_common.cuh"

namespace dsrt {
namespace cuda_kernels {

// The per-launch limits in force (kMaxTensors / kMaxBlocks unless a test lowered them to
// exercise the splitting with small data). Defined in fused_optimizers.cu.
int launch_tensor_limit();
int launch_block_limit();

// Packs entries into chunk lists and calls launch(list, blocks) for each (a Status; the first
// error stops the walk). Empty tensors take no block.
template <class Launch>
Status for_each_chunk_list(const TensorEntry *entries, size_t count, Launch &&launch) {
  ChunkList list;
  return plan_chunk_lists(entries, count, launch_tensor_limit(), launch_block_limit(), list, launch);
}

// The block's tensor and chunk (every kernel over a chunk list starts with this).
__device__ inline const TensorEntry &block_entry(const ChunkList &list, size_t *chunk) {
  const int slot = chunk_slot(list, static_cast<int>(blockIdx.x));
  *chunk = chunk_of_block(list, slot, static_cast<int>(blockIdx.x));
  return list.tensors[slot];
}

// Reduction of per-chunk double partial sums into per-tensor doubles in a fixed order (one block
// per tensor, a fixed tree): out_a[i] (and out_b[i] when partials_b is given) receive tensor i's
// sum (out_a's times scale_a squared), added to what is there when accumulate is true. Defined in
// norms.cu.
Status reduce_partials(const double *partials_a, const double *partials_b, const TensorEntry *entries, size_t count,
                       double *out_a, double *out_b, bool accumulate, cudaStream_t stream, double scale_a = 1.0);

// Fills partial_base of every entry (consecutive chunk slots) and returns the slots needed.
inline size_t assign_partials(TensorEntry *entries, size_t count) {
  size_t slots = 0;
  for (size_t t = 0; t < count; ++t) {
    entries[t].partial_base = slots;
    slots += chunks_of(entries[t].n);
  }
  return slots;
}

}  // namespace cuda_kernels
}  // namespace dsrt
