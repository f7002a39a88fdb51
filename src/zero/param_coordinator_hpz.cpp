// defines: ParamCoordinator's hpZ part (ZeRO++ zero_hpz_partition_size) -- the secondary group,
// cutting, dropping and counting the secondary partitions (param_coordinator.h).
#include "zero/param_coordinator.h"

#include "util/half.h"
#include "util/log.h"

namespace dsrt {

Status ParamCoordinator::set_secondary_group(Comm *group) {
  if (group != nullptr && (group->size() < 1 || comm_->size() % group->size() != 0))
    return Error(DSRT_ERR_CONFIG, "hpZ: a group of %d ranks does not divide the world of %d", group->size(),
                 comm_->size());
  drop_secondaries(true);
  secondary_comm_ = group != nullptr && group->size() > 1 ? group : nullptr;
  return Status::Ok();
}

int64_t ParamCoordinator::secondary_elems(size_t t) const {
  return shard_size(t) * (comm_->size() / secondary_comm_->size());
}

// Cuts this rank's secondary partition from the full gathered copy (same bytes as the shards the
// world gather assembled). Only the first release after the shards changed makes one.
Status ParamCoordinator::make_secondary(size_t t) {
  TensorState &ts = tensors_[t];
  if (secondary_comm_ == nullptr || ts.persistent || !ts.secondary.empty() || ts.gathered.empty()) return Status::Ok();
  DSRT_RETURN_IF_ERROR(wait_pending(t));
  const size_t bytes = static_cast<size_t>(secondary_elems(t)) * dtype_size(options_.working_dtype);
  DSRT_RETURN_IF_ERROR(device_->allocate(bytes, &ts.secondary, false)
                           .with_context(Format("allocating the hpZ secondary partition of '%s'", names_[t].c_str())));
  const char *from = static_cast<const char *>(ts.gathered.data()) + static_cast<size_t>(secondary_comm_->rank()) * bytes;
  Status status = device_->copy(ts.secondary.data(), from, bytes, nullptr);
  if (status.ok()) status = device_->synchronize(nullptr);
  if (!status.ok()) ts.secondary.reset();
  return status.with_context(Format("cutting the hpZ secondary partition of '%s'", names_[t].c_str()));
}

void ParamCoordinator::drop_secondaries(bool frozen_too) {
  for (TensorState &ts : tensors_) {
    if (ts.secondary.empty() || (ts.frozen && !frozen_too)) continue;
    if (ts.pending) {  // a gather may still read it (callers have none in flight; this is a guard)
      const size_t t = static_cast<size_t>(&ts - tensors_.data());
      Status status = wait_pending(t);
      if (!status.ok()) logf(DSRT_LOG_ERROR, "hpZ: %s", status.message().c_str());
    }
    ts.secondary.reset();
  }
}

uint64_t ParamCoordinator::secondary_bytes() const {
  uint64_t bytes = 0;
  for (const TensorState &ts : tensors_) bytes += ts.secondary.bytes();
  return bytes;
}

}  // namespace dsrt
