// defines: Engine creation, registration, the state buffers (allocation, partition-state reads and
// writes) and memory accounting. Build is in engine_build.cpp, the tensors' access calls in
// engine_tensors.cpp, the step in engine_step.cpp.
#include "engine/engine.h"
#include "optim/step_constants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/comm_checks.h"
#include "comm/device_comm.h"
#include "comm/staged/staged_comm.h"
#include "config/config_rules.h"
#include "device/device_select.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

Engine::~Engine() {
  if (order_event_ != nullptr && device_) (void)device_->destroy_event(order_event_);
}

Status Engine::create(const TrainConfig &config, std::shared_ptr<Comm> comm, std::unique_ptr<Engine> *out,
                      const char *device_spec, const char *device_origin) {
  if (!comm) return Error(DSRT_ERR_INVALID_ARGUMENT, "engine create: no communicator");
  // Every refusal that depends on the config alone lives in src/config (config_rules.h), so
  // `dsrt config check` refuses the same configs with the same messages.
  DSRT_RETURN_IF_ERROR(check_train_config(config));

  std::unique_ptr<Engine> engine(new Engine());
  engine->config_ = config;
  engine->config_.world_size = comm->size();
  engine->store_.set_dtypes(config.bf16_master_weights ? DSRT_BF16 : DSRT_F32,
                            config.bf16_optimizer_states ? DSRT_BF16 : DSRT_F32);
  DeviceChoice choice;
  DSRT_RETURN_IF_ERROR(device_select_spec(device_spec, device_origin, device_local_rank(comm->rank()), &engine->device_,
                                          &choice)
                           .with_context("engine create: choosing the device"));
  if (engine->device_->type() != DSRT_DEVICE_CPU) {
    // A host communicator cannot read device buffers: stage its collectives through pinned host memory.
    if (dynamic_cast<DeviceOrderedComm *>(comm.get()) == nullptr) {
      std::shared_ptr<Comm> staged;
      DSRT_RETURN_IF_ERROR(staged_comm_create(comm, engine->device_, &staged)
                               .with_context(Format("engine create: staging the %s communicator through host memory for %s",
                                                    comm->backend(), engine->device_->name())));
      comm = std::move(staged);
    }
  }
  engine->comm_ = std::move(comm);
  engine->part_comm_ = engine->comm_;  // MiCS's shard group replaces it at build
  logf(DSRT_LOG_INFO, "engine device: %s (%s)", engine->device_->name(), choice.reason.c_str());
  DSRT_RETURN_IF_ERROR(optimizer_backend_create(*engine->device_, nullptr, &engine->backend_));
  DSRT_RETURN_IF_ERROR(engine->device_->create_event(&engine->order_event_));
  engine->host_backend_ = optimizer_backend_host();
  engine->scaler_ = LossScaler(config.fp16, config.fp16.enabled);
  if (!config.optimizer.present)
    log_warn_once("engine_no_optimizer",
                  "the config has no \"optimizer\" section; dsrt steps the parameters itself and uses AdamW "
                  "(lr 1e-3) -- add an optimizer section to choose");
  if (config.has_grad_accum_dtype && config.grad_accum_dtype != DSRT_F32)
    log_warn_once("engine_grad_accum_dtype",
                  Format("data_types.grad_accum_dtype is %s; dsrt accumulates gradients in fp32 (exact sums over "
                         "micro-steps and ranks, 4 bytes per accumulated element)",
                         dtype_name(config.grad_accum_dtype)));
  const double base_momentum =
      config.optimizer.type == OptimizerType::SGD ? config.optimizer.momentum : config.optimizer.beta1;
  DSRT_RETURN_IF_ERROR(make_lr_scheduler(config.scheduler, config.optimizer.lr, base_momentum, &engine->scheduler_));
  // "comm_timeout": from now on the process's MPI and TCP collectives wait that long.
  if (config.comm_timeout_s > 0) comm_set_timeout_seconds(config.comm_timeout_s);
  engine->groups_.init(config.optimizer,
                       config.scheduler.type != SchedulerType::None ? engine->scheduler_->name() : nullptr,
                       engine->scheduler_->has_momentum());
  log_set_rank(engine->comm_->rank());
  DSRT_RETURN_IF_ERROR(engine->monitor_open());
  // DeepSpeed prints the effective config at startup; dsrt does so at info level on rank 0.
  if (engine->comm_->rank() == 0 && !config.effective_json.empty() && log_enabled(DSRT_LOG_INFO))
    log_message(DSRT_LOG_INFO, "effective config:\n" + config.effective_json);
  *out = std::move(engine);
  return Status::Ok();
}

Status Engine::require_built(const char *what) const {
  DSRT_RETURN_IF_ERROR(require_usable(what));
  if (!built_)
    return Error(DSRT_ERR_STATE, "%s: the engine is not built yet; call dsrt_engine_build after the last add_param",
                 what);
  return Status::Ok();
}

Status Engine::require_usable(const char *what) const {
  if (!failure_.empty())
    return Error(DSRT_ERR_STATE,
                 "%s: the engine is unusable after a failed collective (%s); the ranks may be out of step, so "
                 "destroy the engine and restart from a checkpoint",
                 what, failure_.c_str());
  if (!load_failure_.empty())
    return Error(DSRT_ERR_STATE,
                 "%s: the engine is unusable until a checkpoint load succeeds: the last load failed after it had "
                 "replaced part of the state (%s); load a checkpoint again (or destroy the engine)",
                 what, load_failure_.c_str());
  return Status::Ok();
}

Status Engine::track(Status status) {
  if (status.code() == DSRT_ERR_COMM && failure_.empty()) failure_ = status.message();
  return status;
}

Status Engine::check_new_param(const char *what, const std::string &name, const int64_t *shape, int ndim,
                               const float *init, std::vector<int64_t> *shape_out, int64_t *numel,
                               std::vector<float> *init_out) const {
  if (built_)
    return Error(DSRT_ERR_STATE, "%s('%s'): the engine is already built; register every tensor before build", what,
                 name.c_str());
  if (name.empty()) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the tensor name is empty", what);
  if (ndim < 0 || ndim > 8)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): ndim is %d; it must be 0..8", what, name.c_str(), ndim);
  if (ndim > 0 && shape == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): shape is NULL with ndim %d", what, name.c_str(), ndim);
  bool taken = false;
  for (const TensorInfo &t : tensors_) taken = taken || t.name == name;
  for (size_t i = 0; i < frozen_.size(); ++i) taken = taken || frozen_.tensor(i).name == name;
  if (taken)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): a tensor of that name is already registered", what,
                 name.c_str());
  *numel = 1;
  shape_out->clear();
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] <= 0)
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): shape[%d] is %lld; sizes must be positive", what,
                   name.c_str(), i, static_cast<long long>(shape[i]));
    if (*numel > (int64_t{1} << 40) / shape[i])
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): the tensor has more than 2^40 elements", what, name.c_str());
    shape_out->push_back(shape[i]);
    *numel *= shape[i];
  }
  init_out->clear();
  if (init != nullptr) {
    init_out->assign(init, init + *numel);
    for (int64_t i = 0; i < *numel; ++i)
      if (!std::isfinite((*init_out)[i]))
        return Error(DSRT_ERR_INVALID_ARGUMENT, "%s('%s'): init[%lld] is not finite", what, name.c_str(),
                     static_cast<long long>(i));
  }
  return Status::Ok();
}

Status Engine::add_param(const std::string &name, const int64_t *shape, int ndim, const float *init,
                         size_t *index) {
  TensorInfo info;
  info.name = name;
  DSRT_RETURN_IF_ERROR(check_new_param("add_param", name, shape, ndim, init, &info.shape, &info.numel, &info.init));
  tensors_.push_back(std::move(info));
  if (index != nullptr) *index = tensors_.size() - 1;
  return Status::Ok();
}

Status Engine::allocate_states() {
  num_states_ = optimizer_state_count(config_.optimizer);
  // SGD keeps a momentum buffer when any group uses momentum.
  if (config_.optimizer.type == OptimizerType::SGD) num_states_ = groups_.any_momentum() ? 1 : 0;
  // Where the masters, states and the offloaded step's staging live: offload/state_store.h.
  StateStoreLayout layout;
  layout.partition_elems = static_cast<size_t>(part_.partition_elems());
  layout.num_states = num_states_;
  for (int i = 0; i < num_states_; ++i) layout.state_initial[i] = optimizer_state_initial_value(config_.optimizer, i);
  layout.offloaded = host_optimizer();
  layout.pin_memory = config_.zero.offload_optimizer.pin_memory;
  layout.split = compute_offload_split();
  store_.set_split(layout.split);  // stages_through_host() below reads it
  layout.on_nvme = config_.zero.offload_optimizer.device == OffloadDevice::Nvme;
  if (layout.on_nvme) layout.nvme = nvme_options();
  // Stage 3 NVMe swaps the gradient partition instead of a host copy (engine_nvme_grads.cpp).
  layout.stage_grads = stages_through_host() && !nvme_swaps_gradients();
  layout.stage_working = stages_through_host();
  layout.working_dtype = working_dtype();
  DSRT_RETURN_IF_ERROR(store_.allocate(device_.get(), layout));
  const size_t working_bytes = static_cast<size_t>(part_.resident_working_elems()) * dtype_size(working_dtype());
  DSRT_RETURN_IF_ERROR(device_->allocate(working_bytes, &working_).with_context("allocating working copies"));
  return Status::Ok();
}

double Engine::current_lr() const { return scheduler_->lr(); }

Status Engine::require_no_pending(const char *what) const {
  if (pending_)
    return Error(DSRT_ERR_STATE,
                 "%s: the last optimizer step failed writing NVMe swap files and is incomplete; call "
                 "dsrt_engine_step again to retry it (no gradient is lost), or destroy the engine",
                 what);
  return Status::Ok();
}

Status Engine::check_partition_range(const char *what, int state, size_t offset, size_t count,
                                     const float *data) const {
  if (state < -1 || state >= num_states_ || offset + count > static_cast<size_t>(part_.partition_elems()) ||
      (count > 0 && data == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: state %d (use -1..%d), range [%zu, %zu) of a %lld-element partition",
                 what, state, num_states_ - 1, offset, offset + count, static_cast<long long>(part_.partition_elems()));
  return Status::Ok();
}

Status Engine::read_partition_state(int state, size_t offset, size_t count, float *out) {
  DSRT_RETURN_IF_ERROR(require_built("read_partition_state"));
  DSRT_RETURN_IF_ERROR(check_partition_range("read_partition_state", state, offset, count, out));
  if (count == 0) return Status::Ok();
  return store_.copy(state, offset, count, out, false);
}

Status Engine::write_partition_state(int state, size_t offset, size_t count, const float *src) {
  DSRT_RETURN_IF_ERROR(require_built("write_partition_state"));
  DSRT_RETURN_IF_ERROR(require_no_pending("write_partition_state"));
  DSRT_RETURN_IF_ERROR(check_partition_range("write_partition_state", state, offset, count, src));
  if (count == 0) return Status::Ok();
  return store_.copy(state, offset, count, const_cast<float *>(src), true);
}

void Engine::set_client_state(const void *data, uint64_t size) {
  if (data == nullptr || size == 0) {
    client_state_.clear();
    return;
  }
  const auto *p = static_cast<const uint8_t *>(data);
  client_state_.assign(p, p + size);
}

Status Engine::memory(dsrt_memory_stats *out) const {
  dsrt_memory_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  // Memory from device_->allocate is "device" memory (host memory on a CPU engine); memory from
  // allocate_pinned (offload_optimizer cpu) is host memory.
  const int dev = DSRT_LOC_DEVICE;
  if (built_) {
    // offload_param: working_ exists only during a step; the shards are in host memory or on NVMe.
    stats.working_params[dev] += working_.bytes();
    // Frozen tensors: their working copies only (shards at stage 3, unless offload_param moved them to
    // host memory or NVMe, counted below); their gathered copies are the coordinator's, as are hpZ's
    // secondary partitions.
    stats.working_params[dev] += frozen_.resident_bytes();
    if (coordinator_) stats.working_params[dev] += coordinator_->gathered_bytes() + coordinator_->secondary_bytes();
    stats.working_params[DSRT_LOC_HOST] += param_nvme_resident_bytes();
    stats.working_params[DSRT_LOC_NVME] += param_nvme_shard_bytes();
    if (param_nvme_offload()) stats.buffers[DSRT_LOC_HOST] += param_nvme_swapper()->host_bytes();
    if (const NvmeStates *nvme = store_.nvme()) {
      // Masters and states live in the swap files; the gradients too at stage 3 (the pool buffers
      // that carry them are counted below), else in host memory.
      const uint64_t elems = static_cast<uint64_t>(part_.partition_elems());
      // The reducer's accumulator: on the device on the staged route, with its host copy unless swapped.
      stats.gradients[stages_through_host() ? dev : DSRT_LOC_HOST] += reducer_.accumulator_bytes();
      stats.gradients[DSRT_LOC_HOST] += store_.host_grads().bytes();
      if (nvme->grad_swap()) stats.gradients[DSRT_LOC_NVME] += nvme->grad_swap()->bytes_on_disk();
      stats.master_params[DSRT_LOC_NVME] += elems * dtype_size(store_.master_dtype());
      stats.optimizer_states[DSRT_LOC_NVME] += elems * dtype_size(store_.state_dtype()) * static_cast<uint64_t>(num_states_);
      stats.buffers[DSRT_LOC_HOST] += nvme->swapper().host_bytes();
    } else {
      // Offloaded: the reduced partition stays on the device (the reducer's accumulator) and its
      // fp32 copy for the optimizer is in host memory.
      const int opt_loc = host_optimizer() ? DSRT_LOC_HOST : dev;
      stats.gradients[dev] += reducer_.accumulator_bytes();
      stats.gradients[DSRT_LOC_HOST] += store_.host_grads().bytes();
      stats.master_params[opt_loc] += store_.buffer(-1).bytes();
      for (int i = 0; i < num_states_; ++i) stats.optimizer_states[opt_loc] += store_.buffer(i).bytes();
      // offload_optimizer.ratio < 1: the device part of the masters and states.
      stats.master_params[dev] += store_.device_part(-1).bytes();
      for (int i = 0; i < num_states_; ++i) stats.optimizer_states[dev] += store_.device_part(i).bytes();
    }
    stats.buffers[host_optimizer() ? DSRT_LOC_HOST : dev] += lamb_update_.bytes();
    for (const OneBitGroup &group : onebit_) {  // the 1-bit optimizers: host or device memory
      stats.optimizer_states[dev] += group.reduce.error_bytes();
      stats.optimizer_states[dev] += group.accumulator.size() * sizeof(float) + group.d_accumulator.bytes();  // 0/1 Adam's u
      stats.buffers[dev] += group.reduce.scratch_bytes() + group.momentum.size() * sizeof(float) + group.d_momentum.bytes();
    }
    // 1-bit LAMB: the fresh variance is a state; the previous step's momentum a buffer.
    stats.optimizer_states[dev] += onebit_lamb_.fresh.size() * sizeof(float) + onebit_lamb_.d_fresh.bytes();
    stats.buffers[dev] += onebit_lamb_.last.size() * sizeof(float) + onebit_lamb_.d_last.bytes() +
                          onebit_lamb_.d_scalars.bytes();
    stats.buffers[DSRT_LOC_HOST] += store_.host_working().bytes();
    stats.buffers[dev] += reducer_.buffer_bytes() + stage_->buffer_bytes();
    if (coordinator_) stats.buffers[dev] += coordinator_->cached_bytes();
  }
  *out = stats;  // whole; dsrt_engine_memory copies the caller's struct_size bytes
  return Status::Ok();
}

}  // namespace dsrt
