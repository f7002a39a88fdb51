// defines: Config::resolve -- from validated values to the TrainConfig the engine runs on.
#include <cmath>

#include "config/config.h"
#include "config/config_internal.h"

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

  // Every key here has a value now: no "auto" is left and the schema gives the rest.
  auto value = [&](const std::string &path) {
    const KeySpec *spec = c.spec_for(path);
    return spec ? c.effective(*spec) : Value::null();
  };
  auto num = [&](const std::string &path, double fallback) {
    Value v = value(path);
    return v.kind == Value::Kind::Number ? v.number : fallback;
  };
  auto i64 = [&](const std::string &path, int64_t fallback) {
    double v = num(path, static_cast<double>(fallback));
    return v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(v);
  };
  auto flag = [&](const std::string &path, bool fallback) {
    Value v = value(path);
    return v.kind == Value::Kind::Bool ? v.boolean : fallback;
  };
  auto text = [&](const std::string &path, const std::string &fallback) {
    Value v = value(path);
    return v.kind == Value::Kind::String ? v.text : fallback;
  };

  TrainConfig t;
  Batch batch;
  DSRT_RETURN_IF_ERROR(c.derive_batch(world_size, &batch));
  t.train_batch_size = batch.train;
  t.train_micro_batch_size_per_gpu = batch.micro;
  t.gradient_accumulation_steps = batch.gas;
  t.world_size = world_size;

  t.gradient_clipping = num("gradient_clipping", t.gradient_clipping);
  t.prescale_gradients = flag("prescale_gradients", t.prescale_gradients);
  t.gradient_predivide_factor = num("gradient_predivide_factor", t.gradient_predivide_factor);
  std::string comm = text("communication_data_type", "");
  t.has_communication_data_type = !comm.empty();
  t.communication_data_type = dtype_of(comm);
  std::string accum = text("data_types.grad_accum_dtype", "");
  t.has_grad_accum_dtype = !accum.empty();
  t.grad_accum_dtype = dtype_of(accum);
  // null (DeepSpeed 0.19's default) and Infinity mean never; the engine prints when it is positive.
  t.steps_per_print = value("steps_per_print").kind == Value::Kind::Number ? i64("steps_per_print", 0) : 0;
  t.comm_timeout_s = num("comm_timeout", 0.0);
  t.wall_clock_breakdown = flag("wall_clock_breakdown", t.wall_clock_breakdown);
  t.csv_monitor.enabled = flag("csv_monitor.enabled", t.csv_monitor.enabled);
  t.csv_monitor.output_path = text("csv_monitor.output_path", t.csv_monitor.output_path);
  t.csv_monitor.job_name = text("csv_monitor.job_name", t.csv_monitor.job_name);

  t.fp16.enabled = flag("fp16.enabled", false);
  t.fp16.loss_scale = num("fp16.loss_scale", t.fp16.loss_scale);
  t.fp16.initial_scale_power = static_cast<int>(i64("fp16.initial_scale_power", t.fp16.initial_scale_power));
  t.fp16.loss_scale_window = i64("fp16.loss_scale_window", t.fp16.loss_scale_window);
  t.fp16.hysteresis = static_cast<int>(i64("fp16.hysteresis", t.fp16.hysteresis));
  t.fp16.consecutive_hysteresis = flag("fp16.consecutive_hysteresis", t.fp16.consecutive_hysteresis);
  t.fp16.min_loss_scale = num("fp16.min_loss_scale", t.fp16.min_loss_scale);
  t.bf16_enabled = flag("bf16.enabled", false);
  t.bf16_check_grad_overflow = flag("bf16.check_grad_overflow", false);

  OptimizerConfig &o = t.optimizer;
  o.present = c.has_optimizer();
  if (o.present) {
    int type = c.optimizer_type();
    o.type = static_cast<OptimizerType>(type);
    const std::string p = "optimizer.params.";
    o.lr = num(p + "lr", o.lr);
    o.beta1 = num(p + "betas.0", o.beta1);
    o.beta2 = num(p + "betas.1", o.beta2);
    o.eps = num(p + "eps", o.eps);
    o.weight_decay = num(p + "weight_decay", o.weight_decay);
    // DeepSpeed: type AdamW always decouples weight decay; type Adam does unless adam_w_mode is false.
    o.adam_w_mode = o.type == OptimizerType::AdamW ? true : flag(p + "adam_w_mode", o.adam_w_mode);
    o.bias_correction = flag(p + "bias_correction", o.bias_correction);
    o.momentum = num(p + "momentum", o.momentum);
    o.dampening = num(p + "dampening", o.dampening);
    o.nesterov = flag(p + "nesterov", o.nesterov);
    o.max_coeff = num(p + "max_coeff", o.max_coeff);
    o.min_coeff = num(p + "min_coeff", o.min_coeff);
    o.initial_accumulator_value = num(p + "initial_accumulator_value", o.initial_accumulator_value);
    o.freeze_step = static_cast<int64_t>(num(p + "freeze_step", static_cast<double>(o.freeze_step)));
    o.var_freeze_step = static_cast<int64_t>(num(p + "var_freeze_step", static_cast<double>(o.var_freeze_step)));
    o.var_update_scaler = static_cast<int64_t>(num(p + "var_update_scaler", static_cast<double>(o.var_update_scaler)));
    o.local_step_scaler = static_cast<int64_t>(num(p + "local_step_scaler", static_cast<double>(o.local_step_scaler)));
    o.local_step_clipper =
        static_cast<int64_t>(num(p + "local_step_clipper", static_cast<double>(o.local_step_clipper)));
  }

  SchedulerConfig &s = t.scheduler;
  if (c.has_scheduler()) {
    s.type = static_cast<SchedulerType>(c.scheduler_type());
    const std::string p = "scheduler.params.";
    s.warmup_min_lr = num(p + "warmup_min_lr", s.warmup_min_lr);
    s.warmup_max_lr = num(p + "warmup_max_lr", s.warmup_max_lr);
    s.warmup_num_steps = i64(p + "warmup_num_steps", s.warmup_num_steps);
    s.warmup_type = text(p + "warmup_type", s.warmup_type);
    s.total_num_steps = i64(p + "total_num_steps", s.total_num_steps);
    s.warmup_min_ratio = num(p + "warmup_min_ratio", s.warmup_min_ratio);
    s.cos_min_ratio = num(p + "cos_min_ratio", s.cos_min_ratio);
    s.cycle_min_lr = num(p + "cycle_min_lr", s.cycle_min_lr);
    s.cycle_max_lr = num(p + "cycle_max_lr", s.cycle_max_lr);
    s.decay_lr_rate = num(p + "decay_lr_rate", s.decay_lr_rate);
    s.cycle_first_step_size = i64(p + "cycle_first_step_size", s.cycle_first_step_size);
    s.cycle_second_step_size = i64(p + "cycle_second_step_size", s.cycle_second_step_size);
    s.cycle_first_stair_count = i64(p + "cycle_first_stair_count", s.cycle_first_stair_count);
    s.cycle_second_stair_count = i64(p + "cycle_second_stair_count", s.cycle_second_stair_count);
    s.decay_step_size = i64(p + "decay_step_size", s.decay_step_size);
    s.cycle_momentum = flag(p + "cycle_momentum", s.cycle_momentum);
    s.cycle_min_mom = num(p + "cycle_min_mom", s.cycle_min_mom);
    s.cycle_max_mom = num(p + "cycle_max_mom", s.cycle_max_mom);
    s.decay_mom_rate = num(p + "decay_mom_rate", s.decay_mom_rate);
    // DeepSpeed's OneCycle cycles momentum only for an optimizer with betas: with SGD or Adagrad it
    // turns cycling off (check() warned), so SGD keeps its own momentum.
    if (s.type == SchedulerType::OneCycle && o.present &&
        (o.type == OptimizerType::SGD || o.type == OptimizerType::Adagrad))
      s.cycle_momentum = false;
    s.lr_range_test_min_lr = num(p + "lr_range_test_min_lr", s.lr_range_test_min_lr);
    s.lr_range_test_step_size = i64(p + "lr_range_test_step_size", s.lr_range_test_step_size);
    s.lr_range_test_step_rate = num(p + "lr_range_test_step_rate", s.lr_range_test_step_rate);
    s.lr_range_test_staircase = flag(p + "lr_range_test_staircase", s.lr_range_test_staircase);
  }

  ZeroConfig &z = t.zero;
  const std::string zp = "zero_optimization.";
  z.stage = static_cast<int>(i64(zp + "stage", 0));
  z.contiguous_gradients = flag(zp + "contiguous_gradients", z.contiguous_gradients);
  z.reduce_scatter = flag(zp + "reduce_scatter", z.reduce_scatter);
  z.reduce_bucket_size = i64(zp + "reduce_bucket_size", z.reduce_bucket_size);
  z.allgather_partitions = flag(zp + "allgather_partitions", z.allgather_partitions);
  z.allgather_bucket_size = i64(zp + "allgather_bucket_size", z.allgather_bucket_size);
  z.overlap_comm = flag(zp + "overlap_comm", z.stage == 3);
  z.round_robin_gradients = flag(zp + "round_robin_gradients", z.round_robin_gradients);
  z.sub_group_size = i64(zp + "sub_group_size", z.sub_group_size);
  z.stage3_prefetch_bucket_size = i64(zp + "stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size);
  z.stage3_param_persistence_threshold =
      i64(zp + "stage3_param_persistence_threshold", z.stage3_param_persistence_threshold);
  z.stage3_max_live_parameters = i64(zp + "stage3_max_live_parameters", z.stage3_max_live_parameters);
  z.stage3_max_reuse_distance = i64(zp + "stage3_max_reuse_distance", z.stage3_max_reuse_distance);
  z.stage3_gather_16bit_weights_on_model_save =
      flag(zp + "stage3_gather_16bit_weights_on_model_save", z.stage3_gather_16bit_weights_on_model_save);
  for (OffloadConfig *offload : {&z.offload_optimizer, &z.offload_param}) {
    const bool is_param = offload == &z.offload_param;
    const std::string p = zp + (is_param ? "offload_param." : "offload_optimizer.");
    offload->device = device_of(text(p + "device", "none"));
    offload->nvme_path = text(p + "nvme_path", "");
    offload->pin_memory = flag(p + "pin_memory", true);
    offload->buffer_count = i64(p + "buffer_count", is_param ? 5 : 4);
    offload->buffer_size = i64(p + "buffer_size", offload->buffer_size);
    offload->max_in_cpu = i64(p + "max_in_cpu", offload->max_in_cpu);
    offload->pipeline_read = flag(p + "pipeline_read", false);
    offload->pipeline_write = flag(p + "pipeline_write", false);
    offload->fast_init = flag(p + "fast_init", false);
    offload->ratio = num(p + "ratio", 1.0);
    // Below the stage that reads it the section is ignored, as DeepSpeed ignores it (check() warned).
    if ((is_param && z.stage != 3) || (!is_param && z.stage == 0)) offload->device = OffloadDevice::None;
  }

  t.aio.block_size = i64("aio.block_size", t.aio.block_size);
  t.aio.queue_depth = i64("aio.queue_depth", t.aio.queue_depth);
  t.aio.intra_op_parallelism = i64("aio.intra_op_parallelism", t.aio.intra_op_parallelism);
  t.aio.single_submit = flag("aio.single_submit", t.aio.single_submit);
  t.aio.overlap_events = flag("aio.overlap_events", t.aio.overlap_events);
  t.aio.use_gds = flag("aio.use_gds", t.aio.use_gds);
  t.checkpoint.use_node_local_storage = flag("checkpoint.use_node_local_storage", false);
  t.checkpoint.load_universal = flag("checkpoint.load_universal", false);

  t.effective_json = c.to_json();
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace dsrt
