// staged_comm.h -- the host-staged communicator: device buffers are copied to pinned host staging
// buffers, the inner host communicator (MPI) runs the collective there, and the results are
// copied back. It is the path for ranks that share one GPU (NCCL refuses two ranks on one device)
// and for builds with CUDA but no NCCL; it moves every byte over PCIe twice, so NCCL is preferred
// wherever each rank has its own GPU.
//
// Ordering: issuing a collective waits for the compute stream's work enqueued so far (the device
// to host copy needs it), then hands the collective to the inner communicator, which progresses
// it while the host goes on; wait() waits for it and copies the result back, so the device buffer
// holds the result when wait() returns. Control helpers (f64, u64, bytes, barrier) take host
// memory and go straight to the inner communicator.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "device/device.h"

namespace dsrt {

// Wraps inner (a host communicator) for buffers of device. Both are kept alive by the result.
Status staged_comm_create(std::shared_ptr<Comm> inner, std::shared_ptr<Device> device, std::shared_ptr<Comm> *out);

}  // namespace dsrt
