// comm.h -- the communicator interface the engine partitions over: local (one rank), MPI (CPU
// buffers, and device buffers staged through the host), NCCL (GPU buffers).
//
// Collectives are asynchronous: they return a handle, and the buffers must not be touched until
// handle->wait() returns. Handles complete in the order they were issued on one communicator.
// 16-bit buffers (fp16, bf16) are reduced with fp32 accumulation and rounded once, since MPI has
// no 16-bit sum. A wait that exceeds the timeout (config "comm_timeout" or DSRT_COMM_TIMEOUT_S seconds, default 120)
// returns DSRT_ERR_COMM naming the operation, the rank and the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

enum class ReduceOp { Sum, Max, Min };

class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual Status wait() = 0;
};
using CommHandle = std::unique_ptr<CommRequest>;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char *backend() const = 0;  // "local", "mpi", "nccl"

  // In place: buffer holds count elements on every rank; afterwards, the reduction.
  virtual Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) = 0;
  // send holds size()*recv_count elements; recv gets this rank's reduced block of recv_count.
  virtual Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                                CommHandle *handle) = 0;
  // Uneven form (MPI_Reduce_scatter): send holds sum(recv_counts) elements laid out rank by rank;
  // rank r receives its reduced block of recv_counts[r] (recv_counts has size() entries).
  virtual Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype,
                                  ReduceOp op, CommHandle *handle) = 0;
  // send holds count elements; recv gets size()*count (rank r's block at r*count). send may be
  // recv + rank()*count (in place).
  virtual Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) = 0;
  // Uneven form (MPI_Allgatherv): send holds counts[rank()] elements; recv gets sum(counts), rank
  // r's block at counts[0] + ... + counts[r-1]. send may be that block of recv (in place).
  virtual Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                              CommHandle *handle) = 0;
  virtual Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) = 0;

  // Blocking helpers for small control values (norms, flags, agreement checks, manifests).
  virtual Status all_reduce_f64(double *values, size_t count, ReduceOp op) = 0;
  virtual Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) = 0;
  virtual Status broadcast_bytes(void *data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;

  // The training step reported in timeout and disagreement messages.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // Blocking forms of the collectives (a communicator may run them on the caller's thread).
  virtual Status all_reduce_sync(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(all_reduce(buffer, count, dtype, op, &handle));
    return handle->wait();
  }
  virtual Status reduce_scatter_sync(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(reduce_scatter(send, recv, recv_count, dtype, op, &handle));
    return handle->wait();
  }
  virtual Status all_gather_sync(const void *send, void *recv, size_t count, dsrt_dtype dtype) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(all_gather(send, recv, count, dtype, &handle));
    return handle->wait();
  }
  virtual Status broadcast_sync(void *buffer, size_t count, dsrt_dtype dtype, int root) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(broadcast(buffer, count, dtype, root, &handle));
    return handle->wait();
  }

 private:
  int64_t step_ = 0;
};

// A world of one rank.
Status comm_create_local(std::shared_ptr<Comm> *out);
// The world the process was launched into (see dsrt_comm_create_from_env).
Status comm_create_from_env(std::shared_ptr<Comm> *out);

}  // namespace dsrt
