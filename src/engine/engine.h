// engine.h -- the Engine: tensor registry and the training step for ZeRO 0-3; where the state
// lives (device, host, NVMe) is its StateStore (offload/state_store.h).
//
// The engine implements PartitionedState (zero/partitioned_state.h), the narrow view checkpoints
// read and write: the partitioning, this rank's masters and optimizer states wherever they live,
// the working copies, the frozen tensors, the counters and the scalars saved with them.
// Internals reachable from other modules besides that view (offload, tools, tests):
//   param_offload()           offload_param.device "cpu" or "nvme" (stage 3): working_copy() is
//                             nullptr between steps; the shards are in pinned host memory or (nvme)
//                             in param_nvme_swapper()'s store, one array per tensor; read one with
//                             read_working_shard()
//   loss_scaler() / mutable_loss_scaler()   LossScalerState through state()/set_state()
//   grad_reducer(), param_coordinator()  bucket and gather statistics (the latter only at stage 3)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "config/train_config.h"
#include "device/device.h"
#include "dsrt.h"
#include "engine/frozen_params.h"
#include "engine/loss_scaler.h"
#include "engine/lr_scheduler.h"
#include "engine/param_groups.h"
#include "engine/step_timers.h"
#include "monitor/monitor_csv.h"
#include "monitor/monitor_events.h"
#include "offload/grad_swap.h"
#include "offload/nvme_swapper.h"
#include "offload/state_store.h"
#include "optim/cpu_optimizer.h"
#include "optim/onebit_lamb.h"
#include "optim/optimizer_backend.h"
#include "util/status.h"
#include "zero/compressed_allreduce.h"
#include "zero/grad_reducer.h"
#include "zero/param_coordinator.h"
#include "zero/partition.h"
#include "zero/partitioned_state.h"
#include "zero/zero_stage.h"

namespace dsrt {

// EngineCounters: zero/step_counters.h.

class Engine final : public PartitionedState {
 public:
  // CONFIG / UNSUPPORTED for settings the engine cannot run.
  // device_spec: the host's device ("cpu", "cuda", "cuda:N"), named device_origin in messages;
  // nullptr: DSRT_DEVICE, else automatic (device_select.h).
  static Status create(const TrainConfig &config, std::shared_ptr<Comm> comm, std::unique_ptr<Engine> *out,
                       const char *device_spec = nullptr, const char *device_origin = nullptr);
  ~Engine() override;

  // --- life cycle (the C API's calls) ---
  // *index (if not null): the new tensor's index in the trainable registry (the C API's handles
  // name tensors by it: capi/handles.h).
  Status add_param(const std::string &name, const int64_t *shape, int ndim, const float *init, size_t *index);
  Status build();
  Status acquire(size_t t, void **data, dsrt_dtype *dtype);
  Status release(size_t t);
  Status grad(size_t t, void **grad, dsrt_dtype *dtype);
  Status grad_ready(size_t t);
  Status step(dsrt_step_result *out);
  // The host's backward of this micro-step is done: the micro-step's reduction now (what step()
  // would otherwise do first: finish_micro_step), so the next step() only runs the boundary. Once
  // per micro-step: a second call before the next gradient is a no-op. Collective.
  Status end_backward();
  Status read_fp32(size_t t, float *out, uint64_t count);
  Status write_fp32(size_t t, const float *src, uint64_t count);
  Status memory(dsrt_memory_stats *out) const;
  // The host's compute stream (a cudaStream_t; ignored on the CPU device): the engine's device work
  // waits for the host's work enqueued on it, and the host's later work waits for the engine's.
  Status set_stream(void *stream);

  // --- monitors (engine_monitor.cpp): what the host reports, and the events of the last step ---
  Status report_loss(double loss);
  Status report_host_time(int phase, double seconds);
  // The monitor events the last step() produced (empty unless it was a boundary).
  const std::vector<MonitorEvent> &events() const { return events_; }
  // --- parameter groups and host-driven hyperparameters (param_groups.h) ---
  Status add_group(int32_t *out);
  Status set_tensor_group(size_t t, int32_t group);
  int32_t tensor_group(size_t t) const override { return tensors_[t].group; }
  size_t num_groups() const { return groups_.size(); }
  // Set: before build, or between accumulation windows (STATE while a window is open).
  Status set_group_hyper(int32_t group, const char *name, double value);
  // The value in force for the next step ("lr": the schedule's value with a config scheduler).
  Status get_group_hyper(int32_t group, const char *name, double *out) const;
  // The lr group used at the last boundary step (before the first: the lr the first step will use).
  Status group_lr_used(int32_t group, double *out) const;
  const ParamGroups &param_groups() const { return groups_; }
  ParamGroups &mutable_param_groups() { return groups_; }  // checkpoint load

  // --- host-driven accumulation boundaries ---
  // -1: count micro-steps against gradient_accumulation_steps (DeepSpeed's default); 0 / 1: the
  // micro-step the next step() closes is / is not a boundary, until changed (DeepSpeed's
  // set_gradient_accumulation_boundary).
  Status set_accumulation_boundary(int32_t mode);
  // Whether the accumulated gradient is divided by gradient_accumulation_steps (DeepSpeed's
  // scale_wrt_gas, default true). Changed only between windows.
  Status set_scale_wrt_gas(bool enabled);
  // Whether an accumulation window is open (a micro-step finished or a gradient requested since
  // the last boundary).
  bool window_open() const;

  // --- frozen tensors (frozen_params.h): registered apart from the trainable ones; index i is
  // the i-th frozen tensor (*index, if not null). No gradient, master or optimizer state.
  Status add_frozen_param(const std::string &name, const int64_t *shape, int ndim, const float *init,
                          size_t *index);
  Status frozen_acquire(size_t i, void **data, dsrt_dtype *dtype);
  Status frozen_release(size_t i);
  Status frozen_read_fp32(size_t i, float *out, uint64_t count);
  Status frozen_write_fp32(size_t i, const float *src, uint64_t count);
  // STATE naming the tensor: what (grad, grad_ready, set_group...) needs a trainable tensor.
  Status frozen_refuse(size_t i, const char *what) const;
  size_t num_frozen() const override { return frozen_.size(); }
  const FrozenParams &frozen() const { return frozen_; }
  FrozenParams &mutable_frozen() { return frozen_; }  // checkpoint load, 16-bit model save
  // The frozen tensors through the partitioned-state view.
  const std::string &frozen_name(size_t i) const override { return frozen_.tensor(i).name; }
  const std::vector<int64_t> &frozen_shape(size_t i) const override { return frozen_.tensor(i).shape; }
  int64_t frozen_numel(size_t i) const override { return frozen_.tensor(i).numel; }
  ElemRange frozen_owned(size_t i) const override { return frozen_.owned(i); }
  Status read_frozen_fp32(size_t i, float *out) override { return frozen_.read_fp32(i, out); }
  Status read_frozen_working(size_t i, std::vector<uint8_t> *out) override { return frozen_.read_working(i, out); }
  Status write_frozen_owned_fp32(size_t i, const float *owned_values) override {
    return frozen_.write_owned_fp32(i, owned_values);
  }

  bool built() const override { return built_; }
  double loss_scale() const { return scaler_.scale(); }
  double current_lr() const;
  dsrt_dtype working_dtype() const override { return config_.working_dtype(); }
  const Device &device() const override { return *device_; }

  // --- registry ---
  size_t num_tensors() const override { return tensors_.size(); }
  const std::string &tensor_name(size_t t) const override { return tensors_[t].name; }
  const std::vector<int64_t> &tensor_shape(size_t t) const override { return tensors_[t].shape; }
  int64_t tensor_numel(size_t t) const override { return tensors_[t].numel; }

  // --- internals for checkpoints and offload (see the top of this file) ---
  const TrainConfig &config() const override { return config_; }
  Comm &comm() const override { return *comm_; }
  int rank() const override { return comm_->rank(); }
  int world_size() const { return comm_->size(); }
  const Partitioning &partitioning() const override { return part_; }
  // nullptr also when the array is kept in bf16 (bf16_master_weights_and_grads /
  // bf16_optimizer_states): read_partition_state / write_partition_state convert to and from fp32.
  float *master_partition() const override {
    return states_resident_on_host() && store_.master_dtype() == DSRT_F32 ? store_.buffer(-1).as<float>() : nullptr;
  }
  int num_optimizer_states() const override { return num_states_; }
  float *optimizer_state(int i) const override {
    return states_resident_on_host() && store_.state_dtype() == DSRT_F32 ? store_.buffer(i).as<float>() : nullptr;
  }
  // The storage dtype of the masters / optimizer states: fp32, or bf16 in DeepSpeed's lower-memory
  // bf16 mode (config bf16.bf16_master_weights_and_grads / bf16.bf16_optimizer_states).
  dsrt_dtype master_dtype() const { return store_.master_dtype(); }
  dsrt_dtype state_dtype() const { return store_.state_dtype(); }
  Status read_partition_state(int state, size_t offset, size_t count, float *out) override;
  Status write_partition_state(int state, size_t offset, size_t count, const float *src) override;
  bool nvme_offload() const override { return store_.nvme() != nullptr; }
  // tests: fault injection, statistics
  NvmeSwapper *nvme_swapper() const { return store_.nvme() ? &store_.nvme()->swapper() : nullptr; }
  const SubGroupPipelineStats &last_nvme_step() const { return nvme_stats_; }
  // Stage 3 with offload_optimizer "nvme" on the CPU device: the gradient partition is swapped too
  // (engine_nvme_grads.cpp); null otherwise. last_nvme_norm_pass(): the boundary's norm pass over it.
  GradSwap *nvme_grad_swap() const { return store_.nvme() ? store_.nvme()->grad_swap() : nullptr; }
  // Tests and benchmarks: before build, keep the gradient partition in memory under NVMe offload
  // (the route before gradient swapping), to compare memory and step time against it.
  Status set_nvme_gradient_swap(bool on);
  const SubGroupPipelineStats &last_nvme_norm_pass() const { return nvme_norm_stats_; }
  void *working_copy() const override { return working_.data(); }  // nullptr between steps with offload_param
  bool param_offload() const { return store_.param_shards() != nullptr; }  // offload_param "cpu" or "nvme"
  bool param_nvme_offload() const { return param_nvme_swapper() != nullptr; }  // offload_param "nvme"
  NvmeSwapper *param_nvme_swapper() const { return param_offload() ? store_.param_shards()->swapper() : nullptr; }
  const GradReducer &grad_reducer() const { return reducer_; }
  // offload_optimizer: the host copy of the fp32 gradient partition (nullptr without offload, and
  // on the CPU device, where the optimizer reads the accumulator in place, and at stage 3 with
  // offload_optimizer nvme, where the gradient partition is swapped).
  const float *host_grad_partition() const { return store_.host_grads().as<float>(); }
  // Tests: before build, make offload_optimizer "cpu" or "nvme" on the CPU device stage the
  // gradients and the working partition through host buffers as on a GPU (the default there is in place).
  Status set_host_staging_on_cpu(bool on);
  const ParamCoordinator *param_coordinator() const { return coordinator_.get(); }  // stage 3 only
  const Comm *hpz_group() const { return hpz_comm_.get(); }  // ZeRO++ hpZ group (null: off)
  // The ranks the state is partitioned over: the world, or with MiCS (mics_shard_size) this rank's
  // shard group. part_rank() indexes the partitioning (owned_segments); rank() stays the world's.
  Comm &partition_comm() const override { return *part_comm_; }
  int part_rank() const override { return part_comm_->rank(); }
  int part_size() const override { return part_comm_->size(); }
  // MiCS: the ranks holding the same shard in every shard group (null: off). Replica 0 of each
  // shard (the first shard group) writes checkpoint shards.
  const Comm *replica_group() const { return replica_comm_.get(); }
  int replica_index() const override { return replica_comm_ ? replica_comm_->rank() : 0; }
  Status refresh_working_copies() override;
  const EngineCounters &counters() const override { return counters_; }
  // wall_clock_breakdown's per-phase seconds since build (tests: what each call adds where).
  const StepTimers &step_timers() const { return timers_; }
  void set_counters(const EngineCounters &counters) override {
    counters_ = counters;
    step_lrs_valid_ = false;  // a loaded engine has not run a boundary yet
  }
  // 1-bit Adam: whether the next update runs in the compression stage (DeepSpeed's step count,
  // applied_steps + 1, is past max(freeze_step, 2): its first step only initializes, and the
  // check follows each warm-up update), and group g's compressed all-reduce (nullptr for another
  // optimizer). onebit_reset_errors zeroes every worker and server error (after a load, as
  // DeepSpeed's load_state_dict drops them).
  // 0/1 Adam (ZeroOneAdam, engine_zero_one.cpp): onebit_compressing() says whether the next
  // update keeps the gradients local (a step between variance updates, or any step once the
  // variance is frozen); zero_one_frozen() whether the next update runs in the local-step stage;
  // onebit_reset_errors also restarts its interval policy, its accumulated update u and its
  // learning-rate sums (DeepSpeed's ZeroOneAdam.load_state_dict drops them all).
  bool onebit_compressing() const;
  bool onebit_type() const {
    return config_.optimizer.type == OptimizerType::OneBitAdam || config_.optimizer.type == OptimizerType::ZeroOneAdam ||
           config_.optimizer.type == OptimizerType::OneBitLamb;
  }
  bool zero_one_frozen() const;
  struct ZeroOnePolicy {
    int64_t var_interval = 1, var_counter = 0;      // variance updated every var_interval steps
    int64_t local_interval = 1, local_counter = 0;  // after the freeze: a sync every local_interval steps
    bool errors_zeroed = false;                     // the errors were restarted when the variance froze
  };
  const ZeroOnePolicy &zero_one_policy() const { return zero_one_; }
  const std::vector<float> *zero_one_accumulator(size_t g) const {
    return g < onebit_.size() ? &onebit_[g].accumulator : nullptr;
  }
  // Group g's u in host memory, on either device (INVALID_ARGUMENT for a group without one).
  Status zero_one_accumulator_to_host(size_t g, std::vector<float> *out) const;
  const CompressedAllReduce *onebit_reduce(size_t g) const { return g < onebit_.size() ? &onebit_[g].reduce : nullptr; }
  void onebit_reset_errors() override;
  // 1-bit LAMB (OneBitLamb, engine_onebit_lamb.cpp): one compressed all-reduce over every
  // tensor's momentum (onebit_reduce(0)), the per-tensor scalars (indexed by tensor), the fresh
  // variance and the momentum of the previous step (packed in group order). A checkpoint keeps
  // them with this rank's errors (onebit_lamb_serialize); a load at the same world size restores
  // everything, at another the errors restart at zero.
  struct OneBitLambEngineState {
    std::vector<OneBitLambTensorState> tensors;  // on a CUDA device: a copy, refreshed after each step
    std::vector<float> fresh, last;              // empty on a CUDA device (d_fresh, d_last instead)
    bool scaled = false;  // the scaling coefficients were fixed (the first compression step ran)
    // CUDA device: fresh, last, and per tensor its scalars (3 doubles), sums (3 doubles), step (a float).
    DeviceBuffer d_fresh, d_last, d_scalars;
  };
  const OneBitLambEngineState &onebit_lamb_state() const { return onebit_lamb_; }
  Status onebit_lamb_serialize(std::vector<uint8_t> *out) const override;
  Status onebit_lamb_restore(const std::vector<uint8_t> &bytes) override;
  const LossScaler &loss_scaler() const { return scaler_; }
  LossScaler &mutable_loss_scaler() { return scaler_; }
  LossScalerState scaler_state() const override { return scaler_.state(); }
  bool scaler_dynamic() const override { return scaler_.dynamic(); }
  void set_scaler_state(const LossScalerState &state) override { scaler_.set_state(state); }
  // Parameter groups by name (engine_state_view.cpp).
  size_t num_param_groups() const override { return groups_.size(); }
  std::vector<GroupValues> group_values() const override;
  Status check_group_values(const std::vector<GroupValues> &groups) const override;
  Status set_group_values(const std::vector<GroupValues> &groups) override;
  int64_t scheduler_iteration() const override { return scheduler_->last_batch_iteration(); }
  void set_scheduler_iteration(int64_t iteration) override { scheduler_->set_last_batch_iteration(iteration); }
  const std::vector<uint8_t> &client_state() const override { return client_state_; }
  void set_client_state(const void *data, uint64_t size) override;
  // A checkpoint load that failed after it began changing the engine (a full swap disk half-way
  // through the NVMe states) leaves a mix of old and new values: every call then fails with
  // DSRT_ERR_STATE naming the failure, until a load succeeds. "" clears it (load_checkpoint only).
  void set_load_failure(std::string message) override { load_failure_ = std::move(message); }
  const std::string &load_failure() const override { return load_failure_; }

 private:
  Engine() = default;
  struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    std::vector<float> init;  // kept from add_param until build
    int acquired = 0;         // open acquire brackets
    int32_t group = 0;        // parameter group (param_groups.h)
  };

  Status require_built(const char *what) const;
  Status require_usable(const char *what) const;
  // Remembers a failed collective: the ranks may now disagree on what comes next, so every later
  // call fails fast with DSRT_ERR_STATE instead of risking a hang.
  Status track(Status status);
  Status build_impl();
  Status acquire_impl(size_t t, void **data, dsrt_dtype *dtype);
  Status read_fp32_impl(size_t t, float *out, uint64_t count);
  Status refresh_working_copies_impl();
  Status step_impl(dsrt_step_result *out);
  Status end_backward_impl();
  // The steps of step_impl (engine_step.cpp), in order.
  Status finish_micro_step();  // after the host's stream: stage 3's agreement, the micro-step's reduction
  Status reduce_window();      // at the boundary: the window's reduction, the host copy when offloaded
  // The gradient norm the ranks agree on (unscaled by unscale); infinity when they overflowed.
  Status agreed_grad_norm(double unscale, double *norm);
  void skip_step(dsrt_step_result *result);  // overflow: count it, lower the loss scale
  // Unscale, clip by result.grad_norm, the optimizer on this rank's partition.
  Status apply_step(double unscale, const dsrt_step_result &result, double step_start);
  Status check_rank_agreement();
  Status check_frozen_agreement();  // engine_frozen.cpp
  Status allocate_states();
  // Runs the optimizer with step_lrs_ (one lr per group).
  Status optimizer_update(float grad_scale);
  // step_lrs_ = the lr every group uses at this boundary.
  void fix_step_lrs();
  // The kernels' hyperparameters of group g for this boundary.
  OptimizerHyper group_hyper(size_t g) const;
  // The scheduler's momentum, pinned beta2 and their flags, with the given lr (engine_groups.cpp).
  ScheduledHyper scheduled_hyper(double lr) const;
  void report_progress(const dsrt_step_result &result);
  Status complete_boundary(bool applied, dsrt_step_result &result, dsrt_step_result *out, double step_start);
  Status require_no_pending(const char *what) const;
  // INVALID_ARGUMENT unless state is -1..num_states_-1 and [offset, offset+count) lies in the partition.
  Status check_partition_range(const char *what, int state, size_t offset, size_t count, const float *data) const;

  // ZeRO-Offload (offload_optimizer.device "cpu"): the fp32 masters and optimizer states are in
  // host memory (store_); at each boundary the reduced gradient partition is copied into
  // store_.host_grads(), the norm, overflow check and optimizer run on the host, and the new working
  // values are written into store_.host_working() (partition coordinates) and copied into working_.
  // On the CPU device (stages_through_host() false) they read the accumulator and write working_.
  // NVMe swap buffers are always page-locked on a GPU (they are DMA sources and targets), as DeepSpeed's are.
  PinnedPool::Allocator swap_buffer_allocator() const;
  bool host_optimizer() const { return config_.zero.offload_optimizer.device == OffloadDevice::Cpu; }
  // Whether the step reads a host copy of the gradient partition and writes a host staging of the
  // working partition: offload "cpu" or "nvme" on a device other than the CPU. On the CPU device
  // the gradient accumulator and the working copy are host memory already, so the CPU optimizer
  // reads and writes them in place (no copies), unless a test asked for the staged path
  // (set_host_staging_on_cpu) to run a GPU engine's code on a machine without one.
  bool stages_through_host() const {
    // A partial offload (offload_optimizer.ratio < 1, store_.split() > 0) keeps the staged route:
    // its device and host halves step at once from separate gradient and working buffers.
    // Forced (tests), offload "nvme" stages too: its GPU route runs on the CPU device.
    if (device_->type() == DSRT_DEVICE_CPU)
      return (host_optimizer() && store_.split() > 0) ||
             (host_staging_on_cpu_ && config_.zero.offload_optimizer.device != OffloadDevice::None);
    return config_.zero.offload_optimizer.device != OffloadDevice::None;
  }
  bool host_staging_on_cpu_ = false;
  // Masters and states resident in host-addressable memory (master_partition() is non-null).
  bool states_resident_on_host() const {
    return !store_.nvme() && store_.split() == 0 && (host_optimizer() || device_->type() == DSRT_DEVICE_CPU);
  }
  // ZeRO-Offload++ (offload_optimizer.ratio < 1; engine_offload_split.cpp): partition elements
  // [0, split) keep masters and states on the device (store_.device_part), the rest in
  // store_.buffer (host memory, indexed from the split); split 0 when everything is on the host.
  int64_t compute_offload_split() const;
  Status split_optimizer_update(float grad_scale);
  // Ordering against the host's stream (set_stream): the engine's default stream waits for the
  // host's work so far; the host's stream waits for the engine's work so far. No-ops without a stream.
  Status order_after_host();
  Status order_host_after_engine();
  DeviceStream host_stream_ = nullptr;
  DeviceEvent order_event_ = nullptr;
  // The fp32 gradient partition the norm and the optimizer read (store_.host_grads() when staged).
  const float *step_grads() const;
  Status stage_host_grads();
  // Copies [part_offset, +count) runs of store_.host_working() (every owned segment, adjacent ones merged)
  // into the working copy of this rank's partition.
  Status upload_working_partition();
  // working_[elem_offset, +n) = cast(src[0, n)) from host fp32 values, through a host buffer.
  Status write_working_from_host(const float *src, size_t n, int64_t elem_offset);
  // Element offset in working_ of partition offset 0 (stages 1-2: this rank's flat partition).
  int64_t working_partition_base() const;

  // NVMe optimizer offload (engine_nvme.cpp): the masters and states are in the store's NVMe
  // sub-groups (store_.nvme(), offload/nvme_states.h); the engine runs the optimizer pass over them.
  Status nvme_optimizer_update(float grad_scale, size_t first_group);
  Status nvme_agree(Status local);
  Status nvme_resume_step(dsrt_step_result *out);
  // The store's layout for offload_optimizer "nvme": the sub-group size and the swapper's options.
  NvmeStatesOptions nvme_options() const;
  SubGroupPipelineStats nvme_stats_;
  // Gradient swapping (engine_nvme_grads.cpp): sub-group g's fp32 gradient is the store's array
  // "g<g>.grad", read by the optimizer pass beside its master and states (never written back by it).
  bool nvme_swaps_gradients() const;
  void nvme_grad_reducer_options(ReducerOptions *options);
  Status nvme_grad_sum_squares(float scale, double *sum, bool *nonfinite);  // agreed by the ranks
  Status nvme_grad_norm_pass(float scale, double *sum, bool *nonfinite);    // this rank's files
  Status nvme_grads_agree();
  Status nvme_grads_from_device();  // staged route: device accumulator -> swap files at the boundary
  bool nvme_gradient_swap_ = true;
  SubGroupPipelineStats nvme_norm_stats_;
  // A boundary whose NVMe optimizer pass failed: the next step() call resumes it from
  // next_group (the sub-groups before it hold the new step) instead of starting a micro-step.
  struct PendingStep {
    std::vector<double> lrs;  // per group
    float grad_scale = 1;
    size_t next_group = 0;
    dsrt_step_result result{};
    double step_start = 0;
  };
  std::unique_ptr<PendingStep> pending_;

  // Parameter offload (engine_param_nvme.cpp, offload_param at stage 3). The shard of every
  // non-persistent tensor lives in the store's ParamShards (store_.param_shards(),
  // offload/param_shards.h): pinned host memory ("cpu"; and under "nvme" the first ones, in
  // registration order, whose shards fit in offload_param.max_in_cpu elements) or the array "p<t>"
  // of its own SwapStore ("nvme"). "cpu" on the CPU device: the kept shards are in the working
  // layout and working_ is a view of them while a step or refresh rewrites them. Otherwise
  // working_ (device memory) is allocated only while a step or
  // refresh rewrites the shards (param_nvme_open .. _close, for both devices of offload_param; a
  // failed write-back keeps it, and the next close writes it). The coordinator takes the shards
  // from the ParamShards, its ShardSource (and reads ahead from NVMe in the background).
 public:
  // This rank's working shard of t (shard_size elements, working dtype) into dst (host memory),
  // wherever it is (resident, kept in host memory, or on NVMe). Stage 3 only; for save_16bit_model.
  Status read_working_shard(size_t t, void *dst) override;
  uint64_t param_nvme_shard_bytes() const;     // shards on NVMe
  uint64_t param_nvme_resident_bytes() const;  // shards in host memory ("cpu": all; "nvme": max_in_cpu)
  // offload_param "cpu" on the CPU device with fp32 working shards and fp32 masters in memory: the
  // kept shards are the masters themselves (one array, written once by the optimizer's pass).
  bool working_shards_are_masters() const;

 private:
  Status param_offload_build();
  Status hpz_build();  // engine_hpz.cpp
  Status mics_build();  // engine_mics.cpp
  // offload_param "cpu" on the CPU device: the kept shards are the working shards (engine_param_nvme.cpp).
  bool kept_in_place() const;

  Status param_nvme_open();
  Status param_nvme_close();
  Status release_working_shards();
  Status param_nvme_write_shard(size_t t, const float *full);

  TrainConfig config_;
  std::shared_ptr<Comm> comm_;
  std::shared_ptr<Comm> part_comm_;     // partitioning group: comm_, or MiCS's shard group
  std::shared_ptr<Comm> replica_comm_;  // MiCS: same shard index across shard groups (null: off)
  std::shared_ptr<Comm> gather_comm_;   // MiCS hierarchical gather: part_comm_ gathering in two steps
  std::shared_ptr<Comm> hpz_comm_;  // ZeRO++ hpZ group (stage 3, zero_hpz_partition_size > 1); outlives coordinator_
  std::shared_ptr<Device> device_;  // shared with a host-staged communicator
  // The arithmetic on device_'s memory (gradients, non-offloaded masters and states, working
  // copies), and on host memory (offloaded masters and states). Declared after device_: the
  // device backend's scratch buffers are released before the device.
  std::unique_ptr<OptimizerBackend> backend_;
  std::unique_ptr<OptimizerBackend> host_backend_;
  std::vector<TensorInfo> tensors_;
  FrozenParams frozen_;
  // INVALID_ARGUMENT for a bad name (empty, or taken by a trainable or frozen tensor) or shape.
  Status check_new_param(const char *what, const std::string &name, const int64_t *shape, int ndim, const float *init,
                         std::vector<int64_t> *shape_out, int64_t *numel, std::vector<float> *init_out) const;
  bool built_ = false;
  // end_backward finished the micro-step: the next step() does not finish it again. Cleared by
  // step() and by the next micro-step's first gradient (grad, grad_ready).
  bool micro_step_ended_ = false;

  Partitioning part_;
  // The masters and optimizer states wherever they live (device, host, NVMe sub-groups) and the
  // offloaded step's host staging (offload/state_store.h).
  StateStore store_;
  int num_states_ = 0;
  DeviceBuffer working_;
  DeviceBuffer lamb_update_;
  // 1-bit Adam (engine_onebit.cpp): per parameter group, its compressed all-reduce (the worker and
  // server errors) and the group's momentum gathered into one vector, as DeepSpeed's fp16
  // optimizer hands OnebitAdam one flat tensor per group.
  struct OneBitGroup {
    CompressedAllReduce reduce;
    std::vector<float> momentum;
    std::vector<float> accumulator;  // 0/1 Adam: u, minus the sum of the local updates since the last sync
    double lrs = 0.0;                // 0/1 Adam: the sum of the learning rates since the last sync
    // On a CUDA device the two vectors above stay empty and these hold them in device memory.
    DeviceBuffer d_momentum, d_accumulator;
    float *momentum_ptr() { return d_momentum.bytes() > 0 ? d_momentum.as<float>() : momentum.data(); }
    float *accumulator_ptr() { return d_accumulator.bytes() > 0 ? d_accumulator.as<float>() : accumulator.data(); }
  };
  bool onebit_on_device() const { return device_->type() == DSRT_DEVICE_CUDA; }
  ZeroOnePolicy zero_one_;
  Status zero_one_update(const std::vector<OptimizerSlice> &slices, const std::vector<std::vector<size_t>> &by_group,
                         float grad_scale);
  std::vector<OneBitGroup> onebit_;
  Status onebit_build();
  Status onebit_update(const std::vector<OptimizerSlice> &slices, const std::vector<std::vector<size_t>> &by_group,
                       float grad_scale);
  OneBitLambEngineState onebit_lamb_;
  Status onebit_lamb_update(const std::vector<OptimizerSlice> &slices, const std::vector<std::vector<size_t>> &by_group,
                            float grad_scale);
  Status onebit_lamb_build_device(size_t total);
  Status onebit_lamb_update_device(const std::vector<OptimizerSlice> &slices,
                                   const std::vector<std::vector<size_t>> &by_group, float grad_scale);
  Status onebit_lamb_pull_device(OneBitLambEngineState *host, std::vector<float> *fresh) const;
  Status onebit_lamb_push_device();
  GradReducer reducer_;
  std::unique_ptr<ParamCoordinator> coordinator_;  // stage 3
  // The stage's part of the step (zero_stage.h): drives reducer_ and coordinator_, agrees on the
  // norm, publishes the working copies. Created at build.
  std::unique_ptr<ZeroStage> stage_;

  ParamGroups groups_;
  std::vector<double> step_lrs_;       // per group: the lr of the boundary being applied / last applied
  bool step_lrs_valid_ = false;        // step_lrs_ are a boundary's (else group_lr reports the next lr)
  int32_t boundary_override_ = -1;     // set_accumulation_boundary
  bool scale_wrt_gas_ = true;
  LossScaler scaler_{Fp16Config{}, false};
  std::unique_ptr<LrScheduler> scheduler_;
  EngineCounters counters_;
  std::vector<uint8_t> client_state_;
  std::string failure_;  // set by the first failed collective
  std::string load_failure_;  // set by a load that failed half-way (set_load_failure)
  StepTimers timers_;
  double build_time_ = 0;           // progress lines: samples/s since the last line
  double progress_last_time_ = 0;
  int64_t progress_last_step_ = 0;
  SwapInStats progress_swap_last_;  // the coordinator's parameter swap-in totals at the last line

  // Monitors (engine_monitor.cpp): DeepSpeed's events at each boundary, written by rank 0 to
  // csv_monitor's files when it is enabled.
  Status monitor_open();
  void monitor_boundary(double step_start);
  MonitorEvents monitor_{1};
  std::unique_ptr<CsvMonitor> csv_;
  std::vector<MonitorEvent> events_;
  double monitor_reduce_mark_ = 0;  // reducer_.reduce_seconds() at the previous boundary
  bool has_last_loss_ = false;      // the last boundary's train_loss, for the progress line
  double last_loss_ = 0;
  // The host's forward and backward seconds since the last progress line (-1: never reported).
  double progress_host_seconds_[2] = {-1, -1};
  std::string host_times_text(int64_t steps) const;  // ", host forward X ms, backward Y ms" per step
};

}  // namespace dsrt
