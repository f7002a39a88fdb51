// frozen_params.h -- frozen tensors: parameters the optimizer never touches (a LoRA/PEFT base
// model). They have a working copy only: no gradient, no fp32 master, no optimizer state, and
// they are kept out of the partition layout that the trainable tensors' master, states and
// gradient partition share.
//
// Stages 0-2: every rank holds the whole working copy of each frozen tensor, in a
// buffer of its own; acquire returns it.
// Stage 3 (any W): each tensor is split on its own into W shards of s = ceil(n/W) elements (rank r
// holds elements [r*s, min((r+1)*s, n)), its buffer padded to s). The gathers belong to the stage-3
// ParamCoordinator (attach()): each frozen tensor is one of its entries, after the trainable ones,
// so acquire/release follow the same trace, prefetching, reuse, live limit and persistence
// threshold as the trainable tensors (a collective: every rank acquires the same tensors in the
// same order).
//
// Parameter offload (offload_param "cpu"/"nvme"): the shard of a non-persistent frozen tensor
// moves off the device into a FrozenShardStore (move_to_store: pinned host memory or a swap file,
// beside the trainable shards), and the coordinator reads it from its shard source on gather.
//
// zero_quantized_nontrainable_weights (ZeRO++): the coordinator's gathers of the frozen entries send
// each shard as int8 blocks with fp32 scales and dequantize on arrival (zero/quantized_gather.h);
// the resident shards stay in the working dtype, and reads for checkpoints (read_fp32,
// read_working) gather them exactly here.
//
// Values come in as fp32 (registration, write_fp32, checkpoint load) and are stored in the
// working dtype; read_fp32 widens the working copy back (exact).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "dsrt.h"
#include "offload/shard_source.h"
#include "util/status.h"
#include "zero/param_coordinator.h"
#include "zero/partition.h"

namespace dsrt {

// FrozenShardStore (where offloaded frozen shards live): offload/shard_source.h.

class FrozenParams {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    std::vector<float> init;  // kept until build (empty: zeros)
    int acquired = 0;
    DeviceBuffer resident;    // whole (unsharded) or this rank's padded shard; empty when offloaded
    FrozenShardStore *store = nullptr;  // offloaded: the shard lives there
  };

  // Registration (before build). The caller checks name uniqueness and shape.
  void add(std::string name, std::vector<int64_t> shape, int64_t numel, std::vector<float> init);
  // Allocates and fills the working copies; sharded at stage 3 (one shard of n elements on one rank).
  Status build(Comm *comm, Device *device, dsrt_dtype dtype, int stage);
  // Stage 3: acquire/release/refreshes go through the coordinator, whose entry base + i is tensor i.
  void attach(ParamCoordinator *coordinator, size_t base);
  // The stage-3 coordinator's entry of each tensor (name, sizes, device shard).
  std::vector<FrozenEntry> entries() const;
  // Moves tensor i's shard into store (offload_param) and frees its device buffer.
  Status move_to_store(size_t i, FrozenShardStore *store);
  size_t coordinator_entry(size_t i) const { return base_ + i; }

  size_t size() const { return tensors_.size(); }
  const Tensor &tensor(size_t i) const { return tensors_[i]; }
  bool sharded() const { return sharded_; }
  int64_t shard_elems(size_t i) const;
  // Tensor elements this rank holds of tensor i.
  ElemRange owned(size_t i) const;

  // The full working copy on the device (collective when sharded).
  Status acquire(size_t i, void **data);
  Status release(size_t i);
  // The full value in fp32 on the host (collective when sharded).
  Status read_fp32(size_t i, float *out);
  // The full working-dtype bytes on the host (numel * dtype size; collective when sharded).
  Status read_working(size_t i, std::vector<uint8_t> *out);
  // Sets the value from a full fp32 host array (every rank passes the same; local, no collective):
  // the resident copy and a live gathered copy.
  Status write_fp32(size_t i, const float *src);
  // Sets this rank's part from fp32 values of elements [owned(i).begin, +owned(i).size()).
  Status write_owned_fp32(size_t i, const float *owned_values);

  // Device bytes of the working copies or shards (offloaded shards not included).
  uint64_t resident_bytes() const;

 private:
  Status write_range(DeviceBuffer &buffer, int64_t at, const float *src, int64_t count);
  // Writes fp32 values into this rank's shard (device buffer or store) from element 0.
  Status write_shard(size_t i, const float *src, int64_t count);
  Status gather(size_t i, void *dst);

  std::vector<Tensor> tensors_;
  Comm *comm_ = nullptr;
  Device *device_ = nullptr;
  dsrt_dtype dtype_ = DSRT_F32;
  bool sharded_ = false;
  ParamCoordinator *coordinator_ = nullptr;
  size_t base_ = 0;
};

}  // namespace dsrt
