// defines: NcclComm (collectives on a communication stream, host buffers staged through device
// memory, timeouts by polling ncclCommGetAsyncError and aborting; split by ncclCommSplit) behind
// nccl_comm_make (nccl_shared.h); nccl_create.cpp creates the first one. Its handles are
// nccl_request.cpp's, its fp32 block-exchange paths nccl_blocks.cpp's.
#include "comm/nccl/nccl_comm.h"

#ifdef DSRT_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/comm_split.h"
#include "comm/nccl/nccl_shared.h"
#include "cuda/comm_reduce.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace nccl_internal {
namespace {

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : op == ReduceOp::Max ? ncclMax : ncclMin; }

using Body = std::function<Status(const std::vector<Arg> &, const std::string &, Clock::time_point)>;

class NcclComm final : public Comm, public DeviceOrderedComm {
 public:
  explicit NcclComm(std::shared_ptr<Shared> shared) : s_(std::move(shared)) {}

  int rank() const override { return s_->rank; }
  int size() const override { return s_->size; }
  const char *backend() const override { return "nccl"; }

  Status set_compute_stream(DeviceStream stream) override {
    std::lock_guard<std::mutex> guard(s_->mutex);
    s_->compute = static_cast<cudaStream_t>(stream);
    return Status::Ok();
  }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    count_all_reduce(count * dtype_size(dtype));
    const size_t e = dtype_size(dtype);
    std::string what = Format("all_reduce (%s, %zu elements, %s)", dtype_name(dtype), count, reduce_op_name(op));
    return issue(std::move(what), handle, {{buffer, count * e, true, true}},
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   char *b = static_cast<char *>(a[0].dev);
                   if (dtype == DSRT_F32 && op == ReduceOp::Sum)
                     return s_->nccl_locked(ncclAllReduce(b, b, count, ncclFloat32, ncclSum, s_->comm, s_->stream),
                                            "ncclAllReduce", w, until);
                   BlockLayout layout = split_blocks(count, s_->size);
                   char *own = b + layout.offset[s_->rank] * e;
                   DSRT_RETURN_IF_ERROR(reduce_blocks(s_.get(), b, own, layout, dtype, op, w, until));
                   return gather_blocks(s_.get(), own, b, layout, e, w, until);
                 });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    count_reduce_scatter(recv_count * dtype_size(dtype) * size(), recv_count * dtype_size(dtype));
    const size_t e = dtype_size(dtype), n = static_cast<size_t>(s_->size);
    std::string what = Format("reduce_scatter (%s, %zu elements per rank, %s)", dtype_name(dtype), recv_count,
                              reduce_op_name(op));
    return issue(std::move(what), handle,
                 {{const_cast<void *>(send), recv_count * n * e, true, false}, {recv, recv_count * e, false, true}},
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   if (dtype == DSRT_F32 && op == ReduceOp::Sum)
                     return s_->nccl_locked(ncclReduceScatter(a[0].dev, a[1].dev, recv_count, ncclFloat32, ncclSum,
                                                              s_->comm, s_->stream),
                                            "ncclReduceScatter", w, until);
                   return reduce_blocks(s_.get(), a[0].dev, a[1].dev, equal_blocks(recv_count, s_->size), dtype, op, w, until);
                 });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, s_->size);
    count_reduce_scatter(layout.total * dtype_size(dtype), layout.count[s_->rank] * dtype_size(dtype));
    const size_t e = dtype_size(dtype);
    std::string what = Format("reduce_scatter_v (%s, %zu elements in all, %zu here, %s)", dtype_name(dtype),
                              layout.total, layout.count[s_->rank], reduce_op_name(op));
    return issue(std::move(what), handle,
                 {{const_cast<void *>(send), layout.total * e, true, false},
                  {recv, layout.count[s_->rank] * e, false, true}},
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) -> Status {
                   if (!(dtype == DSRT_F32 && op == ReduceOp::Sum))
                     return reduce_blocks(s_.get(), a[0].dev, a[1].dev, layout, dtype, op, w, until);
                   // One ncclReduce per owner, grouped: uneven blocks in fp32.
                   DSRT_RETURN_IF_ERROR(s_->nccl_locked(ncclGroupStart(), "ncclGroupStart", w, until));
                   for (int r = 0; r < s_->size; ++r) {
                     if (layout.count[r] == 0) continue;
                     char *block = static_cast<char *>(a[0].dev) + layout.offset[r] * e;
                     void *out = r == s_->rank ? a[1].dev : block;  // only the root's recvbuff is written
                     ncclResult_t rc = ncclReduce(block, out, layout.count[r], ncclFloat32, ncclSum, r, s_->comm,
                                                  s_->stream);
                     if (rc != ncclSuccess && rc != ncclInProgress) {
                       ncclGroupEnd();
                       return s_->nccl_locked(rc, "ncclReduce", w, until);
                     }
                   }
                   return s_->nccl_locked(ncclGroupEnd(), "ncclGroupEnd (reduce_scatter_v)", w, until);
                 });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    count_all_gather(count * dtype_size(dtype));
    const size_t bytes = count * dtype_size(dtype), n = static_cast<size_t>(s_->size);
    std::string what = Format("all_gather (%s, %zu elements per rank)", dtype_name(dtype), count);
    // In place when send is recv's own block; NCCL accepts exactly that aliasing.
    const bool in_place = static_cast<const char *>(send) == static_cast<char *>(recv) + s_->rank * bytes;
    std::vector<Arg> args{{recv, bytes * n, in_place, true}};
    if (!in_place) args.push_back({const_cast<void *>(send), bytes, true, false});
    return issue(std::move(what), handle, std::move(args),
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   const void *from = in_place ? static_cast<char *>(a[0].dev) + s_->rank * bytes : a[1].dev;
                   return s_->nccl_locked(ncclAllGather(from, a[0].dev, bytes, ncclUint8, s_->comm, s_->stream),
                                          "ncclAllGather", w, until);
                 });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, s_->size);
    count_all_gather(layout.count[s_->rank] * dtype_size(dtype));
    const size_t e = dtype_size(dtype);
    std::string what = Format("all_gather_v (%s, %zu elements in all, %zu here)", dtype_name(dtype), layout.total,
                              layout.count[s_->rank]);
    const bool in_place =
        static_cast<const char *>(send) == static_cast<char *>(recv) + layout.offset[s_->rank] * e;
    std::vector<Arg> args{{recv, layout.total * e, in_place, true}};
    if (!in_place) args.push_back({const_cast<void *>(send), layout.count[s_->rank] * e, true, false});
    return issue(std::move(what), handle, std::move(args),
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   const void *from =
                       in_place ? static_cast<char *>(a[0].dev) + layout.offset[s_->rank] * e : a[1].dev;
                   return gather_blocks(s_.get(), from, a[0].dev, layout, e, w, until);
                 });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    count_broadcast(count * dtype_size(dtype), root);
    const size_t bytes = count * dtype_size(dtype);
    std::string what = Format("broadcast (%s, %zu elements, root %d)", dtype_name(dtype), count, root);
    return issue(std::move(what), handle, {{buffer, bytes, root == s_->rank, true}},
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   return s_->nccl_locked(
                       ncclBroadcast(a[0].dev, a[0].dev, bytes, ncclUint8, root, s_->comm, s_->stream),
                       "ncclBroadcast", w, until);
                 });
  }

  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_gather(bytes_per_rank);
    const size_t n = static_cast<size_t>(s_->size), own = static_cast<size_t>(s_->rank) * bytes_per_rank;
    std::string what = Format("all_gather_bytes (%zu bytes per rank)", bytes_per_rank);
    const bool in_place = static_cast<const char *>(send) == static_cast<char *>(recv) + own;
    std::vector<Arg> args{{recv, bytes_per_rank * n, in_place, true}};
    if (!in_place) args.push_back({const_cast<void *>(send), bytes_per_rank, true, false});
    return issue(std::move(what), handle, std::move(args),
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   const void *from = in_place ? static_cast<char *>(a[0].dev) + own : a[1].dev;
                   return s_->nccl_locked(
                       ncclAllGather(from, a[0].dev, bytes_per_rank, ncclUint8, s_->comm, s_->stream),
                       "ncclAllGather (bytes)", w, until);
                 });
  }

  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_to_all(bytes_per_rank);
    return exchange_blocks(Format("all_to_all_bytes (%zu bytes per rank)", bytes_per_rank), send, recv,
                           bytes_per_rank, handle);
  }

  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_args(*this, send, recv, count, dtype, handle));
    const size_t block = count * dtype_size(dtype);
    count_all_to_all(block);
    return exchange_blocks(Format("all_to_all (%s, %zu elements per rank)", dtype_name(dtype), count), send, recv,
                           block, handle);
  }

  // ncclCommSplit on this communicator's NCCL communicator (non-blocking, polled under the
  // timeout); the colors are exchanged and checked first so that every rank fails alike on a bad
  // one. The child gets its own streams and scratch pool on the same device.
  Status split(int color, int key, std::shared_ptr<Comm> *out) override {
    DSRT_RETURN_IF_ERROR(check_split_args(color, out));
    *out = nullptr;
    SplitPlan plan;
    DSRT_RETURN_IF_ERROR(comm_split_plan(*this, color, key, &plan));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    std::shared_ptr<Shared> child;
    DSRT_RETURN_IF_ERROR(make_shared_state(s_->device, &child));
    child->timeout_s = s_->timeout_s;
    const std::string w = s_->where(Format("split (color %d, key %d)", color, key), step());
    Clock::time_point until = deadline_after(s_->timeout_s);
    ncclComm_t comm = nullptr;
    {
      std::lock_guard<std::mutex> guard(s_->mutex);
      if (s_->broken) return s_->broken_error(w);
      DSRT_CUDA_OK(cudaSetDevice(s_->device), w);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      // In progress on the parent until the child exists: nccl_locked waits that out.
      DSRT_RETURN_IF_ERROR(s_->nccl_locked(ncclCommSplit(s_->comm, plan.color, key, &comm, &config), "ncclCommSplit",
                                           w, until));
    }
    DSRT_RETURN_IF_ERROR(wait_created(comm, w, s_->timeout_s));
    child->comm = comm;
    child->rank = plan.rank;
    child->size = plan.size();
    int nccl_rank = -1, nccl_size = 0;
    if (ncclCommUserRank(comm, &nccl_rank) != ncclSuccess || ncclCommCount(comm, &nccl_size) != ncclSuccess ||
        nccl_rank != plan.rank || nccl_size != plan.size())
      return Error(DSRT_ERR_INTERNAL, "%s: NCCL made rank %d of %d where the colors say rank %d of %d", w.c_str(),
                   nccl_rank, nccl_size, plan.rank, plan.size());
    auto made = std::make_shared<NcclComm>(std::move(child));
    made->set_step(step());
    *out = std::move(made);
    return Status::Ok();
#else
    return Error(DSRT_ERR_UNSUPPORTED, "split needs ncclCommSplit (NCCL 2.18 or newer); this build has NCCL %d.%d: "
                 "rebuild against a newer NCCL", NCCL_MAJOR, NCCL_MINOR);
#endif
  }

  // Control values: host memory staged through the device, blocking.
  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_f64", values, count, op));
    count_all_reduce(count * sizeof(double));
    // NCCL's max/min (fmax/fmin) drop NaN: a NaN flag travels alongside and is put back.
    std::vector<uint64_t> nan_flags(count, 0);
    for (size_t i = 0; i < count; ++i) nan_flags[i] = std::isnan(values[i]) ? 1 : 0;
    std::string what = Format("all_reduce_f64 (%zu values, %s)", count, reduce_op_name(op));
    DSRT_RETURN_IF_ERROR(blocking(std::move(what),
                                  {{values, count * 8, true, true}, {nan_flags.data(), count * 8, true, true}},
                                  [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                                    DSRT_RETURN_IF_ERROR(s_->nccl_locked(ncclGroupStart(), "ncclGroupStart", w, until));
                                    ncclResult_t r1 = ncclAllReduce(a[0].dev, a[0].dev, count, ncclFloat64,
                                                                    nccl_op(op), s_->comm, s_->stream);
                                    ncclResult_t r2 = ncclAllReduce(a[1].dev, a[1].dev, count, ncclUint64, ncclMax,
                                                                    s_->comm, s_->stream);
                                    ncclResult_t r3 = ncclGroupEnd();
                                    DSRT_RETURN_IF_ERROR(s_->nccl_locked(r1, "ncclAllReduce (f64)", w, until));
                                    DSRT_RETURN_IF_ERROR(s_->nccl_locked(r2, "ncclAllReduce (NaN flags)", w, until));
                                    return s_->nccl_locked(r3, "ncclGroupEnd", w, until);
                                  }));
    for (size_t i = 0; i < count; ++i)
      if (nan_flags[i] != 0) values[i] = std::nan("");
    return Status::Ok();
  }

  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_u64", values, count, op));
    count_all_reduce(count * sizeof(uint64_t));
    std::string what = Format("all_reduce_u64 (%zu values, %s)", count, reduce_op_name(op));
    return blocking(std::move(what), {{values, count * 8, true, true}},
                    [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                      return s_->nccl_locked(ncclAllReduce(a[0].dev, a[0].dev, count, ncclUint64, nccl_op(op),
                                                           s_->comm, s_->stream),
                                             "ncclAllReduce (u64)", w, until);
                    });
  }

  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_bytes_args(*this, data, bytes, root));
    count_broadcast(bytes, root);
    std::string what = Format("broadcast_bytes (%zu bytes, root %d)", bytes, root);
    return blocking(std::move(what), {{data, bytes, root == s_->rank, true}},
                    [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                      return s_->nccl_locked(
                          ncclBroadcast(a[0].dev, a[0].dev, bytes, ncclUint8, root, s_->comm, s_->stream),
                          "ncclBroadcast (bytes)", w, until);
                    });
  }

  Status barrier() override {
    int32_t token = 1;
    return blocking("barrier", {{&token, sizeof token, true, true}},
                    [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                      return s_->nccl_locked(
                          ncclAllReduce(a[0].dev, a[0].dev, 1, ncclInt32, ncclSum, s_->comm, s_->stream),
                          "ncclAllReduce (barrier)", w, until);
                    });
  }

 private:
  // All-to-all of block bytes per rank: grouped ncclSend/ncclRecv with every peer, this rank's own
  // block copied on the device.
  Status exchange_blocks(std::string what, const void *send, void *recv, size_t block, CommHandle *handle) {
    const size_t n = static_cast<size_t>(s_->size), me = static_cast<size_t>(s_->rank);
    return issue(std::move(what), handle,
                 {{const_cast<void *>(send), block * n, true, false}, {recv, block * n, false, true}},
                 [=](const std::vector<Arg> &a, const std::string &w, Clock::time_point until) {
                   const char *from = static_cast<const char *>(a[0].dev);
                   char *to = static_cast<char *>(a[1].dev);
                   if (block == 0) return Status::Ok();
                   DSRT_CUDA_OK(cudaMemcpyAsync(to + me * block, from + me * block, block, cudaMemcpyDeviceToDevice,
                                                s_->stream), w + ": this rank's own block");
                   if (n == 1) return Status::Ok();
                   DSRT_RETURN_IF_ERROR(s_->nccl_locked(ncclGroupStart(), "ncclGroupStart", w, until));
                   for (size_t p = 0; p < n; ++p) {
                     if (p == me) continue;
                     ncclResult_t rc = ncclSend(from + p * block, block, ncclUint8, static_cast<int>(p), s_->comm,
                                                s_->stream);
                     if (rc == ncclSuccess || rc == ncclInProgress)
                       rc = ncclRecv(to + p * block, block, ncclUint8, static_cast<int>(p), s_->comm, s_->stream);
                     if (rc != ncclSuccess && rc != ncclInProgress) {
                       ncclGroupEnd();
                       return s_->nccl_locked(rc, "ncclSend/ncclRecv (all_to_all)", w, until);
                     }
                   }
                   return s_->nccl_locked(ncclGroupEnd(), "ncclGroupEnd (all_to_all)", w, until);
                 });
  }

  // Enqueues one collective: ordered after the compute stream, host buffers staged in, body, a
  // completion event. A failure after anything was enqueued leaves the ranks out of step, so it
  // breaks the communicator.
  Status issue(std::string what, CommHandle *handle, std::vector<Arg> args, const Body &body) {
    *handle = nullptr;
    const int64_t at_step = step();
    std::string w = s_->where(what, at_step);
    Clock::time_point until = deadline_after(s_->timeout_s);
    std::lock_guard<std::mutex> guard(s_->mutex);
    if (s_->broken) return s_->broken_error(w);
    DSRT_CUDA_OK(cudaSetDevice(s_->device), w);
    bool any_host = false;
    for (Arg &a : args) {
      a.dev = a.ptr;
      if (a.bytes == 0 || a.ptr == nullptr) continue;
      cudaPointerAttributes attr;
      DSRT_CUDA_OK(cudaPointerGetAttributes(&attr, a.ptr), w);
      a.staged = attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged;
      any_host = any_host || a.staged;
    }
    Status status = enqueue_locked(args, any_host, body, w, until);
    cudaEvent_t done = nullptr;
    if (status.ok()) status = cuda_status(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate", w);
    if (status.ok()) status = cuda_status(cudaEventRecord(done, s_->stream), "cudaEventRecord", w);
    if (!status.ok()) {
      for (Arg &a : args)
        if (a.staged && a.dev != a.ptr && a.dev != nullptr) cudaFreeAsync(a.dev, s_->stream);
      if (done != nullptr) cudaEventDestroy(done);
      if (!s_->broken) return s_->break_locked(status);
      return status;
    }
    *handle = nccl_request_make(s_, done, std::move(args), std::move(w), until);
    return Status::Ok();
  }

  Status enqueue_locked(std::vector<Arg> &args, bool any_host, const Body &body, const std::string &w,
                        Clock::time_point until) {
    if (any_host) {
      // Copies from pageable host memory synchronize the stream: drain it first, under the deadline.
      cudaEvent_t idle = nullptr;
      DSRT_CUDA_OK(cudaEventCreateWithFlags(&idle, cudaEventDisableTiming), w);
      Status st = cuda_status(cudaEventRecord(idle, s_->stream), "cudaEventRecord", w);
      s_->mutex.unlock();
      if (st.ok()) st = s_->wait_event(idle, w + " (waiting for earlier collectives)", until);
      s_->mutex.lock();
      cudaEventDestroy(idle);
      DSRT_RETURN_IF_ERROR(st);
      if (s_->broken) return s_->broken_error(w);
    }
    DSRT_CUDA_OK(cudaEventRecord(s_->ready, s_->compute), w + ": ordering after the compute stream");
    DSRT_CUDA_OK(cudaStreamWaitEvent(s_->stream, s_->ready, 0), w + ": ordering after the compute stream");
    for (Arg &a : args) {
      if (!a.staged) continue;
      a.dev = nullptr;
      DSRT_CUDA_OK(cudaMallocFromPoolAsync(&a.dev, a.bytes, s_->pool, s_->stream),
                   w + Format(": %zu bytes of device memory to stage a host buffer", a.bytes));
      if (a.in)
        DSRT_CUDA_OK(cudaMemcpyAsync(a.dev, a.ptr, a.bytes, cudaMemcpyHostToDevice, s_->stream),
                     w + ": staging a host buffer");
    }
    return body(args, w, until);
  }

  Status blocking(std::string what, std::vector<Arg> args, const Body &body) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(issue(std::move(what), &handle, std::move(args), body));
    return handle->wait();
  }

  std::shared_ptr<Shared> s_;
};

}  // namespace

std::shared_ptr<Comm> nccl_comm_make(std::shared_ptr<Shared> shared) { return std::make_shared<NcclComm>(std::move(shared)); }

}  // namespace nccl_internal
}  // namespace dsrt

#endif  // DSRT_HAVE_NCCL
