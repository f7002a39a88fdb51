// quantized_reduce.h -- ZeRO++ qgZ: a gradient reduce-scatter whose data travels as int4 (or int8)
// blocks with fp32 scales, in DeepSpeed's hierarchical all-to-all scheme
// (runtime/comm/coalesced_collectives.py, all_to_all_quant_reduce):
//
//   1. every rank quantizes the blocks of the ranks of each local index and all-to-alls them inside
//      its node: local rank l receives, from every rank of its node, the blocks of the ranks with
//      local index l (one per node);
//   2. it dequantizes and sums them in fp32, one partial sum per node;
//   3. it quantizes the partial sums and all-to-alls them across nodes (among the ranks with its
//      local index): each rank receives the partial sums of its own block from every node;
//   4. it dequantizes and sums those: this rank's reduced block, in fp32.
//
// On one node step 3 is skipped (the partial sum is the result); with one rank per node, step 1
// is (the blocks enter step 3 unquantized). Nodes come from comm_split_by_node; where it finds
// no even layout, the world is treated as one node (one all-to-all stage).
//
// A block is a list of segments (the shards of a bucket's tensors): each quantized segment has
// its own groups (qgz_group_for_shape: DeepSpeed's per-tensor group count), so a small tensor
// never shares a scale with a large one; a raw segment travels as fp32 (DeepSpeed sends 1-D
// tensors, biases and norms, by a plain reduce-scatter). The error of an element is bounded by one quantization step of every group it
// passed through: sum over the senders of max|x| of their group / 2^(bits-1) in step 1, plus the
// same of the partial sum's group in step 3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "quant/quantize.h"
#include "util/status.h"

namespace dsrt {

struct QgzSegment {
  size_t elems = 0;
  size_t group = 0;  // elements per quantization group (even for 4 bits); 0: sent raw in fp32
};

// DeepSpeed's group for a gradient of this shape (all_to_all_quant_reduce): the tensor is cut
// into max(dim 0, dim 1, world size) groups, which is about one row of a matrix; rounded up to an
// even size for int4. 1-D tensors (and scalars) give 0: DeepSpeed reduces them unquantized.
size_t qgz_group_for_shape(const int64_t *shape, int ndim, int world_size);

class QuantizedReduceScatter {
 public:
  // Collective over world (and the node communicators, which come from comm_split_by_node on
  // world; either may be null, meaning one node). bits 4 or 8. The buffers of reduce_scatter are
  // in device's memory and its kernels are the device's (quant_device.h), enqueued on stream;
  // device must outlive this object. Without a device: host memory and the CPU kernels.
  Status init(Comm *world, std::shared_ptr<Comm> intra, std::shared_ptr<Comm> inter, int bits,
              Device *device = nullptr, DeviceStream stream = nullptr);

  // send: world->size() blocks, rank-major, each laid out as segments (sum of elems = block
  // elements), of dtype. out: this rank's reduced block, fp32 (block elements). Both in the
  // device's memory; the work before it on stream is waited for. Blocking (out is complete on
  // return), collective over world: every rank passes the same segments.
  Status reduce_scatter(const void *send, dsrt_dtype dtype, const std::vector<QgzSegment> &segments, float *out);

  // Bytes of one block's payload.
  size_t payload_bytes(const std::vector<QgzSegment> &segments) const;
  // Bytes sent by the node communicators (they count their own traffic, not the world's).
  CommTraffic traffic() const;
  // The node communicators (null when the world is used as one node).
  const Comm *intra() const { return intra_.get(); }
  const Comm *inter() const { return inter_.get(); }
  bool hierarchical() const { return nodes_ > 1 && locals_ > 1; }
  int nodes() const { return nodes_; }
  int locals() const { return locals_; }

 private:
  // Quantizes (or copies raw) one block of segments from src (dtype) into payload.
  Status pack(const void *src, dsrt_dtype dtype, const std::vector<QgzSegment> &segments, uint8_t *payload);
  // dst (fp32, block elements) += the block in payload.
  Status unpack_add(const uint8_t *payload, const std::vector<QgzSegment> &segments, float *dst);
  // Grows buf to at least bytes (contents undefined).
  Status reserve(DeviceBuffer *buf, size_t bytes, const char *what);

  Comm *world_ = nullptr;
  std::shared_ptr<Comm> intra_, inter_;
  int bits_ = 4;
  int nodes_ = 1, locals_ = 1;
  int my_node_ = 0, my_local_ = 0;
  std::vector<int> rank_at_;  // rank_at_[node * locals_ + local] = world rank
  std::unique_ptr<Device> host_;  // the CPU device when init got none
  Device *device_ = nullptr;
  DeviceStream stream_ = nullptr;
  DeviceBuffer send_, recv_, partial_;
};

}  // namespace dsrt
