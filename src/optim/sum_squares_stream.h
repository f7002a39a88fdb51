// sum_squares_stream.h -- cpu_sum_squares over an fp32 array that arrives in consecutive pieces
// (the gradient partition read back from NVMe sub-group by sub-group), with the bitwise result of
// one cpu_sum_squares call over the whole array: the same chunk cut (plan_chunks of the total
// length, decided when the stream is made), each chunk's partial from the same kernel over the
// same contiguous elements, the partials added in chunk order. A chunk that a piece boundary cuts
// is gathered into a staging buffer of at most one chunk (plan_chunks: at least 32768 elements,
// about total / (8 * threads); the whole array with one OpenMP thread).
#pragma once

#include <cstddef>
#include <vector>

namespace dsrt {

class SumSquaresStream {
 public:
  // total: the number of elements add() will be given, in order. Make the stream on the thread
  // (and outside any parallel region or work-pool task) where cpu_sum_squares would have run.
  explicit SumSquaresStream(size_t total);

  // The next `count` elements. More than total in all is ignored.
  void add(const float *data, size_t count);
  size_t added() const { return pos_; }
  size_t staging_capacity() const { return staging_.capacity(); }

  // After exactly `total` elements: what cpu_sum_squares(data, DSRT_F32, total, scale, nonfinite)
  // returns for the concatenated pieces.
  double finish(float scale, bool *nonfinite) const;

 private:
  size_t total_ = 0;
  size_t chunk_ = 0;    // chunk length (the last one may be shorter)
  int threads_ = 1;
  size_t pos_ = 0;      // elements added so far
  std::vector<double> partial_;
  std::vector<float> staging_;  // the chunk in progress when a piece ended inside it
};

}  // namespace dsrt
