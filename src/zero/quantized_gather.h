// quantized_gather.h -- ZeRO++ qwZ: an all-gather whose payload is the shard quantized to int8
// blocks with fp32 scales, dequantized into the working dtype on arrival.
//
// Each rank's payload is the quantize.h format of its shard of s elements with DeepSpeed's group
// size for s (qwz_group_size): the group scales first, then the int8 values, padded to 4 bytes;
// one all-gather of opaque bytes carries every rank's payload (DeepSpeed sends values and scales
// in two). Every rank dequantizes every block, its own included, so all ranks hold the same
// gathered values. The buffers are in the memory of the device given to start (host memory for
// the CPU device); the kernels are chosen by quant_device.h, and on a CUDA device the payloads
// live in device memory (the communicator moves them: NCCL directly, the staged communicator
// through pinned host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "quant/quantize.h"
#include "util/status.h"

namespace dsrt {

class QuantizedAllGather {
 public:
  // Bytes one rank sends for a shard of s elements.
  static size_t payload_bytes(size_t s);

  // Quantizes send (s elements of dtype, in device's memory; the work before it on stream is
  // waited for) and issues the all-gather of the payloads; handle completes when every payload has
  // arrived. The object must stay alive (and unmoved) until finish() or abandon(); device must
  // outlive it.
  Status start(Comm *comm, Device *device, DeviceStream stream, const void *send, size_t s, dsrt_dtype dtype,
               CommHandle *handle);
  // The same for host memory (the CPU kernels).
  Status start(Comm *comm, const void *send, size_t s, dsrt_dtype dtype, CommHandle *handle);
  // After the handle's wait succeeded: writes size() * s elements of dtype into recv (rank r's
  // block at r * s; in the device's memory), waits for the device to finish, and releases the
  // payload buffers.
  Status finish(void *recv);
  // The handle failed or was dropped: release the payload buffers.
  void abandon();
  bool active() const { return active_; }
  // Bytes this object has sent since construction (for tests and benchmarks).
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  Device *device_ = nullptr;
  DeviceStream stream_ = nullptr;
  DeviceBuffer send_, recv_;
  size_t s_ = 0;
  int world_ = 1;
  dsrt_dtype dtype_ = DSRT_F32;
  bool active_ = false;
  uint64_t bytes_sent_ = 0;
};

}  // namespace dsrt
