// multi_tensor.cuh -- the chunk list: many tensors updated by one kernel launch. The host walks
// the tensors in 65536-element chunks and packs, per launch, a table of tensors and a map from
// block to (tensor, chunk), passed by value as the kernel argument (about 18 KiB: CUDA 12.1+
// allows 32 KiB of kernel arguments on Volta and newer, and every GPU we build for is one). A
// launch holds up to 2048 chunks, enough to keep every SM of an H100 busy at 8 blocks each with a
// wave to spare, so 200M parameters take two launches. A tensor that does not fit in a launch
// continues in the next one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_common.cuh"

namespace dsrt {
namespace cuda_kernels {

constexpr size_t kChunk = 65536;
constexpr int kMaxTensors = 110;
constexpr int kMaxBlocks = 2048;

// The arrays of one tensor; what each kernel reads or writes depends on the kernel.
struct TensorEntry {
  void *master;       // master_dtype elements
  const void *grad;   // gradient, or the data of a reduction
  void *state0;       // state_dtype elements
  void *state1;
  void *working;
  float *update;
  size_t n;
  size_t partial_base;  // first chunk's slot in the reduction workspace
  int global_index;     // the tensor's index in the caller's list
  int8_t grad_dtype;
  int8_t working_dtype;  // -1: no working copy
  uint8_t vector_ok;     // every array 16-byte aligned: 8-element vector accesses
  int8_t master_dtype;   // fp32, or bf16 (bf16.bf16_master_weights_and_grads)
  int8_t state_dtype;    // fp32, or bf16 (bf16.bf16_optimizer_states)
};

struct ChunkList {
  TensorEntry tensors[kMaxTensors];
  uint8_t block_tensor[kMaxBlocks];  // index into tensors (kMaxTensors < 256)
  int block_chunk[kMaxBlocks];
};

static_assert(sizeof(ChunkList) <= 30 * 1024, "a chunk list must fit the 32 KiB kernel-argument limit with room for the rest");

inline size_t chunks_of(size_t n) { return (n + kChunk - 1) / kChunk; }

// Packs entries into chunk lists and calls launch(list, blocks) for each (a Status; the first
// error stops the walk). Empty tensors take no block.
// The per-launch limits in force (kMaxTensors / kMaxBlocks unless a test lowered them to
// exercise the splitting with small data). Defined in fused_optimizers.cu.
int launch_tensor_limit();
int launch_block_limit();

template <class Launch>
Status for_each_chunk_list(const TensorEntry *entries, size_t count, Launch &&launch) {
  const int max_tensors = launch_tensor_limit(), max_blocks = launch_block_limit();
  ChunkList list;
  int tensors = 0, blocks = 0;
  for (size_t t = 0; t < count; ++t) {
    const size_t chunks = chunks_of(entries[t].n);
    for (size_t c = 0; c < chunks; ++c) {
      bool need_slot = tensors == 0 || list.tensors[tensors - 1].global_index != static_cast<int>(t);
      if (blocks == max_blocks || (need_slot && tensors == max_tensors)) {
        DSRT_RETURN_IF_ERROR(launch(list, blocks));
        tensors = 0;
        blocks = 0;
        need_slot = true;
      }
      if (need_slot) {
        list.tensors[tensors] = entries[t];
        list.tensors[tensors].global_index = static_cast<int>(t);
        ++tensors;
      }
      list.block_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      list.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
    }
  }
  if (blocks > 0) DSRT_RETURN_IF_ERROR(launch(list, blocks));
  return Status::Ok();
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
