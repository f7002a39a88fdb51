// nccl_comm.h -- the NCCL communicator: collectives between GPUs, one rank per GPU, ids shared by
// the host (MPI, the TCP rendezvous, or the caller through dsrt_nccl_unique_id). nccl_comm.cpp
// implements it in builds with NCCL; nccl_unavailable.cpp answers DSRT_ERR_UNSUPPORTED otherwise.
//
// Collectives run on the communicator's own CUDA stream, ordered after the work enqueued so far
// on the compute stream (comm_set_compute_stream, device_comm.h; the default stream until set).
// wait() blocks the host until the collective is done on the GPU, polling NCCL's asynchronous
// error so that a failed or vanished peer aborts the communicator with DSRT_ERR_COMM instead of
// hanging; DSRT_COMM_TIMEOUT_S bounds every wait. Buffers may be device memory (the fast path) or
// host memory (staged through device memory, for an engine that runs on the CPU).
//
// Reductions: fp32 sums use NCCL's own collectives (fp32 arithmetic). NCCL adds fp16/bf16 in 16
// bits at every step of its ring and its max/min drop NaN, so every other reduction exchanges
// each rank's block in its own dtype (grouped ncclSend/ncclRecv, the same bytes as NCCL's
// reduce-scatter) and reduces the gathered copies in fp32, rounding once, NaN-propagating.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "comm/device_comm.h"

namespace dsrt {

constexpr size_t kNcclUniqueIdBytes = 128;

// Fills out (kNcclUniqueIdBytes) with a fresh NCCL unique id.
Status nccl_unique_id(void *out);
// Joins the NCCL world identified by id as rank of world_size on CUDA device ordinal device.
// DSRT_ERR_DEVICE when no GPU is visible or device is out of range; DSRT_ERR_COMM when a rank does
// not join within DSRT_COMM_TIMEOUT_S.
Status nccl_comm_create(const void *id, int rank, int world_size, int device, std::shared_ptr<Comm> *out);

}  // namespace dsrt
