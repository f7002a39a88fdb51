// defines: ParamCoordinator -- ZeRO-3 gathers, the acquire trace, prefetching, reuse. The reads of
// shards from the shard source are in param_coordinator_reads.cpp, hpZ's secondary partitions in
// param_coordinator_hpz.cpp, the cross-rank agreement check in param_coordinator_agreement.cpp.
#include "zero/param_coordinator.h"

#include <algorithm>

#include "comm/comm_checks.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"
#include "util/steady_clock.h"

namespace dsrt {

ParamCoordinator::~ParamCoordinator() {
  for (TensorState &ts : tensors_)
    if (ts.pending) (void)ts.pending->wait();
  drop_reads();
  // The device outlives the coordinator (the engine declares it first).
  if (transfer_stream_ != nullptr) (void)device_->destroy_stream(transfer_stream_);
}

Status ParamCoordinator::init(const Partitioning *partitioning, Comm *comm, Device *device,
                              const CoordinatorOptions &options, void *shards, std::vector<std::string> names,
                              std::vector<FrozenEntry> frozen) {
  part_ = partitioning;
  comm_ = comm;
  device_ = device;
  options_ = options;
  shards_ = shards;
  names_ = std::move(names);
  const size_t trainable = part_->num_tensors();
  tensors_ = std::vector<TensorState>(trainable + frozen.size());
  for (size_t t = 0; t < trainable; ++t) {
    tensors_[t].numel = part_->numel(t);
    tensors_[t].shard_elems = part_->shard_layout().shard_size(t);
  }
  for (size_t k = 0; k < frozen.size(); ++k) {
    TensorState &ts = tensors_[trainable + k];
    ts.numel = frozen[k].numel;
    ts.shard_elems = frozen[k].shard_elems;
    ts.frozen = true;
    ts.frozen_shard = frozen[k].shard;
    names_.push_back(std::move(frozen[k].name));
  }
  int64_t largest = 0;
  for (size_t t = 0; t < tensors_.size(); ++t)
    if (tensors_[t].numel > options_.persistence_threshold) largest = std::max(largest, gathered_elems(t));
  // Room for the largest tensor twice (one being released while the next is gathered) plus a
  // prefetch bucket's worth, never more than the live-parameter limit.
  const int64_t limit_elems =
      std::min(2 * largest + std::max<int64_t>(0, options_.prefetch_bucket_elems), std::max(options_.max_live_elems, largest));
  cache_limit_ = static_cast<size_t>(limit_elems) * dtype_size(options_.working_dtype);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    tensors_[t].persistent = tensors_[t].numel <= options_.persistence_threshold;
    if (tensors_[t].persistent) DSRT_RETURN_IF_ERROR(gather(t, false));
  }
  return Status::Ok();
}

const char *ParamCoordinator::kept_view(size_t t) const {
  const TensorState &ts = tensors_[t];
  if (comm_->size() != 1 || device_->type() != DSRT_DEVICE_CPU || ts.frozen || source_ == nullptr ||
      !ts.secondary.empty())
    return nullptr;
  return static_cast<const char *>(source_->resident(t));
}

Status ParamCoordinator::gather(size_t t, bool async) {
  const double start = steady_seconds();
  const int64_t s = shard_size(t);
  TensorState &ts = tensors_[t];
  if (const char *kept = kept_view(t)) {
    // One rank, the shard kept in host memory: the gathered copy would be the shard byte for byte,
    // so the shard itself is handed out. Counted as gathered (live elements, prefetch, reuse) as
    // a copy would be; re-gathering it (refresh after a step) finds it up to date.
    if (ts.view && ts.gathered.data() == kept) return Status::Ok();
    if (!ts.gathered.empty()) {
      DSRT_RETURN_IF_ERROR(wait_pending(t));
      free_gathered(t);
    }
    const size_t bytes = static_cast<size_t>(s) * dtype_size(options_.working_dtype);
    ts.gathered = DeviceBuffer(const_cast<char *>(kept), bytes, nullptr);  // not owned
    ts.view = true;
    live_elems_ += gathered_elems(t);
    if (async) {
      // In flight as a copy would be, so that prefetching and its counts go as they did.
      ts.pending = completed_handle();
      in_flight_elems_ += gathered_elems(t);
    }
    gather_seconds_ += steady_seconds() - start;
    return Status::Ok();
  }
  if (ts.view) free_gathered(t);  // the shard is no longer kept there: a copy of its own
  const bool fresh = ts.gathered.empty();
  if (fresh) {
    const size_t bytes = static_cast<size_t>(s * comm_->size()) * dtype_size(options_.working_dtype);
    auto cached = cache_.find(bytes);
    if (cached != cache_.end()) {
      ts.gathered = std::move(cached->second);
      cache_.erase(cached);
      cache_bytes_ -= bytes;
    } else {
      DSRT_RETURN_IF_ERROR(device_->allocate(bytes, &ts.gathered, false)
                               .with_context(Format("allocating the gathered copy of '%s'", names_[t].c_str())));
    }
    live_elems_ += gathered_elems(t);
  }
  const char *send = nullptr;
  Status status;
  const bool quantize = ts.frozen ? options_.quantized_nontrainable : options_.quantized_weights;
  const char *key = ts.frozen ? "zero_quantized_nontrainable_weights" : "zero_quantized_weights";
  if (!ts.secondary.empty() && quantize) {
    // hpZ + qwZ: the secondary partitions travel quantized too (as DeepSpeed's).
    status = ts.quantized
                 .start(secondary_comm_, device_, nullptr, ts.secondary.data(), static_cast<size_t>(secondary_elems(t)),
                        options_.working_dtype, &ts.pending)
                 .with_context(Format("gathering '%s' in its hpZ group (%s)", names_[t].c_str(), key));
  } else if (!ts.secondary.empty()) {
    // hpZ: the group's secondary partitions make up the whole (padded) tensor.
    status = secondary_comm_->all_gather(ts.secondary.data(), ts.gathered.data(),
                                         static_cast<size_t>(secondary_elems(t)), options_.working_dtype, &ts.pending)
                 .with_context(Format("gathering '%s' in its hpZ group", names_[t].c_str()));
  } else {
    status = shard_to_send(t, &send);
    if (status.ok() && comm_->size() == 1 && device_->type() != DSRT_DEVICE_CPU) {
      // One rank on a GPU: the gathered copy is the shard. A device copy on the default stream
      // (where dsrt orders its work after the host's kernels, so a reused buffer is not
      // overwritten under a kernel still reading it) needs no host wait, where the host
      // communicator's staging would copy through host memory and wait for the GPU twice.
      status = device_->copy(ts.gathered.data(), send, static_cast<size_t>(s) * dtype_size(options_.working_dtype), nullptr)
                   .with_context(Format("gathering '%s'", names_[t].c_str()));
      ts.staged.reset();  // the device pool reuses it only after the copy
      if (status.ok()) ts.pending = completed_handle();  // as a collective's handle: prefetch counts alike
    } else if (status.ok() && quantize && comm_->size() > 1) {
      status = ts.quantized.start(comm_, device_, nullptr, send, static_cast<size_t>(s), options_.working_dtype,
                                  &ts.pending)
                   .with_context(Format("gathering '%s' (%s)", names_[t].c_str(), key));
    } else if (status.ok()) {
      status = comm_->all_gather(send, ts.gathered.data(), static_cast<size_t>(s), options_.working_dtype, &ts.pending)
                   .with_context(Format("gathering '%s'", names_[t].c_str()));
    }
  }
  if (!status.ok()) {
    // Nothing was gathered: a fresh copy must not be taken for the tensor by a later acquire.
    ts.quantized.abandon();
    ts.staged.reset();
    if (fresh) free_gathered(t);
    gather_seconds_ += steady_seconds() - start;
    return status;
  }
  in_flight_elems_ += gathered_elems(t);
  gather_seconds_ += steady_seconds() - start;
  if (!async) return wait_pending(t);
  return Status::Ok();
}

const char *ParamCoordinator::device_shard(size_t t) const {
  const TensorState &ts = tensors_[t];
  if (ts.frozen) return static_cast<const char *>(ts.frozen_shard);
  if (shards_ == nullptr) return nullptr;
  const size_t wsize = dtype_size(options_.working_dtype);
  return static_cast<const char *>(shards_) + part_->shard_layout().shard_offset(t) * static_cast<int64_t>(wsize);
}

void ParamCoordinator::set_frozen_shard(size_t t, const void *shard) {
  drop_reads();
  tensors_[t].frozen_shard = shard;
}

Status ParamCoordinator::shard_to_send(size_t t, const char **send) {
  const size_t wsize = dtype_size(options_.working_dtype);
  if (const char *shard = device_shard(t)) {
    *send = shard;
    return Status::Ok();
  }
  if (source_ == nullptr)
    return Error(DSRT_ERR_STATE, "gathering '%s': no resident shards and no shard source", names_[t].c_str());
  TensorState &ts = tensors_[t];
  const size_t bytes = static_cast<size_t>(shard_size(t)) * wsize;
  if (const void *kept = source_->resident(t)) {
    if (device_->type() == DSRT_DEVICE_CPU) {
      *send = static_cast<const char *>(kept);
      return Status::Ok();
    }
    DSRT_RETURN_IF_ERROR(device_->allocate(bytes, &ts.staged, false)
                             .with_context(Format("staging the shard of '%s'", names_[t].c_str())));
    // On a stream of its own: the staging buffer is new to this gather, so the copy needs no order
    // against the host's kernels, and waiting for it alone does not wait for every kernel queued
    // on the default stream (the gather itself is ordered after those by the communicator).
    if (transfer_stream_ == nullptr)
      DSRT_RETURN_IF_ERROR(device_->create_stream(&transfer_stream_).with_context("ZeRO-3: the shard transfer stream"));
    DSRT_RETURN_IF_ERROR(device_->copy(ts.staged.data(), kept, bytes, transfer_stream_)
                             .with_context(Format("staging the shard of '%s'", names_[t].c_str())));
    DSRT_RETURN_IF_ERROR(device_->synchronize(transfer_stream_));
    *send = static_cast<const char *>(ts.staged.data());
    return Status::Ok();
  }
  DSRT_RETURN_IF_ERROR(fetch(t));
  set_read(t, Read::None);  // the gather owns staged now (freed when it completes)
  *send = static_cast<const char *>(ts.staged.data());
  return Status::Ok();
}

void ParamCoordinator::set_shard_source(void *shards, ShardSource *source) {
  if (shards != nullptr) drop_reads();
  if (shards != nullptr) drop_secondaries(false);  // the trainable shards are about to be rewritten
  shards_ = shards;
  source_ = source;
}

Status ParamCoordinator::wait_pending(size_t t) {
  TensorState &ts = tensors_[t];
  if (!ts.pending) return Status::Ok();
  const double start = steady_seconds();
  CommHandle handle = std::move(ts.pending);
  in_flight_elems_ -= gathered_elems(t);
  Status status = handle->wait().with_context(Format("gathering '%s'", names_[t].c_str()));
  ts.staged.reset();
  if (ts.quantized.active()) {
    if (status.ok()) {
      status = ts.quantized.finish(ts.gathered.data())
                   .with_context(Format("dequantizing the gathered '%s' (zero_quantized_weights)", names_[t].c_str()));
    } else {
      ts.quantized.abandon();
    }
  }
  gather_seconds_ += steady_seconds() - start;
  return status;
}

int64_t ParamCoordinator::gathered_elems(size_t t) const {
  return shard_size(t) * comm_->size();
}

void ParamCoordinator::free_gathered(size_t t) {
  DeviceBuffer &buffer = tensors_[t].gathered;
  if (buffer.empty()) return;
  live_elems_ -= gathered_elems(t);
  if (tensors_[t].view) {
    tensors_[t].view = false;
    buffer.reset();  // the kept shard: nothing to free or cache
    return;
  }
  // Keep recently freed buffers for the next gathers of the same size: fresh allocations of large
  // blocks are page-faulted in on every first touch. The cache is bounded (see cache_limit_).
  const size_t bytes = buffer.bytes();
  if (bytes <= cache_limit_) {
    while (cache_bytes_ + bytes > cache_limit_ && !cache_.empty()) {
      cache_bytes_ -= cache_.begin()->first;
      cache_.erase(cache_.begin());
    }
    cache_bytes_ += bytes;
    cache_.emplace(bytes, std::move(buffer));
  }
  buffer.reset();
}

void ParamCoordinator::prefetch_after(size_t position) {
  int64_t in_flight = in_flight_elems_;
  int64_t live = live_elems_;
  // The window is scanned from the acquire's position every time: a tensor that was still gathered
  // when an earlier scan passed it may have been freed since (released, not kept for reuse).
  size_t j = position;
  for (; j < trace_.size(); ++j) {
    const size_t u = trace_[j];
    TensorState &ts = tensors_[u];
    if (!ts.gathered.empty()) continue;
    const int64_t size = gathered_elems(u);
    if (in_flight + size > options_.prefetch_bucket_elems || live + size > options_.max_live_elems) break;
    // A shard not read yet: its read starts below and its gather is issued by a later acquire, so
    // the read overlaps the host's work in between. Whether a read was started depends only on
    // the trace, the sizes and the buffer count, so every rank stops at the same tensor.
    if (device_shard(u) == nullptr && source_ != nullptr && ts.read == Read::None && source_->resident(u) == nullptr)
      break;
    Status status = gather(u, true);
    if (!status.ok()) {
      // Reported by the acquire that needs it (which gathers it again when called again).
      logf(DSRT_LOG_DEBUG, "prefetch of '%s' failed: %s", names_[u].c_str(), status.message().c_str());
      set_read(u, Read::Failed);
      ts.read_error = status;
      break;
    }
    in_flight += size;
    live += size;
  }
  read_ahead_from(j);
}

Status ParamCoordinator::acquire(size_t t, void **data) {
  const size_t position = acquires_;
  if (following_ && !(position < trace_.size() && trace_[position] == t)) {
    following_ = false;
    logf(DSRT_LOG_DEBUG, "ZeRO-3: acquire of '%s' departs from the recorded order at position %zu; prefetching stops "
                         "and the order is recorded again",
         names_[t].c_str(), position);
  }
  TensorState &ts = tensors_[t];
  Status status;
  if (ts.pending) {
    ++prefetch_hits_;
    ++ts.prefetch_hits;
    status = wait_pending(t);
  } else if (ts.gathered.empty()) {
    status = gather(t, false);
  }
  // A failed acquire (e.g. a failed swap-in) is not part of the sequence: calling it again is.
  if (!status.ok()) return status;
  current_.push_back(t);
  ++acquires_;
  ++ts.acquired;
  if (following_) prefetch_after(position + 1);
  *data = ts.gathered.data();
  return Status::Ok();
}

void ParamCoordinator::maybe_free(size_t t) {
  TensorState &ts = tensors_[t];
  if (ts.persistent || ts.acquired > 0 || ts.pending || ts.gathered.empty()) return;
  if (following_ && live_elems_ <= options_.max_live_elems) {
    // Keep it when the trace says it comes back soon.
    const size_t position = acquires_;
    int64_t distance = 0;
    for (size_t j = position; j < trace_.size(); ++j) {
      if (trace_[j] == t) {
        if (distance <= options_.max_reuse_distance) return;
        break;
      }
      distance += tensors_[trace_[j]].numel;
      if (distance > options_.max_reuse_distance) break;
    }
  }
  free_gathered(t);
}

Status ParamCoordinator::release(size_t t) {
  TensorState &ts = tensors_[t];
  current_.push_back(t | kReleaseBit);
  if (ts.acquired > 0) --ts.acquired;
  if (ts.acquired == 0) {
    DSRT_RETURN_IF_ERROR(make_secondary(t));
    maybe_free(t);
  }
  return Status::Ok();
}

Status ParamCoordinator::end_micro_step() {
  Status agreement = check_agreement();
  for (size_t t = 0; t < tensors_.size(); ++t) DSRT_RETURN_IF_ERROR(wait_pending(t));
  drop_reads();  // reads ahead of a micro-step that left the trace
  DSRT_RETURN_IF_ERROR(agreement);

  std::vector<size_t> acquires;
  for (uint64_t e : current_)
    if ((e & kReleaseBit) == 0) acquires.push_back(static_cast<size_t>(e));
  if (!trace_valid_ || acquires != trace_) {
    if (trace_valid_)
      logf(DSRT_LOG_DEBUG, "ZeRO-3: the acquire order changed (%zu acquires, trace had %zu); recorded again",
           acquires.size(), trace_.size());
    trace_ = std::move(acquires);
    trace_valid_ = !trace_.empty();
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    TensorState &ts = tensors_[t];
    if (!ts.persistent && ts.acquired == 0) free_gathered(t);
  }
  current_.clear();
  acquires_ = 0;
  following_ = trace_valid_;
  return Status::Ok();
}

Status ParamCoordinator::refresh() {
  // The trainable shards changed: their next gathers go over the world again. A frozen entry's
  // secondary partition stays valid (the step never rewrites it; regather drops its own).
  drop_secondaries(false);
  for (size_t t = 0; t < tensors_.size(); ++t)
    if (!tensors_[t].frozen && !tensors_[t].gathered.empty()) DSRT_RETURN_IF_ERROR(gather(t, true));
  for (size_t t = 0; t < tensors_.size(); ++t) DSRT_RETURN_IF_ERROR(wait_pending(t));
  return Status::Ok();
}

Status ParamCoordinator::regather(size_t t) {
  DSRT_RETURN_IF_ERROR(wait_pending(t));
  tensors_[t].secondary.reset();  // hpZ: the shards were rewritten, so is the secondary partition's source
  if (tensors_[t].gathered.empty()) return Status::Ok();
  DSRT_RETURN_IF_ERROR(wait_pending(t));
  return gather(t, false);
}

Status ParamCoordinator::overwrite(size_t t, const float *full) {
  TensorState &ts = tensors_[t];
  DSRT_RETURN_IF_ERROR(wait_pending(t));
  ts.secondary.reset();  // stale now; the shards are rewritten by the caller too
  if (ts.gathered.empty()) return Status::Ok();
  // The gathered copy is device memory: convert on the host and copy it up (on the CPU device the
  // copy is a memcpy). The tensor's elements only; the padding past numel is left as gathered.
  const size_t n = static_cast<size_t>(tensors_[t].numel);
  std::vector<char> converted(n * dtype_size(options_.working_dtype));
  cpu_convert(full, DSRT_F32, converted.data(), options_.working_dtype, n);
  DSRT_RETURN_IF_ERROR(device_->copy(ts.gathered.data(), converted.data(), converted.size(), nullptr)
                           .with_context(Format("overwriting the gathered copy of '%s'", names_[t].c_str())));
  return device_->synchronize(nullptr);
}

uint64_t ParamCoordinator::cached_bytes() const { return cache_bytes_; }

uint64_t ParamCoordinator::gathered_bytes() const {
  uint64_t bytes = 0;
  for (const TensorState &ts : tensors_)
    if (!ts.view) bytes += ts.gathered.bytes();  // a view is the kept shard's memory
  return bytes;
}

}  // namespace dsrt
