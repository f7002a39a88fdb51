// defines: the engine's parameter offload at stage 3 (ZeRO-Infinity's offload_param), both devices:
//   "nvme": the 16-bit shard of every tensor above stage3_param_persistence_threshold lives either
//           in host memory -- the first such tensors in registration order while their shards add
//           up to at most offload_param.max_in_cpu elements (DeepSpeed's "parameter elements to
//           maintain in CPU memory") -- or in its own SwapStore array;
//   "cpu":  every such shard lives in pinned host memory (the same machinery with no swap store).
// Frozen tensors (the coordinator's entries after the trainable ones) are laid out the same way,
// after the trainable tensors (arrays "f<i>"): their shards move there once at build and are read
// back on gather like the trainable ones; ParamShards is also their FrozenShardStore (checkpoint
// save/load, write_fp32). The step never rewrites them.
// ParamShards is the coordinator's ShardSource: it hands over the shards kept in host memory
// (resident(): the coordinator sends them directly on the CPU device and copies them into a staging
// buffer on a GPU, whose collectives need device pointers), and starts swap-ins into pool buffers
// that the aio engine fills in the background. Persistent tensors stay gathered in device memory.
// The device working shard buffer (working_) exists only while a step or refresh rewrites the
// shards; close copies them out (host memory through Device::copy, NVMe with several swap-outs in
// flight) and frees it, or keeps it when a write fails so nothing is lost.
// "cpu" on the CPU device, where host memory is the device's memory: the kept shards are laid out
// as the working shards (trainable tensor t at shard_offset(t), persistent tensors' slots
// included), and working_ is a view of them while a step or refresh rewrites them, so nothing is
// allocated, zeroed or copied back per step (the optimizer writes the kept shards in place).
#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>

#include "engine/engine.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

class ParamShards final : public ShardSource, public FrozenShardStore {
 public:
  struct Shard {
    std::string array;           // SwapStore name ("p<t>"); empty for persistent tensors
    size_t bytes = 0;            // shard bytes (working dtype)
    int64_t kept_offset = -1;    // byte offset in kept; -1: on NVMe
  };

  // swapper null: offload_param "cpu" (every shard kept in host memory; nothing is ever read).
  ParamShards(NvmeSwapper *swapper, Device *device) : swapper_(swapper), device_(device) {}
  ~ParamShards() override {
    for (auto &entry : reads_) (void)swapper_->store().wait(entry.second.ticket);
  }

  std::vector<Shard> shards;  // per coordinator entry: the trainable tensors, then the frozen ones
  DeviceBuffer kept;          // the shards kept in host memory (max_in_cpu)
  size_t frozen_base = 0;     // entry of frozen tensor 0

  Status read_frozen_shard(size_t i, void *host_dst) override {
    const Shard &s = shards[frozen_base + i];
    if (const void *at = resident(frozen_base + i)) {
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

  Status write_frozen_shard(size_t i, const void *host_src) override {
    const Shard &s = shards[frozen_base + i];
    if (void *at = kept_shard(frozen_base + i)) {
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

  const void *resident(size_t t) const override {
    const int64_t at = shards[t].kept_offset;
    return at < 0 ? nullptr : static_cast<const char *>(kept.data()) + at;
  }
  void *kept_shard(size_t t) { return const_cast<void *>(resident(t)); }

  size_t free_buffers() const override {
    if (swapper_ == nullptr) return 0;
    const PinnedPool &pool = swapper_->pool();
    return pool.buffer_count() - pool.in_use();
  }

  Status start_read(size_t t, bool *started) override {
    *started = false;
    if (swapper_ == nullptr)
      return Error(DSRT_ERR_STATE, "the shard of tensor %zu is not kept in host memory and there is no swap store", t);
    if (free_buffers() == 0) return Status::Ok();
    InFlight read;
    DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&read.lease));
    DSRT_RETURN_IF_ERROR(swapper_->store().swap_in(shards[t].array, read.lease.data(), shards[t].bytes, &read.ticket));
    reads_.emplace(t, std::move(read));
    *started = true;
    return Status::Ok();
  }

  Status finish_read(size_t t, void *dst) override {
    auto it = reads_.find(t);
    if (it == reads_.end()) return Error(DSRT_ERR_STATE, "no read of shard %zu was started", t);
    InFlight read = std::move(it->second);
    reads_.erase(it);
    DSRT_RETURN_IF_ERROR(swapper_->store().wait(read.ticket));
    DSRT_RETURN_IF_ERROR(device_->copy(dst, read.lease.data(), shards[t].bytes, nullptr));
    return device_->synchronize(nullptr);
  }

  void cancel_read(size_t t) override {
    auto it = reads_.find(t);
    if (it == reads_.end()) return;
    (void)swapper_->store().wait(it->second.ticket);  // the file is unchanged by a read
    reads_.erase(it);
  }

 private:
  struct InFlight {
    PinnedLease lease;
    SwapTicket ticket;
  };
  NvmeSwapper *swapper_;
  Device *device_;
  std::map<size_t, InFlight> reads_;
};

ParamShards &param_shards(const std::unique_ptr<ShardSource> &source) { return static_cast<ParamShards &>(*source); }

}  // namespace

uint64_t Engine::param_nvme_shard_bytes() const {
  if (!param_source_) return 0;
  uint64_t bytes = 0;
  for (const ParamShards::Shard &s : param_shards(param_source_).shards)
    if (s.kept_offset < 0) bytes += s.bytes;
  return bytes;
}

uint64_t Engine::param_nvme_resident_bytes() const {
  return param_source_ ? param_shards(param_source_).kept.bytes() : 0;
}

Status Engine::param_offload_build() {
  const size_t wsize = dtype_size(working_dtype());
  const OffloadConfig &offload = config_.zero.offload_param;
  const bool nvme = offload.device == OffloadDevice::Nvme;
  // "cpu" keeps every shard in host memory: max_in_cpu does not apply (DeepSpeed reads it for NVMe).
  const int64_t max_in_cpu = nvme ? offload.max_in_cpu : std::numeric_limits<int64_t>::max();
  // Entries: the trainable tensors, then the frozen ones (the coordinator's order).
  const size_t entries = coordinator_->num_entries();
  const size_t trainable = tensors_.size();
  auto entry_name = [&](size_t t) { return t < trainable ? tensors_[t].name : frozen_.tensor(t - trainable).name; };
  auto entry_numel = [&](size_t t) { return t < trainable ? tensors_[t].numel : frozen_.tensor(t - trainable).numel; };
  std::vector<ParamShards::Shard> layout(entries);
  int64_t largest = 0;
  int64_t in_cpu = 0;  // elements kept in host memory so far (this rank's shards)
  uint64_t kept_bytes = 0;
  // In place (the header): the trainable shards at their working offsets, the frozen ones after.
  const bool in_place = kept_in_place();
  if (in_place) kept_bytes = (static_cast<uint64_t>(part_.resident_working_elems()) * wsize + 63) / 64 * 64;
  for (size_t t = 0; t < entries; ++t) {
    if (coordinator_->persistent(t)) continue;
    const int64_t shard = t < trainable ? part_.shard_layout().shard_size(t) : frozen_.shard_elems(t - trainable);
    ParamShards::Shard &s = layout[t];
    s.array = t < trainable ? param_array(t) : "f" + std::to_string(t - trainable);
    s.bytes = static_cast<size_t>(shard) * wsize;
    if (in_place && t < trainable) {
      s.kept_offset = part_.shard_layout().shard_offset(t) * static_cast<int64_t>(wsize);
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
                   entry_name(t).c_str(), static_cast<long long>(entry_numel(t)), static_cast<long long>(shard),
                   part_size(), static_cast<long long>(offload.buffer_size), static_cast<long long>(shard),
                   static_cast<long long>(entry_numel(t)));
    in_cpu = -1;
    largest = std::max(largest, shard);
  }
  if (nvme) {
    // Buffers hold one shard each: sized to the largest shard on NVMe rather than buffer_size, so
    // that a large default buffer_size does not pin buffer_count * buffer_size bytes for a small model.
    const uint64_t shard_bytes = static_cast<uint64_t>(largest) * wsize;
    NvmeSwapperOptions options;
    options.aio = config_.aio;
    options.offload = offload;
    options.config_key = "zero_optimization.offload_param";
    options.allocator = swap_buffer_allocator();
    options.rank = rank();
    options.buffer_bytes = std::max<uint64_t>(4096, (shard_bytes + 4095) / 4096 * 4096);
    DSRT_RETURN_IF_ERROR(NvmeSwapper::create(options, &param_nvme_).with_context("build: NVMe parameter offload"));
  }
  auto source = std::make_unique<ParamShards>(param_nvme_.get(), device_.get());
  source->shards = std::move(layout);
  source->frozen_base = trainable;
  if (kept_bytes > 0)
    DSRT_RETURN_IF_ERROR(allocate_offloaded(kept_bytes, offload, &source->kept)
                             .with_context(nvme ? "build: the parameter shards kept in host memory (offload_param.max_in_cpu)"
                                                : "build: the parameter shards in host memory (offload_param.device \"cpu\")"));
  param_source_ = std::move(source);
  coordinator_->set_shard_source(working_.data(), param_source_.get());
  // Write every shard to its place (host memory or NVMe) and free the device working shards.
  DSRT_RETURN_IF_ERROR(param_nvme_close().with_context("build: storing the initial parameter shards"));
  // The frozen shards move once; persistent ones stay on the device (gathered on every rank).
  for (size_t i = 0; i < frozen_.size(); ++i)
    if (!coordinator_->persistent(trainable + i))
      DSRT_RETURN_IF_ERROR(frozen_.move_to_store(i, &param_shards(param_source_)).with_context("build"));
  if (!nvme) {
    logf(DSRT_LOG_INFO, "parameter offload to host memory: %llu bytes of shards in pinned host memory",
         static_cast<unsigned long long>(param_nvme_resident_bytes()));
    return Status::Ok();
  }
  logf(DSRT_LOG_INFO,
       "NVMe parameter offload: %llu bytes of shards on NVMe, %llu kept in host memory (max_in_cpu %lld elements), "
       "%zu buffers of %zu bytes in '%s'",
       static_cast<unsigned long long>(param_nvme_shard_bytes()),
       static_cast<unsigned long long>(param_nvme_resident_bytes()), static_cast<long long>(offload.max_in_cpu),
       param_nvme_->pool().buffer_count(), param_nvme_->pool().buffer_size(), param_nvme_->store().folder().c_str());
  return Status::Ok();
}

bool Engine::kept_in_place() const {
  return config_.zero.offload_param.device == OffloadDevice::Cpu && device_->type() == DSRT_DEVICE_CPU;
}

Status Engine::param_nvme_open() {
  if (!param_source_ || !working_.empty()) return Status::Ok();
  const size_t working_bytes = static_cast<size_t>(part_.resident_working_elems()) * dtype_size(working_dtype());
  coordinator_->drop_reads();
  if (kept_in_place()) {
    // A view (no release): the step writes the kept shards themselves.
    working_ = DeviceBuffer(param_shards(param_source_).kept.data(), working_bytes, nullptr);
    coordinator_->set_shard_source(working_.data(), param_source_.get());
    return Status::Ok();
  }
  DSRT_RETURN_IF_ERROR(device_->allocate(working_bytes, &working_).with_context("allocating the working shards"));
  coordinator_->set_shard_source(working_.data(), param_source_.get());
  return Status::Ok();
}

Status Engine::param_nvme_close() {
  if (!param_source_ || working_.empty()) return Status::Ok();
  ParamShards &source = param_shards(param_source_);
  // The shards were written by the backend (on its stream) and read by the gathers: both done.
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  const int64_t wsize = static_cast<int64_t>(dtype_size(working_dtype()));
  const char *working = static_cast<const char *>(working_.data());
  auto shard_of = [&](size_t t) { return working + part_.shard_layout().shard_offset(t) * wsize; };
  for (size_t t = 0; t < tensors_.size(); ++t) {
    void *kept = source.kept_shard(t);
    if (kept != nullptr && kept != shard_of(t))  // equal: working_ is the view of the kept shards
      DSRT_RETURN_IF_ERROR(device_->copy(kept, shard_of(t), source.shards[t].bytes, nullptr));
  }
  DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
  if (!param_nvme_) return release_working_shards();

  // The shards on NVMe: one swap-out per pool buffer in flight. A swap-out commits only once all of
  // its bytes are written, so after a failure every array holds either its new or its previous
  // value on disk, and working_ (kept below) holds every new value.
  SwapStore &store = param_nvme_->store();
  PinnedPool &pool = param_nvme_->pool();
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
      failure = status.with_context(Format("writing the shard of '%s' to NVMe", tensors_[out.t].name.c_str()));
  };
  for (size_t t = 0; t < tensors_.size() && failure.ok(); ++t) {
    const ParamShards::Shard &s = source.shards[t];
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
      failure = status.with_context(Format("writing the shard of '%s' to NVMe", tensors_[t].name.c_str()));
      break;
    }
    in_flight.push_back(std::move(out));
  }
  while (!in_flight.empty()) retire();
  if (!failure.ok())
    return failure.with_context(
        "the updated shards stay in host memory (the step is applied); the next step, or a call that rewrites the "
        "shards, writes them to NVMe again");
  return release_working_shards();
}

Status Engine::release_working_shards() {
  working_.reset();
  coordinator_->set_shard_source(nullptr, param_source_.get());
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
  if (!param_source_) return Error(DSRT_ERR_STATE, "read_working_shard: no working shards");
  ParamShards &source = param_shards(param_source_);
  if (const void *kept = source.resident(t)) {
    std::memcpy(dst, kept, bytes);  // host to host: the kept shards are pinned host memory on every device
    return Status::Ok();
  }
  if (source.shards[t].array.empty()) {
    // Persistent: gathered on every rank; the all-gather put rank r's shard at r * shard_size.
    const char *gathered = static_cast<const char *>(coordinator_->gathered_data(t));
    if (gathered == nullptr)
      return Error(DSRT_ERR_STATE, "read_working_shard: '%s' is persistent but not gathered", tensors_[t].name.c_str());
    DSRT_RETURN_IF_ERROR(device_->copy(dst, gathered + static_cast<size_t>(part_rank()) * bytes, bytes, nullptr));
    return device_->synchronize(nullptr);
  }
  if (!param_nvme_) return Error(DSRT_ERR_STATE, "read_working_shard: the shard of '%s' is nowhere", tensors_[t].name.c_str());
  coordinator_->drop_reads();  // frees the read buffers
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(param_nvme_->pool().acquire(&lease));
  DSRT_RETURN_IF_ERROR(param_nvme_->store()
                           .read(source.shards[t].array, lease.data(), bytes)
                           .with_context(Format("reading the shard of '%s' from NVMe", tensors_[t].name.c_str())));
  std::memcpy(dst, lease.data(), bytes);
  return Status::Ok();
}

Status Engine::param_nvme_write_shard(size_t t, const float *full) {
  if (coordinator_->persistent(t)) return Status::Ok();  // its gathered copy is overwritten instead
  coordinator_->drop_reads();  // a read ahead of t would be stale; and the buffers are needed here
  const OwnedSegment mine = part_.owned_piece(t, part_rank());
  if (mine.count <= 0) return Status::Ok();
  const size_t wsize = dtype_size(working_dtype());
  const int64_t at = mine.part_offset - part_.shard_layout().shard_offset(t);
  ParamShards &source = param_shards(param_source_);
  if (void *kept = source.kept_shard(t)) {
    cpu_convert(full + mine.tensor_begin, DSRT_F32, static_cast<char *>(kept) + at * static_cast<int64_t>(wsize),
                working_dtype(), static_cast<size_t>(mine.count));
    return Status::Ok();
  }
  const size_t bytes = source.shards[t].bytes;
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(param_nvme_->pool().acquire(&lease));
  SwapStore &store = param_nvme_->store();
  DSRT_RETURN_IF_ERROR(store.read(param_array(t), lease.data(), bytes));
  cpu_convert(full + mine.tensor_begin, DSRT_F32, static_cast<char *>(lease.data()) + at * static_cast<int64_t>(wsize),
              working_dtype(), static_cast<size_t>(mine.count));
  return store.write(param_array(t), lease.data(), bytes);
}

}  // namespace dsrt
