// defines: the engine's parameter offload at stage 3 (ZeRO-Infinity's offload_param), both devices:
// the shards of the non-persistent tensors live in the StateStore's ParamShards
// (offload/param_shards.h: host memory within offload_param.max_in_cpu, else NVMe; every shard in
// host memory under "cpu"); this file builds their layout from the registry and the coordinator,
// and moves the working shards in and out around a step or refresh.
// Frozen tensors (the coordinator's entries after the trainable ones) are laid out the same way,
// after the trainable tensors: their shards move there once at build and are read back on gather
// like the trainable ones; ParamShards is also their FrozenShardStore (checkpoint save/load,
// write_fp32). The step never rewrites them. Persistent tensors stay gathered in device memory.
// The device working shard buffer (working_) exists only while a step or refresh rewrites the
// shards; close stores them (host memory through Device::copy, NVMe with several swap-outs in
// flight) and frees it, or keeps it when a write fails so nothing is lost.
// "cpu" on the CPU device, where host memory is the device's memory: the kept shards are laid out
// as the working shards (trainable tensor t at shard_offset(t), persistent tensors' slots
// included), and working_ is a view of them while a step or refresh rewrites them, so nothing is
// allocated, zeroed or copied back per step (the optimizer writes the kept shards in place). With
// fp32 working shards and fp32 masters in memory that layout is the masters' (this rank's
// partition, part_offset for part_offset), so the kept shards are the masters themselves: the
// optimizer's pass skips the working copy (4 of its 32 bytes per parameter; DeepSpeed copies its
// fp32 partition into the parameters' shards after the step) and no second array is kept.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

uint64_t Engine::param_nvme_shard_bytes() const {
  return store_.param_shards() ? store_.param_shards()->nvme_bytes() : 0;
}

uint64_t Engine::param_nvme_resident_bytes() const {
  return store_.param_shards() ? store_.param_shards()->kept_bytes() : 0;
}

Status Engine::param_offload_build() {
  const size_t wsize = dtype_size(working_dtype());
  const OffloadConfig &offload = config_.zero.offload_param;
  const bool nvme = offload.device == OffloadDevice::Nvme;
  // Entries: the trainable tensors, then the frozen ones (the coordinator's order).
  const size_t entries = coordinator_->num_entries();
  const size_t trainable = tensors_.size();
  ParamShardsOptions options;
  for (size_t t = 0; t < entries; ++t) {
    ParamShardEntry entry;
    entry.name = t < trainable ? tensors_[t].name : frozen_.tensor(t - trainable).name;
    entry.numel = t < trainable ? tensors_[t].numel : frozen_.tensor(t - trainable).numel;
    entry.persistent = coordinator_->persistent(t);
    if (!entry.persistent)
      entry.shard_elems = t < trainable ? part_.shard_layout().shard_size(t) : frozen_.shard_elems(t - trainable);
    if (t < trainable) entry.working_offset = part_.shard_layout().shard_offset(t) * static_cast<int64_t>(wsize);
    options.entries.push_back(std::move(entry));
  }
  options.trainable = trainable;
  options.working_elem_bytes = wsize;
  options.offload = offload;
  options.part_size = part_size();
  // In place (the header): the trainable shards at their working offsets, the frozen ones after.
  options.in_place = kept_in_place();
  if (options.in_place)
    options.in_place_bytes = (static_cast<uint64_t>(part_.resident_working_elems()) * wsize + 63) / 64 * 64;
  if (working_shards_are_masters()) {
    options.in_place_memory = store_.buffer(-1).data();
    options.in_place_bytes = static_cast<uint64_t>(part_.resident_working_elems()) * wsize;
  }
  options.swapper.aio = config_.aio;
  options.swapper.allocator = swap_buffer_allocator();
  options.swapper.rank = rank();
  DSRT_RETURN_IF_ERROR(store_.create_param_shards(options));
  ParamShards &shards = *store_.param_shards();
  coordinator_->set_shard_source(working_.data(), &shards);
  // Write every shard to its place (host memory or NVMe) and free the device working shards.
  DSRT_RETURN_IF_ERROR(param_nvme_close().with_context("build: storing the initial parameter shards"));
  // The frozen shards move once; persistent ones stay on the device (gathered on every rank).
  for (size_t i = 0; i < frozen_.size(); ++i)
    if (!coordinator_->persistent(trainable + i))
      DSRT_RETURN_IF_ERROR(frozen_.move_to_store(i, &shards).with_context("build"));
  if (!nvme) {
    logf(DSRT_LOG_INFO, "parameter offload to host memory: %llu bytes of shards in pinned host memory",
         static_cast<unsigned long long>(param_nvme_resident_bytes()));
    return Status::Ok();
  }
  NvmeSwapper &swapper = *shards.swapper();
  logf(DSRT_LOG_INFO,
       "NVMe parameter offload: %llu bytes of shards on NVMe, %llu kept in host memory (max_in_cpu %lld elements), "
       "%zu buffers of %zu bytes in '%s'",
       static_cast<unsigned long long>(param_nvme_shard_bytes()),
       static_cast<unsigned long long>(param_nvme_resident_bytes()), static_cast<long long>(offload.max_in_cpu),
       swapper.pool().buffer_count(), swapper.pool().buffer_size(), swapper.store().folder().c_str());
  return Status::Ok();
}

bool Engine::kept_in_place() const {
  return config_.zero.offload_param.device == OffloadDevice::Cpu && device_->type() == DSRT_DEVICE_CPU;
}

bool Engine::working_shards_are_masters() const {
  // The 1-bit optimizers keep their own working-copy writes; a split or NVMe store has no whole
  // in-memory master array.
  return kept_in_place() && working_dtype() == DSRT_F32 && store_.master_dtype() == DSRT_F32 &&
         store_.nvme() == nullptr && store_.split() == 0 && !onebit_type() && store_.buffer(-1).data() != nullptr &&
         store_.buffer(-1).bytes() >= static_cast<size_t>(part_.resident_working_elems()) * sizeof(float);
}

Status Engine::param_nvme_open() {
  if (!store_.param_shards() || !working_.empty()) return Status::Ok();
  const size_t working_bytes = static_cast<size_t>(part_.resident_working_elems()) * dtype_size(working_dtype());
  coordinator_->drop_reads();
  if (kept_in_place()) {
    // A view (no release): the step writes the kept shards themselves.
    working_ = DeviceBuffer(store_.param_shards()->in_place_data(), working_bytes, nullptr);
    coordinator_->set_shard_source(working_.data(), store_.param_shards());
    return Status::Ok();
  }
  DSRT_RETURN_IF_ERROR(device_->allocate(working_bytes, &working_).with_context("allocating the working shards"));
  coordinator_->set_shard_source(working_.data(), store_.param_shards());
  return Status::Ok();
}

Status Engine::param_nvme_close() {
  if (!store_.param_shards() || working_.empty()) return Status::Ok();
  // The shards were written by the backend (on its stream) and read by the gathers: both done.
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  // Into host memory, and onto NVMe: a failed swap-out keeps working_ (every new value) below.
  const Status stored = store_.param_shards()->store_working(working_.data());
  if (!stored.ok())
    return stored.with_context(
        "the updated shards stay in host memory (the step is applied); the next step, or a call that rewrites the "
        "shards, writes them to NVMe again");
  return release_working_shards();
}

Status Engine::release_working_shards() {
  working_.reset();
  coordinator_->set_shard_source(nullptr, store_.param_shards());
  coordinator_->read_ahead();  // the first shards of the next micro-step (NVMe)
  return Status::Ok();
}

Status Engine::read_working_shard(size_t t, void *dst) {
  if (part_.flat()) return Error(DSRT_ERR_STATE, "read_working_shard: only at ZeRO stage 3");
  const size_t wsize = dtype_size(working_dtype());
  const size_t bytes = static_cast<size_t>(part_.shard_layout().shard_size(t)) * wsize;
  if (!working_.empty()) {
    DSRT_RETURN_IF_ERROR(device_->copy(dst, static_cast<const char *>(working_.data()) +
                                                part_.shard_layout().shard_offset(t) * static_cast<int64_t>(wsize),
                                       bytes, nullptr));
    return device_->synchronize(nullptr);
  }
  ParamShards *source = store_.param_shards();
  if (!source) return Error(DSRT_ERR_STATE, "read_working_shard: no working shards");
  if (const void *kept = source->resident(t)) {
    std::memcpy(dst, kept, bytes);  // host to host: the kept shards are pinned host memory on every device
    return Status::Ok();
  }
  if (!source->has_shard(t)) {
    // Persistent: gathered on every rank; the all-gather put rank r's shard at r * shard_size.
    const char *gathered = static_cast<const char *>(coordinator_->gathered_data(t));
    if (gathered == nullptr)
      return Error(DSRT_ERR_STATE, "read_working_shard: '%s' is persistent but not gathered", tensors_[t].name.c_str());
    DSRT_RETURN_IF_ERROR(device_->copy(dst, gathered + static_cast<size_t>(part_rank()) * bytes, bytes, nullptr));
    return device_->synchronize(nullptr);
  }
  if (!source->swapper()) return Error(DSRT_ERR_STATE, "read_working_shard: the shard of '%s' is nowhere", tensors_[t].name.c_str());
  coordinator_->drop_reads();  // frees the read buffers
  return source->read_shard(t, dst);
}

Status Engine::param_nvme_write_shard(size_t t, const float *full) {
  if (coordinator_->persistent(t)) return Status::Ok();  // its gathered copy is overwritten instead
  coordinator_->drop_reads();  // a read ahead of t would be stale; and the buffers are needed here
  const OwnedSegment mine = part_.owned_piece(t, part_rank());
  if (mine.count <= 0) return Status::Ok();
  const int64_t at = mine.part_offset - part_.shard_layout().shard_offset(t);
  return store_.param_shards()->write_owned(t, at, full + mine.tensor_begin, static_cast<size_t>(mine.count),
                                            working_dtype());
}

}  // namespace dsrt
