// device_comm.h -- what a communicator over device buffers adds to Comm: the caller's compute
// stream, after whose enqueued work every collective is ordered (the NCCL and the host-staged
// communicators). Host communicators have nothing to order, so setting a stream on them is a no-op.
#pragma once

#include "comm/comm.h"
#include "device/device.h"

namespace dsrt {

class DeviceOrderedComm {
 public:
  virtual ~DeviceOrderedComm() = default;
  // Collectives issued after this call wait (on the device, not the host where possible) for the
  // work enqueued on stream before them. nullptr is the device's default stream.
  virtual Status set_compute_stream(DeviceStream stream) = 0;
};

// Sets comm's compute stream when it runs on a device; OK without effect otherwise.
inline Status comm_set_compute_stream(Comm &comm, DeviceStream stream) {
  if (auto *ordered = dynamic_cast<DeviceOrderedComm *>(&comm)) return ordered->set_compute_stream(stream);
  return Status::Ok();
}

}  // namespace dsrt
