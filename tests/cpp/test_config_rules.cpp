// The config layer's rules (config_rules.h): the defaults come from the schema alone (a
// default-constructed TrainConfig equals what Config::resolve gives for an empty config), and the
// refusals Engine::create makes are check_train_config's, with its messages, also for a hand-built
// TrainConfig that JSON could not express (the schema's ranges refuse those values first).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "comm/comm.h"
#include "config/config.h"
#include "config/config_rules.h"
#include "engine/engine.h"

namespace dsrt {
namespace {

TrainConfig resolved(const std::string &json) {
  std::unique_ptr<Config> config;
  Status status = Config::parse(json, "test", &config);
  EXPECT_TRUE(status.ok()) << status.message();
  TrainConfig out;
  if (config) {
    status = config->resolve(1, &out);
    EXPECT_TRUE(status.ok()) << status.message();
  }
  return out;
}

void expect_same_offload(const OffloadConfig &a, const OffloadConfig &b, const char *which) {
  SCOPED_TRACE(which);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.nvme_path, b.nvme_path);
  EXPECT_EQ(a.pin_memory, b.pin_memory);
  EXPECT_EQ(a.buffer_count, b.buffer_count);
  EXPECT_EQ(a.buffer_size, b.buffer_size);
  EXPECT_EQ(a.max_in_cpu, b.max_in_cpu);
  EXPECT_EQ(a.pipeline_read, b.pipeline_read);
  EXPECT_EQ(a.pipeline_write, b.pipeline_write);
  EXPECT_EQ(a.fast_init, b.fast_init);
  EXPECT_EQ(a.ratio, b.ratio);
}

TEST(ConfigRules, DefaultTrainConfigIsTheSchemasEmptyConfig) {
  const TrainConfig hand;
  const TrainConfig schema = resolved("{}");
  EXPECT_EQ(hand.train_batch_size, schema.train_batch_size);
  EXPECT_EQ(hand.train_micro_batch_size_per_gpu, schema.train_micro_batch_size_per_gpu);
  EXPECT_EQ(hand.gradient_accumulation_steps, schema.gradient_accumulation_steps);
  EXPECT_EQ(hand.gradient_clipping, schema.gradient_clipping);
  EXPECT_EQ(hand.prescale_gradients, schema.prescale_gradients);
  EXPECT_EQ(hand.gradient_predivide_factor, schema.gradient_predivide_factor);
  EXPECT_EQ(hand.has_communication_data_type, schema.has_communication_data_type);
  EXPECT_EQ(hand.has_grad_accum_dtype, schema.has_grad_accum_dtype);
  EXPECT_EQ(hand.steps_per_print, schema.steps_per_print);
  EXPECT_EQ(hand.comm_timeout_s, schema.comm_timeout_s);
  EXPECT_EQ(hand.wall_clock_breakdown, schema.wall_clock_breakdown);
  EXPECT_EQ(hand.csv_monitor.enabled, schema.csv_monitor.enabled);
  EXPECT_EQ(hand.csv_monitor.output_path, schema.csv_monitor.output_path);
  EXPECT_EQ(hand.csv_monitor.job_name, schema.csv_monitor.job_name);
  EXPECT_EQ(hand.fp16.enabled, schema.fp16.enabled);
  EXPECT_EQ(hand.fp16.loss_scale, schema.fp16.loss_scale);
  EXPECT_EQ(hand.fp16.initial_scale_power, schema.fp16.initial_scale_power);
  EXPECT_EQ(hand.fp16.loss_scale_window, schema.fp16.loss_scale_window);
  EXPECT_EQ(hand.fp16.hysteresis, schema.fp16.hysteresis);
  EXPECT_EQ(hand.fp16.consecutive_hysteresis, schema.fp16.consecutive_hysteresis);
  EXPECT_EQ(hand.fp16.min_loss_scale, schema.fp16.min_loss_scale);
  EXPECT_EQ(hand.bf16_enabled, schema.bf16_enabled);
  EXPECT_EQ(hand.bf16_check_grad_overflow, schema.bf16_check_grad_overflow);
  const ZeroConfig &a = hand.zero, &b = schema.zero;
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.contiguous_gradients, b.contiguous_gradients);
  EXPECT_EQ(a.reduce_scatter, b.reduce_scatter);
  EXPECT_EQ(a.reduce_bucket_size, b.reduce_bucket_size);
  EXPECT_EQ(a.allgather_partitions, b.allgather_partitions);
  EXPECT_EQ(a.allgather_bucket_size, b.allgather_bucket_size);
  EXPECT_EQ(a.overlap_comm, b.overlap_comm);
  EXPECT_EQ(a.round_robin_gradients, b.round_robin_gradients);
  EXPECT_EQ(a.sub_group_size, b.sub_group_size);
  EXPECT_EQ(a.stage3_prefetch_bucket_size, b.stage3_prefetch_bucket_size);
  EXPECT_EQ(a.stage3_param_persistence_threshold, b.stage3_param_persistence_threshold);
  EXPECT_EQ(a.stage3_max_live_parameters, b.stage3_max_live_parameters);
  EXPECT_EQ(a.stage3_max_reuse_distance, b.stage3_max_reuse_distance);
  EXPECT_EQ(a.stage3_gather_16bit_weights_on_model_save, b.stage3_gather_16bit_weights_on_model_save);
  expect_same_offload(a.offload_optimizer, b.offload_optimizer, "offload_optimizer");
  OffloadConfig param_defaults;  // offload_param's own defaults differ in buffer_count (5)
  param_defaults.buffer_count = 5;
  expect_same_offload(param_defaults, b.offload_param, "offload_param");
  EXPECT_EQ(hand.aio.block_size, schema.aio.block_size);
  EXPECT_EQ(hand.aio.queue_depth, schema.aio.queue_depth);
  EXPECT_EQ(hand.aio.intra_op_parallelism, schema.aio.intra_op_parallelism);
  EXPECT_EQ(hand.aio.single_submit, schema.aio.single_submit);
  EXPECT_EQ(hand.aio.overlap_events, schema.aio.overlap_events);
  EXPECT_EQ(hand.aio.use_gds, schema.aio.use_gds);
  EXPECT_EQ(hand.checkpoint.use_node_local_storage, schema.checkpoint.use_node_local_storage);
  EXPECT_EQ(hand.checkpoint.load_universal, schema.checkpoint.load_universal);
}

TEST(ConfigRules, DefaultOptimizerAndSchedulerAreTheSchemas) {
  const OptimizerConfig o;
  const OptimizerConfig adamw = resolved(R"({"optimizer": {"type": "AdamW"}})").optimizer;
  EXPECT_EQ(o.type, adamw.type);
  EXPECT_EQ(o.lr, adamw.lr);
  EXPECT_EQ(o.beta1, adamw.beta1);
  EXPECT_EQ(o.beta2, adamw.beta2);
  EXPECT_EQ(o.eps, adamw.eps);
  EXPECT_EQ(o.weight_decay, adamw.weight_decay);
  EXPECT_EQ(o.bias_correction, adamw.bias_correction);
  EXPECT_EQ(o.adam_w_mode, adamw.adam_w_mode);
  const OptimizerConfig sgd = resolved(R"({"optimizer": {"type": "SGD"}})").optimizer;
  EXPECT_EQ(o.momentum, sgd.momentum);
  EXPECT_EQ(o.dampening, sgd.dampening);
  EXPECT_EQ(o.nesterov, sgd.nesterov);
  const OptimizerConfig lamb = resolved(R"({"optimizer": {"type": "Lamb"}})").optimizer;
  EXPECT_EQ(o.max_coeff, lamb.max_coeff);
  EXPECT_EQ(o.min_coeff, lamb.min_coeff);
  const OptimizerConfig adagrad = resolved(R"({"optimizer": {"type": "Adagrad"}})").optimizer;
  EXPECT_EQ(o.initial_accumulator_value, adagrad.initial_accumulator_value);

  const SchedulerConfig s;
  const SchedulerConfig warmup = resolved(R"({"scheduler": {"type": "WarmupLR"}})").scheduler;
  EXPECT_EQ(s.warmup_min_lr, warmup.warmup_min_lr);
  EXPECT_EQ(s.warmup_max_lr, warmup.warmup_max_lr);
  EXPECT_EQ(s.warmup_num_steps, warmup.warmup_num_steps);
  EXPECT_EQ(s.warmup_type, warmup.warmup_type);
  const SchedulerConfig cosine =
      resolved(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 5000}}})").scheduler;
  EXPECT_EQ(s.warmup_min_ratio, cosine.warmup_min_ratio);
  EXPECT_EQ(s.cos_min_ratio, cosine.cos_min_ratio);
  const SchedulerConfig cycle =
      resolved(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1, "cycle_max_lr": 1}}})").scheduler;
  EXPECT_EQ(s.decay_lr_rate, cycle.decay_lr_rate);
  EXPECT_EQ(s.cycle_first_step_size, cycle.cycle_first_step_size);
  EXPECT_EQ(s.cycle_second_step_size, cycle.cycle_second_step_size);
  EXPECT_EQ(s.cycle_first_stair_count, cycle.cycle_first_stair_count);
  EXPECT_EQ(s.cycle_second_stair_count, cycle.cycle_second_stair_count);
  EXPECT_EQ(s.decay_step_size, cycle.decay_step_size);
  EXPECT_EQ(s.cycle_momentum, cycle.cycle_momentum);
  EXPECT_EQ(s.cycle_min_mom, cycle.cycle_min_mom);
  EXPECT_EQ(s.cycle_max_mom, cycle.cycle_max_mom);
  EXPECT_EQ(s.decay_mom_rate, cycle.decay_mom_rate);
  const SchedulerConfig range = resolved(R"({"scheduler": {"type": "LRRangeTest"}})").scheduler;
  EXPECT_EQ(s.lr_range_test_min_lr, range.lr_range_test_min_lr);
  EXPECT_EQ(s.lr_range_test_step_size, range.lr_range_test_step_size);
  EXPECT_EQ(s.lr_range_test_step_rate, range.lr_range_test_step_rate);
  EXPECT_EQ(s.lr_range_test_staircase, range.lr_range_test_staircase);
}

// Values the schema's ranges keep out of JSON: check_train_config refuses them, and Engine::create
// refuses them with exactly its status and message.
TEST(ConfigRules, EngineRefusesWhatTheRulesRefuse) {
  struct Case {
    const char *what;
    void (*edit)(TrainConfig *);
    dsrt_status code;
    const char *text;
  };
  const Case cases[] = {
      {"negative clipping", [](TrainConfig *c) { c->gradient_clipping = -1; }, DSRT_ERR_CONFIG,
       "gradient_clipping is -1; use 0 (off) or a positive norm"},
      {"stage 4", [](TrainConfig *c) { c->zero.stage = 4; }, DSRT_ERR_CONFIG, "zero_optimization.stage is 4"},
      {"predivide 0", [](TrainConfig *c) { c->gradient_predivide_factor = 0; }, DSRT_ERR_CONFIG,
       "gradient_predivide_factor is 0"},
      {"negative bucket", [](TrainConfig *c) { c->zero.reduce_bucket_size = -1; }, DSRT_ERR_CONFIG,
       "reduce_bucket_size (-1)"},
      {"gas 0", [](TrainConfig *c) { c->gradient_accumulation_steps = 0; }, DSRT_ERR_CONFIG,
       "gradient_accumulation_steps is 0"},
      {"fp16 window 0",
       [](TrainConfig *c) {
         c->fp16.enabled = true;
         c->fp16.loss_scale_window = 0;
       },
       DSRT_ERR_CONFIG, "fp16.loss_scale_window is 0"},
      {"both precisions",
       [](TrainConfig *c) {
         c->fp16.enabled = true;
         c->bf16_enabled = true;
       },
       DSRT_ERR_CONFIG, "fp16.enabled and bf16.enabled are both true"},
      {"one-bit adam with ZeRO",
       [](TrainConfig *c) {
         c->optimizer.type = OptimizerType::OneBitAdam;
         c->zero.stage = 1;
       },
       DSRT_ERR_CONFIG, "OneBitAdam needs zero_optimization.stage 0"},
      {"0/1 adam with ZeRO",
       [](TrainConfig *c) {
         c->optimizer.type = OptimizerType::ZeroOneAdam;
         c->zero.stage = 3;
       },
       DSRT_ERR_CONFIG, "ZeroOneAdam needs zero_optimization.stage 0"},
      {"param offload below stage 3",
       [](TrainConfig *c) {
         c->zero.stage = 2;
         c->zero.offload_param.device = OffloadDevice::Cpu;
       },
       DSRT_ERR_CONFIG, "offload_param needs stage 3"},
      {"negative warmup",
       [](TrainConfig *c) {
         c->scheduler.type = SchedulerType::WarmupLR;
         c->scheduler.warmup_num_steps = -1;
       },
       DSRT_ERR_CONFIG, "scheduler.params.warmup_num_steps is -1 for WarmupLR"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    TrainConfig config;
    c.edit(&config);
    Status rule = check_train_config(config);
    EXPECT_EQ(rule.code(), c.code);
    EXPECT_NE(rule.message().find(c.text), std::string::npos) << rule.message();
    std::shared_ptr<Comm> comm;
    ASSERT_TRUE(comm_create_local(&comm).ok());
    std::unique_ptr<Engine> engine;
    Status created = Engine::create(config, comm, &engine, "cpu", "test");
    EXPECT_EQ(created.code(), rule.code());
    EXPECT_EQ(created.message(), rule.message());
    EXPECT_EQ(engine, nullptr);
  }
  EXPECT_TRUE(check_train_config(TrainConfig()).ok());
}

}  // namespace
}  // namespace dsrt
