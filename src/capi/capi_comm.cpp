// defines: struct dsrt_comm and the dsrt_comm_* / dsrt_nccl_* entry points.
#include <memory>
#include <utility>

#include "capi/guard.h"
#include "capi/handles.h"
#include "comm/comm.h"
#include "comm/nccl/nccl_comm.h"
#include "dsrt.h"

struct dsrt_comm {
  std::shared_ptr<dsrt::Comm> comm;
};

namespace dsrt {

std::shared_ptr<Comm> comm_from_handle(const dsrt_comm *handle) {
  return handle != nullptr ? handle->comm : nullptr;
}

namespace {

// Wraps a created communicator in a handle the caller owns.
Status hand_out(std::shared_ptr<Comm> comm, dsrt_comm **out) {
  auto handle = std::make_unique<dsrt_comm>();
  handle->comm = std::move(comm);
  *out = handle.release();
  return Status::Ok();
}

Status require_out(const char *function, dsrt_comm **out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: argument 'out' is NULL", function);
  *out = nullptr;
  return Status::Ok();
}

}  // namespace
}  // namespace dsrt

extern "C" {

DSRT_API dsrt_status dsrt_comm_create_local(dsrt_comm **out) {
  return dsrt::guarded(__func__, [&] {
    DSRT_RETURN_IF_ERROR(dsrt::require_out("dsrt_comm_create_local", out));
    std::shared_ptr<dsrt::Comm> comm;
    DSRT_RETURN_IF_ERROR(dsrt::comm_create_local(&comm));
    return dsrt::hand_out(std::move(comm), out);
  });
}

DSRT_API dsrt_status dsrt_comm_create_from_env(dsrt_comm **out) {
  return dsrt::guarded(__func__, [&] {
    DSRT_RETURN_IF_ERROR(dsrt::require_out("dsrt_comm_create_from_env", out));
    std::shared_ptr<dsrt::Comm> comm;
    DSRT_RETURN_IF_ERROR(dsrt::comm_create_from_env(&comm).with_context("dsrt_comm_create_from_env"));
    return dsrt::hand_out(std::move(comm), out);
  });
}

DSRT_API dsrt_status dsrt_nccl_unique_id(void *out128) {
  return dsrt::guarded(__func__, [&] {
    if (out128 == nullptr)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_nccl_unique_id: argument 'out128' is NULL");
    return dsrt::nccl_unique_id(out128).with_context("dsrt_nccl_unique_id");
  });
}

DSRT_API dsrt_status dsrt_comm_create_nccl(const void *id128, int32_t rank, int32_t world_size, int32_t device,
                                           dsrt_comm **out) {
  return dsrt::guarded(__func__, [&] {
    DSRT_RETURN_IF_ERROR(dsrt::require_out("dsrt_comm_create_nccl", out));
    if (id128 == nullptr)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_comm_create_nccl: argument 'id128' is NULL");
    if (world_size < 1 || rank < 0 || rank >= world_size)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT,
                         "dsrt_comm_create_nccl: rank %d is not in 0..world_size-1 (world_size %d)", rank,
                         world_size);
    if (device < 0)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_comm_create_nccl: device %d is not a CUDA ordinal", device);
    std::shared_ptr<dsrt::Comm> comm;
    DSRT_RETURN_IF_ERROR(
        dsrt::nccl_comm_create(id128, rank, world_size, device, &comm).with_context("dsrt_comm_create_nccl"));
    return dsrt::hand_out(std::move(comm), out);
  });
}

DSRT_API int32_t dsrt_comm_rank(const dsrt_comm *comm) { return comm != nullptr ? comm->comm->rank() : -1; }

DSRT_API int32_t dsrt_comm_world_size(const dsrt_comm *comm) { return comm != nullptr ? comm->comm->size() : -1; }

DSRT_API dsrt_status dsrt_comm_barrier(dsrt_comm *comm) {
  return dsrt::guarded(__func__, [&] {
    if (comm == nullptr) return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_comm_barrier: argument 'comm' is NULL");
    return comm->comm->barrier().with_context("dsrt_comm_barrier");
  });
}

DSRT_API void dsrt_comm_destroy(dsrt_comm *comm) {
  // Destroying the last reference joins the worker thread; nothing may escape the ABI.
  try {
    std::unique_ptr<dsrt_comm> owned(comm);
  } catch (...) {
  }
}

}  // extern "C"
