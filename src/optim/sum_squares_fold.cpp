// defines: SumSquaresFold -- writing a gradient range and folding its squares into the norm's chunks.
#include "optim/sum_squares_fold.h"

#include <algorithm>

#include "optim/cpu_dispatch.h"
#include "util/half.h"

namespace dsrt {
namespace {

// Each piece is written and summed in blocks this long (16 KiB of fp32), so the sum reads what
// the write just left in L1.
constexpr size_t kBlockElements = 4096;

}  // namespace

void SumSquaresFold::begin(size_t total) {
  const optim_kernels::ChunkPlan plan = optim_kernels::plan_chunks(total);
  kernels_ = &optim_kernels::active_kernels();
  total_ = total;
  chunk_ = std::max<size_t>(plan.size, 1);
  threads_ = plan.threads;
  chunks_.assign(plan.count, Chunk{});
}

void SumSquaresFold::add(float *array, size_t offset, const void *src, dsrt_dtype src_dtype, size_t n,
                         bool overwrite) {
  if (n == 0 || kernels_ == nullptr) return;
  const optim_kernels::KernelTable &kernels = *kernels_;
  const size_t end = std::min(total_, offset + n);
  const size_t esize = dtype_size(src_dtype);
  const unsigned char *source = static_cast<const unsigned char *>(src);
  const size_t first = offset / chunk_, last = (end - 1) / chunk_ + 1;
  // One piece per chunk the range meets; distinct pieces touch distinct chunks, so they run in parallel.
  auto piece = [&](size_t c) {
    Chunk &chunk = chunks_[c];
    const size_t chunk_begin = c * chunk_, chunk_len = std::min(total_, chunk_begin + chunk_) - chunk_begin;
    const size_t b = std::max(offset, chunk_begin), e = std::min(end, chunk_begin + chunk_len);
    const bool fold = !chunk.resum && b - chunk_begin >= chunk.next;
    if (!fold) chunk.resum = true;
    for (size_t s = b; s < e; s += kBlockElements) {
      const size_t stop = std::min(e, s + kBlockElements);
      const unsigned char *from = source + (s - offset) * esize;
      if (overwrite) kernels.convert(from, src_dtype, array + s, DSRT_F32, 0, stop - s);
      else kernels.accumulate(array + s, from, src_dtype, 0, stop - s, 1.0f);
      if (fold) kernels.sum_squares_part(chunk.state, array + chunk_begin, chunk_len, s - chunk_begin, stop - chunk_begin);
    }
    if (fold) chunk.next = e - chunk_begin;
  };
  if (threads_ > 1 && last - first > 1) {
    optim_kernels::work_pool_run(last - first, threads_, [&](size_t i) { piece(first + i); });
  } else {
    for (size_t c = first; c < last; ++c) piece(c);
  }
}

bool SumSquaresFold::matches(size_t total) const {
  if (kernels_ != &optim_kernels::active_kernels() || total != total_) return false;
  const optim_kernels::ChunkPlan plan = optim_kernels::plan_chunks(total);
  return plan.count == chunks_.size() && (plan.count <= 1 || plan.size == chunk_);
}

double SumSquaresFold::finish(const float *array, float scale, bool *nonfinite) const {
  std::vector<double> partial(chunks_.size(), 0.0);
  std::vector<size_t> resum;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].resum) resum.push_back(c);
    else partial[c] = kernels_->sum_squares_total(chunks_[c].state);
  }
  auto one = [&](size_t c) {
    const size_t b = c * chunk_, e = std::min(total_, b + chunk_);
    partial[c] = kernels_->sum_squares(array, DSRT_F32, b, e);
  };
  if (threads_ > 1 && resum.size() > 1) {
    optim_kernels::work_pool_run(resum.size(), threads_, [&](size_t i) { one(resum[i]); });
  } else {
    for (size_t c : resum) one(c);
  }
  return optim_kernels::finish_sum_squares(partial, scale, nonfinite);  // as cpu_sum_squares
}

size_t SumSquaresFold::chunks_resummed() const {
  size_t n = 0;
  for (const Chunk &c : chunks_) n += c.resum ? 1 : 0;
  return n;
}

}  // namespace dsrt
