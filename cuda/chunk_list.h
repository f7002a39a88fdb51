// chunk_list.h -- the chunk list's layout and planning, plain C++ (no CUDA headers) so that the
// CPU tests check the plan the kernels read. Tensors are cut into 65536-element chunks, one block
// per chunk (the element-wise optimizer kernels may cut a chunk further: chunk_part_range). A
// launch takes up to kMaxTensors tensor slots, passed by value as the kernel argument (about 28
// KiB: CUDA 12.1+ allows 32 KiB on Volta and newer, every GPU we build for): each slot holds a
// tensor's arrays, its first block in the launch and the chunk that block takes; a block finds its
// slot by a binary search over the slots' first blocks. With no per-block map in the argument, a
// launch is limited by its tensors only: 512 tensors of 3 chunks take 2 launches of 960 and 576
// blocks (the per-block map allowed 110 tensors and 2048 blocks: 5 launches of ~330 blocks, under
// a third of an H200's resident blocks, 0.41 of the HBM floor on 2026-11-25). A tensor that does
// not fit in a launch continues in the next one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"

#ifdef __CUDACC__
#define DSRT_CHUNK_HD __host__ __device__
#else
#define DSRT_CHUNK_HD
#endif

namespace dsrt {
namespace cuda_kernels {

constexpr size_t kChunk = 65536;
constexpr int kMaxTensors = 320;
constexpr int kMaxBlocks = 1 << 20;  // per launch; far above any one step (68G elements)

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
  int8_t vector_head;    // optimizer steps: -1, or every array 16-byte aligned at elements head + 8k (vector_head())
  int8_t master_dtype;   // fp32, or bf16 (bf16.bf16_master_weights_and_grads)
  int8_t state_dtype;    // fp32, or bf16 (bf16.bf16_optimizer_states)
};

struct ChunkList {
  TensorEntry tensors[kMaxTensors];
  int first_block[kMaxTensors];  // slot s takes blocks first_block[s] .. first_block[s + 1] - 1 (the last: .. blocks - 1)
  int first_chunk[kMaxTensors];  // the chunk of slot s's tensor that its first block takes
  int count;                     // slots in use
};

static_assert(sizeof(ChunkList) <= 30 * 1024, "a chunk list must fit the 32 KiB kernel-argument limit with room for the rest");

inline size_t chunks_of(size_t n) { return (n + kChunk - 1) / kChunk; }

// Block b of a launch: its slot (the last one whose first block is at most b).
DSRT_CHUNK_HD inline int chunk_slot(const ChunkList &list, int block) {
  int lo = 0, hi = list.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (list.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Block b's chunk within its slot's tensor.
DSRT_CHUNK_HD inline size_t chunk_of_block(const ChunkList &list, int slot, int block) {
  return static_cast<size_t>(list.first_chunk[slot]) + static_cast<size_t>(block - list.first_block[slot]);
}

// The element-wise kernels may cut each chunk into 2^shift equal parts, one block each (launched
// with blocks << shift blocks): block b takes part b & (2^shift - 1) of the chunk list's block
// b >> shift. The part's elements of a tensor of n elements: [*begin, *end), empty (begin == end)
// where the tensor's last chunk is short. Parts are multiples of 8 elements (shift <= kMaxPartShift)
// so they keep the 8-element vector accesses aligned.
constexpr int kMaxPartShift = 5;  // 32 parts of 2048 elements: one 8-element vector per thread of 256
DSRT_CHUNK_HD inline void chunk_part_range(size_t chunk, int part, int shift, size_t n, size_t *begin, size_t *end) {
  const size_t span = kChunk >> shift;
  size_t b = chunk * kChunk + static_cast<size_t>(part) * span;
  size_t e = b + span;
  if (b > n) b = n;
  if (e > n) e = n;
  *begin = b;
  *end = e;
}

// The first element index h in 0..7 at which every array (given with its element size in bytes;
// null arrays skipped) is 16-byte aligned, so that 8-element vector accesses start at h, h + 8,
// ...; -1 when there is none (arrays whose addresses disagree modulo 16 bytes in elements, or an
// array not aligned to its element size). Views into buffers at one element offset (a flat
// partition cut into tensors) share such an h even when none starts on 16 bytes.
inline int vector_head(const void *const *arrays, const int *element_bytes, int count) {
  for (int h = 0; h < 8; ++h) {
    bool ok = true;
    for (int a = 0; a < count && ok; ++a) {
      if (arrays[a] == nullptr) continue;
      ok = (reinterpret_cast<uintptr_t>(arrays[a]) + static_cast<uintptr_t>(h) * static_cast<uintptr_t>(element_bytes[a])) % 16 == 0;
    }
    if (ok) return h;
  }
  return -1;
}

// A part's elements [begin, end) for 8-element vector accesses that start at elements head + 8k:
// [begin, *vec_begin) and [*vec_end, end) one element at a time (fewer than 8 each), [*vec_begin,
// *vec_end) a whole number of vectors.
DSRT_CHUNK_HD inline void part_vector_range(size_t begin, size_t end, int head, size_t *vec_begin, size_t *vec_end) {
  size_t vb = begin + (static_cast<size_t>(head) + 8 - begin % 8) % 8;
  if (vb > end) vb = end;
  *vec_begin = vb;
  *vec_end = vb + (end - vb) / 8 * 8;
}

// Packs entries into chunk lists of at most max_tensors slots and max_blocks blocks and calls
// launch(list, blocks) for each (a Status; the first error stops the walk). Empty tensors take no
// block. list is reused between calls.
template <class Launch>
Status plan_chunk_lists(const TensorEntry *entries, size_t count, int max_tensors, int max_blocks, ChunkList &list,
                        Launch &&launch) {
  list.count = 0;
  int blocks = 0;
  for (size_t t = 0; t < count; ++t) {
    const size_t chunks = chunks_of(entries[t].n);
    size_t c = 0;
    while (c < chunks) {
      if (list.count == max_tensors || blocks == max_blocks) {
        DSRT_RETURN_IF_ERROR(launch(static_cast<const ChunkList &>(list), blocks));
        list.count = 0;
        blocks = 0;
      }
      const size_t room = static_cast<size_t>(max_blocks - blocks);
      const size_t take = chunks - c < room ? chunks - c : room;
      const int s = list.count++;
      list.tensors[s] = entries[t];
      list.tensors[s].global_index = static_cast<int>(t);
      list.first_block[s] = blocks;
      list.first_chunk[s] = static_cast<int>(c);
      blocks += static_cast<int>(take);
      c += take;
    }
  }
  if (blocks > 0) DSRT_RETURN_IF_ERROR(launch(static_cast<const ChunkList &>(list), blocks));
  return Status::Ok();
}

}  // namespace cuda_kernels
}  // namespace dsrt
