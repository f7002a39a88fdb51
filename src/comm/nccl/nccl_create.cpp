// defines: the NCCL communicator's creation: nccl_unique_id, nccl_comm_create (non-blocking,
// config.blocking = 0, polled so that it can be abandoned after DSRT_COMM_TIMEOUT_S) and the
// helpers split() shares (make_shared_state, wait_created).
#include "comm/nccl/nccl_comm.h"

#ifdef DSRT_HAVE_NCCL
#include <cstring>

#include "comm/comm_checks.h"
#include "comm/nccl/nccl_shared.h"

namespace dsrt {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL's unique id is not 128 bytes");

namespace nccl_internal {

Status make_shared_state(int device, std::shared_ptr<Shared> *out) {
  auto shared = std::make_shared<Shared>();
  shared->device = device;
  const std::string where = Format("NCCL communicator on cuda:%d", device);
  DSRT_CUDA_OK(cudaSetDevice(device), where);
  DSRT_CUDA_OK(cudaStreamCreateWithFlags(&shared->stream, cudaStreamNonBlocking), where);
  DSRT_CUDA_OK(cudaStreamCreateWithFlags(&shared->copy_stream, cudaStreamNonBlocking), where);
  DSRT_CUDA_OK(cudaEventCreateWithFlags(&shared->ready, cudaEventDisableTiming), where);
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  DSRT_CUDA_OK(cudaMemPoolCreate(&shared->pool, &props), where + ": scratch memory pool");
  uint64_t keep = UINT64_MAX;  // keep freed scratch for the next collective
  DSRT_CUDA_OK(cudaMemPoolSetAttribute(shared->pool, cudaMemPoolAttrReleaseThreshold, &keep), where);
  *out = std::move(shared);
  return Status::Ok();
}

Status wait_created(ncclComm_t comm, const std::string &where, double timeout_s) {
  ncclResult_t rc = ncclInProgress;
  Clock::time_point until = deadline_after(timeout_s);
  while (comm != nullptr) {
    if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) rc = ncclInternalError;
    if (rc != ncclInProgress) break;
    if (Clock::now() >= until) {
      ncclCommAbort(comm);
      return Error(DSRT_ERR_COMM, "%s: creating the NCCL communicator did not complete within %g s: a rank did not "
                                  "join (still starting, died, or got another id), or the ranks cannot reach each "
                                  "other (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO tells more)",
                   where.c_str(), timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (comm == nullptr) return Error(DSRT_ERR_COMM, "%s: NCCL returned no communicator", where.c_str());
  if (rc != ncclSuccess) {
    std::string detail = ncclGetLastError(comm);
    ncclCommAbort(comm);
    return Error(DSRT_ERR_COMM, "%s: creating the NCCL communicator failed: %s (%s)%s", where.c_str(),
                 ncclGetErrorString(rc), detail.c_str(),
                 rc == ncclInvalidUsage ? "; two ranks on one GPU are refused by NCCL: give each rank its own GPU or "
                                          "use DSRT_COMM=staged under mpirun"
                                        : "");
  }
  return Status::Ok();
}

}  // namespace nccl_internal

using nccl_internal::Clock;
using nccl_internal::cuda_status;
using nccl_internal::make_shared_state;
using nccl_internal::Shared;
using nccl_internal::wait_created;

Status nccl_unique_id(void *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "nccl_unique_id: out is NULL");
  ncclUniqueId id;
  ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess)
    return Error(DSRT_ERR_COMM, "ncclGetUniqueId failed: %s (%s); check the network interfaces NCCL may use "
                                "(NCCL_SOCKET_IFNAME)", ncclGetErrorString(rc), ncclGetLastError(nullptr));
  std::memcpy(out, &id, sizeof id);
  return Status::Ok();
}

Status nccl_comm_create(const void *id, int rank, int world_size, int device, std::shared_ptr<Comm> *out) {
  if (out == nullptr || id == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "nccl_comm_create: NULL argument");
  *out = nullptr;
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "nccl_comm_create: rank %d is not in 0..%d", rank, world_size - 1);
  int visible = 0;
  cudaError_t err = cudaGetDeviceCount(&visible);
  if (err != cudaSuccess || visible == 0) {
    cudaGetLastError();
    return Error(DSRT_ERR_DEVICE, "NCCL needs a CUDA GPU, but none is visible to this process (%s): check the "
                                  "driver, nvidia-smi and CUDA_VISIBLE_DEVICES, or use MPI (dsrt_comm_create_from_env "
                                  "under mpirun with DSRT_COMM=mpi)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
  }
  if (device < 0 || device >= visible)
    return Error(DSRT_ERR_DEVICE, "NCCL rank %d: CUDA device %d does not exist (%d visible)", rank, device, visible);
  std::shared_ptr<Shared> shared;
  DSRT_RETURN_IF_ERROR(make_shared_state(device, &shared));
  shared->rank = rank;
  shared->size = world_size;
  shared->timeout_s = comm_timeout_seconds_from_env();
  const std::string where = Format("NCCL rank %d of %d on cuda:%d", rank, world_size, device);
  ncclUniqueId uid;
  std::memcpy(&uid, id, sizeof uid);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // creation returns at once and is polled, so a missing rank times out
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, world_size, uid, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string detail = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
    if (comm != nullptr) ncclCommAbort(comm);
    return Error(DSRT_ERR_COMM, "%s: ncclCommInitRankConfig failed: %s (%s)%s", where.c_str(), ncclGetErrorString(rc),
                 detail.c_str(),
                 rc == ncclInvalidUsage ? "; two ranks on one GPU are refused by NCCL: give each rank its own GPU or "
                                          "use DSRT_COMM=staged under mpirun"
                                        : "");
  }
  DSRT_RETURN_IF_ERROR(wait_created(comm, where, shared->timeout_s));
  shared->comm = comm;
  log_set_rank(rank);
  *out = nccl_internal::nccl_comm_make(std::move(shared));
  return Status::Ok();
}

}  // namespace dsrt

#endif  // DSRT_HAVE_NCCL
