// defines: GradSwap -- the stage-3 gradient partition in per-sub-group swap arrays, accumulated
// range by range through one pool buffer at a time with asynchronous write-backs.
#include "offload/grad_swap.h"

#include <algorithm>
#include <cstring>

#include "util/log.h"

namespace dsrt {

GradSwap::GradSwap(SwapStore &store, PinnedPool &pool, std::vector<int64_t> group_begin,
                   std::function<std::string(size_t)> name)
    : store_(store), pool_(pool), begin_(std::move(group_begin)), name_(std::move(name)) {
  holds_.assign(begin_.size() > 1 ? begin_.size() - 1 : 0, 0);
}

GradSwap::~GradSwap() {
  lease_.release();
  while (!writing_.empty()) {
    const Status status = finish_oldest();
    if (!status.ok()) logf(DSRT_LOG_WARN, "gradient swap: while closing: %s", status.message().c_str());
  }
}

uint64_t GradSwap::array_bytes(size_t g) const {
  return static_cast<uint64_t>(begin_[g + 1] - begin_[g]) * sizeof(float);
}

uint64_t GradSwap::bytes_on_disk() const {
  return begin_.size() > 1 ? static_cast<uint64_t>(begin_.back() - begin_.front()) * sizeof(float) : 0;
}

Status GradSwap::finish_oldest() {
  WriteBack done = std::move(writing_.front());
  writing_.pop_front();
  Status status = store_.wait(done.ticket);
  if (!status.ok()) return lose(status.with_context(Format("writing back the gradients of sub-group %zu", done.group)));
  return Status::Ok();
}

Status GradSwap::lose(Status status) {
  if (lost_.ok()) lost_ = status;
  return status;
}

Status GradSwap::check_lost() const {
  if (lost_.ok()) return Status::Ok();
  return Error(lost_.code(),
               "the gradients of this accumulation window are lost (%s); the step cannot be taken on them (the "
               "next window starts afresh; free space on the nvme_path drive first)",
               lost_.message().c_str());
}

Status GradSwap::acquire(PinnedLease *lease) {
  for (;;) {
    const Status status = pool_.acquire(lease);
    if (status.ok()) return status;
    if (writing_.empty())
      return status.with_context("gradient swap: every swap buffer is in use (is an optimizer pass running?)");
    DSRT_RETURN_IF_ERROR(finish_oldest());
  }
}

Status GradSwap::evict() {
  if (current_ == SIZE_MAX) return Status::Ok();
  WriteBack back;
  back.group = current_;
  back.lease = std::move(lease_);
  current_ = SIZE_MAX;
  const uint64_t bytes = array_bytes(back.group);
  const Status started = store_.swap_out(name_(back.group), back.lease.data(), bytes, &back.ticket);
  if (!started.ok()) return lose(started.with_context(Format("writing back the gradients of sub-group %zu", back.group)));
  holds_[back.group] = 1;  // a later swap-in of the array waits for this write
  stats_.bytes_written += bytes;
  stats_.writes += 1;
  writing_.push_back(std::move(back));
  return Status::Ok();
}

Status GradSwap::map(int64_t offset, int64_t count, float **dst, int64_t *mapped) {
  *dst = nullptr;
  *mapped = 0;
  DSRT_RETURN_IF_ERROR(check_lost());
  if (holds_.empty() || count <= 0 || offset < begin_.front() || offset + count > begin_.back())
    return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient swap: range [%lld, +%lld) is outside the partition [0, %lld)",
                 static_cast<long long>(offset), static_cast<long long>(count),
                 static_cast<long long>(holds_.empty() ? 0 : begin_.back()));
  const size_t g = static_cast<size_t>(std::upper_bound(begin_.begin(), begin_.end() - 1, offset) - begin_.begin()) - 1;
  if (g != current_) {
    DSRT_RETURN_IF_ERROR(evict());
    PinnedLease lease;
    DSRT_RETURN_IF_ERROR(acquire(&lease));
    const uint64_t bytes = array_bytes(g);
    // Its own write-back still in flight is finished here (the store would finish it inside the
    // read, spending the ticket this object waits for).
    while (std::any_of(writing_.begin(), writing_.end(), [g](const WriteBack &w) { return w.group == g; }))
      DSRT_RETURN_IF_ERROR(finish_oldest());
    if (holds_[g]) {
      const Status read = store_.read(name_(g), lease.data(), bytes);
      if (!read.ok()) return lose(read.with_context(Format("reading back the gradients of sub-group %zu to accumulate", g)));
      stats_.bytes_read += bytes;
      stats_.reads += 1;
    } else {
      std::memset(lease.data(), 0, bytes);
    }
    lease_ = std::move(lease);
    current_ = g;
  }
  *dst = lease_.as<float>() + (offset - begin_[g]);
  *mapped = std::min(count, begin_[g + 1] - offset);
  return Status::Ok();
}

Status GradSwap::flush() {
  Status first = evict();
  while (!writing_.empty()) {
    const Status status = finish_oldest();
    if (first.ok() && !status.ok()) first = status;
  }
  if (first.ok()) first = check_lost();
  return first;
}

Status GradSwap::initialize() {
  DSRT_RETURN_IF_ERROR(flush());
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(acquire(&lease));
  for (size_t g = 0; g < holds_.size(); ++g) {
    std::memset(lease.data(), 0, array_bytes(g));
    DSRT_RETURN_IF_ERROR(store_.write(name_(g), lease.data(), array_bytes(g)));
  }
  return Status::Ok();
}

Status GradSwap::finish_window() {
  DSRT_RETURN_IF_ERROR(flush());
  PinnedLease lease;
  for (size_t g = 0; g < holds_.size(); ++g) {
    if (holds_[g]) continue;
    if (!lease.valid()) {
      DSRT_RETURN_IF_ERROR(acquire(&lease));
      std::memset(lease.data(), 0, pool_.buffer_size());
    }
    const Status written = store_.write(name_(g), lease.data(), array_bytes(g));
    if (!written.ok()) return lose(written.with_context(Format("zeroing the gradients of sub-group %zu", g)));
    holds_[g] = 1;
  }
  return Status::Ok();
}

void GradSwap::drain() {
  lease_.release();
  current_ = SIZE_MAX;
  while (!writing_.empty()) {
    const Status status = finish_oldest();  // a failure is recorded (the first one is kept)
    (void)status;
  }
}

void GradSwap::map_or_discard(int64_t offset, int64_t count, float **dst, int64_t *mapped) {
  if (lost_.ok()) {
    const Status status = map(offset, count, dst, mapped);
    if (status.ok()) return;
    defer(status);
  }
  // The window is lost: its remaining ranges are summed here and dropped (a bounded buffer, handed
  // out piece by piece; the reducer maps again until its range is covered).
  constexpr int64_t kDiscardElems = int64_t{1} << 16;
  if (discard_.empty()) discard_.resize(static_cast<size_t>(kDiscardElems));
  *dst = discard_.data();
  *mapped = std::max<int64_t>(1, std::min(count, kDiscardElems));
}

void GradSwap::flush_or_defer() {
  if (!lost_.ok()) return;  // drained when the failure was recorded
  defer(flush());
}

void GradSwap::defer(const Status &status) {
  if (status.ok()) return;
  if (lost_.ok()) lost_ = status;
  drain();
}

void GradSwap::begin_window() {
  // What is in memory belongs to the window that ended (normally nothing: flush ran).
  lease_.release();
  current_ = SIZE_MAX;
  std::fill(holds_.begin(), holds_.end(), 0);
  lost_ = Status::Ok();
  discard_ = std::vector<float>();
}

}  // namespace dsrt
