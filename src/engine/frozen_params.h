// frozen_params.h -- frozen tensors: parameters the optimizer never touches (a LoRA/PEFT base
// model). They have a working copy only: no gradient, no fp32 master, no optimizer state, and
// they are kept out of the partition layout that the trainable tensors' master, states and
// gradient partition share.
//
// Stages 0-2 (and one rank): every rank holds the whole working copy of each frozen tensor, in a
// buffer of its own; acquire returns it.
// Stage 3 on W > 1 ranks: each tensor is split on its own into W shards of s = ceil(n/W) elements
// (rank r holds elements [r*s, min((r+1)*s, n)), its buffer padded to s); acquire all-gathers the
// shards into a buffer of s*W elements whose first n are the tensor (a collective: every rank
// acquires the same frozen tensors in the same order), nested acquires share it, and the last
// release frees it.
//
// zero_quantized_nontrainable_weights (ZeRO++): acquire's gather sends each shard as int8 blocks
// with fp32 scales and dequantizes on arrival (zero/quantized_gather.h); the resident shards stay
// in the working dtype, and reads for checkpoints (read_fp32, read_working) gather them exactly.
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
#include "util/status.h"
#include "zero/partition.h"
#include "zero/quantized_gather.h"

namespace dsrt {

class FrozenParams {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    std::vector<float> init;  // kept until build (empty: zeros)
    int acquired = 0;
    DeviceBuffer resident;    // whole (unsharded) or this rank's padded shard
    DeviceBuffer gathered;    // stage 3 while acquired
  };

  // Registration (before build). The caller checks name uniqueness and shape.
  void add(std::string name, std::vector<int64_t> shape, int64_t numel, std::vector<float> init);
  // Allocates and fills the working copies; sharded at stage 3 on more than one rank.
  Status build(Comm *comm, Device *device, dsrt_dtype dtype, int stage);
  // Quantized gathers for acquire (zero_quantized_nontrainable_weights), on the device's kernels.
  void set_quantized_gathers(bool on) { quantized_ = on; }
  bool quantized_gathers() const { return quantized_; }

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

  uint64_t resident_bytes() const;
  uint64_t gathered_bytes() const;

 private:
  Status write_range(DeviceBuffer &buffer, int64_t at, const float *src, int64_t count);
  // quantized: acquire's gather under zero_quantized_nontrainable_weights.
  Status gather(size_t i, void *dst, bool quantized = false);

  std::vector<Tensor> tensors_;
  Comm *comm_ = nullptr;
  Device *device_ = nullptr;
  dsrt_dtype dtype_ = DSRT_F32;
  bool sharded_ = false;
  bool quantized_ = false;
};

}  // namespace dsrt
