// defines: the table of every DeepSpeed config key: type, DeepSpeed's default, range, and what
// dsrt does with it. One line per key; the order here is the order `dsrt config show` prints.
#include "config/config_internal.h"
#include "config/schema.h"

namespace dsrt {

namespace {

// Builders, so the table below reads as one line per key.
KeySpec key(const std::string &path, KeyType type, Value def) {
  KeySpec spec;
  spec.path = path;
  spec.type = type;
  spec.default_value = std::move(def);
  return spec;
}
KeySpec B(const std::string &path, bool def) { return key(path, KeyType::Bool, Value::of_bool(def)); }
KeySpec I(const std::string &path, double def, double min = -1e300, double max = 1e300) {
  KeySpec spec = key(path, KeyType::Int, Value::of_number(def));
  spec.min = min;
  spec.max = max;
  return spec;
}
KeySpec I_null(const std::string &path, double min = -1e300) {
  KeySpec spec = key(path, KeyType::Int, Value::null());
  spec.min = min;
  spec.nullable = true;
  return spec;
}
KeySpec N(const std::string &path, double def, double min = -1e300, double max = 1e300, bool min_exclusive = false) {
  KeySpec spec = key(path, KeyType::Number, Value::of_number(def));
  spec.min = min;
  spec.max = max;
  spec.min_exclusive = min_exclusive;
  return spec;
}
KeySpec N_null(const std::string &path, double min = -1e300, bool min_exclusive = false) {
  KeySpec spec = key(path, KeyType::Number, Value::null());
  spec.min = min;
  spec.min_exclusive = min_exclusive;
  spec.nullable = true;
  return spec;
}
KeySpec S(const std::string &path, const char *def) {
  return key(path, KeyType::String, def ? Value::of_string(def) : Value::null());
}
KeySpec S_null(const std::string &path) {
  KeySpec spec = key(path, KeyType::String, Value::null());
  spec.nullable = true;
  return spec;
}
KeySpec C(const std::string &path, const char *def, std::vector<std::string> choices) {
  KeySpec spec = key(path, KeyType::Choice, def ? Value::of_string(def) : Value::null());
  spec.choices = std::move(choices);
  spec.nullable = def == nullptr;
  return spec;
}
KeySpec with(KeySpec spec, Support support, const std::string &note) {
  spec.support = support;
  spec.note = note;
  return spec;
}
KeySpec noted(KeySpec spec, const std::string &note) {
  spec.note = note;
  return spec;
}
KeySpec insensitive(KeySpec spec) {
  spec.case_insensitive = true;
  return spec;
}
KeySpec for_optimizers(KeySpec spec, uint32_t mask) {
  spec.optimizer_mask = mask;
  return spec;
}
KeySpec for_schedulers(KeySpec spec, uint32_t mask) {
  spec.scheduler_mask = mask;
  return spec;
}

// A pair key plus its two element keys.
void add_pair(std::vector<KeySpec> *keys, const std::string &path, double first, double second, double min,
              double max, uint32_t optimizer_mask) {
  KeySpec pair = key(path, KeyType::Pair, Value::null());
  pair.optimizer_mask = optimizer_mask;
  keys->push_back(pair);
  for (int i = 0; i < 2; ++i) {
    KeySpec element = N(path + "." + std::to_string(i), i == 0 ? first : second, min, max);
    element.optimizer_mask = optimizer_mask;
    element.note = "less than 1";
    keys->push_back(element);
  }
}

constexpr uint32_t bit(int i) { return 1u << i; }
// Optimizer indexes, as in kOptimizerTypes.
constexpr uint32_t kAdam = bit(0), kAdamW = bit(1), kSGD = bit(2), kLamb = bit(3), kAdagrad = bit(4),
                   kLion = bit(5), kOneBitAdam = bit(6), kZeroOneAdam = bit(7),
                   kOneBitLamb = bit(8);
// Scheduler indexes, as in kSchedulerTypes.
constexpr uint32_t kWarmupLR = bit(1), kWarmupDecayLR = bit(2), kWarmupCosineLR = bit(3), kOneCycle = bit(4),
                   kLRRangeTest = bit(5);


}  // namespace

std::vector<KeySpec> build_schema_keys() {
  std::vector<KeySpec> k;
  const std::vector<std::string> dtypes = {"fp32", "fp16", "bf16"};

  // --- top level: batch, clipping, communication, logging
  k.push_back(I_null("train_batch_size", 1));
  k.push_back(I_null("train_micro_batch_size_per_gpu", 1));
  k.push_back(I_null("gradient_accumulation_steps", 1));
  KeySpec every = noted(I_null("steps_per_print", 1), "null or Infinity: never");
  every.infinity_ok = true;  // Accelerate writes float("inf"), which Python's json prints as Infinity
  k.push_back(every);
  k.push_back(B("wall_clock_breakdown", false));
  // dsrt's own: seconds a collective may wait for the other ranks (DSRT_COMM_TIMEOUT_S otherwise).
  k.push_back(with(N_null("comm_timeout", 0.0, true), Support::Implemented,
                   "dsrt's collective timeout in seconds (default: DSRT_COMM_TIMEOUT_S, else 120); not a DeepSpeed key"));
  k.push_back(N("gradient_clipping", 1.0, 0.0));
  k.push_back(B("prescale_gradients", false));
  k.push_back(N("gradient_predivide_factor", 1.0, 0.0, 1e300, true));
  k.push_back(C("communication_data_type", nullptr, dtypes));
  k.push_back(with(C("seq_parallel_communication_data_type", "fp32", dtypes), Support::Ignored,
                   "dsrt has no sequence parallelism"));
  k.push_back(with(B("dump_state", false), Support::Ignored, "dsrt does not print engine state at startup"));
  k.push_back(with(B("memory_breakdown", false), Support::Ignored,
                   "dsrt does not log memory breakdowns; use dsrt_memory_stats"));
  k.push_back(with(B("sparse_gradients", false), Support::Unsupported,
                   "sparse (embedding) gradients are not implemented; set it to false"));
  k.push_back(with(B("disable_allgather", false), Support::Unsupported,
                   "replacing the all-gather with broadcasts is not implemented; set it to false"));
  k.push_back(with(B("zero_allow_untested_optimizer", false), Support::Ignored,
                   "every dsrt optimizer is supported under ZeRO; there is no client optimizer to allow"));
  k.push_back(with(B("zero_force_ds_cpu_optimizer", true), Support::Ignored,
                   "dsrt always uses its own CPU optimizer when the optimizer is offloaded"));
  k.push_back(with(B("graph_harvesting", false), Support::Unsupported,
                   "CUDA graph harvesting is not implemented; set it to false"));
  k.push_back(with(B("use_data_before_expert_parallelism", false), Support::Ignored,
                   "dsrt has no expert parallelism"));
  k.push_back(with(B("dataloader_drop_last", false), Support::HostSide,
                   "the data loader belongs to the host (the Python front applies it to the one initialize(training_data=) makes)"));
  k.push_back(with(I_null("vocabulary_size", 1), Support::HostSide, "the vocabulary belongs to the host's model"));
  k.push_back(with(I("sequence_parallel_size", 1, 1), Support::Unsupported,
                   "sequence parallelism is not implemented; set it to 1"));
  k.push_back(with(B("disable_python_gc", false), Support::HostSide,
                   "Python's garbage collector belongs to the host program"));
  k.push_back(with(S_null("log_level"), Support::Ignored, "dsrt's log level is DSRT_LOG_LEVEL"));
  k.push_back(with(B("managed_gradient_accumulation", true), Support::Unsupported,
                   "dsrt owns the accumulation boundary (gradient_accumulation_steps); set it to true"));
  k.push_back(with(C("gradient_allreduce_op", "mean", {"mean", "sum"}), Support::Unsupported,
                   "dsrt averages gradients over ranks; summing them is not implemented; set it to \"mean\""));

  // --- fp16 / bf16
  k.push_back(B("fp16.enabled", false));
  k.push_back(with(B("fp16.auto_cast", false), Support::HostSide,
                   "casting the forward's inputs to fp16 is the host's job"));
  k.push_back(noted(N("fp16.loss_scale", 0.0, 0.0), "0 selects dynamic loss scaling"));
  k.push_back(I("fp16.initial_scale_power", 16, 0, 127));
  k.push_back(I("fp16.loss_scale_window", 1000, 1));
  k.push_back(I("fp16.hysteresis", 2, 1));
  k.push_back(B("fp16.consecutive_hysteresis", false));
  k.push_back(N("fp16.min_loss_scale", 1.0, 0.0, 1e300, true));
  k.push_back(with(B("fp16.fp16_master_weights_and_grads", false), Support::Unsupported,
                   "fp16 master weights are not implemented (dsrt keeps fp32 masters); set it to false"));
  k.push_back(B("bf16.enabled", false));
  k.push_back(with(B("bf16.immediate_grad_update", false), Support::Ignored,
                   "dsrt accumulates bf16 gradients in its own buffers"));
  k.push_back(noted(B("bf16.check_grad_overflow", true), "true: skip the step when a gradient is inf or nan"));
  k.push_back(noted(B("bf16.bf16_master_weights_and_grads", false),
                    "true: master weights in bf16, no fp32 copy (ZeRO stage 1-3; without "
                    "bf16_optimizer_states it needs offload_optimizer and Adam/AdamW)"));
  k.push_back(noted(B("bf16.bf16_optimizer_states", false),
                    "true: optimizer states in bf16 (needs bf16_master_weights_and_grads)"));

  // --- zero_optimization
  const std::string z = "zero_optimization.";
  k.push_back(noted(I(z + "stage", 0, 0, 3),
                    "0 = off, 1 = optimizer states, 2 = + gradients, 3 = + parameters"));
  k.push_back(with(B(z + "contiguous_gradients", true), Support::Ignored,
                   "dsrt always packs gradients into contiguous buckets"));
  k.push_back(B(z + "reduce_scatter", true));
  k.push_back(I(z + "reduce_bucket_size", 500000000, 1));
  k.push_back(with(B(z + "use_multi_rank_bucket_allreduce", true), Support::Ignored,
                   "dsrt chooses its own bucket collectives"));
  k.push_back(with(B(z + "allgather_partitions", true), Support::Ignored,
                   "dsrt always gathers updated partitions with all-gather"));
  k.push_back(noted(I(z + "allgather_bucket_size", 500000000, 0), "0: each partition gathered in one piece"));
  KeySpec overlap = key(z + "overlap_comm", KeyType::Bool, Value::null());
  overlap.nullable = true;
  overlap.note = "default: true at stage 3, false otherwise";
  k.push_back(overlap);
  k.push_back(with(B(z + "load_from_fp32_weights", true), Support::Ignored,
                   "dsrt checkpoints always hold fp32 masters and always load them"));
  k.push_back(with(B(z + "elastic_checkpoint", false), Support::Ignored,
                   "dsrt reshards checkpoints to any world size without it"));
  k.push_back(noted(I(z + "sub_group_size", 1000000000, 0), "0: one sub-group per parameter"));
  k.push_back(I(z + "stage3_prefetch_bucket_size", 50000000, 0));
  k.push_back(I(z + "stage3_param_persistence_threshold", 100000, 0));
  k.push_back(with(I(z + "stage3_model_persistence_threshold", 9223372036854775807.0, 0), Support::Ignored,
                   "dsrt bounds persistent parameters only per tensor (stage3_param_persistence_threshold)"));
  k.push_back(I(z + "stage3_max_live_parameters", 1000000000, 0));
  k.push_back(I(z + "stage3_max_reuse_distance", 1000000000, 0));
  k.push_back(B(z + "stage3_gather_16bit_weights_on_model_save", false));
  k.push_back(with(I(z + "stage3_module_granularity_threshold", 0, 0), Support::HostSide,
                   "module-level fetch grouping depends on the host's module tree"));
  k.push_back(with(B(z + "stage3_use_all_reduce_for_fetch_params", false), Support::Unsupported,
                   "fetching parameters with all-reduce is not implemented; set it to false"));
  k.push_back(with(B(z + "stage3_allgather_sequential", false), Support::Ignored,
                   "dsrt gathers stage 3 parameters in its own buckets (stage3_prefetch_bucket_size)"));
  k.push_back(with(B(z + "enable_sanity_checks", false), Support::Ignored, "dsrt always checks its own invariants"));
  k.push_back(with(B(z + "save_muon_momentum_buffer_in_memory", false), Support::Ignored,
                   "dsrt has no Muon optimizer"));
  k.push_back(with(B(z + "compute_grad_norm", true), Support::Ignored,
                   "dsrt always computes the global gradient norm (one fused pass with the overflow check)"));
  k.push_back(with(B(z + "parameter_alignment", false), Support::Ignored,
                   "dsrt always aligns every tensor in its flat buffers"));
  k.push_back(with(B(z + "ignore_unused_parameters", true), Support::Ignored,
                   "dsrt treats a tensor whose gradient was never marked ready as a zero gradient"));
  k.push_back(with(B(z + "legacy_stage1", false), Support::Unsupported,
                   "the legacy stage 1 implementation is not implemented; set it to false"));
  k.push_back(with(B(z + "round_robin_gradients", false), Support::Ignored,
                   "dsrt copies offloaded gradient partitions in its own order; the result is the same"));
  k.push_back(I(z + "zero_hpz_partition_size", 1, 0));
  k.push_back(B(z + "zero_quantized_weights", false));
  k.push_back(B(z + "zero_quantized_nontrainable_weights", false));
  k.push_back(B(z + "zero_quantized_gradients", false));
  // MiCS: removed by DeepSpeed 0.19; dsrt keeps the meaning of earlier versions (docs/zero.md).
  k.push_back(I(z + "mics_shard_size", -1, -1));
  k.push_back(B(z + "mics_hierarchical_params_gather", false));
  k.push_back(with(B(z + "memory_efficient_linear", true), Support::HostSide,
                   "the linear layers belong to the host's model"));
  k.push_back(with(B(z + "pipeline_loading_checkpoint", false), Support::Ignored,
                   "dsrt has no pipeline parallelism"));
  k.push_back(with(B(z + "override_module_apply", true), Support::HostSide,
                   "module.apply belongs to the host's framework"));
  k.push_back(with(B(z + "log_trace_cache_warnings", false), Support::Ignored,
                   "dsrt records the stage 3 fetch order without a trace cache"));

  const std::vector<std::string> devices = {"none", "cpu", "nvme"};
  for (const char *which : {"offload_optimizer", "offload_param"}) {
    const std::string o = z + which + ".";
    bool is_param = std::string(which) == "offload_param";
    k.push_back(C(o + "device", "none", devices));
    k.push_back(S_null(o + "nvme_path"));
    k.push_back(I(o + "buffer_count", is_param ? 5 : 4, 1));
    k.push_back(B(o + "pin_memory", true));
    if (is_param) {
      k.push_back(I(o + "buffer_size", 100000000, 1));
      k.push_back(I(o + "max_in_cpu", 1000000000, 0));
    } else {
      k.push_back(B(o + "pipeline_read", false));
      k.push_back(B(o + "pipeline_write", false));
      k.push_back(with(B(o + "fast_init", false), Support::Ignored, "dsrt initializes NVMe optimizer state one way"));
      k.push_back(N(o + "ratio", 1.0, 0.0, 1.0));  // ZeRO-Offload++ (stage 3, device "cpu")
      k.push_back(with(B(o + "super_offload", false), Support::Unsupported,
                       "SuperOffload (for Superchips) is not implemented; set it to false"));
      k.push_back(with(N(o + "cpuadam_cores_perc", 0.8, 0.0, 1.0), Support::Ignored,
                       "it applies to SuperOffload only; dsrt's CPU optimizer uses OpenMP's thread count"));
    }
  }

  // --- aio (NVMe offload I/O)
  k.push_back(noted(I("aio.block_size", 1048576, 4096, 1073741824.0), "a multiple of 4096 (O_DIRECT)"));
  k.push_back(I("aio.queue_depth", 8, 1, 4096));  // the io_uring engine takes up to 4096 per ring
  k.push_back(I("aio.intra_op_parallelism", 1, 1, 256));
  k.push_back(B("aio.single_submit", false));
  k.push_back(B("aio.overlap_events", true));
  k.push_back(with(B("aio.use_gds", false), Support::Unsupported,
                   "GPUDirect Storage is not implemented (dsrt stages NVMe I/O through pinned host memory); "
                   "set it to false"));

  // --- optimizer
  KeySpec type = insensitive(C("optimizer.type", nullptr, {}));
  for (int i = 0; i < kNumOptimizerTypes; ++i) type.choices.push_back(kOptimizerTypes[i]);
  type.nullable = false;
  k.push_back(type);
  k.push_back(with(B("optimizer.legacy_fusion", false), Support::Ignored,
                   "dsrt has one fused implementation per optimizer"));
  const std::string p = "optimizer.params.";
  const uint32_t adam_like = kAdam | kAdamW | kOneBitAdam | kZeroOneAdam;
  const uint32_t onebit = kOneBitAdam | kZeroOneAdam | kOneBitLamb;
  const uint32_t lamb_like = kLamb | kOneBitLamb;
  k.push_back(for_optimizers(N(p + "lr", 1e-3, 0.0), adam_like | kSGD | lamb_like | kLion));
  k.push_back(for_optimizers(N(p + "lr", 1e-2, 0.0), kAdagrad));
  add_pair(&k, p + "betas", 0.9, 0.999, 0.0, 0.999999999999, adam_like | lamb_like);
  add_pair(&k, p + "betas", 0.9, 0.99, 0.0, 0.999999999999, kLion);
  k.push_back(for_optimizers(N(p + "eps", 1e-8, 0.0), adam_like | lamb_like));
  k.push_back(for_optimizers(N(p + "eps", 1e-10, 0.0), kAdagrad));
  k.push_back(for_optimizers(N(p + "weight_decay", 0.0, 0.0), kAllTypes));
  k.push_back(for_optimizers(B(p + "bias_correction", true), adam_like | lamb_like));
  k.push_back(for_optimizers(
      noted(B(p + "adam_w_mode", true), "type Adam runs AdamW (decoupled weight decay) unless this is false"),
      kAdam | kAdamW));
  k.push_back(for_optimizers(with(B(p + "torch_adam", false), Support::Ignored,
                                  "dsrt runs its own Adam kernels (the same math as torch.optim.Adam/AdamW)"),
                             kAdam | kAdamW));
  k.push_back(for_optimizers(with(B(p + "fp32_optimizer_states", true), Support::Unsupported,
                                  "16-bit optimizer states are not implemented; set it to true"),
                             kAdam | kAdamW | kAdagrad));
  k.push_back(for_optimizers(with(B(p + "amsgrad", false), Support::Unsupported,
                                  "AMSGrad is not implemented (DeepSpeed's fused Adam rejects it too); set it to false"),
                             adam_like | lamb_like | kAdagrad));
  k.push_back(for_optimizers(with(B(p + "set_grad_none", true), Support::Ignored,
                                  "dsrt zeroes its own gradient buffers"),
                             kAdam | kAdamW | kLamb | kLion));
  k.push_back(for_optimizers(N(p + "max_coeff", 10.0, 0.0), lamb_like));
  k.push_back(for_optimizers(N(p + "min_coeff", 0.01, 0.0), lamb_like));
  k.push_back(for_optimizers(with(B(p + "eps_inside_sqrt", false), Support::Unsupported,
                                  "eps inside the square root is not implemented; set it to false"),
                             kLamb | onebit));
  k.push_back(for_optimizers(N(p + "momentum", 0.0, 0.0), kSGD));
  k.push_back(for_optimizers(N(p + "dampening", 0.0, 0.0), kSGD));
  k.push_back(for_optimizers(B(p + "nesterov", false), kSGD));
  k.push_back(for_optimizers(N(p + "initial_accumulator_value", 0.0, 0.0), kAdagrad));
  k.push_back(for_optimizers(with(N(p + "lr_decay", 0.0, 0.0), Support::Unsupported,
                                  "Adagrad lr_decay is not implemented; use a scheduler and set it to 0"),
                             kAdagrad));
  k.push_back(for_optimizers(I(p + "freeze_step", 100000, 0), kOneBitAdam | kOneBitLamb));
  k.push_back(for_optimizers(N(p + "coeff_beta", 0.9, 0.0, 1.0), kOneBitLamb));
  k.push_back(for_optimizers(N(p + "factor_max", 4.0, 0.0), kOneBitLamb));
  k.push_back(for_optimizers(N(p + "factor_min", 0.5, 0.0), kOneBitLamb));
  k.push_back(for_optimizers(N(p + "factor_threshold", 0.1, 0.0, 1.0), kOneBitLamb));
  k.push_back(for_optimizers(I(p + "var_freeze_step", 100000, 0), kZeroOneAdam));
  k.push_back(for_optimizers(I(p + "var_update_scaler", 16, 1), kZeroOneAdam));
  k.push_back(for_optimizers(I(p + "local_step_scaler", 32678, 1), kZeroOneAdam));
  k.push_back(for_optimizers(I(p + "local_step_clipper", 16, 1), kZeroOneAdam));
  k.push_back(for_optimizers(with(N(p + "max_grad_norm", 0.0, 0.0), Support::Ignored,
                                  "DeepSpeed's 0/1 Adam and 1-bit LAMB store it and never read it; use gradient_clipping"),
                             kZeroOneAdam | kOneBitLamb));
  k.push_back(for_optimizers(with(B(p + "cuda_aware", false), Support::Ignored,
                                  "dsrt's 1-bit all-reduce runs over the engine's communicator, on host or device buffers"),
                             onebit));
  k.push_back(for_optimizers(with(C(p + "comm_backend_name", "nccl", {"nccl", "mpi", "hccl", "compressed"}),
                                  Support::Ignored,
                                  "dsrt's 1-bit all-reduce always runs over the engine's communicator"),
                             onebit));

  // --- scheduler
  KeySpec sched = C("scheduler.type", nullptr, {});
  for (int i = 1; i < kNumSchedulerTypes; ++i) sched.choices.push_back(kSchedulerTypes[i]);
  sched.nullable = false;
  k.push_back(sched);
  const std::string s = "scheduler.params.";
  const uint32_t warmups = kWarmupLR | kWarmupDecayLR;
  const std::vector<std::string> warmup_types = {"log", "linear"};
  k.push_back(for_schedulers(N(s + "warmup_min_lr", 0.0, 0.0), warmups));
  k.push_back(for_schedulers(N(s + "warmup_max_lr", 0.001, 0.0), warmups));
  k.push_back(for_schedulers(I(s + "warmup_num_steps", 1000, 0), warmups | kWarmupCosineLR));
  k.push_back(for_schedulers(C(s + "warmup_type", "log", warmup_types), warmups | kWarmupCosineLR));
  KeySpec total = I_null(s + "total_num_steps", 1);
  total.nullable = false;
  total.note = "required by WarmupDecayLR and WarmupCosineLR";
  k.push_back(for_schedulers(total, kWarmupDecayLR | kWarmupCosineLR));
  k.push_back(for_schedulers(N(s + "warmup_min_ratio", 0.0, 0.0, 1.0), kWarmupCosineLR));
  k.push_back(for_schedulers(N(s + "cos_min_ratio", 0.0001, 0.0, 1.0), kWarmupCosineLR));
  KeySpec cmin = N_null(s + "cycle_min_lr", 0.0);
  cmin.nullable = false;
  cmin.note = "required by OneCycle";
  k.push_back(for_schedulers(cmin, kOneCycle));
  KeySpec cmax = cmin;
  cmax.path = s + "cycle_max_lr";
  k.push_back(for_schedulers(cmax, kOneCycle));
  k.push_back(for_schedulers(N(s + "decay_lr_rate", 0.0, 0.0), kOneCycle));
  k.push_back(for_schedulers(I(s + "cycle_first_step_size", 2000, 1), kOneCycle));
  k.push_back(for_schedulers(noted(I_null(s + "cycle_second_step_size", 1), "null: same as cycle_first_step_size"),
                             kOneCycle));
  k.push_back(for_schedulers(I(s + "cycle_first_stair_count", 0, 0), kOneCycle));
  k.push_back(for_schedulers(noted(I_null(s + "cycle_second_stair_count", 0),
                                   "null: same as cycle_first_stair_count"),
                             kOneCycle));
  k.push_back(for_schedulers(I(s + "decay_step_size", 0, 0), kOneCycle));
  k.push_back(for_schedulers(B(s + "cycle_momentum", true), kOneCycle));
  k.push_back(for_schedulers(N(s + "cycle_min_mom", 0.8, 0.0, 1.0), kOneCycle));
  k.push_back(for_schedulers(N(s + "cycle_max_mom", 0.9, 0.0, 1.0), kOneCycle));
  k.push_back(for_schedulers(N(s + "decay_mom_rate", 0.0, 0.0), kOneCycle));
  k.push_back(for_schedulers(N(s + "lr_range_test_min_lr", 0.001, 0.0), kLRRangeTest));
  k.push_back(for_schedulers(I(s + "lr_range_test_step_size", 2000, 1), kLRRangeTest));
  k.push_back(for_schedulers(N(s + "lr_range_test_step_rate", 1.0, 0.0), kLRRangeTest));
  k.push_back(for_schedulers(B(s + "lr_range_test_staircase", false), kLRRangeTest));
  k.push_back(for_schedulers(with(I(s + "last_batch_iteration", -1, -1), Support::Unsupported,
                                  "dsrt restores the scheduler position from checkpoints; set it to -1"),
                             kAllTypes));

  // --- activation checkpointing: the host's model code does it (deepspeed.checkpointing)
  const char act_note[] = "activation checkpointing runs in the host's model code; dsrt does not act on it";
  const std::string a = "activation_checkpointing.";
  k.push_back(with(B(a + "partition_activations", false), Support::HostSide, act_note));
  k.push_back(with(B(a + "contiguous_memory_optimization", false), Support::HostSide, act_note));
  k.push_back(with(B(a + "cpu_checkpointing", false), Support::HostSide, act_note));
  k.push_back(with(I_null(a + "number_checkpoints", 1), Support::HostSide, act_note));
  k.push_back(with(B(a + "synchronize_checkpoint_boundary", false), Support::HostSide, act_note));
  k.push_back(with(B(a + "profile", false), Support::HostSide, act_note));

  // --- checkpoint, data types
  k.push_back(with(insensitive(C("checkpoint.tag_validation", "Warn", {"Ignore", "Warn", "Fail"})), Support::Ignored,
                   "dsrt always checks that every rank saves and loads the same tag"));
  k.push_back(with(B("checkpoint.load_universal", false), Support::Ignored,
                   "dsrt checkpoints load at any world size and stage without a universal conversion"));
  k.push_back(B("checkpoint.use_node_local_storage", false));
  k.push_back(with(B("checkpoint.parallel_write.pipeline_stage", false), Support::Ignored,
                   "dsrt has no pipeline stages; every rank writes its own file"));
  // "fp32" is what dsrt does; the 16-bit values are refused by check() with the reason.
  k.push_back(C("data_types.grad_accum_dtype", nullptr, dtypes));
  // param_dtype: only the precision's own dtype (check() refuses another); buffer_dtype: the Python
  // front casts floating-point buffers to it (unset: buffers keep the dtype they were loaded in).
  k.push_back(C("data_types.param_dtype", nullptr, dtypes));
  k.push_back(C("data_types.buffer_dtype", nullptr, dtypes));

  // --- monitors: dsrt writes csv_monitor itself; tensorboard and wandb need those Python packages,
  // so the Python front writes them from dsrt_engine_events (other hosts forward the events).
  const char mon_note[] = "written by dsrt's Python front (dsrt.initialize) with that package; other hosts "
                          "forward the events dsrt_engine_events returns";
  const char comet_note[] = "dsrt writes no comet logs; forward the events dsrt_engine_events returns from the host";
  k.push_back(B("csv_monitor.enabled", false));
  k.push_back(S("csv_monitor.output_path", ""));
  k.push_back(S("csv_monitor.job_name", "DeepSpeedJobName"));
  k.push_back(with(B("tensorboard.enabled", false), Support::HostSide, mon_note));
  k.push_back(with(S("tensorboard.output_path", ""), Support::HostSide, mon_note));
  k.push_back(with(S("tensorboard.job_name", "DeepSpeedJobName"), Support::HostSide, mon_note));
  k.push_back(with(B("wandb.enabled", false), Support::HostSide, mon_note));
  k.push_back(with(S_null("wandb.group"), Support::HostSide, mon_note));
  k.push_back(with(S_null("wandb.team"), Support::HostSide, mon_note));
  k.push_back(with(S("wandb.project", "deepspeed"), Support::HostSide, mon_note));
  k.push_back(with(B("comet.enabled", false), Support::HostSide, comet_note));
  k.push_back(with(I("comet.samples_log_interval", 100, 1), Support::HostSide, comet_note));
  for (const char *field : {"project", "workspace", "api_key", "experiment_name", "experiment_key", "mode"})
    k.push_back(with(S_null(std::string("comet.") + field), Support::HostSide, comet_note));
  KeySpec online = key("comet.online", KeyType::Bool, Value::null());
  online.nullable = true;
  k.push_back(with(online, Support::HostSide, comet_note));
  const char prof_note[] = "the FLOPs profiler measures the host's model; dsrt does not run it";
  k.push_back(with(B("flops_profiler.enabled", false), Support::HostSide, prof_note));
  k.push_back(with(N("flops_profiler.recompute_fwd_factor", 0.0, 0.0), Support::HostSide, prof_note));
  k.push_back(with(I("flops_profiler.profile_step", 1, 1), Support::HostSide, prof_note));
  k.push_back(with(I("flops_profiler.module_depth", -1, -1), Support::HostSide, prof_note));
  k.push_back(with(I("flops_profiler.top_modules", 1, 1), Support::HostSide, prof_note));
  k.push_back(with(B("flops_profiler.detailed", true), Support::HostSide, prof_note));
  k.push_back(with(S_null("flops_profiler.output_file"), Support::HostSide, prof_note));
  return k;
}

std::vector<SectionSpec> build_schema_sections() {
  auto sec = [](const char *path, Support support = Support::Implemented, bool opaque = false,
                const char *note = "") {
    SectionSpec spec;
    spec.path = path;
    spec.support = support;
    spec.opaque = opaque;
    spec.note = note;
    return spec;
  };
  std::vector<SectionSpec> s = {
      sec(""), sec("fp16"), sec("bf16"), sec("zero_optimization"), sec("zero_optimization.offload_optimizer"),
      sec("zero_optimization.offload_param"), sec("aio"), sec("optimizer"), sec("optimizer.params"),
      sec("scheduler"), sec("scheduler.params"), sec("activation_checkpointing", Support::HostSide),
      sec("checkpoint"), sec("checkpoint.parallel_write"), sec("data_types"),
      sec("tensorboard", Support::HostSide), sec("wandb", Support::HostSide), sec("csv_monitor"),
      sec("comet", Support::HostSide), sec("flops_profiler", Support::HostSide),
      // DeepSpeed features outside dsrt's scope, kept as written but not validated.
      sec("zero_optimization.zeropp_loco_param", Support::Unsupported, true,
          "ZeRO++ LoCo gradient compression is not implemented; remove the section"),
      sec("amp", Support::Unsupported, true, "NVIDIA Apex AMP is not implemented; use fp16 or bf16 instead"),
      sec("pipeline", Support::HostSide, true, "pipeline parallelism is not implemented by dsrt; it is ignored"),
      sec("sparse_attention", Support::HostSide, true, "sparse attention belongs to the host's model"),
      sec("compression_training", Support::Unsupported, true, "compression training is not implemented"),
      sec("weight_quantization", Support::Unsupported, true, "weight quantization is not implemented"),
      sec("quantize_training", Support::Unsupported, true, "quantization-aware training is not implemented"),
      sec("elasticity", Support::Unsupported, true, "elastic training is not implemented"),
      sec("eigenvalue", Support::Unsupported, true, "the eigenvalue computation is not implemented"),
      sec("nebula", Support::Unsupported, true, "Nebula checkpointing is not implemented"),
      sec("hybrid_engine", Support::Unsupported, true, "the hybrid (RLHF) engine is not implemented"),
      sec("data_efficiency", Support::HostSide, true, "data sampling and routing belong to the host's data loader"),
      sec("curriculum_learning", Support::HostSide, true, "curriculum learning belongs to the host's data loader"),
      sec("progressive_layer_drop", Support::HostSide, true, "progressive layer drop belongs to the host's model"),
      sec("autotuning", Support::HostSide, true, "autotuning is a launcher feature; dsrt does not run it"),
      sec("compile", Support::HostSide, true, "torch.compile applies to the host's model"),
      sec("torch_autocast", Support::HostSide, true, "autocast applies to the host's forward pass"),
      sec("timers", Support::HostSide, true, "dsrt keeps no throughput timers; time steps from the host"),
      sec("tensor_parallel", Support::Unsupported, true, "tensor parallelism (AutoTP) is not implemented"),
      sec("zero_optimization.zenflow", Support::Unsupported, true, "ZenFlow is not implemented; remove the section"),
      sec("zero_optimization.leaf_module", Support::HostSide, true,
          "ZeRO-3 leaf modules are part of the host's module tree; dsrt does not act on them"),
      sec("comms_logger", Support::HostSide, true, "dsrt does not log its collectives; DSRT_LOG_LEVEL=debug traces them"),
      sec("datastates", Support::Unsupported, true, "DataStates checkpointing is not implemented"),
  };
  return s;
}

}  // namespace dsrt
