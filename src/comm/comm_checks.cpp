// defines: argument checks shared by the communicators, completed handles, the timeout setting.
#include "comm/comm_checks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "util/env_number.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

// Long enough for the imbalance between ranks of a training step (a checkpoint shard, an NVMe
// optimizer pass), short enough that survivors of a dead rank fail within two minutes.
constexpr double kDefaultTimeoutSeconds = 120.0;
std::atomic<double> g_timeout_override{0.0};

class CompletedRequest final : public CommRequest {
 public:
  explicit CompletedRequest(Status status) : status_(std::move(status)) {}
  Status wait() override { return status_; }

 private:
  Status status_;
};

bool valid_dtype(dsrt_dtype dtype) { return dtype == DSRT_F32 || dtype == DSRT_F16 || dtype == DSRT_BF16; }
bool valid_op(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Min; }

// True when [a, a+a_bytes) and [b, b+b_bytes) share a byte.
bool overlaps(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

Status check_common(const char *operation, const void *handle, dsrt_dtype dtype) {
  if (handle == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the handle out-parameter is NULL", operation);
  if (!valid_dtype(dtype))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: dtype %d is not one of DSRT_F32, DSRT_F16, DSRT_BF16", operation,
                 static_cast<int>(dtype));
  return Status::Ok();
}

Status check_buffer(const char *operation, const char *name, const void *buffer, size_t count) {
  if (buffer == nullptr && count > 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: %s is NULL but the count is %zu", operation, name, count);
  return Status::Ok();
}

Status check_op(const char *operation, ReduceOp op) {
  if (!valid_op(op))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: reduce op %d is not Sum, Max or Min", operation,
                 static_cast<int>(op));
  return Status::Ok();
}

Status check_root(const char *operation, const Comm &comm, int root) {
  if (root < 0 || root >= comm.size())
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank of this communicator (ranks 0..%d)", operation,
                 root, comm.size() - 1);
  return Status::Ok();
}

}  // namespace

const char *reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "unknown";
}

double comm_timeout_seconds_from_env() {
  // A day: far above any legitimate collective, far below where seconds stop fitting a deadline.
  return env_number("DSRT_COMM_TIMEOUT_S", kDefaultTimeoutSeconds, {0.001, 86400.0, false, "seconds"});
}

void comm_set_timeout_seconds(double seconds) {
  g_timeout_override.store(std::isfinite(seconds) && seconds > 0 ? seconds : 0.0);
}

double comm_timeout_seconds(double created_s) {
  const double override_s = g_timeout_override.load();
  return override_s > 0 ? override_s : created_s;
}

BlockLayout equal_blocks(size_t block_count, int size) {
  BlockLayout layout;
  for (int r = 0; r < size; ++r) {
    layout.count.push_back(block_count);
    layout.offset.push_back(layout.total);
    layout.total += block_count;
  }
  return layout;
}

BlockLayout split_blocks(size_t count, int size) {
  BlockLayout layout;
  size_t block = (count + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
  for (int r = 0; r < size; ++r) {
    size_t begin = std::min(count, block * static_cast<size_t>(r));
    size_t end = std::min(count, begin + block);
    layout.count.push_back(end - begin);
    layout.offset.push_back(begin);
  }
  layout.total = count;
  return layout;
}

BlockLayout blocks_from_counts(const size_t *counts, int size) {
  BlockLayout layout;
  for (int r = 0; r < size; ++r) {
    layout.count.push_back(counts[r]);
    layout.offset.push_back(layout.total);
    layout.total += counts[r];
  }
  return layout;
}

CommHandle completed_handle(Status status) { return std::make_unique<CompletedRequest>(std::move(status)); }

Status check_all_reduce_args(const Comm &, const void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op,
                             const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("all_reduce", handle, dtype));
  DSRT_RETURN_IF_ERROR(check_op("all_reduce", op));
  return check_buffer("all_reduce", "buffer", buffer, count);
}

// send holds layout.total elements; the output block (this rank's, of layout) lands in out_block,
// which may be exactly this rank's block of whole (in place) or must not overlap whole at all.
static Status check_blocks(const char *operation, const char *whole_name, const void *whole, const char *part_name,
                           const void *part, const BlockLayout &layout, int rank, dsrt_dtype dtype) {
  size_t element = dtype_size(dtype);
  size_t own = layout.count[rank];
  DSRT_RETURN_IF_ERROR(check_buffer(operation, whole_name, whole, layout.total));
  DSRT_RETURN_IF_ERROR(check_buffer(operation, part_name, part, own));
  const char *own_block = static_cast<const char *>(whole) + layout.offset[rank] * element;
  if (part != own_block && overlaps(whole, layout.total * element, part, own * element))
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "%s: %s overlaps %s other than at exactly this rank's own block (element offset %zu); use separate "
                 "buffers, or exactly that block for in place",
                 operation, part_name, whole_name, layout.offset[rank]);
  return Status::Ok();
}

static Status check_counts(const char *operation, const size_t *counts) {
  if (counts == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the per-rank counts array is NULL", operation);
  return Status::Ok();
}

Status check_reduce_scatter_args(const Comm &comm, const void *send, const void *recv, size_t recv_count,
                                 dsrt_dtype dtype, ReduceOp op, const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("reduce_scatter", handle, dtype));
  DSRT_RETURN_IF_ERROR(check_op("reduce_scatter", op));
  return check_blocks("reduce_scatter", "send", send, "recv", recv, equal_blocks(recv_count, comm.size()),
                      comm.rank(), dtype);
}

Status check_reduce_scatter_v_args(const Comm &comm, const void *send, const void *recv, const size_t *recv_counts,
                                   dsrt_dtype dtype, ReduceOp op, const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("reduce_scatter_v", handle, dtype));
  DSRT_RETURN_IF_ERROR(check_op("reduce_scatter_v", op));
  DSRT_RETURN_IF_ERROR(check_counts("reduce_scatter_v", recv_counts));
  return check_blocks("reduce_scatter_v", "send", send, "recv", recv, blocks_from_counts(recv_counts, comm.size()),
                      comm.rank(), dtype);
}

Status check_all_gather_args(const Comm &comm, const void *send, const void *recv, size_t count, dsrt_dtype dtype,
                             const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("all_gather", handle, dtype));
  return check_blocks("all_gather", "recv", recv, "send", send, equal_blocks(count, comm.size()), comm.rank(), dtype);
}

Status check_all_gather_v_args(const Comm &comm, const void *send, const void *recv, const size_t *counts,
                               dsrt_dtype dtype, const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("all_gather_v", handle, dtype));
  DSRT_RETURN_IF_ERROR(check_counts("all_gather_v", counts));
  return check_blocks("all_gather_v", "recv", recv, "send", send, blocks_from_counts(counts, comm.size()),
                      comm.rank(), dtype);
}

Status check_broadcast_args(const Comm &comm, const void *buffer, size_t count, dsrt_dtype dtype, int root,
                            const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("broadcast", handle, dtype));
  DSRT_RETURN_IF_ERROR(check_root("broadcast", comm, root));
  return check_buffer("broadcast", "buffer", buffer, count);
}

Status check_all_gather_bytes_args(const Comm &comm, const void *send, const void *recv, size_t bytes_per_rank,
                                   const CommHandle *handle) {
  const char *operation = "all_gather_bytes";
  if (handle == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the handle out-parameter is NULL", operation);
  const size_t total = bytes_per_rank * static_cast<size_t>(comm.size());
  DSRT_RETURN_IF_ERROR(check_buffer(operation, "recv", recv, total));
  DSRT_RETURN_IF_ERROR(check_buffer(operation, "send", send, bytes_per_rank));
  const char *own = static_cast<const char *>(recv) + static_cast<size_t>(comm.rank()) * bytes_per_rank;
  if (send != own && overlaps(recv, total, send, bytes_per_rank))
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "%s: send overlaps recv other than at exactly this rank's own block (byte offset %zu); use separate "
                 "buffers, or exactly that block for in place",
                 operation, static_cast<size_t>(comm.rank()) * bytes_per_rank);
  return Status::Ok();
}

static Status check_exchange(const char *operation, const Comm &comm, const void *send, const void *recv,
                             size_t block_bytes) {
  const size_t total = block_bytes * static_cast<size_t>(comm.size());
  DSRT_RETURN_IF_ERROR(check_buffer(operation, "send", send, total));
  DSRT_RETURN_IF_ERROR(check_buffer(operation, "recv", recv, total));
  if (overlaps(send, total, recv, total))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: send and recv overlap; it has no in-place form, use separate buffers",
                 operation);
  return Status::Ok();
}

Status check_all_to_all_args(const Comm &comm, const void *send, const void *recv, size_t count, dsrt_dtype dtype,
                             const CommHandle *handle) {
  DSRT_RETURN_IF_ERROR(check_common("all_to_all", handle, dtype));
  return check_exchange("all_to_all", comm, send, recv, count * dtype_size(dtype));
}

Status check_all_to_all_bytes_args(const Comm &comm, const void *send, const void *recv, size_t bytes_per_rank,
                                   const CommHandle *handle) {
  if (handle == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "all_to_all_bytes: the handle out-parameter is NULL");
  return check_exchange("all_to_all_bytes", comm, send, recv, bytes_per_rank);
}

Status check_split_args(int color, const std::shared_ptr<Comm> *out) {
  (void)color;  // checked collectively (comm_split_plan), so that every rank fails alike
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "split: the out-parameter is NULL");
  return Status::Ok();
}

Status check_control_args(const char *operation, const void *values, size_t count, ReduceOp op) {
  DSRT_RETURN_IF_ERROR(check_op(operation, op));
  DSRT_RETURN_IF_ERROR(check_buffer(operation, "values", values, count));
  if (count > (1u << 30))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: %zu values is too many for a control reduction (at most 2^30)",
                 operation, count);
  return Status::Ok();
}

Status check_broadcast_bytes_args(const Comm &comm, const void *data, size_t bytes, int root) {
  DSRT_RETURN_IF_ERROR(check_root("broadcast_bytes", comm, root));
  return check_buffer("broadcast_bytes", "data", data, bytes);
}

}  // namespace dsrt
