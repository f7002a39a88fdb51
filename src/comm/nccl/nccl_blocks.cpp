// defines: the NCCL communicator's fp32 paths (nccl_shared.h) -- reduce_blocks (reductions NCCL
// would do in 16 bits or without NaN: a block exchange and one reduction kernel) and gather_blocks
// (uneven blocks by grouped broadcasts).
#include "comm/nccl/nccl_comm.h"

#ifdef DSRT_HAVE_NCCL

#include "comm/comm_checks.h"
#include "comm/nccl/nccl_shared.h"
#include "cuda/comm_reduce.h"
#include "util/half.h"

namespace dsrt {
namespace nccl_internal {
namespace {

int kernel_op(ReduceOp op) { return op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? 1 : 2; }

}  // namespace

// The fp32 path for every reduction NCCL would do in 16 bits or without NaN: each rank sends
// every peer that peer's block (grouped send/recv, the buffer's own dtype on the wire) and
// reduces the copies of its own block with one kernel. Caller holds the mutex.
Status reduce_blocks(Shared *s, const void *send, void *recv, const BlockLayout &layout, dsrt_dtype dtype, ReduceOp op,
                     const std::string &w, Clock::time_point until) {
  const int me = s->rank, n = s->size;
  const size_t e = dtype_size(dtype), own = layout.count[me], block = own * e;
  const char *base = static_cast<const char *>(send);
  void *scratch = nullptr;
  if (n > 1 && block > 0)
    DSRT_CUDA_OK(cudaMallocFromPoolAsync(&scratch, block * (n - 1), s->pool, s->stream),
                 w + Format(": %zu bytes of receive scratch", block * (n - 1)));
  auto free_scratch = [&] {
    if (scratch != nullptr) cudaFreeAsync(scratch, s->stream);
  };
  Status status = s->nccl_locked(ncclGroupStart(), "ncclGroupStart", w, until);
  for (int p = 0; p < n && status.ok(); ++p) {
    if (p == me) continue;
    ncclResult_t rc = ncclSuccess;
    if (layout.count[p] > 0)
      rc = ncclSend(base + layout.offset[p] * e, layout.count[p] * e, ncclUint8, p, s->comm, s->stream);
    if ((rc == ncclSuccess || rc == ncclInProgress) && block > 0)
      rc = ncclRecv(static_cast<char *>(scratch) + static_cast<size_t>(p < me ? p : p - 1) * block, block,
                    ncclUint8, p, s->comm, s->stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      ncclGroupEnd();
      status = s->nccl_locked(rc, "ncclSend/ncclRecv", w, until);
    }
  }
  if (status.ok()) status = s->nccl_locked(ncclGroupEnd(), "ncclGroupEnd (block exchange)", w, until);
  if (status.ok())
    status = cuda_reduce_rank_blocks(recv, base + layout.offset[me] * e, scratch, me, n, own, dtype,
                                     kernel_op(op), s->stream);
  free_scratch();
  if (!status.ok() && !s->broken) return s->break_locked(status.with_context(w));
  return status;
}

// Every rank's block of layout into recv (grouped broadcasts from each owner). Caller holds
// the mutex.
Status gather_blocks(Shared *s, const void *own, void *recv, const BlockLayout &layout, size_t e, const std::string &w,
                     Clock::time_point until) {
  DSRT_RETURN_IF_ERROR(s->nccl_locked(ncclGroupStart(), "ncclGroupStart", w, until));
  for (int r = 0; r < s->size; ++r) {
    if (layout.count[r] == 0) continue;
    char *block = static_cast<char *>(recv) + layout.offset[r] * e;
    const void *from = r == s->rank ? own : block;
    ncclResult_t rc = ncclBroadcast(from, block, layout.count[r] * e, ncclUint8, r, s->comm, s->stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      ncclGroupEnd();
      return s->nccl_locked(rc, "ncclBroadcast", w, until);
    }
  }
  return s->nccl_locked(ncclGroupEnd(), "ncclGroupEnd (block gather)", w, until);
}

}  // namespace nccl_internal
}  // namespace dsrt

#endif  // DSRT_HAVE_NCCL
