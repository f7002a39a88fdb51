// nccl_shared.h -- what the NCCL communicator (nccl_comm.cpp, its handles in nccl_request.cpp, its
// fp32 paths in nccl_blocks.cpp) and its creation (nccl_create.cpp) share: the state a
// communicator and its outstanding handles hold (streams, scratch pool, the NCCL communicator, the
// broken state), checked CUDA calls, and the creation helpers split() uses.
// Only with DSRT_HAVE_NCCL.
#pragma once

#ifdef DSRT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_checks.h"
#include "util/log.h"

namespace dsrt {
namespace nccl_internal {

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline Status cuda_status(cudaError_t err, const char *call, const std::string &where) {
  if (err == cudaSuccess) return Status::Ok();
  return Error(DSRT_ERR_DEVICE, "%s failed (%s): %s (%s)", call, where.c_str(), cudaGetErrorString(err),
               cudaGetErrorName(err));
}
#define DSRT_CUDA_OK(call, where) DSRT_RETURN_IF_ERROR(cuda_status((call), #call, (where)))

// A buffer a collective reads (in) and/or writes (out). Host memory is staged through a device
// temporary; device memory is used as is.
struct Arg {
  void *ptr = nullptr;
  size_t bytes = 0;
  bool in = false, out = false;
  void *dev = nullptr;  // what the NCCL calls use
  bool staged = false;
};

// State the communicator and its outstanding handles share (a handle may outlive the comm).
struct Shared {
  std::mutex mutex;  // one thread at a time inside NCCL, and around abort
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, device = 0;
  double timeout_s = 300;
  cudaStream_t stream = nullptr;       // collectives
  cudaStream_t copy_stream = nullptr;  // copies of results back to host buffers
  cudaStream_t compute = nullptr;      // the caller's stream the collectives wait for
  cudaEvent_t ready = nullptr;
  cudaMemPool_t pool = nullptr;        // scratch and staging, stream-ordered
  bool broken = false;
  std::string broken_reason;

  ~Shared() {
    if (cudaSetDevice(device) != cudaSuccess) return;
    if (comm != nullptr) {
      // Let issued collectives drain (bounded); a peer that never arrives gets the comm aborted.
      bool drained = stream == nullptr || poll_idle(deadline_after(std::min(timeout_s, 30.0)));
      ncclResult_t state = drained ? ncclCommFinalize(comm) : ncclInternalError;
      // A non-blocking communicator finalizes in the background: poll it (bounded).
      Clock::time_point until = deadline_after(std::min(timeout_s, 30.0));
      while (state == ncclInProgress && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
      }
      if (state == ncclSuccess) ncclCommDestroy(comm);
      else ncclCommAbort(comm);
    }
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
    if (pool != nullptr) cudaMemPoolDestroy(pool);
  }

  bool poll_idle(Clock::time_point until) {
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q != cudaErrorNotReady) return q == cudaSuccess;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
        return false;
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  std::string where(const std::string &what, int64_t step) const {
    return Format("%s on rank %d of %d (cuda:%d) at step %lld", what.c_str(), rank, size, device,
                  static_cast<long long>(step));
  }

  // Marks the communicator unusable and aborts NCCL (peers then fail too instead of hanging).
  // Caller holds mutex.
  Status break_locked(Status reason) {
    if (!broken) {
      broken = true;
      broken_reason = reason.message();
      if (comm != nullptr) ncclCommAbort(comm);
      comm = nullptr;
      logf(DSRT_LOG_ERROR, "%s", reason.message().c_str());
    }
    return reason;
  }

  Status broken_error(const std::string &what) const {
    return Error(DSRT_ERR_COMM,
                 "%s on rank %d: this NCCL communicator is unusable after an earlier failure (%s); the ranks are no "
                 "longer in step, so restart the job (or create a new communicator on every rank)",
                 what.c_str(), rank, broken_reason.c_str());
  }

  // Checks an NCCL call made under mutex. ncclInProgress (a non-blocking communicator still
  // enqueuing) is waited out; any other failure breaks the communicator.
  Status nccl_locked(ncclResult_t result, const char *call, const std::string &what, Clock::time_point until) {
    if (result == ncclInProgress) {
      do {
        if (Clock::now() >= until)
          return break_locked(Error(DSRT_ERR_COMM, "%s: %s did not finish enqueuing within %g s; communicator "
                                                   "aborted. Raise DSRT_COMM_TIMEOUT_S if this is legitimate",
                                    what.c_str(), call, timeout_s));
        std::this_thread::yield();
        if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
      } while (result == ncclInProgress);
    }
    if (result == ncclSuccess) return Status::Ok();
    return break_locked(Error(DSRT_ERR_COMM, "%s: %s failed: %s (%s); communicator aborted", what.c_str(), call,
                              ncclGetErrorString(result), comm != nullptr ? ncclGetLastError(comm) : ""));
  }

  // Waits for event: DSRT_ERR_COMM when NCCL reports an asynchronous error or until passes, after
  // which the communicator is aborted.
  Status wait_event(cudaEvent_t event, const std::string &what, Clock::time_point until) {
    for (int spin = 0;; ++spin) {
      cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return Status::Ok();
      std::lock_guard<std::mutex> guard(mutex);
      if (broken) return broken_error(what);
      if (q != cudaErrorNotReady)
        return break_locked(cuda_status(q, "cudaEventQuery", what + ": the GPU failed while the collective ran"));
      ncclResult_t state = ncclSuccess;
      ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
      if (rc != ncclSuccess) state = rc;
      if (state != ncclSuccess && state != ncclInProgress)
        return break_locked(Error(DSRT_ERR_COMM, "%s failed: NCCL reports %s (%s): a peer died, left, or the network "
                                                 "failed; communicator aborted",
                                  what.c_str(), ncclGetErrorString(state), ncclGetLastError(comm)));
      if (Clock::now() >= until)
        return break_locked(Error(DSRT_ERR_COMM,
                                  "%s did not complete within %g s: another rank skipped or reordered this "
                                  "collective, is still busy, or died; the communicator is now unusable (aborted). "
                                  "Raise DSRT_COMM_TIMEOUT_S if the step is legitimately slower",
                                  what.c_str(), timeout_s));
      if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

// The device side of a communicator: its streams, ordering event and scratch pool on device.
Status make_shared_state(int device, std::shared_ptr<Shared> *out);
// Polls a non-blocking communicator being created (init or split) until it is ready; aborts it on
// failure or after timeout_s.
Status wait_created(ncclComm_t comm, const std::string &where, double timeout_s);
// The communicator over a created state.
std::shared_ptr<Comm> nccl_comm_make(std::shared_ptr<Shared> shared);

// The handle of an enqueued collective (nccl_request.cpp): wait() waits for done under the
// deadline until, copies the staged host buffers of args that are out back, and frees the staging
// and the event (so does destruction without a wait).
CommHandle nccl_request_make(std::shared_ptr<Shared> shared, cudaEvent_t done, std::vector<Arg> args, std::string what,
                             Clock::time_point until);

// The fp32 path for a reduction NCCL would do in 16 bits or without NaN (nccl_blocks.cpp): each
// rank sends every peer that peer's block of layout (grouped send/recv, the buffer's own dtype on
// the wire) and reduces the copies of its own block into recv with one kernel. A failure breaks
// the communicator. The caller holds s->mutex.
Status reduce_blocks(Shared *s, const void *send, void *recv, const BlockLayout &layout, dsrt_dtype dtype, ReduceOp op,
                     const std::string &w, Clock::time_point until);
// Every rank's block of layout into recv (grouped broadcasts from each owner; own is this rank's).
// The caller holds s->mutex.
Status gather_blocks(Shared *s, const void *own, void *recv, const BlockLayout &layout, size_t e, const std::string &w,
                     Clock::time_point until);

}  // namespace nccl_internal
}  // namespace dsrt
#endif
