// defines: ParamCoordinator's swap-in reads -- shards not resident in memory (offload_param
// "nvme" past max_in_cpu) read from the shard source into device staging: on demand, ahead of
// the recorded trace, and their cancellation (see param_coordinator.h).
#include "zero/param_coordinator.h"

#include <algorithm>

#include "util/half.h"
#include "util/log.h"
#include "util/steady_clock.h"

namespace dsrt {

void ParamCoordinator::set_read(size_t t, Read read) {
  TensorState &ts = tensors_[t];
  auto counted = [](Read r) { return r == Read::Started || r == Read::Ready; };
  if (counted(ts.read)) reading_elems_ -= gathered_elems(t);
  if (counted(read)) reading_elems_ += gathered_elems(t);
  ts.read = read;
  if (read != Read::Failed) ts.read_error = Status::Ok();
}

Status ParamCoordinator::fetch(size_t t) {
  TensorState &ts = tensors_[t];
  switch (ts.read) {
    case Read::Failed: {
      Status error = ts.read_error;
      set_read(t, Read::None);  // the next gather reads again
      return error;
    }
    case Read::Ready:
      ++swap_stats_.read_hits;
      return Status::Ok();
    case Read::Started:
      ++swap_stats_.read_hits;
      return finish_read(t);
    case Read::None:
      break;
  }
  make_room();
  bool started = false;
  DSRT_RETURN_IF_ERROR(source_->start_read(t, &started).with_context(Format("swapping in '%s'", names_[t].c_str())));
  if (!started)
    return Error(DSRT_ERR_STATE, "swapping in '%s': every read buffer is taken by something other than reads ahead",
                 names_[t].c_str());
  set_read(t, Read::Started);
  reading_.push_back(t);
  swap_stats_.peak_reads_in_flight = std::max(swap_stats_.peak_reads_in_flight, reading_.size());
  ++swap_stats_.reads_on_demand;
  return finish_read(t);
}

Status ParamCoordinator::finish_read(size_t t) {
  const double start = steady_seconds();
  TensorState &ts = tensors_[t];
  const auto in_list = std::find(reading_.begin(), reading_.end(), t);
  if (in_list != reading_.end()) reading_.erase(in_list);
  const size_t bytes = static_cast<size_t>(shard_size(t)) * dtype_size(options_.working_dtype);
  Status status = ts.staged.empty() ? device_->allocate(bytes, &ts.staged, false) : Status::Ok();
  if (status.ok()) {
    status = source_->finish_read(t, ts.staged.data());
  } else {
    source_->cancel_read(t);
  }
  swap_stats_.read_wait_seconds += steady_seconds() - start;
  if (!status.ok()) {
    ts.staged.reset();
    set_read(t, Read::None);
    return status.with_context(Format("swapping in '%s'", names_[t].c_str()));
  }
  swap_stats_.bytes_read += bytes;
  set_read(t, Read::Ready);
  return Status::Ok();
}

void ParamCoordinator::make_room() {
  // A gather needs a read buffer: finish reads ahead, oldest first, until one is free. Their shards
  // wait in their staging buffers (or their errors on their tensors) for their own gathers.
  while (source_->free_buffers() == 0 && !reading_.empty()) {
    const size_t u = reading_.front();
    ++swap_stats_.buffers_reclaimed;
    Status status = finish_read(u);
    if (!status.ok()) {
      set_read(u, Read::Failed);
      tensors_[u].read_error = status;
    }
  }
}

void ParamCoordinator::read_ahead_from(size_t position) {
  if (source_ == nullptr) return;
  for (size_t j = position; j < trace_.size(); ++j) {
    const size_t u = trace_[j];
    TensorState &ts = tensors_[u];
    if (!ts.gathered.empty() || ts.read != Read::None || device_shard(u) != nullptr || source_->resident(u) != nullptr)
      continue;
    if (reading_elems_ + gathered_elems(u) > options_.prefetch_bucket_elems || source_->free_buffers() == 0) break;
    bool started = false;
    Status status = source_->start_read(u, &started);
    if (!status.ok()) {
      set_read(u, Read::Failed);  // reported by the acquire that needs it
      ts.read_error = status.with_context(Format("swapping in '%s'", names_[u].c_str()));
      continue;
    }
    if (!started) break;
    set_read(u, Read::Started);
    reading_.push_back(u);
    ++swap_stats_.reads_ahead;
    swap_stats_.peak_reads_in_flight = std::max(swap_stats_.peak_reads_in_flight, reading_.size());
  }
}

void ParamCoordinator::read_ahead() {
  if (trace_valid_ && following_) read_ahead_from(0);
}

void ParamCoordinator::drop_reads() {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    TensorState &ts = tensors_[t];
    if (ts.read == Read::None) continue;
    if (ts.read == Read::Started) source_->cancel_read(t);
    if (ts.read != Read::Failed) ++swap_stats_.reads_cancelled;
    if (!ts.pending) ts.staged.reset();
    set_read(t, Read::None);
  }
  reading_.clear();
}

}  // namespace dsrt
