// defines: LocalComm, the world of one rank: reductions are the identity and gathers are copies,
// with the same argument checks as every other communicator.
#include <cstring>

#include "comm/comm.h"
#include "comm/comm_checks.h"
#include "util/half.h"

namespace dsrt {
namespace {

void copy_unless_same(void *dst, const void *src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backend() const override { return "local"; }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    copy_unless_same(recv, send, recv_count * dtype_size(dtype));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    copy_unless_same(recv, send, recv_counts[0] * dtype_size(dtype));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    copy_unless_same(recv, send, counts[0] * dtype_size(dtype));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    copy_unless_same(recv, send, count * dtype_size(dtype));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    copy_unless_same(recv, send, bytes_per_rank);
    *handle = completed_handle();
    return Status::Ok();
  }

  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_bytes_args(*this, send, recv, bytes_per_rank, handle));
    copy_unless_same(recv, send, bytes_per_rank);
    *handle = completed_handle();
    return Status::Ok();
  }

  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_args(*this, send, recv, count, dtype, handle));
    copy_unless_same(recv, send, count * dtype_size(dtype));
    *handle = completed_handle();
    return Status::Ok();
  }

  Status split(int color, int, std::shared_ptr<Comm> *out) override {
    DSRT_RETURN_IF_ERROR(check_split_args(color, out));
    if (color < 0)
      return Error(DSRT_ERR_INVALID_ARGUMENT, "split: color %d is negative; colors must be >= 0", color);
    *out = std::make_shared<LocalComm>();
    return Status::Ok();
  }

  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    return check_control_args("all_reduce_f64", values, count, op);
  }
  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    return check_control_args("all_reduce_u64", values, count, op);
  }
  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    return check_broadcast_bytes_args(*this, data, bytes, root);
  }
  Status barrier() override { return Status::Ok(); }
};

}  // namespace

Status comm_create_local(std::shared_ptr<Comm> *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "comm_create_local: out is NULL");
  *out = std::make_shared<LocalComm>();
  return Status::Ok();
}

}  // namespace dsrt
