// train_config.h -- the typed, fully resolved configuration the engine runs on.
//
// src/config parses DeepSpeed JSON into a Config (config.h) and resolves it into this struct;
// every other layer reads only this struct. The defaults are the schema's (schema_table.cpp):
// Config::resolve takes every value from there. The member initializers below only serve C++ code
// that builds a TrainConfig by hand (tests); test_config_rules checks that a default-constructed
// TrainConfig equals what resolve gives for "{}", so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string>

#include "aio/aio_options.h"
#include "dsrt.h"

namespace dsrt {

enum class OptimizerType { Adam, AdamW, SGD, Lamb, Adagrad, Lion, OneBitAdam, ZeroOneAdam, OneBitLamb };
enum class SchedulerType { None, WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest };
enum class OffloadDevice { None, Cpu, Nvme };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::AdamW;
  bool present = false;  // false: no "optimizer" section (DeepSpeed then expects a client optimizer)
  double lr = 1e-3;
  double beta1 = 0.9;   // Adam/AdamW/Lamb/Lion betas[0]
  double beta2 = 0.999; // betas[1]  (Lion default betas are (0.9, 0.99))
  double eps = 1e-8;    // Adagrad default 1e-10 in torch; DeepSpeed's CPU Adagrad uses 1e-8
  double weight_decay = 0.0;
  bool adam_w_mode = true;       // DeepSpeed: "Adam" runs AdamW unless adam_w_mode is false
  bool bias_correction = true;
  double momentum = 0.0;         // SGD
  double dampening = 0.0;        // SGD
  bool nesterov = false;         // SGD
  double max_coeff = 10.0;       // Lamb trust-ratio clamp
  double min_coeff = 0.01;
  double initial_accumulator_value = 0.0;  // Adagrad
  int64_t freeze_step = 100000;  // OneBitAdam, OneBitLamb: steps of the uncompressed warm-up stage
  // OneBitLamb: the running average of the warm-up trust ratios (coeff_beta) and the clamps of the
  // factor that rescales it in the compression stage.
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
  // ZeroOneAdam (0/1 Adam): the variance is updated until var_freeze_step, its interval doubling
  // every var_update_scaler updates; after it, the local-step interval doubles every
  // local_step_scaler steps up to local_step_clipper.
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
};

struct SchedulerConfig {
  SchedulerType type = SchedulerType::None;
  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" or "linear"
  int64_t total_num_steps = -1;     // required by WarmupDecayLR / WarmupCosineLR
  double warmup_min_ratio = 0.0;    // WarmupCosineLR
  double cos_min_ratio = 0.0001;    // WarmupCosineLR
  // OneCycle
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;  // -1: same as first
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = -1;  // -1: same as first
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // LRRangeTest
  double lr_range_test_min_lr = 0.001;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0: dynamic; > 0: static
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;
  bool pin_memory = true;
  int64_t buffer_count = 4;       // optimizer default 4, param default 5
  int64_t buffer_size = 100000000;  // param only
  int64_t max_in_cpu = 1000000000;  // param only
  bool pipeline_read = false;     // optimizer only
  bool pipeline_write = false;    // optimizer only
  bool fast_init = false;
  double ratio = 1.0;
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;  // resolved: DeepSpeed's default is true at stage 3, false otherwise
  bool round_robin_gradients = false;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  // ZeRO++ hpZ: ranks per secondary-partition group (1 or 0: off). Stage 3 only; 1 below it.
  int64_t zero_hpz_partition_size = 1;
  // ZeRO++ (stage 3 only; DeepSpeed ignores them at other stages): int8 parameter all-gathers
  // (qwZ), of frozen tensors only, and int4 gradient reduce-scatter (qgZ). docs/zero.md.
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  // MiCS (DeepSpeed <= 0.18's mics_shard_size; a dsrt extension since 0.19 removed it): ranks per
  // shard group at stage 3, parameters/gradients/optimizer states partitioned inside the group and
  // replicated across groups. 0 or below: off (every rank one group).
  int64_t mics_shard_size = -1;
  // MiCS: parameter all-gathers inside the node, then across nodes, when a shard group spans nodes.
  bool mics_hierarchical_params_gather = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param;  // buffer_count defaults to 5 here
};

// AioConfig ("aio") is the I/O layer's own options struct: aio/aio_options.h.

struct CheckpointConfig {
  bool use_node_local_storage = false;
  bool load_universal = false;
};

// csv_monitor (DeepSpeed's defaults: output_path "", job_name "DeepSpeedJobName").
struct CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct TrainConfig {
  int64_t train_batch_size = 1;
  int64_t train_micro_batch_size_per_gpu = 1;
  int64_t gradient_accumulation_steps = 1;
  int world_size = 1;

  double gradient_clipping = 1.0;  // DeepSpeed 0.19: clip at 1.0 unless the key says otherwise
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool has_communication_data_type = false;
  dsrt_dtype communication_data_type = DSRT_F32;
  bool has_grad_accum_dtype = false;
  dsrt_dtype grad_accum_dtype = DSRT_F32;
  int64_t steps_per_print = 0;  // progress line every N steps; 0: never (DeepSpeed 0.19: null)
  double comm_timeout_s = 0;  // "comm_timeout"; 0: not given (DSRT_COMM_TIMEOUT_S or the default)
  bool wall_clock_breakdown = false;
  uint64_t seed = 0;

  Fp16Config fp16;
  bool bf16_enabled = false;
  // DeepSpeed skips a bf16 step with inf/nan gradients only when this is true; dsrt skips such a
  // step in every precision (a non-finite update would destroy the masters), so it is recorded only.
  bool bf16_check_grad_overflow = true;
  // bf16.bf16_master_weights_and_grads: the master weights are kept in bf16 (no fp32 copy);
  // bf16.bf16_optimizer_states: so are the optimizer states. DeepSpeed's lower-memory bf16 mode:
  // the update is computed in fp32 and each stored value rounded to the nearest bf16.
  bool bf16_master_weights = false;
  bool bf16_optimizer_states = false;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  AioConfig aio;
  CheckpointConfig checkpoint;
  CsvMonitorConfig csv_monitor;

  std::string effective_json;  // the effective config, as dsrt_config_to_json prints it

  // The working-copy dtype implied by fp16/bf16.
  dsrt_dtype working_dtype() const {
    return fp16.enabled ? DSRT_F16 : (bf16_enabled ? DSRT_BF16 : DSRT_F32);
  }
};

}  // namespace dsrt
