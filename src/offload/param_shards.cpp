// defines: ParamShards -- the parameter offload's shards (offload_param "cpu" / "nvme"): their
// layout (host memory within max_in_cpu, else NVMe), the coordinator's reads, and storing,
// reading and rewriting them.
#include "offload/param_shards.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

#include "offload/state_store.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

Status ParamShards::create(const ParamShardsOptions &options, Device *device, std::unique_ptr<ParamShards> *out) {
  const OffloadConfig &offload = options.offload;
  const bool nvme = offload.device == OffloadDevice::Nvme;
  // "cpu" keeps every shard in host memory: max_in_cpu does not apply (DeepSpeed reads it for NVMe).
  const int64_t max_in_cpu = nvme ? offload.max_in_cpu : std::numeric_limits<int64_t>::max();
  const size_t entries = options.entries.size();
  std::unique_ptr<ParamShards> source(new ParamShards(device, options));
  std::vector<Shard> &layout = source->shards_;
  layout.resize(entries);
  int64_t largest = 0;
  int64_t in_cpu = 0;  // elements kept in host memory so far (this rank's shards)
  uint64_t kept_bytes = 0;
  // In place (the header): the trainable shards at their working offsets, the frozen ones after.
  if (options.in_place && options.in_place_memory == nullptr) kept_bytes = options.in_place_bytes;
  for (size_t t = 0; t < entries; ++t) {
    const ParamShardEntry &entry = options.entries[t];
    if (entry.persistent) continue;
    const int64_t shard = entry.shard_elems;
    Shard &s = layout[t];
    s.array = t < options.trainable ? "p" + std::to_string(t) : "f" + std::to_string(t - options.trainable);
    s.bytes = static_cast<size_t>(shard) * options.working_elem_bytes;
    if (options.in_place && t < options.trainable) {
      s.kept_offset = entry.working_offset;
      s.in_caller_memory = options.in_place_memory != nullptr;
      continue;
    }
    // DeepSpeed's max_in_cpu: shards stay in host memory while their running total fits; from the
    // first one that does not fit on, every shard is on NVMe.
    if (in_cpu >= 0 && shard <= max_in_cpu - in_cpu) {
      in_cpu += shard;
      s.kept_offset = static_cast<int64_t>(kept_bytes);
      kept_bytes += (s.bytes + 63) / 64 * 64;
      continue;
    }
    if (shard > offload.buffer_size)
      return Error(DSRT_ERR_CONFIG,
                   "build: tensor '%s' (%lld elements) has a shard of %lld elements on each of %d rank(s), larger "
                   "than zero_optimization.offload_param.buffer_size (%lld elements); raise buffer_size to at least "
                   "%lld, or raise stage3_param_persistence_threshold to at least %lld to keep the tensor in memory",
                   entry.name.c_str(), static_cast<long long>(entry.numel), static_cast<long long>(shard),
                   options.part_size, static_cast<long long>(offload.buffer_size), static_cast<long long>(shard),
                   static_cast<long long>(entry.numel));
    in_cpu = -1;
    largest = std::max(largest, shard);
  }
  if (nvme) {
    // Buffers hold one shard each: sized to the largest shard on NVMe rather than buffer_size, so
    // that a large default buffer_size does not pin buffer_count * buffer_size bytes for a small model.
    const uint64_t shard_bytes = static_cast<uint64_t>(largest) * options.working_elem_bytes;
    NvmeSwapperOptions swapper = options.swapper;
    swapper.offload = offload;
    swapper.config_key = "zero_optimization.offload_param";
    swapper.buffer_bytes = std::max<uint64_t>(4096, (shard_bytes + 4095) / 4096 * 4096);
    DSRT_RETURN_IF_ERROR(NvmeSwapper::create(swapper, &source->swapper_).with_context("build: NVMe parameter offload"));
  }
  if (kept_bytes > 0)
    DSRT_RETURN_IF_ERROR(allocate_offloaded(*device, kept_bytes, offload.pin_memory, &source->kept_)
                             .with_context(nvme ? "build: the parameter shards kept in host memory (offload_param.max_in_cpu)"
                                                : "build: the parameter shards in host memory (offload_param.device \"cpu\")"));
  *out = std::move(source);
  return Status::Ok();
}

ParamShards::~ParamShards() {
  for (auto &entry : reads_) (void)swapper_->store().wait(entry.second.ticket);
}

uint64_t ParamShards::nvme_bytes() const {
  uint64_t bytes = 0;
  for (const Shard &s : shards_)
    if (s.kept_offset < 0) bytes += s.bytes;
  return bytes;
}

const void *ParamShards::resident(size_t t) const {
  const Shard &s = shards_[t];
  if (s.kept_offset < 0) return nullptr;
  return static_cast<const char *>(s.in_caller_memory ? options_.in_place_memory : kept_.data()) + s.kept_offset;
}

Status ParamShards::read_frozen_shard(size_t i, void *host_dst) {
  const size_t t = options_.trainable + i;
  const Shard &s = shards_[t];
  if (const void *at = resident(t)) {
    std::memcpy(host_dst, at, s.bytes);  // pinned host memory on every device
    return Status::Ok();
  }
  if (swapper_ == nullptr || s.array.empty())
    return Error(DSRT_ERR_STATE, "the shard of frozen tensor %zu is neither in host memory nor on NVMe", i);
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
  DSRT_RETURN_IF_ERROR(swapper_->store().read(s.array, lease.data(), s.bytes));
  std::memcpy(host_dst, lease.data(), s.bytes);
  return Status::Ok();
}

Status ParamShards::write_frozen_shard(size_t i, const void *host_src) {
  const size_t t = options_.trainable + i;
  const Shard &s = shards_[t];
  if (void *at = kept_shard(t)) {
    std::memcpy(at, host_src, s.bytes);
    return Status::Ok();
  }
  if (swapper_ == nullptr || s.array.empty())
    return Error(DSRT_ERR_STATE, "the shard of frozen tensor %zu is neither in host memory nor on NVMe", i);
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
  std::memcpy(lease.data(), host_src, s.bytes);
  return swapper_->store().write(s.array, lease.data(), s.bytes);
}

size_t ParamShards::free_buffers() const {
  if (swapper_ == nullptr) return 0;
  const PinnedPool &pool = swapper_->pool();
  return pool.buffer_count() - pool.in_use();
}

Status ParamShards::start_read(size_t t, bool *started) {
  *started = false;
  if (swapper_ == nullptr)
    return Error(DSRT_ERR_STATE, "the shard of tensor %zu is not kept in host memory and there is no swap store", t);
  if (free_buffers() == 0) return Status::Ok();
  InFlight read;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&read.lease));
  DSRT_RETURN_IF_ERROR(swapper_->store().swap_in(shards_[t].array, read.lease.data(), shards_[t].bytes, &read.ticket));
  reads_.emplace(t, std::move(read));
  *started = true;
  return Status::Ok();
}

Status ParamShards::finish_read(size_t t, void *dst) {
  auto it = reads_.find(t);
  if (it == reads_.end()) return Error(DSRT_ERR_STATE, "no read of shard %zu was started", t);
  InFlight read = std::move(it->second);
  reads_.erase(it);
  DSRT_RETURN_IF_ERROR(swapper_->store().wait(read.ticket));
  DSRT_RETURN_IF_ERROR(device_->copy(dst, read.lease.data(), shards_[t].bytes, nullptr));
  return device_->synchronize(nullptr);
}

void ParamShards::cancel_read(size_t t) {
  auto it = reads_.find(t);
  if (it == reads_.end()) return;
  (void)swapper_->store().wait(it->second.ticket);  // the file is unchanged by a read
  reads_.erase(it);
}

Status ParamShards::store_working(const void *working_shards) {
  const char *working = static_cast<const char *>(working_shards);
  auto shard_of = [&](size_t t) { return working + options_.entries[t].working_offset; };
  for (size_t t = 0; t < options_.trainable; ++t) {
    void *kept = kept_shard(t);
    if (kept != nullptr && kept != shard_of(t))  // equal: the working shards are the view of the kept ones
      DSRT_RETURN_IF_ERROR(device_->copy(kept, shard_of(t), shards_[t].bytes, nullptr));
  }
  DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
  if (!swapper_) return Status::Ok();

  // The shards on NVMe: one swap-out per pool buffer in flight.
  SwapStore &store = swapper_->store();
  PinnedPool &pool = swapper_->pool();
  struct Out {
    size_t t;
    PinnedLease lease;
    SwapTicket ticket;
  };
  std::deque<Out> in_flight;
  Status failure;
  auto retire = [&]() {
    Out out = std::move(in_flight.front());
    in_flight.pop_front();
    Status status = store.wait(out.ticket);
    if (!status.ok() && failure.ok())
      failure = status.with_context(Format("writing the shard of '%s' to NVMe", options_.entries[out.t].name.c_str()));
  };
  for (size_t t = 0; t < options_.trainable && failure.ok(); ++t) {
    const Shard &s = shards_[t];
    if (s.array.empty() || s.kept_offset >= 0) continue;
    if (!in_flight.empty() && (in_flight.size() >= pool.buffer_count() || pool.in_use() == pool.buffer_count()))
      retire();
    Out out;
    out.t = t;
    Status status = pool.acquire(&out.lease);
    if (status.ok()) status = device_->copy(out.lease.data(), shard_of(t), s.bytes, nullptr);
    if (status.ok()) status = device_->synchronize(nullptr);
    if (status.ok()) status = store.swap_out(s.array, out.lease.data(), s.bytes, &out.ticket);
    if (!status.ok()) {
      failure = status.with_context(Format("writing the shard of '%s' to NVMe", options_.entries[t].name.c_str()));
      break;
    }
    in_flight.push_back(std::move(out));
  }
  while (!in_flight.empty()) retire();
  return failure;
}

Status ParamShards::read_shard(size_t t, void *dst) {
  const size_t bytes = shards_[t].bytes;
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
  DSRT_RETURN_IF_ERROR(swapper_->store()
                           .read(shards_[t].array, lease.data(), bytes)
                           .with_context(Format("reading the shard of '%s' from NVMe", options_.entries[t].name.c_str())));
  std::memcpy(dst, lease.data(), bytes);
  return Status::Ok();
}

Status ParamShards::write_owned(size_t t, int64_t at, const float *src, size_t count, dsrt_dtype working_dtype) {
  const int64_t wsize = static_cast<int64_t>(dtype_size(working_dtype));
  if (void *kept = kept_shard(t)) {
    cpu_convert(src, DSRT_F32, static_cast<char *>(kept) + at * wsize, working_dtype, count);
    return Status::Ok();
  }
  const size_t bytes = shards_[t].bytes;
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
  SwapStore &store = swapper_->store();
  DSRT_RETURN_IF_ERROR(store.read(shards_[t].array, lease.data(), bytes));
  cpu_convert(src, DSRT_F32, static_cast<char *>(lease.data()) + at * wsize, working_dtype, count);
  return store.write(shards_[t].array, lease.data(), bytes);
}

}  // namespace dsrt
