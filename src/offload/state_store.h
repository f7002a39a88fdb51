// state_store.h -- where this rank's partition of the fp32 (or bf16) master weights and optimizer
// states lives -- device memory, host memory or NVMe -- with the host staging of the gradient and
// working partitions that offloading needs, and copies of partition ranges in and out of the
// states as fp32 host values (wherever they live). The engine allocates it once at build
// (allocate, then initialize with the initial masters) and asks it for buffers and ranges.
//
// State -1 is the masters, i >= 0 optimizer state i (Adam: 0 = m, 1 = v). In memory each state is
// one buffer of the partition's length in its storage dtype (master_dtype(), state_dtype(): fp32,
// or bf16 in DeepSpeed's bf16_master_weights_and_grads / bf16_optimizer_states mode): device
// memory, or host memory when the optimizer is offloaded to the CPU (offloaded()). ZeRO-Offload++
// (offload_optimizer.ratio < 1): partition elements [0, split()) keep fp32 masters and states in
// device buffers (device_part()), the rest in buffer() (host memory, indexed from split()).
// With offload_optimizer "nvme" the states live in NVMe sub-groups instead (nvme(),
// nvme_states.h), and these buffers stay empty. With offload_param at stage 3 the parameter shards
// live here too (param_shards(), param_shards.h): in host memory or on NVMe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/device.h"
#include "dsrt.h"
#include "offload/nvme_states.h"
#include "offload/param_shards.h"
#include "util/status.h"

namespace dsrt {

// Host memory for offloaded states: page-locked when offload pin_memory asks, else pageable.
Status allocate_offloaded(Device &device, size_t bytes, bool pin_memory, DeviceBuffer *out);

// Where the states of a partition go, decided by the engine at build.
struct StateStoreLayout {
  size_t partition_elems = 0;
  int num_states = 0;
  float state_initial[2] = {0.0f, 0.0f};  // optimizer state i's initial value
  bool offloaded = false;    // offload_optimizer "cpu": the states in host memory
  bool pin_memory = false;   // offload_optimizer.pin_memory
  int64_t split = 0;         // offload_optimizer.ratio < 1: elements [0, split) stay on the device
  bool on_nvme = false;      // offload_optimizer "nvme": the states in NVMe sub-groups (nvme below)
  NvmeStatesOptions nvme;    // on_nvme: the sub-groups and the swapper (sizes and dtypes: filled here)
  bool stage_grads = false;  // a pinned host copy of the fp32 gradient partition (host_grads)
  bool stage_working = false;  // a pinned host staging of the working partition (host_working)
  dsrt_dtype working_dtype = DSRT_F32;
};

class StateStore {
 public:
  // At build: the buffers of the layout (zeroed; states at their initial values), on device.
  Status allocate(Device *device, const StateStoreLayout &layout);
  // After allocate: the masters from the pieces' initial values (in memory, or the NVMe
  // sub-groups' swap files created with them).
  Status initialize(const std::vector<StatePiece> &pieces);

  // Before build: the storage dtypes. allocate() sets the rest (tests set them by hand): the device
  // the buffers belong to (copies go through it), whether buffer() is host memory
  // (offload_optimizer "cpu"), and the split.
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
  // the storage dtype, wherever it lives (NVMe included); synchronous. The caller checks the range.
  Status copy(int state, size_t offset, size_t count, float *data, bool write);

  // offload_optimizer "nvme": the sub-groups (null otherwise).
  NvmeStates *nvme() const { return nvme_.get(); }
  // The offloaded step's host staging (empty when not staged): the fp32 gradient partition (not
  // with stage 3's gradient swapping) and the working-dtype partition the host optimizer writes.
  const DeviceBuffer &host_grads() const { return host_grads_; }
  const DeviceBuffer &host_working() const { return host_working_; }

  // offload_param (stage 3): where the parameter shards live (param_shards.h); null otherwise.
  // Created after allocate, on the store's device.
  Status create_param_shards(const ParamShardsOptions &options) {
    return ParamShards::create(options, device_, &param_shards_);
  }
  ParamShards *param_shards() const { return param_shards_.get(); }

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
  StateStoreLayout layout_;
  DeviceBuffer host_grads_;    // pinned fp32 gradient partition
  DeviceBuffer host_working_;  // pinned working-dtype staging of the partition
  std::unique_ptr<NvmeStates> nvme_;
  std::unique_ptr<ParamShards> param_shards_;
};

}  // namespace dsrt
