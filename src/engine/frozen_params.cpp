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
  sharded_ = stage == 3;
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

Status FrozenParams::write_shard(size_t i, const float *src, int64_t count) {
  Tensor &t = tensors_[i];
  if (t.store == nullptr) return write_range(t.resident, 0, src, count);
  if (count <= 0) return Status::Ok();
  // Offloaded: read the shard, convert the values into it, write it back (the padding is kept).
  if (coordinator_ != nullptr) coordinator_->drop_reads();  // frees the read buffers; no stale read ahead
  const size_t wsize = dtype_size(dtype_);
  std::vector<uint8_t> host(static_cast<size_t>(shard_elems(i)) * wsize);
  DSRT_RETURN_IF_ERROR(t.store->read_frozen_shard(i, host.data()));
  for (int64_t k = 0; k < count; ++k) from_float(host.data(), dtype_, static_cast<size_t>(k), src[k]);
  return t.store->write_frozen_shard(i, host.data());
}

void FrozenParams::attach(ParamCoordinator *coordinator, size_t base) {
  coordinator_ = coordinator;
  base_ = base;
}

std::vector<FrozenEntry> FrozenParams::entries() const {
  std::vector<FrozenEntry> out;
  for (size_t i = 0; i < tensors_.size(); ++i)
    out.push_back({tensors_[i].name, tensors_[i].numel, shard_elems(i), tensors_[i].resident.data()});
  return out;
}

Status FrozenParams::move_to_store(size_t i, FrozenShardStore *store) {
  Tensor &t = tensors_[i];
  if (t.store != nullptr) return Error(DSRT_ERR_STATE, "frozen tensor '%s' is offloaded already", t.name.c_str());
  std::vector<uint8_t> host(t.resident.bytes());
  DSRT_RETURN_IF_ERROR(device_->copy(host.data(), t.resident.data(), host.size(), nullptr));
  DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
  DSRT_RETURN_IF_ERROR(store->write_frozen_shard(i, host.data())
                           .with_context(Format("offloading the shard of frozen tensor '%s'", t.name.c_str())));
  t.store = store;
  if (coordinator_ != nullptr) coordinator_->set_frozen_shard(base_ + i, nullptr);
  t.resident.reset();
  return Status::Ok();
}

Status FrozenParams::gather(size_t i, void *dst) {
  Tensor &t = tensors_[i];
  if (t.store == nullptr)
    return comm_->all_gather_sync(t.resident.data(), dst, static_cast<size_t>(shard_elems(i)), dtype_)
        .with_context(Format("gathering frozen tensor '%s'", t.name.c_str()));
  // Offloaded: the shard comes up from the store into a device staging buffer first.
  if (coordinator_ != nullptr) coordinator_->drop_reads();
  const size_t bytes = static_cast<size_t>(shard_elems(i)) * dtype_size(dtype_);
  std::vector<uint8_t> host(bytes);
  DSRT_RETURN_IF_ERROR(t.store->read_frozen_shard(i, host.data())
                           .with_context(Format("reading the shard of frozen tensor '%s'", t.name.c_str())));
  DeviceBuffer staged;
  DSRT_RETURN_IF_ERROR(device_->allocate(bytes, &staged, false));
  DSRT_RETURN_IF_ERROR(device_->copy(staged.data(), host.data(), bytes, nullptr));
  DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
  return comm_->all_gather_sync(staged.data(), dst, static_cast<size_t>(shard_elems(i)), dtype_)
      .with_context(Format("gathering frozen tensor '%s'", t.name.c_str()));
}

Status FrozenParams::acquire(size_t i, void **data) {
  Tensor &t = tensors_[i];
  if (coordinator_ != nullptr) {
    DSRT_RETURN_IF_ERROR(coordinator_->acquire(base_ + i, data));
    ++t.acquired;
    return Status::Ok();
  }
  ++t.acquired;
  *data = t.resident.data();
  return Status::Ok();
}

Status FrozenParams::release(size_t i) {
  Tensor &t = tensors_[i];
  if (t.acquired == 0)
    return Error(DSRT_ERR_STATE, "release('%s'): the tensor is not acquired; pair each release with an acquire",
                 t.name.c_str());
  --t.acquired;
  if (coordinator_ != nullptr) return coordinator_->release(base_ + i);
  return Status::Ok();
}

Status FrozenParams::read_working(size_t i, std::vector<uint8_t> *out) {
  Tensor &t = tensors_[i];
  const size_t wsize = dtype_size(dtype_);
  const size_t bytes = static_cast<size_t>(t.numel) * wsize;
  if (!sharded_ && t.store == nullptr) {
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
  const ElemRange mine = owned(i);
  DSRT_RETURN_IF_ERROR(write_shard(i, owned_values, mine.size()));
  // A live gathered copy is gathered again (collective, as acquire).
  if (coordinator_ != nullptr) return coordinator_->regather(base_ + i);
  return Status::Ok();
}

Status FrozenParams::write_fp32(size_t i, const float *src) {
  const ElemRange mine = owned(i);
  DSRT_RETURN_IF_ERROR(write_shard(i, src + mine.begin, mine.size()));
  if (coordinator_ != nullptr) return coordinator_->overwrite(base_ + i, src);
  return Status::Ok();
}

uint64_t FrozenParams::resident_bytes() const {
  uint64_t total = 0;
  for (const Tensor &t : tensors_) total += t.resident.bytes();
  return total;
}

}  // namespace dsrt
