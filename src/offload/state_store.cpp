// defines: StateStore -- the allocation of the masters, optimizer states and offload staging,
// their initial values, and range copies of the states wherever they live.
#include "offload/state_store.h"

#include <algorithm>
#include <cstring>
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

Status allocate_offloaded(Device &device, size_t bytes, bool pin_memory, DeviceBuffer *out) {
  if (pin_memory) return device.allocate_pinned(bytes, out);
  return allocate_host(bytes, "allocating offloaded host memory", out);
}

Status StateStore::allocate(Device *device, const StateStoreLayout &layout) {
  layout_ = layout;
  const size_t part = layout.partition_elems;
  const int num_states = layout.num_states;
  // Offloaded to the CPU, the masters and states are host memory (zeroed, as device memory): only
  // the CPU optimizer and host-side reads touch them, so they are page-locked only when
  // offload_optimizer.pin_memory asks (DeepSpeed's meaning). The transfer staging below is always pinned.
  const bool on_host = layout.offloaded;
  // offload_optimizer.ratio < 1: the first split() elements stay on the device (fp32 masters
  // only: the bf16 master mode refuses a ratio below 1, so a split never meets bf16 storage).
  set_device(device, on_host);
  set_split(layout.split);
  const size_t split = static_cast<size_t>(split_);
  auto allocate_state = [&](DeviceBuffer *out, dsrt_dtype dtype, const char *what) {
    const Status s = on_host ? allocate_offloaded(*device, (part - split) * dtype_size(dtype), layout.pin_memory, out)
                             : device->allocate(part * dtype_size(dtype), out);
    return s.with_context(what);
  };
  if (split > 0) {
    auto fill_device = [&](DeviceBuffer *buffer, size_t n, float value) -> Status {
      if (value == 0.0f || n == 0) return Status::Ok();
      const std::vector<float> filled(n, value);
      DSRT_RETURN_IF_ERROR(device->copy(buffer->data(), filled.data(), n * sizeof(float), nullptr));
      return device->synchronize(nullptr);
    };
    DSRT_RETURN_IF_ERROR(device->allocate(split * sizeof(float), &device_part(-1))
                             .with_context("allocating the device part of the fp32 master weights (offload_optimizer.ratio)"));
    for (int i = 0; i < num_states; ++i) {
      DSRT_RETURN_IF_ERROR(device->allocate(split * sizeof(float), &device_part(i))
                               .with_context("allocating the device part of the optimizer states (offload_optimizer.ratio)"));
      DSRT_RETURN_IF_ERROR(fill_device(&device_part(i), split, layout.state_initial[i]));
    }
  }
  // ratio 0: nothing is left for the host.
  const bool host_part = !layout.on_nvme && !(on_host && split == part);
  if (host_part)
    DSRT_RETURN_IF_ERROR(allocate_state(&buffer(-1), master_dtype_,
                                        master_dtype_ == DSRT_F32 ? "allocating fp32 master weights"
                                                                  : "allocating bf16 master weights"));
  for (int i = 0; i < num_states && host_part; ++i) {
    DSRT_RETURN_IF_ERROR(allocate_state(&buffer(i), state_dtype_, "allocating optimizer states"));
    const float value = layout.state_initial[i];
    if (value == 0.0f) continue;
    if (split > 0) {
      std::fill(buffer(i).as<float>(), buffer(i).as<float>() + (part - split), value);  // host, fp32
      continue;
    }
    const std::vector<float> filled(part, value);
    DSRT_RETURN_IF_ERROR(copy(i, 0, part, const_cast<float *>(filled.data()), true));
  }
  if (layout.stage_grads) {
    DSRT_RETURN_IF_ERROR(device->allocate_pinned(part * sizeof(float), &host_grads_)
                             .with_context("allocating the host gradient partition (optimizer offload)"));
    // Padding is never copied from the device; the norm reads it, so it must be zero.
    std::memset(host_grads_.data(), 0, part * sizeof(float));
  }
  if (layout.stage_working)
    DSRT_RETURN_IF_ERROR(device->allocate_pinned(part * dtype_size(layout.working_dtype), &host_working_)
                             .with_context("allocating the host working-copy staging (optimizer offload)"));
  return Status::Ok();
}

Status StateStore::initialize(const std::vector<StatePiece> &pieces) {
  if (layout_.on_nvme) {
    NvmeStatesOptions options = layout_.nvme;
    options.partition_elems = static_cast<int64_t>(layout_.partition_elems);
    options.num_states = layout_.num_states;
    options.state_initial[0] = layout_.state_initial[0];
    options.state_initial[1] = layout_.state_initial[1];
    options.master_dtype = master_dtype_;
    options.state_dtype = state_dtype_;
    return NvmeStates::create(options, pieces, &nvme_);
  }
  // The masters may be device memory, bf16, or split by offload_optimizer.ratio: copy converts and
  // copies through the device.
  for (const StatePiece &piece : pieces)
    if (piece.values != nullptr)
      DSRT_RETURN_IF_ERROR(copy(-1, static_cast<size_t>(piece.part_offset), static_cast<size_t>(piece.count),
                                const_cast<float *>(piece.values), true));
  return Status::Ok();
}

Status StateStore::copy(int state, size_t offset, size_t count, float *data, bool write) {
  if (nvme_) return nvme_->range(state, offset, count, data, write);
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
