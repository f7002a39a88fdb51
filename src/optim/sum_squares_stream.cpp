// defines: SumSquaresStream -- cpu_sum_squares over pieces, chunk by chunk as the whole-array call.
#include "optim/sum_squares_stream.h"

#include <algorithm>

#include "optim/cpu_dispatch.h"
#include "util/status.h"

namespace dsrt {

SumSquaresStream::SumSquaresStream(size_t total) : total_(total) {
  const optim_kernels::ChunkPlan plan = optim_kernels::plan_chunks(total);
  chunk_ = std::max<size_t>(plan.size, 1);
  threads_ = plan.threads;
  partial_.assign(plan.count, 0.0);
}

void SumSquaresStream::add(const float *data, size_t count) {
  count = std::min(count, total_ - pos_);
  if (count == 0 || data == nullptr) return;
  const optim_kernels::KernelTable &kernels = optim_kernels::active_kernels();
  const size_t end = pos_ + count;
  while (pos_ < end) {
    const size_t c = pos_ / chunk_;
    const size_t chunk_begin = c * chunk_, chunk_end = std::min(total_, chunk_begin + chunk_);
    const float *here = data + (pos_ - (end - count));
    if (pos_ == chunk_begin && end >= chunk_end) {
      // Whole chunks inside this piece: straight from it, in parallel as the whole-array call runs them.
      size_t last = c;
      while (last < partial_.size() && std::min(total_, (last + 1) * chunk_) <= end) ++last;
      auto one = [&](size_t k) {
        const size_t b = k * chunk_, e = std::min(total_, b + chunk_);
        partial_[k] = kernels.sum_squares(here + (b - pos_), DSRT_F32, 0, e - b);
      };
      if (threads_ > 1 && last - c > 1) {
        optim_kernels::work_pool_run(last - c, threads_, [&](size_t i) { one(c + i); });
      } else {
        for (size_t k = c; k < last; ++k) one(k);
      }
      pos_ = std::min(total_, last * chunk_);
      continue;
    }
    // A chunk cut by a piece boundary: gather it, then sum it as one contiguous range.
    const size_t take = std::min(end, chunk_end) - pos_;
    if (staging_.capacity() < chunk_end - chunk_begin) staging_.reserve(chunk_end - chunk_begin);
    staging_.insert(staging_.end(), here, here + take);
    pos_ += take;
    if (pos_ == chunk_end) {
      partial_[c] = kernels.sum_squares(staging_.data(), DSRT_F32, 0, staging_.size());
      staging_.clear();
    }
  }
}

double SumSquaresStream::finish(float scale, bool *nonfinite) const {
  return optim_kernels::finish_sum_squares(partial_, scale, nonfinite);
}

}  // namespace dsrt
