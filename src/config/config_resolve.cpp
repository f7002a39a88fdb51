// defines: Config::resolve -- from validated values to the TrainConfig the engine runs on.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

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
  // set and section set a field from its key, leaving it as it is when the key does not exist for
  // this optimizer, scheduler or offload section (the field is then not used).
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
  // The field's type says which kind of value its key has: a flag (bool), text (std::string), a
  // number (double) or an integer (any other arithmetic type, converted as i64_of does).
  auto set = [&](auto &field, const std::string &path) {
    using T = std::remove_reference_t<decltype(field)>;
    Value v;
    if constexpr (std::is_same_v<T, bool>) {
      if (need(path, Value::Kind::Bool, &v)) field = v.boolean;
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (need(path, Value::Kind::String, &v)) field = v.text;
    } else if constexpr (std::is_floating_point_v<T>) {
      if (need(path, Value::Kind::Number, &v)) field = v.number;
    } else {
      static_assert(std::is_integral_v<T>, "a config field is a flag, text, a number or an integer");
      if (need(path, Value::Kind::Number, &v)) field = static_cast<T>(i64_of(v.number));
    }
  };
  // A section's keys, in order: each field from the key prefix + name.
  using Field = std::variant<bool *, std::string *, double *, int *, int64_t *>;
  auto section = [&](const std::string &prefix, std::initializer_list<std::pair<const char *, Field>> keys) {
    for (const auto &key : keys) {
      const std::string path = prefix + key.first;  // not a structured binding: C++17 lambdas cannot capture one
      std::visit([&](auto *f) { set(*f, path); }, key.second);
    }
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

  section("", {{"gradient_clipping", &t.gradient_clipping},
               {"prescale_gradients", &t.prescale_gradients},
               {"gradient_predivide_factor", &t.gradient_predivide_factor}});
  std::string comm = text_or("communication_data_type", "");
  t.has_communication_data_type = !comm.empty();
  t.communication_data_type = dtype_of(comm);
  std::string accum = text_or("data_types.grad_accum_dtype", "");
  t.has_grad_accum_dtype = !accum.empty();
  t.grad_accum_dtype = dtype_of(accum);
  // null (DeepSpeed 0.19's default) and Infinity mean never; the engine prints when it is positive.
  t.steps_per_print = value("steps_per_print").kind == Value::Kind::Number ? i64_or("steps_per_print", 0) : 0;
  t.comm_timeout_s = num_or("comm_timeout", 0.0);
  set(t.wall_clock_breakdown, "wall_clock_breakdown");
  section("csv_monitor.", {{"enabled", &t.csv_monitor.enabled},
                           {"output_path", &t.csv_monitor.output_path},
                           {"job_name", &t.csv_monitor.job_name}});

  section("fp16.", {{"enabled", &t.fp16.enabled},
                    {"loss_scale", &t.fp16.loss_scale},
                    {"initial_scale_power", &t.fp16.initial_scale_power},
                    {"loss_scale_window", &t.fp16.loss_scale_window},
                    {"hysteresis", &t.fp16.hysteresis},
                    {"consecutive_hysteresis", &t.fp16.consecutive_hysteresis},
                    {"min_loss_scale", &t.fp16.min_loss_scale}});
  section("bf16.", {{"enabled", &t.bf16_enabled},
                    {"check_grad_overflow", &t.bf16_check_grad_overflow},
                    {"bf16_master_weights_and_grads", &t.bf16_master_weights},
                    {"bf16_optimizer_states", &t.bf16_optimizer_states}});

  OptimizerConfig &o = t.optimizer;
  o.present = c.has_optimizer();
  if (o.present) {
    int type = c.optimizer_type();
    o.type = static_cast<OptimizerType>(type);
    section("optimizer.params.", {{"lr", &o.lr},
                                  {"betas.0", &o.beta1},
                                  {"betas.1", &o.beta2},
                                  {"eps", &o.eps},
                                  {"weight_decay", &o.weight_decay},
                                  {"adam_w_mode", &o.adam_w_mode},
                                  {"bias_correction", &o.bias_correction},
                                  {"momentum", &o.momentum},
                                  {"dampening", &o.dampening},
                                  {"nesterov", &o.nesterov},
                                  {"max_coeff", &o.max_coeff},
                                  {"min_coeff", &o.min_coeff},
                                  {"initial_accumulator_value", &o.initial_accumulator_value},
                                  {"freeze_step", &o.freeze_step},
                                  {"coeff_beta", &o.coeff_beta},
                                  {"factor_max", &o.factor_max},
                                  {"factor_min", &o.factor_min},
                                  {"factor_threshold", &o.factor_threshold},
                                  {"var_freeze_step", &o.var_freeze_step},
                                  {"var_update_scaler", &o.var_update_scaler},
                                  {"local_step_scaler", &o.local_step_scaler},
                                  {"local_step_clipper", &o.local_step_clipper}});
    // DeepSpeed: type AdamW always decouples weight decay; type Adam does unless adam_w_mode is false.
    if (o.type == OptimizerType::AdamW) o.adam_w_mode = true;
  }

  SchedulerConfig &s = t.scheduler;
  if (c.has_scheduler()) {
    s.type = static_cast<SchedulerType>(c.scheduler_type());
    const std::string p = "scheduler.params.";
    section(p, {{"warmup_min_lr", &s.warmup_min_lr},
                {"warmup_max_lr", &s.warmup_max_lr},
                {"warmup_num_steps", &s.warmup_num_steps},
                {"warmup_type", &s.warmup_type},
                {"warmup_min_ratio", &s.warmup_min_ratio},
                {"cos_min_ratio", &s.cos_min_ratio},
                {"decay_lr_rate", &s.decay_lr_rate},
                {"cycle_first_step_size", &s.cycle_first_step_size},
                {"cycle_first_stair_count", &s.cycle_first_stair_count},
                {"decay_step_size", &s.decay_step_size},
                {"cycle_momentum", &s.cycle_momentum},
                {"cycle_min_mom", &s.cycle_min_mom},
                {"cycle_max_mom", &s.cycle_max_mom},
                {"decay_mom_rate", &s.decay_mom_rate},
                {"lr_range_test_min_lr", &s.lr_range_test_min_lr},
                {"lr_range_test_step_size", &s.lr_range_test_step_size},
                {"lr_range_test_step_rate", &s.lr_range_test_step_rate},
                {"lr_range_test_staircase", &s.lr_range_test_staircase}});
    s.total_num_steps = i64_or(p + "total_num_steps", s.total_num_steps);
    s.cycle_min_lr = num_or(p + "cycle_min_lr", s.cycle_min_lr);
    s.cycle_max_lr = num_or(p + "cycle_max_lr", s.cycle_max_lr);
    s.cycle_second_step_size = i64_or(p + "cycle_second_step_size", s.cycle_second_step_size);
    s.cycle_second_stair_count = i64_or(p + "cycle_second_stair_count", s.cycle_second_stair_count);
    // DeepSpeed's OneCycle cycles momentum only for an optimizer with betas: with SGD or Adagrad it
    // turns cycling off (check() warned), so SGD keeps its own momentum.
    if (s.type == SchedulerType::OneCycle && o.present &&
        (o.type == OptimizerType::SGD || o.type == OptimizerType::Adagrad))
      s.cycle_momentum = false;
  }

  ZeroConfig &z = t.zero;
  const std::string zp = "zero_optimization.";
  section(zp, {{"stage", &z.stage},
               {"contiguous_gradients", &z.contiguous_gradients},
               {"reduce_scatter", &z.reduce_scatter},
               {"reduce_bucket_size", &z.reduce_bucket_size},
               {"allgather_partitions", &z.allgather_partitions},
               {"allgather_bucket_size", &z.allgather_bucket_size},
               {"overlap_comm", &z.overlap_comm},
               {"round_robin_gradients", &z.round_robin_gradients},
               {"sub_group_size", &z.sub_group_size},
               {"stage3_prefetch_bucket_size", &z.stage3_prefetch_bucket_size},
               {"stage3_param_persistence_threshold", &z.stage3_param_persistence_threshold},
               {"stage3_max_live_parameters", &z.stage3_max_live_parameters},
               {"stage3_max_reuse_distance", &z.stage3_max_reuse_distance},
               {"stage3_gather_16bit_weights_on_model_save", &z.stage3_gather_16bit_weights_on_model_save},
               {"zero_hpz_partition_size", &z.zero_hpz_partition_size},
               {"zero_quantized_weights", &z.zero_quantized_weights},
               {"zero_quantized_nontrainable_weights", &z.zero_quantized_nontrainable_weights},
               {"zero_quantized_gradients", &z.zero_quantized_gradients},
               {"mics_shard_size", &z.mics_shard_size},
               {"mics_hierarchical_params_gather", &z.mics_hierarchical_params_gather}});
  // hpZ is a stage-3 partitioning (DeepSpeed reads it only there); 0 means off, like 1.
  z.zero_hpz_partition_size = std::max<int64_t>(1, z.zero_hpz_partition_size);
  if (z.stage != 3) z.zero_hpz_partition_size = 1;
  // MiCS (docs/zero.md): stage 3 only; 0 or below means off. The rules are in config_rules.cpp.
  if (z.mics_shard_size <= 0) z.mics_shard_size = -1;
  if (z.mics_shard_size <= 0) z.mics_hierarchical_params_gather = false;
  for (OffloadConfig *offload : {&z.offload_optimizer, &z.offload_param}) {
    const bool is_param = offload == &z.offload_param;
    const std::string p = zp + (is_param ? "offload_param." : "offload_optimizer.");
    std::string device;
    set(device, p + "device");
    offload->device = device_of(device);
    offload->nvme_path = text_or(p + "nvme_path", "");
    section(p, {{"pin_memory", &offload->pin_memory},
                {"buffer_count", &offload->buffer_count},
                {"buffer_size", &offload->buffer_size},
                {"max_in_cpu", &offload->max_in_cpu},
                {"pipeline_read", &offload->pipeline_read},
                {"pipeline_write", &offload->pipeline_write},
                {"fast_init", &offload->fast_init},
                {"ratio", &offload->ratio}});
    // Below the stage that reads it the section is ignored, as DeepSpeed ignores it (check() warned).
    if ((is_param && z.stage != 3) || (!is_param && z.stage == 0)) offload->device = OffloadDevice::None;
  }

  section("aio.", {{"block_size", &t.aio.block_size},
                   {"queue_depth", &t.aio.queue_depth},
                   {"intra_op_parallelism", &t.aio.intra_op_parallelism},
                   {"single_submit", &t.aio.single_submit},
                   {"overlap_events", &t.aio.overlap_events},
                   {"use_gds", &t.aio.use_gds}});
  section("checkpoint.", {{"use_node_local_storage", &t.checkpoint.use_node_local_storage},
                          {"load_universal", &t.checkpoint.load_universal}});

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
