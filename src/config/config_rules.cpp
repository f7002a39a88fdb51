// defines: the refusals that depend on the configuration alone (config_rules.h): the loss-scaling
// keys, the scheduler's keys, and the rules across sections the engine used to check itself.
#include "config/config_rules.h"
#include "config/bf16_master_rules.h"
#include "config/schema.h"

#include <cmath>

namespace dsrt {
namespace {

Status check_finite(double value, const char *key, const char *schedule) {
  if (!std::isfinite(value))
    return Error(DSRT_ERR_CONFIG, "%s (%s) is not a finite number; set a finite value", key, schedule);
  return Status::Ok();
}

Status check_non_negative(double value, const char *key, const char *schedule) {
  DSRT_RETURN_IF_ERROR(check_finite(value, key, schedule));
  if (value < 0.0) return Error(DSRT_ERR_CONFIG, "%s is %g for %s; set a value >= 0", key, value, schedule);
  return Status::Ok();
}

Status check_positive_steps(int64_t value, const char *key, const char *schedule) {
  if (value <= 0)
    return Error(DSRT_ERR_CONFIG, "%s is %lld for %s; set a positive number of steps", key,
                 static_cast<long long>(value), schedule);
  return Status::Ok();
}

Status check_total_steps(const SchedulerConfig &config, const char *schedule) {
  if (config.total_num_steps <= 0)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.total_num_steps is required by %s; set it to the number of "
                 "optimizer steps of the whole run (greater than warmup_num_steps = %lld)",
                 schedule, static_cast<long long>(config.warmup_num_steps));
  if (config.total_num_steps <= config.warmup_num_steps)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.total_num_steps (%lld) must be greater than "
                 "scheduler.params.warmup_num_steps (%lld) for %s; raise total_num_steps to the "
                 "run's optimizer step count or lower warmup_num_steps",
                 static_cast<long long>(config.total_num_steps), static_cast<long long>(config.warmup_num_steps),
                 schedule);
  return Status::Ok();
}

Status check_warmup(const SchedulerConfig &config, const char *schedule) {
  // 0 and 1 are valid: DeepSpeed warms up over max(2, warmup_num_steps) steps, and so does lr_warmup.cpp.
  if (config.warmup_num_steps < 0)
    return Error(DSRT_ERR_CONFIG, "scheduler.params.warmup_num_steps is %lld for %s; set a number of steps >= 0",
                 static_cast<long long>(config.warmup_num_steps), schedule);
  return Status::Ok();
}

Status check_warmup_lr(const SchedulerConfig &config, const char *schedule) {
  DSRT_RETURN_IF_ERROR(check_warmup(config, schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(config.warmup_min_lr, "scheduler.params.warmup_min_lr", schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(config.warmup_max_lr, "scheduler.params.warmup_max_lr", schedule));
  return Status::Ok();
}

Status check_warmup_cosine(const SchedulerConfig &config, double base_lr) {
  const char *schedule = "WarmupCosineLR";
  DSRT_RETURN_IF_ERROR(check_warmup(config, schedule));
  DSRT_RETURN_IF_ERROR(check_total_steps(config, schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(config.warmup_min_ratio, "scheduler.params.warmup_min_ratio", schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(config.cos_min_ratio, "scheduler.params.cos_min_ratio", schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(base_lr, "optimizer.params.lr", schedule));
  return Status::Ok();
}

Status check_one_cycle(const SchedulerConfig &config) {
  const char *schedule = "OneCycle";
  DSRT_RETURN_IF_ERROR(check_non_negative(config.cycle_min_lr, "scheduler.params.cycle_min_lr", schedule));
  DSRT_RETURN_IF_ERROR(check_non_negative(config.cycle_max_lr, "scheduler.params.cycle_max_lr", schedule));
  if (config.cycle_min_lr == 0.0 && config.cycle_max_lr == 0.0)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.cycle_min_lr and scheduler.params.cycle_max_lr are required by "
                 "OneCycle (both are 0, so the learning rate would stay 0); set the cycle's lower "
                 "and upper learning rates");
  DSRT_RETURN_IF_ERROR(
      check_positive_steps(config.cycle_first_step_size, "scheduler.params.cycle_first_step_size", schedule));
  if (config.cycle_second_step_size < -1)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.cycle_second_step_size is %lld for OneCycle; set a number of "
                 "steps >= 0, or leave it out to use cycle_first_step_size",
                 static_cast<long long>(config.cycle_second_step_size));
  if (config.cycle_first_stair_count < 0)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.cycle_first_stair_count is %lld for OneCycle; set a count >= 0 "
                 "(0 = continuous)",
                 static_cast<long long>(config.cycle_first_stair_count));
  if (config.cycle_second_stair_count < -1)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.cycle_second_stair_count is %lld for OneCycle; set a count >= 0 "
                 "(0 = continuous), or leave it out to use cycle_first_stair_count",
                 static_cast<long long>(config.cycle_second_stair_count));
  if (config.decay_step_size < 0)
    return Error(DSRT_ERR_CONFIG,
                 "scheduler.params.decay_step_size is %lld for OneCycle; set a number of steps >= "
                 "0 (0 = no decay after the cycle)",
                 static_cast<long long>(config.decay_step_size));
  DSRT_RETURN_IF_ERROR(check_finite(config.decay_lr_rate, "scheduler.params.decay_lr_rate", schedule));
  DSRT_RETURN_IF_ERROR(check_finite(config.cycle_min_mom, "scheduler.params.cycle_min_mom", schedule));
  DSRT_RETURN_IF_ERROR(check_finite(config.cycle_max_mom, "scheduler.params.cycle_max_mom", schedule));
  DSRT_RETURN_IF_ERROR(check_finite(config.decay_mom_rate, "scheduler.params.decay_mom_rate", schedule));
  return Status::Ok();
}

Status check_lr_range_test(const SchedulerConfig &config) {
  const char *schedule = "LRRangeTest";
  DSRT_RETURN_IF_ERROR(
      check_non_negative(config.lr_range_test_min_lr, "scheduler.params.lr_range_test_min_lr", schedule));
  DSRT_RETURN_IF_ERROR(
      check_positive_steps(config.lr_range_test_step_size, "scheduler.params.lr_range_test_step_size", schedule));
  DSRT_RETURN_IF_ERROR(
      check_finite(config.lr_range_test_step_rate, "scheduler.params.lr_range_test_step_rate", schedule));
  return Status::Ok();
}

// The pinned pool of an NVMe swapper holds buffer_count buffers (offload/pinned_pool.cpp).
constexpr int64_t kMaxSwapBuffers = 4096;

Status check_nvme_buffers(const OffloadConfig &offload, const char *section) {
  if (offload.buffer_count < 1 || offload.buffer_count > kMaxSwapBuffers)
    return Error(DSRT_ERR_CONFIG, "zero_optimization.%s.buffer_count is %lld; use 1 to %lld swap buffers", section,
                 static_cast<long long>(offload.buffer_count), static_cast<long long>(kMaxSwapBuffers));
  return Status::Ok();
}

}  // namespace

Status check_fp16_config(const Fp16Config &fp16, bool fp16_enabled) {
  if (!fp16_enabled) return Status::Ok();
  if (!std::isfinite(fp16.loss_scale) || fp16.loss_scale < 0.0)
    return Error(DSRT_ERR_CONFIG, "fp16.loss_scale is %g; set 0 for dynamic loss scaling or a positive static scale",
                 fp16.loss_scale);
  if (fp16.loss_scale > 0.0) return Status::Ok();
  if (fp16.initial_scale_power < -126 || fp16.initial_scale_power > 126)
    return Error(DSRT_ERR_CONFIG,
                 "fp16.initial_scale_power is %d; set an integer in [-126, 126] (DeepSpeed's default is 16)",
                 fp16.initial_scale_power);
  if (fp16.loss_scale_window < 1)
    return Error(DSRT_ERR_CONFIG, "fp16.loss_scale_window is %lld; set a positive number of steps (default 1000)",
                 static_cast<long long>(fp16.loss_scale_window));
  if (fp16.hysteresis < 1)
    return Error(DSRT_ERR_CONFIG, "fp16.hysteresis is %d; set a positive integer (default 2)", fp16.hysteresis);
  if (!std::isfinite(fp16.min_loss_scale) || fp16.min_loss_scale <= 0.0)
    return Error(DSRT_ERR_CONFIG, "fp16.min_loss_scale is %g; set a positive finite value (default 1)",
                 fp16.min_loss_scale);
  return Status::Ok();
}

Status check_scheduler_config(const SchedulerConfig &config, double base_lr) {
  switch (config.type) {
    case SchedulerType::None: return check_non_negative(base_lr, "optimizer.params.lr", "no scheduler");
    case SchedulerType::WarmupLR: return check_warmup_lr(config, "WarmupLR");
    case SchedulerType::WarmupDecayLR:
      DSRT_RETURN_IF_ERROR(check_warmup_lr(config, "WarmupDecayLR"));
      return check_total_steps(config, "WarmupDecayLR");
    case SchedulerType::WarmupCosineLR: return check_warmup_cosine(config, base_lr);
    case SchedulerType::OneCycle: return check_one_cycle(config);
    case SchedulerType::LRRangeTest: return check_lr_range_test(config);
  }
  return Error(DSRT_ERR_CONFIG,
               "scheduler.type has an unknown value (%d); use WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or "
               "LRRangeTest",
               static_cast<int>(config.type));
}

// MiCS (docs/zero.md): shard groups of consecutive ranks that tile the world, at stage 3.
static Status check_mics_rules(const TrainConfig &config) {
  const ZeroConfig &z = config.zero;
  if (z.mics_shard_size <= 0) return Status::Ok();
  if (z.stage != 3)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size %lld needs ZeRO stage 3 (MiCS shards parameters), but the stage "
                 "is %d; set zero_optimization.stage to 3 or mics_shard_size to -1",
                 static_cast<long long>(z.mics_shard_size), z.stage);
  if (z.mics_shard_size > config.world_size || config.world_size % z.mics_shard_size != 0)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size %lld does not divide the world size %d: MiCS shard groups of "
                 "consecutive ranks must tile the world; use a divisor of %d",
                 static_cast<long long>(z.mics_shard_size), config.world_size, config.world_size);
  if (z.zero_hpz_partition_size > 1)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size and zero_hpz_partition_size are both set: MiCS and hpZ are two "
                 "different ways to keep parameter gathers inside a group; choose one (set the other to -1 / 1)");
  if (z.offload_optimizer.device != OffloadDevice::None && z.offload_optimizer.ratio < 1.0)
    return Error(DSRT_ERR_UNSUPPORTED,
                 "zero_optimization.offload_optimizer.ratio %g < 1 with mics_shard_size is not implemented (the "
                 "device/host split is not built over MiCS shard groups); set ratio to 1 or mics_shard_size to -1",
                 z.offload_optimizer.ratio);
  return Status::Ok();
}

Status check_train_config(const TrainConfig &config) {
  if (config.fp16.enabled && config.bf16_enabled)
    return Error(DSRT_ERR_CONFIG, "fp16.enabled and bf16.enabled are both true; enable at most one of them");
  DSRT_RETURN_IF_ERROR(check_fp16_config(config.fp16, config.fp16.enabled));
  if (config.gradient_accumulation_steps < 1)
    return Error(DSRT_ERR_CONFIG, "gradient_accumulation_steps is %lld; it must be at least 1",
                 static_cast<long long>(config.gradient_accumulation_steps));
  if (config.zero.stage < 0 || config.zero.stage > 3)
    return Error(DSRT_ERR_CONFIG, "zero_optimization.stage is %d; use 0, 1, 2 or 3", config.zero.stage);
  if (!(config.gradient_clipping >= 0.0) || !std::isfinite(config.gradient_clipping))
    return Error(DSRT_ERR_CONFIG, "gradient_clipping is %g; use 0 (off) or a positive norm", config.gradient_clipping);
  if (!(config.gradient_predivide_factor > 0.0) || !std::isfinite(config.gradient_predivide_factor))
    return Error(DSRT_ERR_CONFIG, "gradient_predivide_factor is %g; it must be positive",
                 config.gradient_predivide_factor);
  if (config.zero.stage3_max_live_parameters < 1)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.stage3_max_live_parameters is %lld; it must be a positive number of elements",
                 static_cast<long long>(config.zero.stage3_max_live_parameters));
  // 0 has DeepSpeed's meaning: one bucket per gradient; each partition gathered in one piece.
  if (config.zero.reduce_bucket_size < 0 || config.zero.allgather_bucket_size < 0)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.reduce_bucket_size (%lld) and allgather_bucket_size (%lld) must not be negative",
                 static_cast<long long>(config.zero.reduce_bucket_size),
                 static_cast<long long>(config.zero.allgather_bucket_size));
  if (config.zero.stage3_prefetch_bucket_size < 0 || config.zero.stage3_max_reuse_distance < 0 ||
      config.zero.stage3_param_persistence_threshold < 0)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.stage3_prefetch_bucket_size, stage3_max_reuse_distance and "
                 "stage3_param_persistence_threshold must not be negative (0 turns each off)");
  if (config.optimizer.type == OptimizerType::SGD && config.optimizer.nesterov &&
      (config.optimizer.momentum <= 0.0 || config.optimizer.dampening != 0.0))
    return Error(DSRT_ERR_CONFIG,
                 "optimizer.params.nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                 config.optimizer.momentum, config.optimizer.dampening);
  const bool onebit_kind = config.optimizer.type == OptimizerType::OneBitAdam ||
                           config.optimizer.type == OptimizerType::ZeroOneAdam ||
                           config.optimizer.type == OptimizerType::OneBitLamb;
  if (onebit_kind && config.zero.stage != 0)
    return Error(DSRT_ERR_CONFIG,
                 "optimizer.type %s needs zero_optimization.stage 0 (it is %d): DeepSpeed's 1-bit "
                 "optimizers are not compatible with ZeRO; set the stage to 0 or use Adam/AdamW",
                 kOptimizerTypes[static_cast<int>(config.optimizer.type)], config.zero.stage);
  if (config.optimizer.type == OptimizerType::OneBitLamb && config.optimizer.factor_min > config.optimizer.factor_max)
    return Error(DSRT_ERR_CONFIG, "optimizer.params.factor_min (%g) is above factor_max (%g); OneBitLamb clamps its "
                 "compression-stage factor into [factor_min, factor_max]",
                 config.optimizer.factor_min, config.optimizer.factor_max);
  const OffloadConfig &param = config.zero.offload_param, &optim = config.zero.offload_optimizer;
  if (param.device != OffloadDevice::None && config.zero.stage != 3)
    return Error(DSRT_ERR_CONFIG, "zero_optimization.offload_param needs stage 3 (stage is %d)", config.zero.stage);
  if (param.device == OffloadDevice::Nvme) {
    if (param.nvme_path.empty())
      return Error(DSRT_ERR_CONFIG, "zero_optimization.offload_param.nvme_path is required when its device is \"nvme\"");
    if (param.buffer_count < 1 || param.buffer_size < 1)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.offload_param.buffer_count (%lld) and buffer_size (%lld elements) must be positive",
                   static_cast<long long>(param.buffer_count), static_cast<long long>(param.buffer_size));
    DSRT_RETURN_IF_ERROR(check_nvme_buffers(param, "offload_param"));
  }
  if (optim.device == OffloadDevice::Nvme) {
    if (config.zero.stage < 1)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.offload_optimizer.device \"nvme\" needs ZeRO stage 1, 2 or 3 (stage is 0)");
    if (config.optimizer.type == OptimizerType::Lamb)
      return Error(DSRT_ERR_UNSUPPORTED,
                   "optimizer Lamb with offload_optimizer.device \"nvme\" is not implemented: Lamb's trust ratio "
                   "needs whole-tensor norms before any weight is updated, which the single NVMe sub-group pass "
                   "cannot provide; use Adam/AdamW, or offload_optimizer.device \"cpu\"");
    if (optim.nvme_path.empty())
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.offload_optimizer.nvme_path is required when its device is \"nvme\"");
    if (config.zero.sub_group_size < 0)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.sub_group_size is %lld; it must not be negative (0: one sub-group per parameter)",
                   static_cast<long long>(config.zero.sub_group_size));
    if (optim.buffer_count < 1)
      return Error(DSRT_ERR_CONFIG, "zero_optimization.offload_optimizer.buffer_count is %lld; it must be at least 1",
                   static_cast<long long>(optim.buffer_count));
    DSRT_RETURN_IF_ERROR(check_nvme_buffers(optim, "offload_optimizer"));
  }
  if (optim.device != OffloadDevice::None && optim.ratio < 1.0) {
    const double ratio = optim.ratio;
    if (!(ratio >= 0.0))
      return Error(DSRT_ERR_CONFIG, "zero_optimization.offload_optimizer.ratio is %g; it must be in [0, 1]", ratio);
    if (config.zero.stage != 3)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.offload_optimizer.ratio %g < 1 (partial offload) needs ZeRO stage 3 (stage is %d), "
                   "as in DeepSpeed; set ratio to 1 or use stage 3",
                   ratio, config.zero.stage);
    if (optim.device == OffloadDevice::Nvme)
      return Error(DSRT_ERR_UNSUPPORTED,
                   "zero_optimization.offload_optimizer.ratio %g < 1 with device \"nvme\" is not implemented; partial "
                   "offload splits the optimizer between the device and host memory: use device \"cpu\", or ratio 1",
                   ratio);
    if (config.optimizer.type == OptimizerType::Lamb)
      return Error(DSRT_ERR_UNSUPPORTED,
                   "optimizer Lamb with zero_optimization.offload_optimizer.ratio < 1 is not implemented (its trust "
                   "ratio needs whole-tensor norms over both halves); use Adam/AdamW (DeepSpeed allows CPU Adam only) "
                   "or ratio 1");
    if (config.zero.sub_group_size < 0)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.sub_group_size is %lld; it must not be negative (0: one sub-group per parameter)",
                   static_cast<long long>(config.zero.sub_group_size));
  }
  DSRT_RETURN_IF_ERROR(check_mics_rules(config));
  DSRT_RETURN_IF_ERROR(check_bf16_master_rules(config));
  return check_scheduler_config(config.scheduler, config.optimizer.lr);
}

}  // namespace dsrt
