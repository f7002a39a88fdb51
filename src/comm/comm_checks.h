// comm_checks.h -- argument checks every communicator applies before it touches a buffer, the
// already-completed handle, and the timeout read from DSRT_COMM_TIMEOUT_S.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/comm.h"

namespace dsrt {

const char *reduce_op_name(ReduceOp op);

// Rank r's block of a reduce-scatter or all-gather is count[r] elements at element offset[r].
struct BlockLayout {
  std::vector<size_t> count;
  std::vector<size_t> offset;
  size_t total = 0;
};
BlockLayout equal_blocks(size_t block_count, int size);
// count elements split into size blocks of ceil(count/size) (the last ones shorter or empty).
BlockLayout split_blocks(size_t count, int size);
// Blocks of counts[r] laid out rank after rank (counts has size entries).
BlockLayout blocks_from_counts(const size_t *counts, int size);

// Seconds a collective may take before it fails (DSRT_COMM_TIMEOUT_S, default 120). A value that
// is not a positive number is reported once and the default is used.
double comm_timeout_seconds_from_env();
// The timeout the MPI and TCP communicators apply to each collective as it starts: the config key
// "comm_timeout" of the last engine created with it (comm_set_timeout_seconds, process-wide), else
// created_s, the communicator's own (DSRT_COMM_TIMEOUT_S when it was created, or the default).
// NCCL communicators keep the value of their creation.
double comm_timeout_seconds(double created_s);
void comm_set_timeout_seconds(double seconds);  // <= 0: back to each communicator's own

// A handle whose wait() returns status at once (for local copies and zero-length collectives).
CommHandle completed_handle(Status status = Status::Ok());

// Each check names the operation and the argument that was wrong.
Status check_all_reduce_args(const Comm &comm, const void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op,
                             const CommHandle *handle);
Status check_reduce_scatter_args(const Comm &comm, const void *send, const void *recv, size_t recv_count,
                                 dsrt_dtype dtype, ReduceOp op, const CommHandle *handle);
Status check_reduce_scatter_v_args(const Comm &comm, const void *send, const void *recv, const size_t *recv_counts,
                                   dsrt_dtype dtype, ReduceOp op, const CommHandle *handle);
Status check_all_gather_v_args(const Comm &comm, const void *send, const void *recv, const size_t *counts,
                               dsrt_dtype dtype, const CommHandle *handle);
Status check_all_gather_args(const Comm &comm, const void *send, const void *recv, size_t count, dsrt_dtype dtype,
                             const CommHandle *handle);
Status check_broadcast_args(const Comm &comm, const void *buffer, size_t count, dsrt_dtype dtype, int root,
                            const CommHandle *handle);
Status check_all_gather_bytes_args(const Comm &comm, const void *send, const void *recv, size_t bytes_per_rank,
                                   const CommHandle *handle);
Status check_all_to_all_args(const Comm &comm, const void *send, const void *recv, size_t count, dsrt_dtype dtype,
                             const CommHandle *handle);
Status check_all_to_all_bytes_args(const Comm &comm, const void *send, const void *recv, size_t bytes_per_rank,
                                   const CommHandle *handle);
Status check_split_args(int color, const std::shared_ptr<Comm> *out);
Status check_control_args(const char *operation, const void *values, size_t count, ReduceOp op);
Status check_broadcast_bytes_args(const Comm &comm, const void *data, size_t bytes, int root);

}  // namespace dsrt
