// defines: GradReducer -- bucket assignment, the buffer pool, and per-stage reduction.
#include "zero/grad_reducer.h"

#include <algorithm>
#include <cstring>

#include "comm/comm_checks.h"
#include "comm/topology.h"
#include "util/half.h"
#include "util/log.h"
#include "util/steady_clock.h"

namespace dsrt {

GradReducer::~GradReducer() {
  for (InFlight &op : in_flight_)
    if (op.handle) (void)op.handle->wait();
}

Status GradReducer::init(const Partitioning *partitioning, Comm *comm, Device *device, OptimizerBackend *backend,
                         const ReducerOptions &options) {
  part_ = partitioning;
  comm_ = comm;
  device_ = device;
  backend_ = backend;
  if (backend_ == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient reducer: no arithmetic backend");
  options_ = options;
  rank_ = comm->rank();
  world_ = comm->size();
  if (options_.replica_comm != nullptr && options_.replica_comm->size() <= 1) options_.replica_comm = nullptr;
  if (options_.replica_comm != nullptr && part_->stage() != 3)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient reducer: MiCS replicas need ZeRO stage 3, not %d", part_->stage());
  dp_world_ = world_ * (options_.replica_comm != nullptr ? options_.replica_comm->size() : 1);
  // The fold writes host memory with the CPU kernels, into the accumulator only.
  if (part_->stage() < 2 || options_.map_range || device_->type() != DSRT_DEVICE_CPU) options_.fold_norm = false;
  fold_begun_ = fold_missed_ = fold_complete_ = false;
  // 0 (DeepSpeed's meaning): no two gradients share a bucket.
  if (options_.bucket_elems < 0)
    return Error(DSRT_ERR_CONFIG, "zero_optimization.reduce_bucket_size is %lld; it must not be negative",
                 static_cast<long long>(options_.bucket_elems));

  qgz_.reset();
  if (options_.quantized_gradients && part_->stage() == 3 && world_ > 1) {
    if (options_.qgz_groups.size() != part_->num_tensors())
      return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient reducer: qgz_groups has %zu entries for %zu tensors",
                   options_.qgz_groups.size(), part_->num_tensors());
    std::shared_ptr<Comm> intra, inter;
    // A layout comm_split_by_node refuses (on every rank alike) is run as one node.
    const Status split = comm_split_by_node(*comm, &intra, &inter);
    if (!split.ok()) {
      log_warn_once("qgz-nodes", "zero_quantized_gradients: " + split.message() +
                                     "; reducing over all ranks as one node (a single all-to-all stage)");
      intra.reset();
      inter.reset();
    }
    qgz_ = std::make_unique<QuantizedReduceScatter>();
    DSRT_RETURN_IF_ERROR(qgz_->init(comm, std::move(intra), std::move(inter), options_.qgz_bits, device, nullptr));
  }
  const size_t n = part_->num_tensors();
  bucket_of_.assign(n, 0);
  tensor_state_.assign(n, 0);
  buckets_.clear();
  // Tensor t's buffer footprint: its elements rounded up so the next tensor starts aligned (this
  // equals the flat layout's spacing, so a flat bucket buffer mirrors the flat range exactly).
  auto footprint = [&](size_t t) {
    if (part_->flat()) {
      const int64_t next = t + 1 < n ? part_->flat_layout().tensor_offset(t + 1)
                                     : round_up(part_->flat_layout().tensor_range(t).end, kTensorAlignElems);
      return next - part_->flat_layout().tensor_offset(t);
    }
    return round_up(part_->numel(t), kTensorAlignElems);
  };
  size_t end = n;
  while (end > 0) {
    size_t begin = end - 1;
    int64_t elems = footprint(begin);
    while (begin > 0 && elems + footprint(begin - 1) <= options_.bucket_elems) {
      --begin;
      elems += footprint(begin);
    }
    Bucket bucket;
    bucket.first = begin;
    bucket.last = end;
    bucket.elems = elems;
    int64_t offset = 0;
    for (size_t t = begin; t < end; ++t) {
      bucket.offsets.push_back(offset);
      offset += footprint(t);
      bucket_of_[t] = buckets_.size();
    }
    if (part_->flat()) bucket.flat_begin = part_->flat_layout().tensor_offset(begin);
    buckets_.push_back(std::move(bucket));
    end = begin;
  }

  const int outside = (options_.map_range ? 1 : 0) + (options_.flush_ranges ? 1 : 0) + (options_.on_window_start ? 1 : 0);
  if (outside != 0 && outside != 3)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient reducer: map_range, flush_ranges and on_window_start go together");
  if (outside != 0 && part_->stage() != 3)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "gradient reducer: a gradient partition outside the reducer needs ZeRO "
                                            "stage 3, not %d", part_->stage());
  accumulator_.reset();
  if (outside != 0) return Status::Ok();
  // Stages 0-1 accumulate the whole flat space; stages 2-3 only this rank's partition.
  const int64_t accum_elems = part_->stage() <= 1 ? part_->flat_layout().total() : part_->partition_elems();
  DSRT_RETURN_IF_ERROR(device_->allocate(static_cast<size_t>(accum_elems) * sizeof(float), &accumulator_)
                           .with_context("allocating the fp32 gradient accumulator"));
  return Status::Ok();
}

float *GradReducer::grad_partition() const {
  if (accumulator_.empty()) return nullptr;
  float *base = accumulator_.as<float>();
  if (part_->stage() == 1) return base + part_->flat_layout().partition(rank_).begin;
  return base;
}

double GradReducer::post_scale() const {
  const double prescale = options_.prescale_gradients ? 1.0 / dp_world_ : 1.0 / options_.predivide_factor;
  const double steps = divide_by_accumulation_ ? static_cast<double>(options_.accumulation_steps) : 1.0;
  const int world = local_only_ ? 1 : dp_world_;
  return 1.0 / (static_cast<double>(world) * steps * prescale);
}

bool GradReducer::window_open() const {
  if (!first_micro_step_) return true;
  for (int state : tensor_state_)
    if (state != 0) return true;
  return false;
}

Status GradReducer::take_buffer(size_t bytes, DeviceBuffer *out) {
  size_t best = pool_.size();
  for (size_t i = 0; i < pool_.size(); ++i)
    if (pool_[i].bytes() >= bytes && (best == pool_.size() || pool_[i].bytes() < pool_[best].bytes())) best = i;
  if (best == pool_.size() && !in_flight_.empty()) {
    // Completing the oldest collective returns its buffers before the pool has to grow.
    DSRT_RETURN_IF_ERROR(complete_oldest());
    return take_buffer(bytes, out);
  }
  if (best < pool_.size()) {
    *out = std::move(pool_[best]);
    pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(best));
    return Status::Ok();
  }
  // Callers overwrite or zero what they use.
  DSRT_RETURN_IF_ERROR(device_->allocate(bytes, out, false).with_context("allocating a gradient bucket buffer"));
  pool_bytes_ += bytes;
  ++pool_buffers_;
  if (pool_buffers_ > 4)
    logf(DSRT_LOG_DEBUG,
         "gradient buffer pool grew to %zu buffers (%llu bytes): the host holds many gradient buffers at once; "
         "call dsrt_tensor_grad/dsrt_tensor_grad_ready per tensor as backward produces them to save memory",
         pool_buffers_, static_cast<unsigned long long>(pool_bytes_));
  return Status::Ok();
}

void GradReducer::give_buffer(DeviceBuffer &&buffer) {
  if (!buffer.empty()) pool_.push_back(std::move(buffer));
}

Status GradReducer::ensure_bucket_buffer(Bucket &bucket) {
  if (!bucket.buffer.empty()) return Status::Ok();
  const size_t bytes = static_cast<size_t>(bucket.elems) * dtype_size(options_.working_dtype);
  DSRT_RETURN_IF_ERROR(take_buffer(bytes, &bucket.buffer));
  return device_->memset(bucket.buffer.data(), 0, bytes, nullptr);
}

Status GradReducer::grad(size_t t, void **out) {
  Bucket &bucket = buckets_[bucket_of_[t]];
  if (bucket.issued)
    return Error(DSRT_ERR_INTERNAL, "gradient bucket of tensor %zu was reduced before the tensor was ready", t);
  DSRT_RETURN_IF_ERROR(ensure_bucket_buffer(bucket));
  if (tensor_state_[t] == 0) tensor_state_[t] = 1;
  *out = static_cast<char *>(bucket.buffer.data()) +
         bucket.offsets[t - bucket.first] * static_cast<int64_t>(dtype_size(options_.working_dtype));
  return Status::Ok();
}

Status GradReducer::ready(size_t t) {
  Bucket &bucket = buckets_[bucket_of_[t]];
  tensor_state_[t] = 2;
  ++bucket.ready;
  return issue_ready_buckets();
}

Status GradReducer::issue_ready_buckets() {
  while (next_issue_ < buckets_.size()) {
    Bucket &bucket = buckets_[next_issue_];
    if (bucket.ready < bucket.last - bucket.first) break;
    DSRT_RETURN_IF_ERROR(issue(next_issue_));
    ++next_issue_;
  }
  return Status::Ok();
}

Status GradReducer::issue(size_t b) {
  Bucket &bucket = buckets_[b];
  bucket.issued = true;
  const dsrt_dtype wdt = options_.working_dtype;
  const size_t wsize = dtype_size(wdt);
  const float prescale = static_cast<float>(options_.prescale_gradients ? 1.0 / dp_world_ : 1.0 / options_.predivide_factor);

  if (part_->stage() <= 1) {
    // Local accumulation; an untouched bucket is all zeros.
    float *dst = accumulator_.as<float>() + bucket.flat_begin;
    if (!bucket.buffer.empty()) {
      DSRT_RETURN_IF_ERROR(add_into(dst, bucket.buffer.data(), wdt, static_cast<size_t>(bucket.elems), prescale));
      give_buffer(std::move(bucket.buffer));
    } else if (first_micro_step_) {
      DSRT_RETURN_IF_ERROR(device_->memset(dst, 0, static_cast<size_t>(bucket.elems) * sizeof(float), nullptr));
    }
    return Status::Ok();
  }

  // Every rank takes part in every bucket's collective, touched or not.
  DSRT_RETURN_IF_ERROR(ensure_bucket_buffer(bucket));
  const double start = steady_seconds();
  const dsrt_dtype cdt = options_.comm_dtype;
  const size_t csize = dtype_size(cdt);
  InFlight op;
  op.bucket = b;

  if (part_->stage() == 2) {
    const FlatLayout &flat = part_->flat_layout();
    const ElemRange range{bucket.flat_begin, bucket.flat_begin + bucket.elems};
    const void *send = bucket.buffer.data();
    if (cdt != wdt || prescale != 1.0f) {
      DSRT_RETURN_IF_ERROR(take_buffer(static_cast<size_t>(bucket.elems) * csize, &op.send));
      DSRT_RETURN_IF_ERROR(
          backend_->convert(bucket.buffer.data(), wdt, op.send.data(), cdt, static_cast<size_t>(bucket.elems), prescale));
      send = op.send.data();
    }
    // The collective reads what the backend wrote.
    DSRT_RETURN_IF_ERROR(backend_->synchronize());
    if (options_.reduce_scatter && world_ > 1) {
      std::vector<size_t> counts(static_cast<size_t>(world_));
      for (int r = 0; r < world_; ++r) counts[r] = static_cast<size_t>(intersect(range, flat.partition(r)).size());
      const size_t mine = counts[static_cast<size_t>(rank_)];
      DSRT_RETURN_IF_ERROR(take_buffer(std::max<size_t>(mine, 1) * csize, &op.recv));
      DSRT_RETURN_IF_ERROR(comm_->reduce_scatter_v(send, op.recv.data(), counts.data(), cdt, ReduceOp::Sum, &op.handle)
                               .with_context(Format("reduce-scattering gradient bucket %zu", b)));
    } else {
      // All-reduce in place on whichever buffer is sent; completion reads this rank's part from it.
      DSRT_RETURN_IF_ERROR(comm_->all_reduce(const_cast<void *>(send), static_cast<size_t>(bucket.elems), cdt,
                                             ReduceOp::Sum, &op.handle)
                               .with_context(Format("all-reducing gradient bucket %zu", b)));
    }
  } else if (world_ == 1 && !qgz_ && options_.replica_comm == nullptr && cdt == wdt && prescale == 1.0f) {
    // Stage 3 on one rank: the reduction is the identity and the rearrangement a plain copy, so
    // complete() accumulates each tensor straight from its slice of the bucket buffer.
    op.in_place = true;
    op.handle = completed_handle();  // no collective
  } else {
    // Stage 3: rank-major rearrangement, each tensor's block padded to its shard size.
    const ShardLayout &shards = part_->shard_layout();
    int64_t block = 0;
    for (size_t t = bucket.first; t < bucket.last; ++t) block += shards.shard_size(t);
    DSRT_RETURN_IF_ERROR(take_buffer(static_cast<size_t>(block * world_) * csize, &op.send));
    char *send = static_cast<char *>(op.send.data());
    const char *src = static_cast<const char *>(bucket.buffer.data());
    for (int r = 0; r < world_; ++r) {
      int64_t pos = r * block;
      for (size_t t = bucket.first; t < bucket.last; ++t) {
        const ElemRange owned = shards.owned_range(t, r);
        const int64_t s = shards.shard_size(t);
        const int64_t offset = bucket.offsets[t - bucket.first];
        DSRT_RETURN_IF_ERROR(backend_->convert(src + (offset + owned.begin) * static_cast<int64_t>(wsize), wdt,
                                               send + pos * csize, cdt, static_cast<size_t>(owned.size()), prescale));
        if (owned.size() < s)
          DSRT_RETURN_IF_ERROR(device_->memset(send + (pos + owned.size()) * csize, 0,
                                               static_cast<size_t>(s - owned.size()) * csize, nullptr));
        pos += s;
      }
    }
    DSRT_RETURN_IF_ERROR(backend_->synchronize());
    // The host's buffer is no longer needed once rearranged.
    give_buffer(std::move(bucket.buffer));
    if (qgz_) {
      std::vector<QgzSegment> segments;
      for (size_t t = bucket.first; t < bucket.last; ++t)
        segments.push_back({static_cast<size_t>(shards.shard_size(t)), options_.qgz_groups[t]});
      DSRT_RETURN_IF_ERROR(take_buffer(static_cast<size_t>(block) * sizeof(float), &op.recv));
      DSRT_RETURN_IF_ERROR(qgz_->reduce_scatter(op.send.data(), cdt, segments, op.recv.as<float>())
                               .with_context(Format("reducing gradient bucket %zu (zero_quantized_gradients)", b)));
      op.quantized = true;
      op.handle = completed_handle();  // qgZ ran its stages on the caller
    } else if (options_.reduce_scatter && world_ > 1) {
      DSRT_RETURN_IF_ERROR(take_buffer(static_cast<size_t>(block) * csize, &op.recv));
      DSRT_RETURN_IF_ERROR(comm_->reduce_scatter(op.send.data(), op.recv.data(), static_cast<size_t>(block), cdt,
                                                 ReduceOp::Sum, &op.handle)
                               .with_context(Format("reduce-scattering gradient bucket %zu", b)));
    } else {
      DSRT_RETURN_IF_ERROR(comm_->all_reduce(op.send.data(), static_cast<size_t>(block * world_), cdt, ReduceOp::Sum,
                                             &op.handle)
                               .with_context(Format("all-reducing gradient bucket %zu", b)));
    }
  }
  const bool in_place = op.in_place;
  in_flight_.push_back(std::move(op));
  reduce_seconds_ += steady_seconds() - start;
  // In place there is no collective to overlap: accumulate now, while the host's backward runs,
  // instead of at the micro-step's end in step() (every bucket at one rank is in place, so the
  // oldest is this one; the order of the additions is the same).
  if (!options_.overlap_comm || in_place) return complete_oldest();
  return Status::Ok();
}

Status GradReducer::complete_oldest() {
  if (in_flight_.empty()) return Status::Ok();
  InFlight op = std::move(in_flight_.front());
  in_flight_.pop_front();
  return complete(op);
}

Status GradReducer::complete(InFlight &op) {
  const double start = steady_seconds();
  DSRT_RETURN_IF_ERROR(op.handle->wait().with_context(Format("reducing gradient bucket %zu", op.bucket)));
  Bucket &bucket = buckets_[op.bucket];
  const dsrt_dtype cdt = options_.comm_dtype;
  const size_t csize = dtype_size(cdt);
  const bool scattered = options_.reduce_scatter && world_ > 1;
  // Ranges of the partition this bucket finished: final for the window on its last micro-step.
  std::vector<ElemRange> finished;

  if (part_->stage() == 2) {
    const FlatLayout &flat = part_->flat_layout();
    const ElemRange range{bucket.flat_begin, bucket.flat_begin + bucket.elems};
    const ElemRange partition = flat.partition(rank_);
    const ElemRange mine = intersect(range, partition);
    if (!mine.empty()) {
      const char *src;
      if (scattered) {
        src = static_cast<const char *>(op.recv.data());
      } else {
        const char *reduced = static_cast<const char *>(op.send.empty() ? bucket.buffer.data() : op.send.data());
        src = reduced + (mine.begin - range.begin) * static_cast<int64_t>(csize);
      }
      DSRT_RETURN_IF_ERROR(add_into_accumulator(mine.begin - partition.begin, src, cdt, static_cast<size_t>(mine.size())));
      finished.push_back({mine.begin - partition.begin, mine.end - partition.begin});
    }
    give_buffer(std::move(bucket.buffer));
  } else if (op.in_place) {
    // Stage 3 on one rank: each tensor straight from its slice of the bucket buffer.
    const ShardLayout &shards = part_->shard_layout();
    const char *src = static_cast<const char *>(bucket.buffer.data());
    for (size_t t = bucket.first; t < bucket.last; ++t) {
      const int64_t n = shards.owned_range(t, 0).size();
      if (n == 0) continue;
      DSRT_RETURN_IF_ERROR(accumulate_partition(
          shards.shard_offset(t), src + bucket.offsets[t - bucket.first] * static_cast<int64_t>(csize), cdt, n));
      finished.push_back({shards.shard_offset(t), shards.shard_offset(t) + n});
    }
  } else {
    const ShardLayout &shards = part_->shard_layout();
    const char *base = static_cast<const char *>(scattered || op.quantized ? op.recv.data() : op.send.data());
    // qgZ leaves the reduced block in fp32.
    const dsrt_dtype rdt = op.quantized ? DSRT_F32 : cdt;
    const size_t rsize = dtype_size(rdt);
    int64_t block = 0;
    for (size_t t = bucket.first; t < bucket.last; ++t) block += shards.shard_size(t);
    int64_t pos = scattered || op.quantized ? 0 : rank_ * block;
    if (options_.replica_comm != nullptr) {
      // MiCS: the shard group's sum (after qgZ's reduction, if on), summed again across the
      // replicas of this shard, before it is accumulated.
      DSRT_RETURN_IF_ERROR(options_.replica_comm
                               ->all_reduce_sync(const_cast<char *>(base) + pos * static_cast<int64_t>(rsize),
                                                 static_cast<size_t>(block), rdt, ReduceOp::Sum)
                               .with_context(Format("all-reducing gradient bucket %zu across MiCS replicas", op.bucket)));
    }
    for (size_t t = bucket.first; t < bucket.last; ++t) {
      const ElemRange owned = shards.owned_range(t, rank_);
      if (!owned.empty()) {
        DSRT_RETURN_IF_ERROR(
            accumulate_partition(shards.shard_offset(t), base + pos * static_cast<int64_t>(rsize), rdt, owned.size()));
        finished.push_back({shards.shard_offset(t), shards.shard_offset(t) + owned.size()});
      }
      pos += shards.shard_size(t);
    }
  }
  // The buffers go back to the pool, so the accumulation that reads them must be done.
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  give_buffer(std::move(op.send));
  give_buffer(std::move(op.recv));
  if (op.in_place) give_buffer(std::move(bucket.buffer));
  reduce_seconds_ += steady_seconds() - start;
  if (last_micro_step())
    for (const ElemRange &range : finished) DSRT_RETURN_IF_ERROR(deliver_final(range.begin, range.size()));
  return Status::Ok();
}

Status GradReducer::accumulate_partition(int64_t part_offset, const char *src, dsrt_dtype dtype, int64_t n) {
  if (!options_.map_range) return add_into_accumulator(part_offset, src, dtype, static_cast<size_t>(n));
  const size_t size = dtype_size(dtype);
  for (int64_t done = 0; done < n;) {
    float *dst = nullptr;
    int64_t mapped = 0;
    DSRT_RETURN_IF_ERROR(options_.map_range(part_offset + done, n - done, &dst, &mapped));
    if (dst == nullptr || mapped <= 0 || mapped > n - done)
      return Error(DSRT_ERR_INTERNAL, "gradient reducer: map_range returned %lld elements for %lld",
                   static_cast<long long>(mapped), static_cast<long long>(n - done));
    DSRT_RETURN_IF_ERROR(add_into(dst, src + done * static_cast<int64_t>(size), dtype, static_cast<size_t>(mapped), 1.0f));
    // The memory is valid until the next map_range: the addition must be done.
    DSRT_RETURN_IF_ERROR(backend_->synchronize());
    done += mapped;
  }
  return Status::Ok();
}

Status GradReducer::add_into_accumulator(int64_t part_offset, const void *src, dsrt_dtype dtype, size_t n) {
  float *accum = accumulator_.as<float>();
  // The fold needs the values final for the window: its last micro-step only.
  if (!options_.fold_norm || !last_micro_step() || part_offset + static_cast<int64_t>(n) > part_->partition_elems()) {
    fold_missed_ = true;
    return add_into(accum + part_offset, src, dtype, n, 1.0f);
  }
  if (!fold_begun_) fold_.begin(static_cast<size_t>(part_->partition_elems()));
  fold_begun_ = true;
  fold_.add(accum, static_cast<size_t>(part_offset), src, dtype, n, first_micro_step_);
  return Status::Ok();
}

bool GradReducer::folded_sum_squares(float scale, double *sum, bool *nonfinite) const {
  const size_t total = static_cast<size_t>(part_->partition_elems());
  if (!fold_complete_ || !fold_.matches(total)) return false;
  const double value = fold_.finish(accumulator_.as<float>(), scale, nonfinite);
  if (sum != nullptr) *sum = value;
  return true;
}

Status GradReducer::deliver_final(int64_t part_offset, int64_t count) {
  if (!options_.on_final_range || count <= 0) return Status::Ok();
  return options_.on_final_range(part_offset, count);
}

Status GradReducer::finish_micro_step() {
  // A buffer handed out but never signalled ready counts as zero, as documented.
  for (size_t t = 0; t < tensor_state_.size(); ++t) {
    if (tensor_state_[t] != 1) continue;
    Bucket &bucket = buckets_[bucket_of_[t]];
    if (!bucket.buffer.empty()) {
      const size_t wsize = dtype_size(options_.working_dtype);
      DSRT_RETURN_IF_ERROR(device_->memset(static_cast<char *>(bucket.buffer.data()) + bucket.offsets[t - bucket.first] * wsize,
                                           0, static_cast<size_t>(part_->numel(t)) * wsize, nullptr));
    }
  }
  for (; next_issue_ < buckets_.size(); ++next_issue_) DSRT_RETURN_IF_ERROR(issue(next_issue_));
  while (!in_flight_.empty()) DSRT_RETURN_IF_ERROR(complete_oldest());
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  for (Bucket &bucket : buckets_) {
    bucket.ready = 0;
    bucket.issued = false;
    give_buffer(std::move(bucket.buffer));
  }
  std::fill(tensor_state_.begin(), tensor_state_.end(), 0);
  if (part_->stage() >= 2 && last_micro_step()) final_delivered_ = true;
  // Every range this micro-step wrote went through the fold, and every element carrying data is
  // written once per micro-step: the fold holds the window's whole gradient.
  fold_complete_ = fold_begun_ && !fold_missed_;
  fold_begun_ = fold_missed_ = false;
  first_micro_step_ = false;
  micro_in_window_ += 1;
  next_issue_ = 0;
  // The partition kept outside: everything this micro-step accumulated is written out.
  if (options_.flush_ranges) DSRT_RETURN_IF_ERROR(options_.flush_ranges());
  return Status::Ok();
}

Status GradReducer::reduce_accumulator() {
  if (part_->stage() >= 2) return Status::Ok();
  const double start = steady_seconds();
  const FlatLayout &flat = part_->flat_layout();
  const ElemRange partition = part_->stage() == 0 ? ElemRange{0, flat.total()} : flat.partition(rank_);
  float *accum = accumulator_.as<float>();
  const int64_t total = flat.total();
  // Chunks of reduce_bucket_size elements; with 0, one per gradient (DeepSpeed's meaning).
  std::vector<int64_t> starts;
  if (options_.bucket_elems > 0) {
    for (int64_t a = 0; a < total; a += options_.bucket_elems) starts.push_back(a);
  } else if (total > 0) {
    starts.push_back(0);
    for (size_t t = 1; t < part_->num_tensors(); ++t)
      if (flat.tensor_offset(t) > starts.back() && flat.tensor_offset(t) < total) starts.push_back(flat.tensor_offset(t));
  }
  for (size_t c = 0; c < starts.size(); ++c) {
    const int64_t a = starts[c];
    const ElemRange range{a, c + 1 < starts.size() ? starts[c + 1] : total};
    const ElemRange mine = intersect(range, partition);
    if (world_ == 1 || local_only_) {
      DSRT_RETURN_IF_ERROR(deliver_final(mine.begin - partition.begin, mine.size()));
      continue;
    }
    if (part_->stage() == 0 || !options_.reduce_scatter) {
      DSRT_RETURN_IF_ERROR(comm_->all_reduce_sync(accum + a, static_cast<size_t>(range.size()), DSRT_F32, ReduceOp::Sum)
                               .with_context("all-reducing accumulated gradients"));
      DSRT_RETURN_IF_ERROR(deliver_final(mine.begin - partition.begin, mine.size()));
      continue;
    }
    std::vector<size_t> counts(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) counts[r] = static_cast<size_t>(intersect(range, flat.partition(r)).size());
    DeviceBuffer recv;
    DSRT_RETURN_IF_ERROR(take_buffer(std::max<size_t>(counts[rank_], 1) * sizeof(float), &recv));
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(comm_->reduce_scatter_v(accum + a, recv.data(), counts.data(), DSRT_F32, ReduceOp::Sum, &handle)
                             .with_context("reduce-scattering accumulated gradients"));
    DSRT_RETURN_IF_ERROR(handle->wait().with_context("reduce-scattering accumulated gradients"));
    if (!mine.empty())
      DSRT_RETURN_IF_ERROR(device_->copy(accum + mine.begin, recv.data(), static_cast<size_t>(mine.size()) * sizeof(float),
                                         nullptr));
    DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
    give_buffer(std::move(recv));
    DSRT_RETURN_IF_ERROR(deliver_final(mine.begin - partition.begin, mine.size()));
  }
  final_delivered_ = true;
  reduce_seconds_ += steady_seconds() - start;
  return Status::Ok();
}

void GradReducer::zero_accumulator() {
  // No pass over memory: the next micro-step overwrites every element that carries data (each is
  // covered by exactly one bucket per micro-step); padding is never written and stays zero.
  first_micro_step_ = true;
  micro_in_window_ = 0;
  final_delivered_ = false;
  fold_complete_ = false;
  if (options_.on_window_start) options_.on_window_start();
}

Status GradReducer::add_into(float *dst, const void *src, dsrt_dtype dtype, size_t n, float scale) {
  if (!first_micro_step_) return backend_->accumulate(dst, src, dtype, n, scale);
  return backend_->convert(src, dtype, dst, DSRT_F32, n, scale);
}

}  // namespace dsrt
