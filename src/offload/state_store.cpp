// defines: StateStore -- the in-memory masters and optimizer states, and range copies of them.
#include "offload/state_store.h"

#include <algorithm>
#include <vector>

#include "optim/cpu_optimizer.h"
#include "util/half.h"

namespace dsrt {

float *StateStore::at(int state, int64_t offset) const {
  if (offset < split_) {
    const DeviceBuffer &b = state < 0 ? dev_master_ : dev_states_[state];
    return b.as<float>() + offset;
  }
  const DeviceBuffer &b = state < 0 ? master_ : states_[state];
  return b.as<float>() + (offset - split_);
}

Status StateStore::copy(int state, size_t offset, size_t count, float *data, bool write) {
  // No split: one buffer, which may hold bf16 (copy_state converts).
  if (split_ == 0) return copy_state(state, offset, count, data, write);
  const size_t split = static_cast<size_t>(split_);
  for (size_t at = offset; at < offset + count;) {
    const size_t end = at < split ? std::min(offset + count, split) : offset + count;
    float *here = this->at(state, static_cast<int64_t>(at));
    float *there = data + (at - offset);
    const size_t bytes = (end - at) * sizeof(float);
    DSRT_RETURN_IF_ERROR(write ? device_->copy(here, there, bytes, nullptr) : device_->copy(there, here, bytes, nullptr));
    at = end;
  }
  return device_->synchronize(nullptr);
}

Status StateStore::copy_state(int state, size_t offset, size_t count, float *host, bool write) {
  if (count == 0) return Status::Ok();
  const dsrt_dtype dtype = state < 0 ? master_dtype_ : state_dtype_;
  const size_t esize = dtype_size(dtype);
  char *base = static_cast<char *>(state < 0 ? master_.data() : states_[state].data()) + offset * esize;
  if (dtype == DSRT_F32) {
    DSRT_RETURN_IF_ERROR(write ? device_->copy(base, host, count * sizeof(float), nullptr)
                               : device_->copy(host, base, count * sizeof(float), nullptr));
    return device_->synchronize(nullptr);
  }
  // bf16 storage: fp32 values are rounded to the nearest bf16 on the way in (exact when they came
  // from bf16), widened exactly on the way out.
  if (device_->type() == DSRT_DEVICE_CPU || offloaded_) {
    if (write) cpu_convert(host, DSRT_F32, base, dtype, count);
    else cpu_convert(base, dtype, host, DSRT_F32, count);
    return Status::Ok();
  }
  std::vector<uint16_t> staged(count);
  if (write) {
    cpu_convert(host, DSRT_F32, staged.data(), dtype, count);
    DSRT_RETURN_IF_ERROR(device_->copy(base, staged.data(), count * esize, nullptr));
    return device_->synchronize(nullptr);
  }
  DSRT_RETURN_IF_ERROR(device_->copy(staged.data(), base, count * esize, nullptr));
  DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
  cpu_convert(staged.data(), dtype, host, DSRT_F32, count);
  return Status::Ok();
}

}  // namespace dsrt
