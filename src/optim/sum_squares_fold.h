// sum_squares_fold.h -- the gradient norm's sum of squares taken while the gradient is written.
//
// The last micro-step of a window writes every gradient element of a rank's partition once (the
// reduced bucket converted or added into the fp32 accumulator). SumSquaresFold does that write and,
// on the values just written (still in L1), adds their squares into per-chunk accumulators, so
// the step needs no read pass over the partition for its norm and overflow check.
//
// The result is cpu_sum_squares(array, DSRT_F32, total, scale) bit for bit: the same chunk cut
// (plan_chunks of the whole length, decided by begin()), each chunk's accumulator lanes fed as
// kernels.sum_squares feeds them (kernel_table.h: sum_squares_part), the chunk partials added in
// chunk order. That holds when the ranges written into a chunk arrive in increasing position order
// and every element not written is zero (padding). A chunk whose ranges arrive out of order (its
// upper part first, as when buckets complete from the last tensor backwards) is summed again from
// the array by finish(): one chunk per such bucket boundary.
#pragma once

#include <cstddef>
#include <vector>

#include "dsrt.h"
#include "optim/kernel_table.h"

namespace dsrt {

class SumSquaresFold {
 public:
  // A new fold over an fp32 array of `total` elements. Call it on the thread (outside any parallel
  // region or work-pool task) where cpu_sum_squares would run.
  void begin(size_t total);
  // array[offset, +n) = src (overwrite) or += src, src holding n elements of src_dtype (what the
  // host backend's convert with scale 1, or accumulate with scale 1, writes), and the new values'
  // squares folded. [offset, +n) must lie in [0, total).
  void add(float *array, size_t offset, const void *src, dsrt_dtype src_dtype, size_t n, bool overwrite);
  // Whether cpu_sum_squares(array, DSRT_F32, total, ...) called now on this thread would cut the
  // array as begin() did, with the same kernels (else finish() would not be that result).
  bool matches(size_t total) const;
  // cpu_sum_squares(array, DSRT_F32, total, scale, nonfinite) for the array as add() left it.
  double finish(const float *array, float scale, bool *nonfinite) const;
  // Chunks summed again by finish() (their ranges came out of order); for tests.
  size_t chunks_resummed() const;

 private:
  struct Chunk {
    size_t next = 0;     // position in the chunk after the last range folded
    bool resum = false;  // a range came below `next`: finish() sums the chunk from the array
    double state[optim_kernels::kSumSquaresStateDoubles] = {};
  };
  const optim_kernels::KernelTable *kernels_ = nullptr;
  size_t total_ = 0;
  size_t chunk_ = 1;
  int threads_ = 1;
  std::vector<Chunk> chunks_;
};

}  // namespace dsrt
