// quantized_reduce.cpp -- see quantized_reduce.h.
#include "zero/quantized_reduce.h"

#include <algorithm>
#include <cstring>

#include "quant/quant_device.h"
#include "util/half.h"

namespace dsrt {
namespace {

size_t round4(size_t bytes) { return (bytes + 3) / 4 * 4; }

size_t segment_bytes(const QgzSegment &seg, int bits) {
  if (seg.group == 0) return seg.elems * sizeof(float);
  return quant_groups(seg.elems, seg.group) * sizeof(float) + round4(quant_value_bytes(seg.elems, bits));
}

size_t block_elems(const std::vector<QgzSegment> &segments) {
  size_t n = 0;
  for (const QgzSegment &seg : segments) n += seg.elems;
  return n;
}

}  // namespace

size_t qgz_group_for_shape(const int64_t *shape, int ndim, int world_size) {
  if (ndim < 2) return 0;
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) numel *= shape[d];
  if (numel <= 0) return 0;
  const int64_t groups = std::max<int64_t>({shape[0], shape[1], world_size, 1});
  const int64_t group = (numel + groups - 1) / groups;
  return static_cast<size_t>((group + 1) / 2 * 2);
}

Status QuantizedReduceScatter::init(Comm *world, std::shared_ptr<Comm> intra, std::shared_ptr<Comm> inter, int bits,
                                    Device *device, DeviceStream stream) {
  if (world == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "zero_quantized_gradients: NULL communicator");
  world_ = world;
  bits_ = bits;
  if (device == nullptr) {
    if (!host_) host_ = device_create_cpu();
    device = host_.get();
    stream = nullptr;
  }
  device_ = device;
  stream_ = stream;
  DSRT_RETURN_IF_ERROR(quant_check_format(QuantFormat{bits, 2}).with_context("zero_quantized_gradients"));
  const int w = world->size();
  nodes_ = 1;
  locals_ = w;
  my_node_ = 0;
  my_local_ = world->rank();
  if (intra && inter && intra->size() * inter->size() == w) {
    // Every rank reports (node, local); the layout is used only if all nodes are the same size
    // and the indices form a grid.
    std::vector<uint64_t> where(2 * static_cast<size_t>(w), 0);
    where[2 * static_cast<size_t>(world->rank())] = static_cast<uint64_t>(inter->rank()) + 1;
    where[2 * static_cast<size_t>(world->rank()) + 1] = static_cast<uint64_t>(intra->rank()) + 1;
    DSRT_RETURN_IF_ERROR(world->all_reduce_u64(where.data(), where.size(), ReduceOp::Sum)
                             .with_context("zero_quantized_gradients: agreeing on the node layout"));
    const int n = inter->size(), l = intra->size();
    std::vector<int> at(static_cast<size_t>(w), -1);
    bool grid = true;
    for (int r = 0; r < w && grid; ++r) {
      const uint64_t node = where[2 * static_cast<size_t>(r)], local = where[2 * static_cast<size_t>(r) + 1];
      if (node < 1 || node > static_cast<uint64_t>(n) || local < 1 || local > static_cast<uint64_t>(l)) {
        grid = false;
        break;
      }
      int &slot = at[(node - 1) * static_cast<uint64_t>(l) + (local - 1)];
      if (slot != -1) grid = false;
      slot = r;
    }
    if (grid) {
      nodes_ = n;
      locals_ = l;
      my_node_ = inter->rank();
      my_local_ = intra->rank();
      rank_at_ = std::move(at);
      intra_ = std::move(intra);
      inter_ = std::move(inter);
      return Status::Ok();
    }
  }
  // One node: the world itself is the node.
  rank_at_.resize(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) rank_at_[static_cast<size_t>(r)] = r;
  intra_.reset();
  inter_.reset();
  return Status::Ok();
}

size_t QuantizedReduceScatter::payload_bytes(const std::vector<QgzSegment> &segments) const {
  size_t bytes = 0;
  for (const QgzSegment &seg : segments) bytes += segment_bytes(seg, bits_);
  return bytes;
}

CommTraffic QuantizedReduceScatter::traffic() const {
  CommTraffic sum;
  for (const Comm *c : {intra_.get(), inter_.get()}) {
    if (c == nullptr) continue;
    const CommTraffic t = c->traffic();
    sum.all_reduce += t.all_reduce;
    sum.reduce_scatter += t.reduce_scatter;
    sum.all_gather += t.all_gather;
    sum.all_to_all += t.all_to_all;
    sum.broadcast += t.broadcast;
  }
  return sum;
}

Status QuantizedReduceScatter::reserve(DeviceBuffer *buf, size_t bytes, const char *what) {
  if (buf->bytes() >= bytes) return Status::Ok();
  buf->reset();
  return device_->allocate(bytes, buf, true).with_context(Format("zero_quantized_gradients: allocating %s", what));
}

Status QuantizedReduceScatter::pack(const void *src, dsrt_dtype dtype, const std::vector<QgzSegment> &segments,
                                    uint8_t *payload) {
  const char *in = static_cast<const char *>(src);
  const size_t esize = dtype_size(dtype);
  for (const QgzSegment &seg : segments) {
    if (seg.group != 0) {
      const QuantFormat format{bits_, seg.group};
      const size_t groups = quant_groups(seg.elems, seg.group);
      DSRT_RETURN_IF_ERROR(device_quantize_blocks(*device_, stream_, in, dtype, seg.elems, format,
                                                  payload + groups * sizeof(float), reinterpret_cast<float *>(payload)));
    } else {
      DSRT_RETURN_IF_ERROR(
          device_to_f32(*device_, stream_, in, dtype, seg.elems, reinterpret_cast<float *>(payload)));
    }
    payload += segment_bytes(seg, bits_);
    in += seg.elems * esize;
  }
  return Status::Ok();
}

Status QuantizedReduceScatter::unpack_add(const uint8_t *payload, const std::vector<QgzSegment> &segments,
                                          float *dst) {
  for (const QgzSegment &seg : segments) {
    if (seg.group != 0) {
      const QuantFormat format{bits_, seg.group};
      const size_t groups = quant_groups(seg.elems, seg.group);
      DSRT_RETURN_IF_ERROR(device_dequantize_add_blocks(*device_, stream_, payload + groups * sizeof(float),
                                                        reinterpret_cast<const float *>(payload), seg.elems, format,
                                                        dst));
    } else {
      DSRT_RETURN_IF_ERROR(
          device_add_f32(*device_, stream_, reinterpret_cast<const float *>(payload), seg.elems, dst));
    }
    payload += segment_bytes(seg, bits_);
    dst += seg.elems;
  }
  return Status::Ok();
}

Status QuantizedReduceScatter::reduce_scatter(const void *send, dsrt_dtype dtype,
                                              const std::vector<QgzSegment> &segments, float *out) {
  if (world_ == nullptr) return Error(DSRT_ERR_STATE, "qgZ reduce-scatter used before init");
  const size_t block = block_elems(segments);
  const size_t payload = payload_bytes(segments);
  const size_t esize = dtype_size(dtype);
  const char *in = static_cast<const char *>(send);
  const size_t n = static_cast<size_t>(nodes_), l = static_cast<size_t>(locals_);
  Comm *stage1 = intra_ ? intra_.get() : world_;
  Device &dev = *device_;

  // Steps 1-2: partial[node] = sum over this node's ranks of the block of rank (node, my_local).
  DSRT_RETURN_IF_ERROR(reserve(&partial_, n * block * sizeof(float), "the partial sums"));
  float *partial = partial_.as<float>();
  if (l > 1) {
    DSRT_RETURN_IF_ERROR(reserve(&send_, l * n * payload, "the send payloads"));
    DSRT_RETURN_IF_ERROR(reserve(&recv_, l * n * payload, "the received payloads"));
    DSRT_RETURN_IF_ERROR(dev.memset(partial, 0, n * block * sizeof(float), stream_));
    uint8_t *sent = send_.as<uint8_t>(), *got = recv_.as<uint8_t>();
    for (size_t peer = 0; peer < l; ++peer) {
      for (size_t node = 0; node < n; ++node) {
        const size_t dest = static_cast<size_t>(rank_at_[node * l + peer]);
        DSRT_RETURN_IF_ERROR(pack(in + dest * block * esize, dtype, segments, sent + (peer * n + node) * payload));
      }
    }
    // The communicator reads the payloads on its own stream.
    DSRT_RETURN_IF_ERROR(dev.synchronize(stream_).with_context("qgZ: quantizing the blocks"));
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(stage1->all_to_all_bytes(sent, got, n * payload, &handle)
                             .with_context("qgZ all-to-all inside the node"));
    DSRT_RETURN_IF_ERROR(handle->wait().with_context("qgZ all-to-all inside the node"));
    // Senders in rank order, so the fp32 sums are the same on every run.
    for (size_t from = 0; from < l; ++from)
      for (size_t node = 0; node < n; ++node)
        DSRT_RETURN_IF_ERROR(unpack_add(got + (from * n + node) * payload, segments, partial + node * block));
  } else {
    for (size_t node = 0; node < n; ++node) {
      const size_t dest = static_cast<size_t>(rank_at_[node * l + static_cast<size_t>(my_local_)]);
      DSRT_RETURN_IF_ERROR(device_to_f32(dev, stream_, in + dest * block * esize, dtype, block, partial + node * block));
    }
  }
  if (n == 1) {
    DSRT_RETURN_IF_ERROR(dev.copy(out, partial, block * sizeof(float), stream_));
    return dev.synchronize(stream_).with_context("qgZ: the reduced block");
  }

  // Steps 3-4: the partial sums across nodes.
  DSRT_RETURN_IF_ERROR(reserve(&send_, n * payload, "the send payloads"));
  DSRT_RETURN_IF_ERROR(reserve(&recv_, n * payload, "the received payloads"));
  uint8_t *sent = send_.as<uint8_t>(), *got = recv_.as<uint8_t>();
  for (size_t node = 0; node < n; ++node)
    DSRT_RETURN_IF_ERROR(pack(partial + node * block, DSRT_F32, segments, sent + node * payload));
  DSRT_RETURN_IF_ERROR(dev.synchronize(stream_).with_context("qgZ: quantizing the partial sums"));
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(inter_->all_to_all_bytes(sent, got, payload, &handle)
                           .with_context("qgZ all-to-all across nodes"));
  DSRT_RETURN_IF_ERROR(handle->wait().with_context("qgZ all-to-all across nodes"));
  DSRT_RETURN_IF_ERROR(dev.memset(out, 0, block * sizeof(float), stream_));
  for (size_t node = 0; node < n; ++node)
    DSRT_RETURN_IF_ERROR(unpack_add(got + node * payload, segments, out));
  return dev.synchronize(stream_).with_context("qgZ: the reduced block");
}

}  // namespace dsrt
