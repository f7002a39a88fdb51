// partitioned_state.h -- the narrow view of a built engine that checkpoints read and write
// (src/ckpt/): which elements of which tensor this rank holds, its partition of the masters and
// optimizer states wherever they live, the working copies, the frozen tensors, and the counters
// and scalars saved with them. The engine implements it (engine/engine.h); checkpoints include
// only this header, not the engine's.
//
//   partitioning()            which elements of which tensor every rank holds (zero/partition.h);
//                             owned_segments(part_rank()) lists this rank's pieces and where they sit
//                             (part_offset) in the partition buffers below.
//   master_partition()        this rank's fp32 master weights, partitioning().partition_elems() long
//                             (nullptr when they are kept in bf16: master_dtype())
//   optimizer_state(i)        state array i < num_optimizer_states() (Adam: 0 = m, 1 = v), same layout
//                             Both are nullptr when the optimizer is offloaded to NVMe
//                             (nvme_offload()) or the states are in GPU memory; use
//   read_partition_state() / write_partition_state()  (state -1 = master, i = optimizer_state(i)):
//                             copy a range of this rank's partition out of / into the states,
//                             wherever they live (memory or NVMe swap files)
//   working_copy()            the resident working copy (working_dtype()): the whole flat buffer at
//                             stages 0-2 (tensor t at flat_layout().tensor_offset(t)), this rank's
//                             shards at stage 3 (tensor t's shard at shard_offset(t)); nullptr
//                             between steps with offload_param: read a shard with read_working_shard()
//   refresh_working_copies()  recompute every working copy from the masters (collective at ZeRO>=1);
//                             call after writing master_partition() directly
//   counters() / set_counters()   global step, applied and skipped steps, micro-step position
// Setters are meant for loading a checkpoint into a built engine between steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "config/train_config.h"
#include "device/device.h"
#include "dsrt.h"
#include "util/status.h"
#include "zero/partition.h"
#include "zero/step_counters.h"

namespace dsrt {

// One parameter group's hyperparameters by name (engine/param_groups.h's names, its fixed order).
using GroupValues = std::vector<std::pair<std::string, double>>;

class PartitionedState {
 public:
  virtual ~PartitionedState() = default;

  // --- the model and its layout ---
  virtual bool built() const = 0;
  virtual const TrainConfig &config() const = 0;
  virtual const Device &device() const = 0;
  virtual dsrt_dtype working_dtype() const = 0;
  virtual size_t num_tensors() const = 0;  // the trainable tensors, in registration order
  virtual const std::string &tensor_name(size_t t) const = 0;
  virtual const std::vector<int64_t> &tensor_shape(size_t t) const = 0;
  virtual int64_t tensor_numel(size_t t) const = 0;
  virtual int32_t tensor_group(size_t t) const = 0;
  // The world (rank() indexes it), and the ranks the state is partitioned over: the world, or with
  // MiCS this rank's shard group (part_rank() indexes the partitioning). replica_index(): MiCS's
  // index of this rank's shard group (0 without MiCS); replica 0 writes checkpoint shards.
  virtual Comm &comm() const = 0;
  virtual int rank() const = 0;
  virtual const Partitioning &partitioning() const = 0;
  virtual Comm &partition_comm() const = 0;
  virtual int part_rank() const = 0;
  virtual int part_size() const = 0;
  virtual int replica_index() const = 0;

  // --- this rank's partition of the masters and optimizer states (see the top of this file) ---
  virtual int num_optimizer_states() const = 0;
  virtual float *master_partition() const = 0;
  virtual float *optimizer_state(int i) const = 0;
  virtual Status read_partition_state(int state, size_t offset, size_t count, float *out) = 0;
  virtual Status write_partition_state(int state, size_t offset, size_t count, const float *src) = 0;
  // The states are in NVMe swap files (written in whole-partition passes; an empty write checks
  // that no failed step left a mix of old and new sub-groups).
  virtual bool nvme_offload() const = 0;

  // --- working copies ---
  virtual void *working_copy() const = 0;
  // This rank's working shard of t (shard_size elements, working dtype) into dst (host memory),
  // wherever it is (resident, kept in host memory, or on NVMe). Stage 3 only.
  virtual Status read_working_shard(size_t t, void *dst) = 0;
  virtual Status refresh_working_copies() = 0;

  // --- frozen tensors (no master, no optimizer state; engine/frozen_params.h) ---
  virtual size_t num_frozen() const = 0;
  virtual const std::string &frozen_name(size_t i) const = 0;
  virtual const std::vector<int64_t> &frozen_shape(size_t i) const = 0;
  virtual int64_t frozen_numel(size_t i) const = 0;
  virtual ElemRange frozen_owned(size_t i) const = 0;  // the elements this rank holds
  // The full value in fp32 / the full working-dtype bytes (collective when sharded).
  virtual Status read_frozen_fp32(size_t i, float *out) = 0;
  virtual Status read_frozen_working(size_t i, std::vector<uint8_t> *out) = 0;
  // Sets this rank's part from fp32 values of elements [frozen_owned(i).begin, +size()).
  virtual Status write_frozen_owned_fp32(size_t i, const float *owned_values) = 0;

  // --- counters and scalars saved with the state ---
  virtual const EngineCounters &counters() const = 0;
  virtual void set_counters(const EngineCounters &counters) = 0;
  virtual LossScalerState scaler_state() const = 0;
  virtual bool scaler_dynamic() const = 0;
  virtual void set_scaler_state(const LossScalerState &state) = 0;
  virtual int64_t scheduler_iteration() const = 0;
  virtual void set_scheduler_iteration(int64_t iteration) = 0;
  virtual const std::vector<uint8_t> &client_state() const = 0;
  virtual void set_client_state(const void *data, uint64_t size) = 0;
  // Parameter groups: every group's values (saved), and saved values applied in order. The check
  // applies them to a copy: CHECKPOINT naming the group and the unknown or out-of-range value. The
  // set applies them (unknown names skipped; the error of an out-of-range one): check first.
  virtual size_t num_param_groups() const = 0;
  virtual std::vector<GroupValues> group_values() const = 0;
  virtual Status check_group_values(const std::vector<GroupValues> &groups) const = 0;
  virtual Status set_group_values(const std::vector<GroupValues> &groups) = 0;
  // Drops the per-rank state a checkpoint does not hold (1-bit Adam's errors, 0/1 Adam's
  // accumulated update and intervals), as DeepSpeed's load_state_dict does.
  virtual void onebit_reset_errors() = 0;
  // OneBitLamb's per-rank state as bytes (the per-tensor scalars, the fresh variance, this rank's
  // errors: ckpt_onebit.h) and its restore; other optimizers: empty / INVALID_ARGUMENT.
  virtual Status onebit_lamb_serialize(std::vector<uint8_t> *out) const = 0;
  virtual Status onebit_lamb_restore(const std::vector<uint8_t> &bytes) = 0;
  // A load that failed after it began changing the state: every later call fails with STATE
  // naming it until a load succeeds ("" clears it).
  virtual void set_load_failure(std::string message) = 0;
  virtual const std::string &load_failure() const = 0;
};

}  // namespace dsrt
