// quantized_gather.cpp -- see quantized_gather.h.
#include "zero/quantized_gather.h"

#include "quant/quant_device.h"
#include "util/half.h"

namespace dsrt {
namespace {

struct Layout {
  QuantFormat format;
  size_t groups = 0;
  size_t value_offset = 0;  // after the scales
  size_t bytes = 0;         // whole payload, a multiple of 4
};

Layout layout_for(size_t s) {
  Layout l;
  l.format.bits = 8;
  l.format.group = qwz_group_size(s);
  l.groups = quant_groups(s, l.format.group);
  l.value_offset = l.groups * sizeof(float);
  l.bytes = (l.value_offset + quant_value_bytes(s, 8) + 3) / 4 * 4;
  return l;
}

}  // namespace

size_t QuantizedAllGather::payload_bytes(size_t s) { return layout_for(s).bytes; }

Status QuantizedAllGather::start(Comm *comm, const void *send, size_t s, dsrt_dtype dtype, CommHandle *handle) {
  static const std::unique_ptr<Device> host = device_create_cpu();
  return start(comm, host.get(), nullptr, send, s, dtype, handle);
}

Status QuantizedAllGather::start(Comm *comm, Device *device, DeviceStream stream, const void *send, size_t s,
                                 dsrt_dtype dtype, CommHandle *handle) {
  if (active_) return Error(DSRT_ERR_STATE, "quantized all-gather: the previous gather was not finished");
  if (comm == nullptr || device == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "quantized all-gather: NULL communicator or device");
  const Layout l = layout_for(s);
  world_ = comm->size();
  s_ = s;
  dtype_ = dtype;
  device_ = device;
  stream_ = stream;
  Status status = device->allocate(l.bytes, &send_, true);
  if (status.ok()) status = device->allocate(l.bytes * static_cast<size_t>(world_), &recv_, false);
  if (status.ok())
    status = device_quantize_blocks(*device, stream, send, dtype, s, l.format, send_.as<uint8_t>() + l.value_offset,
                                    send_.as<float>());
  // The communicator reads the payload on its own stream: the quantization must be done.
  if (status.ok()) status = device->synchronize(stream);
  if (status.ok()) status = comm->all_gather_bytes(send_.data(), recv_.data(), l.bytes, handle);
  if (!status.ok()) {
    abandon();
    return status;
  }
  active_ = true;
  bytes_sent_ += l.bytes;
  return Status::Ok();
}

Status QuantizedAllGather::finish(void *recv) {
  if (!active_) return Error(DSRT_ERR_STATE, "quantized all-gather: nothing to finish");
  const Layout l = layout_for(s_);
  const size_t esize = dtype_size(dtype_);
  Status status;
  for (int r = 0; r < world_ && status.ok(); ++r) {
    const uint8_t *payload = recv_.as<uint8_t>() + static_cast<size_t>(r) * l.bytes;
    status = device_dequantize_blocks(*device_, stream_, payload + l.value_offset,
                                      reinterpret_cast<const float *>(payload), s_, l.format,
                                      static_cast<char *>(recv) + static_cast<size_t>(r) * s_ * esize, dtype_);
  }
  // The payloads are freed below and the caller reads recv on another stream (or the host).
  const Status synced = device_->synchronize(stream_);
  if (status.ok()) status = synced;
  abandon();
  return status;
}

void QuantizedAllGather::abandon() {
  active_ = false;
  send_.reset();
  recv_.reset();
}

}  // namespace dsrt
