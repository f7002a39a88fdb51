// defines: StagedComm (device buffers through pinned host staging and an inner host communicator)
// and staged_comm_create. Each collective stages the whole buffer it reads into one leased host
// buffer and runs the inner collective in place there, so in-place and out-of-place calls take
// the same path and give the inner communicator's bits exactly.
#include "comm/staged/staged_comm.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/comm_checks.h"
#include "util/half.h"

namespace dsrt {
namespace {

constexpr size_t kMinStagingBytes = size_t{64} << 10;
constexpr size_t kMaxCachedBuffers = 16;

// The device side every collective and handle shares: the copy stream, the compute stream it
// orders after, and a cache of pinned staging buffers (pinning is too slow to do per call).
struct Staging {
  std::shared_ptr<Device> device;
  DeviceStream copy_stream = nullptr;
  DeviceEvent compute_done = nullptr;
  std::mutex mutex;
  DeviceStream compute = nullptr;
  std::vector<DeviceBuffer> cache;

  ~Staging() {
    if (compute_done != nullptr) (void)device->destroy_event(compute_done);
    if (copy_stream != nullptr) (void)device->destroy_stream(copy_stream);
  }

  Status lease(size_t bytes, DeviceBuffer *out) {
    {
      std::lock_guard<std::mutex> guard(mutex);
      auto best = cache.end();
      for (auto it = cache.begin(); it != cache.end(); ++it)
        if (it->bytes() >= bytes && (best == cache.end() || it->bytes() < best->bytes())) best = it;
      if (best != cache.end()) {
        *out = std::move(*best);
        cache.erase(best);
        return Status::Ok();
      }
    }
    size_t size = kMinStagingBytes;
    while (size < bytes) size *= 2;
    return device->allocate_pinned(size, out)
        .with_context(Format("allocating a %zu-byte host staging buffer on %s", size, device->name()));
  }

  void give_back(DeviceBuffer buffer) {
    if (buffer.empty()) return;
    std::lock_guard<std::mutex> guard(mutex);
    if (cache.size() < kMaxCachedBuffers) cache.push_back(std::move(buffer));
  }

  // host <- device, after the compute stream's work enqueued so far.
  Status to_host(void *host, const void *dev, size_t bytes, const std::string &what) {
    if (bytes == 0) return Status::Ok();
    std::lock_guard<std::mutex> guard(mutex);
    DSRT_RETURN_IF_ERROR(device->record_event(compute_done, compute).with_context(what));
    DSRT_RETURN_IF_ERROR(device->stream_wait_event(copy_stream, compute_done).with_context(what));
    DSRT_RETURN_IF_ERROR(device->copy(host, dev, bytes, copy_stream).with_context(what));
    return device->synchronize(copy_stream).with_context(what);
  }

  // device <- host; complete when it returns.
  Status to_device(void *dev, const void *host, size_t bytes, const std::string &what) {
    if (bytes == 0) return Status::Ok();
    std::lock_guard<std::mutex> guard(mutex);
    DSRT_RETURN_IF_ERROR(device->copy(dev, host, bytes, copy_stream).with_context(what));
    return device->synchronize(copy_stream).with_context(what);
  }
};

// A staging buffer that returns to the cache when the collective is done with it.
class Lease {
 public:
  Lease(std::shared_ptr<Staging> staging, DeviceBuffer buffer)
      : staging_(std::move(staging)), buffer_(std::move(buffer)) {}
  Lease(Lease &&) = default;
  Lease &operator=(Lease &&) = default;
  ~Lease() { release(); }
  void release() {
    if (staging_) staging_->give_back(std::move(buffer_));
    staging_.reset();
  }
  char *data() const { return buffer_.as<char>(); }

 private:
  std::shared_ptr<Staging> staging_;
  DeviceBuffer buffer_;
};

class StagedRequest final : public CommRequest {
 public:
  StagedRequest(CommHandle inner, Lease lease, std::function<Status()> finish)
      : inner_(std::move(inner)), lease_(std::move(lease)), finish_(std::move(finish)) {}
  // The inner collective may still write the staging buffer: it must finish before the buffer
  // returns to the cache.
  ~StagedRequest() override {
    if (!waited_) (void)inner_->wait();
  }
  Status wait() override {
    if (waited_) return result_;
    waited_ = true;
    result_ = inner_->wait();
    if (result_.ok() && finish_) result_ = finish_();
    lease_.release();
    return result_;
  }

 private:
  CommHandle inner_;
  Lease lease_;
  std::function<Status()> finish_;
  bool waited_ = false;
  Status result_;
};

class StagedComm final : public Comm, public DeviceOrderedComm {
 public:
  StagedComm(std::shared_ptr<Comm> inner, std::shared_ptr<Staging> staging)
      : inner_(std::move(inner)), staging_(std::move(staging)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char *backend() const override { return "staged"; }

  Status set_compute_stream(DeviceStream stream) override {
    std::lock_guard<std::mutex> guard(staging_->mutex);
    staging_->compute = stream;
    return Status::Ok();
  }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    count_all_reduce(count * dtype_size(dtype));
    const size_t bytes = count * dtype_size(dtype);
    return stage("all_reduce", bytes, handle,
                 [=](char *host) { return staging_->to_host(host, buffer, bytes, what("all_reduce", "in")); },
                 [=](char *host, CommHandle *inner) { return inner_->all_reduce(host, count, dtype, op, inner); },
                 [=](char *host) { return staging_->to_device(buffer, host, bytes, what("all_reduce", "out")); });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    count_reduce_scatter(recv_count * dtype_size(dtype) * size(), recv_count * dtype_size(dtype));
    const size_t block = recv_count * dtype_size(dtype), own = static_cast<size_t>(rank()) * block;
    const size_t bytes = block * static_cast<size_t>(size());
    return stage("reduce_scatter", bytes, handle,
                 [=](char *host) { return staging_->to_host(host, send, bytes, what("reduce_scatter", "in")); },
                 [=](char *host, CommHandle *inner) {
                   return inner_->reduce_scatter(host, host + own, recv_count, dtype, op, inner);
                 },
                 [=](char *host) { return staging_->to_device(recv, host + own, block, what("reduce_scatter", "out")); });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, size());
    count_reduce_scatter(layout.total * dtype_size(dtype), layout.count[rank()] * dtype_size(dtype));
    const size_t element = dtype_size(dtype), bytes = layout.total * element;
    const size_t own = layout.offset[rank()] * element, own_bytes = layout.count[rank()] * element;
    std::vector<size_t> counts(recv_counts, recv_counts + size());
    return stage("reduce_scatter_v", bytes, handle,
                 [=](char *host) { return staging_->to_host(host, send, bytes, what("reduce_scatter_v", "in")); },
                 [=](char *host, CommHandle *inner) {
                   return inner_->reduce_scatter_v(host, host + own, counts.data(), dtype, op, inner);
                 },
                 [=](char *host) {
                   return staging_->to_device(recv, host + own, own_bytes, what("reduce_scatter_v", "out"));
                 });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    count_all_gather(count * dtype_size(dtype));
    const size_t block = count * dtype_size(dtype), own = static_cast<size_t>(rank()) * block;
    const size_t bytes = block * static_cast<size_t>(size());
    return stage("all_gather", bytes, handle,
                 [=](char *host) { return staging_->to_host(host + own, send, block, what("all_gather", "in")); },
                 [=](char *host, CommHandle *inner) { return inner_->all_gather(host + own, host, count, dtype, inner); },
                 [=](char *host) { return staging_->to_device(recv, host, bytes, what("all_gather", "out")); });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, size());
    count_all_gather(layout.count[rank()] * dtype_size(dtype));
    const size_t element = dtype_size(dtype), bytes = layout.total * element;
    const size_t own = layout.offset[rank()] * element, own_bytes = layout.count[rank()] * element;
    std::vector<size_t> all_counts(counts, counts + size());
    return stage("all_gather_v", bytes, handle,
                 [=](char *host) { return staging_->to_host(host + own, send, own_bytes, what("all_gather_v", "in")); },
                 [=](char *host, CommHandle *inner) {
                   return inner_->all_gather_v(host + own, host, all_counts.data(), dtype, inner);
                 },
                 [=](char *host) { return staging_->to_device(recv, host, bytes, what("all_gather_v", "out")); });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    count_broadcast(count * dtype_size(dtype), root);
    const size_t bytes = count * dtype_size(dtype);
    const bool is_root = root == rank();
    return stage("broadcast", bytes, handle,
                 [=](char *host) {
                   return is_root ? staging_->to_host(host, buffer, bytes, what("broadcast", "in")) : Status::Ok();
                 },
                 [=](char *host, CommHandle *inner) { return inner_->broadcast(host, count, dtype, root, inner); },
                 [=](char *host) {
                   return is_root ? Status::Ok() : staging_->to_device(buffer, host, bytes, what("broadcast", "out"));
                 });
  }

  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_gather(bytes_per_rank);
    const size_t own = static_cast<size_t>(rank()) * bytes_per_rank;
    const size_t bytes = bytes_per_rank * static_cast<size_t>(size());
    return stage("all_gather_bytes", bytes, handle,
                 [=](char *host) {
                   return staging_->to_host(host + own, send, bytes_per_rank, what("all_gather_bytes", "in"));
                 },
                 [=](char *host, CommHandle *inner) {
                   return inner_->all_gather_bytes(host + own, host, bytes_per_rank, inner);
                 },
                 [=](char *host) { return staging_->to_device(recv, host, bytes, what("all_gather_bytes", "out")); });
  }

  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_to_all(bytes_per_rank);
    return stage_exchange("all_to_all_bytes", send, recv, bytes_per_rank, handle,
                          [=](char *in, char *out, CommHandle *inner) {
                            return inner_->all_to_all_bytes(in, out, bytes_per_rank, inner);
                          });
  }

  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_args(*this, send, recv, count, dtype, handle));
    count_all_to_all(count * dtype_size(dtype));
    return stage_exchange("all_to_all", send, recv, count * dtype_size(dtype), handle,
                          [=](char *in, char *out, CommHandle *inner) {
                            return inner_->all_to_all(in, out, count, dtype, inner);
                          });
  }

  // The inner communicator splits; the child stages through the same device with its own streams.
  Status split(int color, int key, std::shared_ptr<Comm> *out) override {
    DSRT_RETURN_IF_ERROR(check_split_args(color, out));
    *out = nullptr;
    inner_->set_step(step());
    std::shared_ptr<Comm> inner;
    DSRT_RETURN_IF_ERROR(inner_->split(color, key, &inner));
    DSRT_RETURN_IF_ERROR(staged_comm_create(std::move(inner), staging_->device, out));
    (*out)->set_step(step());
    std::lock_guard<std::mutex> guard(staging_->mutex);
    return comm_set_compute_stream(**out, staging_->compute);
  }

  // Control values live in host memory: nothing to stage.
  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    count_all_reduce(count * sizeof(double));
    inner_->set_step(step());
    return inner_->all_reduce_f64(values, count, op);
  }
  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    count_all_reduce(count * sizeof(uint64_t));
    inner_->set_step(step());
    return inner_->all_reduce_u64(values, count, op);
  }
  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    if (root >= 0 && root < size()) count_broadcast(bytes, root);
    inner_->set_step(step());
    return inner_->broadcast_bytes(data, bytes, root);
  }
  Status barrier() override {
    inner_->set_step(step());
    return inner_->barrier();
  }

 private:
  std::string what(const char *operation, const char *direction) const {
    return Format("host-staged %s on rank %d: copying %s the staging buffer", operation, rank(),
                  direction[0] == 'i' ? "into" : "out of");
  }

  // Leases a staging buffer, fills it (copy_in), starts the inner collective on it and returns a
  // handle whose wait() copies the result back (copy_out).
  Status stage(const char *operation, size_t bytes, CommHandle *handle, std::function<Status(char *)> copy_in,
               std::function<Status(char *, CommHandle *)> start, std::function<Status(char *)> copy_out) {
    *handle = nullptr;
    inner_->set_step(step());
    DeviceBuffer buffer;
    DSRT_RETURN_IF_ERROR(staging_->lease(std::max<size_t>(bytes, 1), &buffer).with_context(operation));
    Lease lease(staging_, std::move(buffer));
    char *host = lease.data();
    DSRT_RETURN_IF_ERROR(copy_in(host));
    CommHandle inner;
    DSRT_RETURN_IF_ERROR(start(host, &inner));
    *handle = std::make_unique<StagedRequest>(std::move(inner), std::move(lease),
                                              [copy_out = std::move(copy_out), host] { return copy_out(host); });
    return Status::Ok();
  }

  // An all-to-all: send staged into the first half of one lease, the inner exchange into the
  // second half, copied back to recv.
  Status stage_exchange(const char *operation, const void *send, void *recv, size_t block, CommHandle *handle,
                        std::function<Status(char *, char *, CommHandle *)> start) {
    const size_t bytes = block * static_cast<size_t>(size());
    return stage(operation, 2 * bytes, handle,
                 [=](char *host) { return staging_->to_host(host, send, bytes, what(operation, "in")); },
                 [=](char *host, CommHandle *inner) { return start(host, host + bytes, inner); },
                 [=](char *host) { return staging_->to_device(recv, host + bytes, bytes, what(operation, "out")); });
  }

  std::shared_ptr<Comm> inner_;
  std::shared_ptr<Staging> staging_;
};

}  // namespace

Status staged_comm_create(std::shared_ptr<Comm> inner, std::shared_ptr<Device> device, std::shared_ptr<Comm> *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "staged_comm_create: out is NULL");
  *out = nullptr;
  if (!inner || !device) return Error(DSRT_ERR_INVALID_ARGUMENT, "staged_comm_create: no inner communicator or device");
  auto staging = std::make_shared<Staging>();
  staging->device = std::move(device);
  DSRT_RETURN_IF_ERROR(staging->device->create_stream(&staging->copy_stream)
                           .with_context("creating the copy stream of a host-staged communicator"));
  DSRT_RETURN_IF_ERROR(staging->device->create_event(&staging->compute_done)
                           .with_context("creating the ordering event of a host-staged communicator"));
  *out = std::make_shared<StagedComm>(std::move(inner), std::move(staging));
  return Status::Ok();
}

}  // namespace dsrt
