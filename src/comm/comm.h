// comm.h -- the communicator interface the engine partitions over: local (one rank), MPI (CPU
// buffers, and device buffers staged through the host), NCCL (GPU buffers).
//
// Collectives are asynchronous: they return a handle, and the buffers must not be touched until
// handle->wait() returns. Handles complete in the order they were issued on one communicator.
// 16-bit buffers (fp16, bf16) are reduced with fp32 accumulation and rounded once, since MPI has
// no 16-bit sum. A wait that exceeds the timeout (config "comm_timeout" or DSRT_COMM_TIMEOUT_S seconds, default 120)
// returns DSRT_ERR_COMM naming the operation, the rank and the step.
//
// Traffic: every communicator counts the bytes this rank puts on the wire, per collective kind,
// from the moment it is created (traffic()). The figure is what a bandwidth-optimal ring or
// pairwise algorithm sends from this rank for the collective's size, whatever the backend does
// underneath (NCCL's trees, MPI's latency-optimized small all-reduce), so that figures compare
// between backends and between ZeRO layouts. With n ranks:
//   all_gather(_v, _bytes):   (n-1) * this rank's block          (it sends its block to n-1 peers)
//   reduce_scatter(_v):       total - this rank's block          ((n-1)/n * total when even)
//   all_reduce:               2 * (n-1) * total / n              (a reduce-scatter, then an all-gather)
//   all_to_all(_bytes):       (n-1) * block                      (every block but its own)
//   broadcast:                total on the root, 0 elsewhere
// Control helpers count too: all_reduce_f64/u64 as all_reduce, broadcast_bytes as broadcast
// (barrier moves no payload). A world of one rank counts nothing. A communicator made by split()
// counts its own traffic, not its parent's; a host-staged communicator counts what it issues (its
// inner host communicator counts the same bytes again in its own figures).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

enum class ReduceOp { Sum, Max, Min };

// Bytes this rank has put on the wire per collective kind (see the top of this file).
struct CommTraffic {
  uint64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0, all_to_all = 0, broadcast = 0;
  uint64_t total() const { return all_reduce + reduce_scatter + all_gather + all_to_all + broadcast; }
};
enum class CommKind { AllReduce = 0, ReduceScatter, AllGather, AllToAll, Broadcast };

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

  // Data movement of opaque bytes (quantized blocks, packed sign bits): no reduction.
  // all_gather_bytes: send holds bytes_per_rank bytes; recv gets size()*bytes_per_rank, rank r's
  // at r*bytes_per_rank; send may be recv + rank()*bytes_per_rank (in place).
  virtual Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) = 0;
  // all_to_all_bytes: send and recv hold size()*bytes_per_rank bytes; block r of send goes to rank
  // r, block r of recv came from rank r. send and recv must not overlap (no in-place form).
  virtual Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) = 0;
  // send holds size()*count elements, block r goes to rank r; recv block r came from rank r.
  // send and recv must not overlap.
  virtual Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) = 0;
  // Collective over this communicator: a communicator of the ranks passing the same color,
  // ordered by key, then by rank. color must be >= 0 on every rank (every rank gets a
  // communicator; one alone with its color gets a world of one). Blocking: it exchanges the colors
  // and keys over this communicator first, so a rank that passes a bad color makes every rank fail
  // with the same message. The new communicator is independent of this one (its own ordering, its
  // own traffic) and may outlive it.
  virtual Status split(int color, int key, std::shared_ptr<Comm> *out) = 0;

  // Blocking helpers for small control values (norms, flags, agreement checks, manifests).
  virtual Status all_reduce_f64(double *values, size_t count, ReduceOp op) = 0;
  virtual Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) = 0;
  virtual Status broadcast_bytes(void *data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;

  // The training step reported in timeout and disagreement messages.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // Bytes this rank has put on the wire per collective kind since creation (see the top of this file).
  CommTraffic traffic() const;

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

 protected:
  // Each backend counts every collective it issues, after its argument checks passed.
  void count_traffic(CommKind kind, uint64_t bytes);
  void count_all_reduce(size_t total_bytes);
  void count_reduce_scatter(size_t total_bytes, size_t own_bytes);
  void count_all_gather(size_t own_bytes);
  void count_all_to_all(size_t block_bytes);
  void count_broadcast(size_t bytes, int root);

 private:
  int64_t step_ = 0;
  std::atomic<uint64_t> traffic_[5] = {};
};

// A world of one rank.
Status comm_create_local(std::shared_ptr<Comm> *out);
// The world the process was launched into (see dsrt_comm_create_from_env).
Status comm_create_from_env(std::shared_ptr<Comm> *out);

}  // namespace dsrt
