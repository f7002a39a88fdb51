// state_store.h -- where this rank's partition of the fp32 (or bf16) master weights and optimizer
// states lives in memory, and copies of partition ranges in and out of it as fp32 host values.
//
// State -1 is the masters, i >= 0 optimizer state i (Adam: 0 = m, 1 = v). Each state is one
// buffer of the partition's length in its storage dtype (master_dtype(), state_dtype(): fp32, or
// bf16 in DeepSpeed's bf16_master_weights_and_grads / bf16_optimizer_states mode): device memory,
// or host memory when the optimizer is offloaded to the CPU (offloaded()). ZeRO-Offload++
// (offload_optimizer.ratio < 1): partition elements [0, split()) keep fp32 masters and states in
// device buffers (device_part()), the rest in buffer() (host memory, indexed from split()).
// With offload_optimizer "nvme" the states live in the engine's NVMe sub-groups instead
// (engine_nvme.cpp), and these buffers stay empty. The owner allocates the buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

class StateStore {
 public:
  // Before build: the storage dtypes. At allocation: the device the buffers belong to (copies go
  // through it), whether buffer() is host memory (offload_optimizer "cpu"), and the split.
  void set_dtypes(dsrt_dtype master, dsrt_dtype state) {
    master_dtype_ = master;
    state_dtype_ = state;
  }
  void set_device(Device *device, bool offloaded) {
    device_ = device;
    offloaded_ = offloaded;
  }
  void set_split(int64_t split) { split_ = split; }

  dsrt_dtype master_dtype() const { return master_dtype_; }
  dsrt_dtype state_dtype() const { return state_dtype_; }
  bool offloaded() const { return offloaded_; }
  int64_t split() const { return split_; }
  // The state's buffer (the host part under a split), and the device part of a split.
  DeviceBuffer &buffer(int state) { return state < 0 ? master_ : states_[state]; }
  const DeviceBuffer &buffer(int state) const { return state < 0 ? master_ : states_[state]; }
  DeviceBuffer &device_part(int state) { return state < 0 ? dev_master_ : dev_states_[state]; }
  const DeviceBuffer &device_part(int state) const { return state < 0 ? dev_master_ : dev_states_[state]; }

  // Under a split: the fp32 element at partition offset `offset` of the state, in whichever part holds it.
  float *at(int state, int64_t offset) const;
  // [offset, +count) of the state to (write) or from (read) fp32 host values, converting to and from
  // the storage dtype; synchronous. The caller checks the range.
  Status copy(int state, size_t offset, size_t count, float *data, bool write);

 private:
  // copy() without a split: one buffer, which may hold bf16.
  Status copy_state(int state, size_t offset, size_t count, float *host, bool write);

  Device *device_ = nullptr;
  bool offloaded_ = false;
  int64_t split_ = 0;
  DeviceBuffer dev_master_;
  DeviceBuffer dev_states_[2];
  DeviceBuffer master_;     // master_dtype_ elements
  DeviceBuffer states_[2];  // state_dtype_ elements
  dsrt_dtype master_dtype_ = DSRT_F32;
  dsrt_dtype state_dtype_ = DSRT_F32;
};

}  // namespace dsrt
