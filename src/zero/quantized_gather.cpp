// quantized_gather.cpp -- see quantized_gather.h.
#include "zero/quantized_gather.h"

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
  if (active_) return Error(DSRT_ERR_STATE, "quantized all-gather: the previous gather was not finished");
  const Layout l = layout_for(s);
  world_ = comm->size();
  s_ = s;
  dtype_ = dtype;
  send_.assign(l.bytes, 0);
  recv_.resize(l.bytes * static_cast<size_t>(world_));
  DSRT_RETURN_IF_ERROR(quantize_blocks(send, dtype, s, l.format, send_.data() + l.value_offset,
                                       reinterpret_cast<float *>(send_.data())));
  DSRT_RETURN_IF_ERROR(comm->all_gather_bytes(send_.data(), recv_.data(), l.bytes, handle));
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
    const uint8_t *payload = recv_.data() + static_cast<size_t>(r) * l.bytes;
    status = dequantize_blocks(payload + l.value_offset, reinterpret_cast<const float *>(payload), s_, l.format,
                               static_cast<char *>(recv) + static_cast<size_t>(r) * s_ * esize, dtype_);
  }
  abandon();
  return status;
}

void QuantizedAllGather::abandon() {
  active_ = false;
  std::vector<uint8_t>().swap(send_);
  std::vector<uint8_t>().swap(recv_);
}

}  // namespace dsrt
