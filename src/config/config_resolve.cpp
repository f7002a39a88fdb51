// defines: Config::resolve -- from validated values to the TrainConfig the engine runs on.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "config/config.h"
#include "config/config_internal.h"
#include "config/config_rules.h"

namespace dsrt {

namespace {

OffloadDevice device_of(const std::string &text) {
  if (text == "cpu") return OffloadDevice::Cpu;
  if (text == "nvme") return OffloadDevice::Nvme;
  return OffloadDevice::None;
}

dsrt_dtype dtype_of(const std::string &text) {
  if (text == "fp16") return DSRT_F16;
  if (text == "bf16") return DSRT_BF16;
  return DSRT_F32;
}

}  // namespace

Status Config::resolve(int world_size, TrainConfig *out) const {
  if (world_size < 1) return Error(DSRT_ERR_INVALID_ARGUMENT, "world size must be at least 1, got %d", world_size);
  Config c = *this;
  DSRT_RETURN_IF_ERROR(c.set_world_size(world_size));

  std::vector<std::string> pending = c.unresolved();
  if (!pending.empty()) {
    std::string message = Format("%s: %zu value%s still \"auto\"; the host must resolve %s before the engine is "
                                 "created:",
                                 origin_.c_str(), pending.size(), pending.size() == 1 ? " is" : "s are",
                                 pending.size() == 1 ? "it" : "them");
    for (const std::string &path : pending) message += "\n  " + path + ": " + resolve_hint(*c.spec_for(path));
    return Status(DSRT_ERR_CONFIG, message);
  }
  if (!c.unsupported_.empty()) {
    std::string message = Format("%s: the config enables %s dsrt does not implement:", origin_.c_str(),
                                 c.unsupported_.size() == 1 ? "a feature" : "features");
    for (const std::string &item : c.unsupported_) message += "\n  " + item;
    return Status(DSRT_ERR_UNSUPPORTED, message);
  }

  // Every key here has a value now: no "auto" is left and the schema gives the rest. The defaults
  // are the schema's only (schema_table.cpp); a key the schema gives no value is a bug in dsrt.
  // The *_or helpers are for keys whose DeepSpeed default is null: their second argument is what
  // null means to the engine, not a default.
  // Each helper sets a field from its key, leaving it as it is when the key does not exist for this
  // optimizer, scheduler or offload section (the field is then not used).
  Status missing;
  auto value = [&](const std::string &path) {
    const KeySpec *spec = c.spec_for(path);
    return spec ? c.effective(*spec) : Value::null();
  };
  auto need = [&](const std::string &path, Value::Kind kind, Value *out) {
    if (c.spec_for(path) == nullptr) return false;
    *out = value(path);
    if (out->kind == kind) return true;
    if (missing.ok())
      missing = Error(DSRT_ERR_INTERNAL, "config resolve: the schema gives %s no value of the expected type",
                      path.c_str());
    return false;
  };
  auto i64_of = [](double v) { return v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(v); };
  auto num = [&](double &field, const std::string &path) {
    Value v;
    if (need(path, Value::Kind::Number, &v)) field = v.number;
  };
  auto i64 = [&](auto &field, const std::string &path) {
    Value v;
    if (need(path, Value::Kind::Number, &v)) field = static_cast<std::remove_reference_t<decltype(field)>>(i64_of(v.number));
  };
  auto flag = [&](bool &field, const std::string &path) {
    Value v;
    if (need(path, Value::Kind::Bool, &v)) field = v.boolean;
  };
  auto text = [&](std::string &field, const std::string &path) {
    Value v;
    if (need(path, Value::Kind::String, &v)) field = v.text;
  };
  // Keys whose DeepSpeed default is null: if_null is what null means to the engine, not a default.
  auto num_or = [&](const std::string &path, double if_null) {
    Value v = value(path);
    return v.kind == Value::Kind::Number ? v.number : if_null;
  };
  auto i64_or = [&](const std::string &path, int64_t if_null) {
    Value v = value(path);
    return v.kind == Value::Kind::Number ? i64_of(v.number) : if_null;
  };
  auto text_or = [&](const std::string &path, const std::string &if_null) {
    Value v = value(path);
    return v.kind == Value::Kind::String ? v.text : if_null;
  };

  TrainConfig t;
  Batch batch;
  DSRT_RETURN_IF_ERROR(c.derive_batch(world_size, &batch));
  t.train_batch_size = batch.train;
  t.train_micro_batch_size_per_gpu = batch.micro;
  t.gradient_accumulation_steps = batch.gas;
  t.world_size = world_size;

  num(t.gradient_clipping, "gradient_clipping");
  flag(t.prescale_gradients, "prescale_gradients");
  num(t.gradient_predivide_factor, "gradient_predivide_factor");
  std::string comm = text_or("communication_data_type", "");
  t.has_communication_data_type = !comm.empty();
  t.communication_data_type = dtype_of(comm);
  std::string accum = text_or("data_types.grad_accum_dtype", "");
  t.has_grad_accum_dtype = !accum.empty();
  t.grad_accum_dtype = dtype_of(accum);
  // null (DeepSpeed 0.19's default) and Infinity mean never; the engine prints when it is positive.
  t.steps_per_print = value("steps_per_print").kind == Value::Kind::Number ? i64_or("steps_per_print", 0) : 0;
  t.comm_timeout_s = num_or("comm_timeout", 0.0);
  flag(t.wall_clock_breakdown, "wall_clock_breakdown");
  flag(t.csv_monitor.enabled, "csv_monitor.enabled");
  text(t.csv_monitor.output_path, "csv_monitor.output_path");
  text(t.csv_monitor.job_name, "csv_monitor.job_name");

  flag(t.fp16.enabled, "fp16.enabled");
  num(t.fp16.loss_scale, "fp16.loss_scale");
  i64(t.fp16.initial_scale_power, "fp16.initial_scale_power");
  i64(t.fp16.loss_scale_window, "fp16.loss_scale_window");
  i64(t.fp16.hysteresis, "fp16.hysteresis");
  flag(t.fp16.consecutive_hysteresis, "fp16.consecutive_hysteresis");
  num(t.fp16.min_loss_scale, "fp16.min_loss_scale");
  flag(t.bf16_enabled, "bf16.enabled");
  flag(t.bf16_check_grad_overflow, "bf16.check_grad_overflow");
  flag(t.bf16_master_weights, "bf16.bf16_master_weights_and_grads");
  flag(t.bf16_optimizer_states, "bf16.bf16_optimizer_states");

  OptimizerConfig &o = t.optimizer;
  o.present = c.has_optimizer();
  if (o.present) {
    int type = c.optimizer_type();
    o.type = static_cast<OptimizerType>(type);
    const std::string p = "optimizer.params.";
    num(o.lr, p + "lr");
    num(o.beta1, p + "betas.0");
    num(o.beta2, p + "betas.1");
    num(o.eps, p + "eps");
    num(o.weight_decay, p + "weight_decay");
    // DeepSpeed: type AdamW always decouples weight decay; type Adam does unless adam_w_mode is false.
    flag(o.adam_w_mode, p + "adam_w_mode");
    if (o.type == OptimizerType::AdamW) o.adam_w_mode = true;
    flag(o.bias_correction, p + "bias_correction");
    num(o.momentum, p + "momentum");
    num(o.dampening, p + "dampening");
    flag(o.nesterov, p + "nesterov");
    num(o.max_coeff, p + "max_coeff");
    num(o.min_coeff, p + "min_coeff");
    num(o.initial_accumulator_value, p + "initial_accumulator_value");
    i64(o.freeze_step, p + "freeze_step");
    num(o.coeff_beta, p + "coeff_beta");
    num(o.factor_max, p + "factor_max");
    num(o.factor_min, p + "factor_min");
    num(o.factor_threshold, p + "factor_threshold");
    i64(o.var_freeze_step, p + "var_freeze_step");
    i64(o.var_update_scaler, p + "var_update_scaler");
    i64(o.local_step_scaler, p + "local_step_scaler");
    i64(o.local_step_clipper, p + "local_step_clipper");
  }

  SchedulerConfig &s = t.scheduler;
  if (c.has_scheduler()) {
    s.type = static_cast<SchedulerType>(c.scheduler_type());
    const std::string p = "scheduler.params.";
    num(s.warmup_min_lr, p + "warmup_min_lr");
    num(s.warmup_max_lr, p + "warmup_max_lr");
    i64(s.warmup_num_steps, p + "warmup_num_steps");
    text(s.warmup_type, p + "warmup_type");
    s.total_num_steps = i64_or(p + "total_num_steps", s.total_num_steps);
    num(s.warmup_min_ratio, p + "warmup_min_ratio");
    num(s.cos_min_ratio, p + "cos_min_ratio");
    s.cycle_min_lr = num_or(p + "cycle_min_lr", s.cycle_min_lr);
    s.cycle_max_lr = num_or(p + "cycle_max_lr", s.cycle_max_lr);
    num(s.decay_lr_rate, p + "decay_lr_rate");
    i64(s.cycle_first_step_size, p + "cycle_first_step_size");
    s.cycle_second_step_size = i64_or(p + "cycle_second_step_size", s.cycle_second_step_size);
    i64(s.cycle_first_stair_count, p + "cycle_first_stair_count");
    s.cycle_second_stair_count = i64_or(p + "cycle_second_stair_count", s.cycle_second_stair_count);
    i64(s.decay_step_size, p + "decay_step_size");
    flag(s.cycle_momentum, p + "cycle_momentum");
    num(s.cycle_min_mom, p + "cycle_min_mom");
    num(s.cycle_max_mom, p + "cycle_max_mom");
    num(s.decay_mom_rate, p + "decay_mom_rate");
    // DeepSpeed's OneCycle cycles momentum only for an optimizer with betas: with SGD or Adagrad it
    // turns cycling off (check() warned), so SGD keeps its own momentum.
    if (s.type == SchedulerType::OneCycle && o.present &&
        (o.type == OptimizerType::SGD || o.type == OptimizerType::Adagrad))
      s.cycle_momentum = false;
    num(s.lr_range_test_min_lr, p + "lr_range_test_min_lr");
    i64(s.lr_range_test_step_size, p + "lr_range_test_step_size");
    num(s.lr_range_test_step_rate, p + "lr_range_test_step_rate");
    flag(s.lr_range_test_staircase, p + "lr_range_test_staircase");
  }

  ZeroConfig &z = t.zero;
  const std::string zp = "zero_optimization.";
  i64(z.stage, zp + "stage");
  flag(z.contiguous_gradients, zp + "contiguous_gradients");
  flag(z.reduce_scatter, zp + "reduce_scatter");
  i64(z.reduce_bucket_size, zp + "reduce_bucket_size");
  flag(z.allgather_partitions, zp + "allgather_partitions");
  i64(z.allgather_bucket_size, zp + "allgather_bucket_size");
  flag(z.overlap_comm, zp + "overlap_comm");
  flag(z.round_robin_gradients, zp + "round_robin_gradients");
  i64(z.sub_group_size, zp + "sub_group_size");
  i64(z.stage3_prefetch_bucket_size, zp + "stage3_prefetch_bucket_size");
  i64(z.stage3_param_persistence_threshold, zp + "stage3_param_persistence_threshold");
  i64(z.stage3_max_live_parameters, zp + "stage3_max_live_parameters");
  i64(z.stage3_max_reuse_distance, zp + "stage3_max_reuse_distance");
  flag(z.stage3_gather_16bit_weights_on_model_save, zp + "stage3_gather_16bit_weights_on_model_save");
  // hpZ is a stage-3 partitioning (DeepSpeed reads it only there); 0 means off, like 1.
  i64(z.zero_hpz_partition_size, zp + "zero_hpz_partition_size");
  z.zero_hpz_partition_size = std::max<int64_t>(1, z.zero_hpz_partition_size);
  if (z.stage != 3) z.zero_hpz_partition_size = 1;
  flag(z.zero_quantized_weights, zp + "zero_quantized_weights");
  flag(z.zero_quantized_nontrainable_weights, zp + "zero_quantized_nontrainable_weights");
  flag(z.zero_quantized_gradients, zp + "zero_quantized_gradients");
  // MiCS (docs/zero.md): stage 3 only; 0 or below means off. The rules are in config_rules.cpp.
  i64(z.mics_shard_size, zp + "mics_shard_size");
  if (z.mics_shard_size <= 0) z.mics_shard_size = -1;
  flag(z.mics_hierarchical_params_gather, zp + "mics_hierarchical_params_gather");
  if (z.mics_shard_size <= 0) z.mics_hierarchical_params_gather = false;
  for (OffloadConfig *offload : {&z.offload_optimizer, &z.offload_param}) {
    const bool is_param = offload == &z.offload_param;
    const std::string p = zp + (is_param ? "offload_param." : "offload_optimizer.");
    std::string device;
    text(device, p + "device");
    offload->device = device_of(device);
    offload->nvme_path = text_or(p + "nvme_path", "");
    flag(offload->pin_memory, p + "pin_memory");
    i64(offload->buffer_count, p + "buffer_count");
    i64(offload->buffer_size, p + "buffer_size");
    i64(offload->max_in_cpu, p + "max_in_cpu");
    flag(offload->pipeline_read, p + "pipeline_read");
    flag(offload->pipeline_write, p + "pipeline_write");
    flag(offload->fast_init, p + "fast_init");
    num(offload->ratio, p + "ratio");
    // Below the stage that reads it the section is ignored, as DeepSpeed ignores it (check() warned).
    if ((is_param && z.stage != 3) || (!is_param && z.stage == 0)) offload->device = OffloadDevice::None;
  }

  i64(t.aio.block_size, "aio.block_size");
  i64(t.aio.queue_depth, "aio.queue_depth");
  i64(t.aio.intra_op_parallelism, "aio.intra_op_parallelism");
  flag(t.aio.single_submit, "aio.single_submit");
  flag(t.aio.overlap_events, "aio.overlap_events");
  flag(t.aio.use_gds, "aio.use_gds");
  flag(t.checkpoint.use_node_local_storage, "checkpoint.use_node_local_storage");
  flag(t.checkpoint.load_universal, "checkpoint.load_universal");

  DSRT_RETURN_IF_ERROR(missing);
  // The engine's refusals that depend on the config alone (config_rules.h): refused here, so every
  // caller of resolve (dsrt_engine_create, dsrt_config_check, `dsrt config check`) refuses alike.
  DSRT_RETURN_IF_ERROR(check_train_config(t));

  t.effective_json = c.to_json();
  *out = std::move(t);
  return Status::Ok();
}

Status Config::validate(int world_size) const {
  int world = world_size > 0 ? world_size : world_size_;
  if (world <= 0) {
    world = 1;
    double train = 0, micro = 0, gas = 0;
    if (get_number("train_batch_size", &train).ok() && get_number("train_micro_batch_size_per_gpu", &micro).ok() &&
        get_number("gradient_accumulation_steps", &gas).ok() && micro * gas >= 1 && train >= micro * gas &&
        std::fmod(train, micro * gas) == 0 && train / (micro * gas) <= 1e9)
      world = static_cast<int>(train / (micro * gas));
  }
  TrainConfig scratch;
  return resolve(world, &scratch);
}

}  // namespace dsrt
