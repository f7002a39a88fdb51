// defines: FrozenParams -- the working copies of frozen tensors, whole or sharded per tensor.
#include "engine/frozen_params.h"

#include <algorithm>

#include "util/half.h"

namespace dsrt {

void FrozenParams::add(std::string name, std::vector<int64_t> shape, int64_t numel, std::vector<float> init) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.numel = numel;
  t.init = std::move(init);
  tensors_.push_back(std::move(t));
}

int64_t FrozenParams::shard_elems(size_t i) const {
  return sharded_ ? ceil_div(tensors_[i].numel, comm_->size()) : tensors_[i].numel;
}

ElemRange FrozenParams::owned(size_t i) const {
  if (!sharded_) return {0, tensors_[i].numel};
  const int64_t s = shard_elems(i);
  const int64_t n = tensors_[i].numel;
  ElemRange r = intersect({comm_->rank() * s, (comm_->rank() + 1) * s}, {0, n});
  if (r.begin > n) r.begin = r.end = n;  // a high rank of a small tensor holds nothing
  return r;
}

Status FrozenParams::build(Comm *comm, Device *device, dsrt_dtype dtype, int stage) {
  comm_ = comm;
  device_ = device;
  dtype_ = dtype;
  sharded_ = stage == 3 && comm->size() > 1;
  const size_t wsize = dtype_size(dtype);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor &t = tensors_[i];
    DSRT_RETURN_IF_ERROR(device_->allocate(static_cast<size_t>(shard_elems(i)) * wsize, &t.resident, true)
                             .with_context(Format("build: the working copy of frozen tensor '%s'", t.name.c_str())));
    if (!t.init.empty()) {
      const ElemRange mine = owned(i);
      DSRT_RETURN_IF_ERROR(write_range(t.resident, 0, t.init.data() + mine.begin, mine.size())
                               .with_context(Format("build: frozen tensor '%s'", t.name.c_str())));
    }
    std::vector<float>().swap(t.init);
  }
  return Status::Ok();
}

Status FrozenParams::write_range(DeviceBuffer &buffer, int64_t at, const float *src, int64_t count) {
  if (count <= 0) return Status::Ok();
  const size_t wsize = dtype_size(dtype_);
  std::vector<uint8_t> host(static_cast<size_t>(count) * wsize);
  for (int64_t k = 0; k < count; ++k) from_float(host.data(), dtype_, static_cast<size_t>(k), src[k]);
  DSRT_RETURN_IF_ERROR(device_->copy(buffer.as<char>() + at * static_cast<int64_t>(wsize), host.data(), host.size(), nullptr));
  return device_->synchronize(nullptr);
}

Status FrozenParams::gather(size_t i, void *dst, bool quantized) {
  Tensor &t = tensors_[i];
  if (quantized) {
    QuantizedAllGather q;
    CommHandle handle;
    const char *what = "gathering frozen tensor '%s' (zero_quantized_nontrainable_weights)";
    DSRT_RETURN_IF_ERROR(q.start(comm_, device_, nullptr, t.resident.data(), static_cast<size_t>(shard_elems(i)), dtype_, &handle)
                             .with_context(Format(what, t.name.c_str())));
    DSRT_RETURN_IF_ERROR(handle->wait().with_context(Format(what, t.name.c_str())));
    return q.finish(dst).with_context(Format(what, t.name.c_str()));
  }
  return comm_->all_gather_sync(t.resident.data(), dst, static_cast<size_t>(shard_elems(i)), dtype_)
      .with_context(Format("gathering frozen tensor '%s'", t.name.c_str()));
}

Status FrozenParams::acquire(size_t i, void **data) {
  Tensor &t = tensors_[i];
  if (!sharded_) {
    ++t.acquired;
    *data = t.resident.data();
    return Status::Ok();
  }
  if (t.gathered.empty()) {
    const size_t bytes = static_cast<size_t>(shard_elems(i) * comm_->size()) * dtype_size(dtype_);
    DeviceBuffer buffer;
    DSRT_RETURN_IF_ERROR(device_->allocate(bytes, &buffer, false)
                             .with_context(Format("allocating the gathered copy of frozen tensor '%s'", t.name.c_str())));
    DSRT_RETURN_IF_ERROR(gather(i, buffer.data(), quantized_));
    t.gathered = std::move(buffer);
  }
  ++t.acquired;
  *data = t.gathered.data();
  return Status::Ok();
}

Status FrozenParams::release(size_t i) {
  Tensor &t = tensors_[i];
  if (t.acquired == 0)
    return Error(DSRT_ERR_STATE, "release('%s'): the tensor is not acquired; pair each release with an acquire",
                 t.name.c_str());
  if (--t.acquired == 0) t.gathered.reset();
  return Status::Ok();
}

Status FrozenParams::read_working(size_t i, std::vector<uint8_t> *out) {
  Tensor &t = tensors_[i];
  const size_t wsize = dtype_size(dtype_);
  const size_t bytes = static_cast<size_t>(t.numel) * wsize;
  if (!sharded_) {
    out->resize(bytes);
    DSRT_RETURN_IF_ERROR(device_->copy(out->data(), t.resident.data(), bytes, nullptr));
    return device_->synchronize(nullptr);
  }
  // Gathered through a device buffer (the communicator may need device memory), then copied out.
  DeviceBuffer buffer;
  DSRT_RETURN_IF_ERROR(device_->allocate(static_cast<size_t>(shard_elems(i) * comm_->size()) * wsize, &buffer, false)
                           .with_context(Format("reading frozen tensor '%s'", t.name.c_str())));
  DSRT_RETURN_IF_ERROR(gather(i, buffer.data()));
  out->resize(bytes);
  DSRT_RETURN_IF_ERROR(device_->copy(out->data(), buffer.data(), bytes, nullptr));
  return device_->synchronize(nullptr);
}

Status FrozenParams::read_fp32(size_t i, float *out) {
  std::vector<uint8_t> bytes;
  DSRT_RETURN_IF_ERROR(read_working(i, &bytes));
  for (int64_t k = 0; k < tensors_[i].numel; ++k) out[k] = to_float(bytes.data(), dtype_, static_cast<size_t>(k));
  return Status::Ok();
}

Status FrozenParams::write_owned_fp32(size_t i, const float *owned_values) {
  Tensor &t = tensors_[i];
  const ElemRange mine = owned(i);
  DSRT_RETURN_IF_ERROR(write_range(t.resident, 0, owned_values, mine.size()));
  if (!t.gathered.empty()) DSRT_RETURN_IF_ERROR(gather(i, t.gathered.data(), quantized_));  // collective, as acquire
  return Status::Ok();
}

Status FrozenParams::write_fp32(size_t i, const float *src) {
  Tensor &t = tensors_[i];
  const ElemRange mine = owned(i);
  DSRT_RETURN_IF_ERROR(write_range(t.resident, 0, src + mine.begin, mine.size()));
  if (!t.gathered.empty()) DSRT_RETURN_IF_ERROR(write_range(t.gathered, 0, src, t.numel));
  return Status::Ok();
}

uint64_t FrozenParams::resident_bytes() const {
  uint64_t total = 0;
  for (const Tensor &t : tensors_) total += t.resident.bytes();
  return total;
}

uint64_t FrozenParams::gathered_bytes() const {
  uint64_t total = 0;
  for (const Tensor &t : tensors_) total += t.gathered.bytes();
  return total;
}

}  // namespace dsrt
