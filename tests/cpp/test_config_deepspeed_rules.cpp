// Config rules that follow DeepSpeed 0.19.8's reader: unknown top-level keys, the 0 sizes, key
// names, keys DeepSpeed ignores or dropped, grad_accum_dtype, max_grad_norm, defaults,
// steps_per_print Infinity, warnings beside errors, the DeepSpeed JSON of `dsrt config show`, and
// OneCycle's momentum rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "config/config.h"
#include "dsrt.h"

namespace dsrt {
namespace {

std::unique_ptr<Config> parse_ok(const std::string &text) {
  std::unique_ptr<Config> config;
  Status status = Config::parse(text, "test", &config);
  EXPECT_TRUE(status.ok()) << text << ": " << status.message();
  return config;
}

std::string parse_error(const std::string &text) {
  std::unique_ptr<Config> config;
  Status status = Config::parse(text, "test", &config);
  EXPECT_EQ(status.code(), DSRT_ERR_CONFIG) << text;
  EXPECT_EQ(config, nullptr);
  return status.message();
}

TrainConfig resolve_ok(const Config &config, int world = 1) {
  TrainConfig out;
  Status status = config.resolve(world, &out);
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

bool contains(const std::vector<std::string> &lines, const std::string &needle) {
  for (const auto &line : lines)
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

bool has(const std::string &text, const std::string &needle) { return text.find(needle) != std::string::npos; }

TEST(ConfigDeepSpeedRules, UnknownTopLevelKeysWarnLikeDeepSpeedIgnoresThem) {
  auto config = parse_ok(R"({"_comment": "ZeRO-2 for 8 GPUs", "cuda_visible_devices": "0,1",
                             "zero_optimization": {"stage": 2}})");
  EXPECT_TRUE(contains(config->warnings(), "test:1:14: _comment: unknown top-level key; DeepSpeed ignores it"));
  EXPECT_TRUE(contains(config->warnings(), "cuda_visible_devices: unknown top-level key"));
  EXPECT_EQ(resolve_ok(*config).zero.stage, 2);
  // The effective config does not carry them.
  EXPECT_FALSE(has(config->to_json(), "_comment"));
}

TEST(ConfigDeepSpeedRules, TyposAndKnownMisplacementsStayErrors) {
  EXPECT_TRUE(has(parse_error(R"({"zero_optimisation": {"stage": 2}})"),
                  "zero_optimisation: unknown key; did you mean zero_optimization?"));
  EXPECT_TRUE(has(parse_error(R"({"gradient_clip": 1.0})"), "gradient_clip: unknown key; did you mean gradient_clipping?"));
  EXPECT_TRUE(has(parse_error(R"({"comms_config": {"enabled": true}})"), "comms_config: not a DeepSpeed key"));
  EXPECT_TRUE(has(parse_error(R"({"comms_config": {"enabled": true}})"), "did you mean comms_logger?"));
  EXPECT_TRUE(has(parse_error(R"({"monitor_config": {"enabled": true}})"),
                  "did you mean csv_monitor, tensorboard or wandb?"));
  // A section's key at the top level is a misplacement too.
  EXPECT_TRUE(has(parse_error(R"({"offload_optimizer": {"device": "cpu"}})"),
                  "the section offload_optimizer belongs at zero_optimization.offload_optimizer"));
  // Inside sections unknown keys stay errors, as DeepSpeed's sections forbid extra keys.
  EXPECT_TRUE(has(parse_error(R"({"zero_optimization": {"stage": 2, "quux_frobnicate": 1}})"),
                  "zero_optimization.quux_frobnicate: unknown key"));
  EXPECT_TRUE(has(parse_error(R"({"bf16": {"enabled": true, "comment": "x"}})"), "bf16.comment: unknown key"));
}

TEST(ConfigDeepSpeedRules, ZeroSizesHaveDeepSpeedsMeaning) {
  // DeepSpeed 0.19.8: allgather_bucket_size and sub_group_size are ge=0, reduce_bucket_size gt=0.
  auto config = parse_ok(R"({"zero_optimization": {"stage": 3, "allgather_bucket_size": 0, "sub_group_size": 0}})");
  TrainConfig t = resolve_ok(*config);
  EXPECT_EQ(t.zero.allgather_bucket_size, 0);
  EXPECT_EQ(t.zero.sub_group_size, 0);
  EXPECT_TRUE(has(parse_error(R"({"zero_optimization": {"reduce_bucket_size": 0}})"),
                  "zero_optimization.reduce_bucket_size: 0 is out of range; allowed: an integer >= 1"));
  EXPECT_TRUE(has(parse_error(R"({"zero_optimization": {"sub_group_size": -1}})"),
                  "-1 is out of range; allowed: an integer >= 0 (0: one sub-group per parameter)"));
}

TEST(ConfigDeepSpeedRules, KeyNamesAreDeepSpeeds) {
  auto config = parse_ok(R"({"seq_parallel_communication_data_type": "bf16"})");
  EXPECT_TRUE(contains(config->warnings(), "seq_parallel_communication_data_type = \"bf16\" has no effect in dsrt"));
  // dsrt's old spelling was never DeepSpeed's: close enough to the real name to be a typo.
  EXPECT_TRUE(has(parse_error(R"({"seq_parallel_comm_data_type": "bf16"})"),
                  "did you mean seq_parallel_communication_data_type?"));
}

TEST(ConfigDeepSpeedRules, KeysDeepSpeedIgnoresOrDroppedWarn) {
  auto param = parse_ok(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_TRUE(contains(param->warnings(), "zero_optimization.offload_param.device = \"cpu\" has no effect at "
                                          "zero_optimization.stage 2 (DeepSpeed ignores it too)"));
  EXPECT_EQ(resolve_ok(*param).zero.offload_param.device, OffloadDevice::None);
  auto optimizer = parse_ok(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_TRUE(contains(optimizer->warnings(), "zero_optimization.offload_optimizer.device = \"nvme\" has no effect at "
                                              "zero_optimization.stage 0"));
  EXPECT_EQ(resolve_ok(*optimizer).zero.offload_optimizer.device, OffloadDevice::None);
  // aio.thread_count was dropped by DeepSpeed 0.17; it is not intra_op_parallelism.
  auto aio = parse_ok(R"({"aio": {"thread_count": 4, "queue_depth": 16}})");
  EXPECT_TRUE(contains(aio->warnings(), "aio.thread_count: DeepSpeed no longer reads aio.thread_count"));
  TrainConfig t = resolve_ok(*aio);
  EXPECT_EQ(t.aio.intra_op_parallelism, 1);
  EXPECT_EQ(t.aio.queue_depth, 16);
}

TEST(ConfigDeepSpeedRules, GradAccumDtypeFp32IsAcceptedOthersRefusedClearly) {
  auto fp32 = parse_ok(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}})");
  EXPECT_TRUE(fp32->unsupported().empty());
  TrainConfig t = resolve_ok(*fp32);
  EXPECT_TRUE(t.has_grad_accum_dtype);
  EXPECT_EQ(t.grad_accum_dtype, DSRT_F32);
  auto bf16 = parse_ok(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}})");
  ASSERT_EQ(bf16->unsupported().size(), 1u);
  EXPECT_TRUE(has(bf16->unsupported()[0], "data_types.grad_accum_dtype = \"bf16\": accumulating gradients in 16 bits "
                                          "is not implemented"));
  TrainConfig out;
  EXPECT_EQ(bf16->resolve(1, &out).code(), DSRT_ERR_UNSUPPORTED);
}

TEST(ConfigDeepSpeedRules, MaxGradNormNamesGradientClipping) {
  for (const char *type : {"Adam", "AdamW", "SGD", "Lamb", "Adagrad", "Lion"}) {
    const std::string message =
        parse_error(std::string(R"({"optimizer": {"type": ")") + type + R"(", "params": {"max_grad_norm": 1.0}}})");
    EXPECT_TRUE(has(message, "optimizer.params.max_grad_norm: not an optimizer parameter (DeepSpeed refuses it too); "
                             "clip with the top-level \"gradient_clipping\": 1.0"))
        << type << ": " << message;
  }
}

TEST(ConfigDeepSpeedRules, DefaultsAreDeepSpeed0198s) {
  auto config = parse_ok(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                             "offload_param": {"device": "cpu"}}})");
  TrainConfig t = resolve_ok(*config);
  EXPECT_TRUE(t.zero.offload_optimizer.pin_memory);
  EXPECT_TRUE(t.zero.offload_param.pin_memory);
  EXPECT_TRUE(t.bf16_check_grad_overflow);
  double persistence = 0;
  ASSERT_TRUE(config->get_number("zero_optimization.stage3_model_persistence_threshold", &persistence).ok());
  EXPECT_EQ(persistence, 9223372036854775807.0);
  auto check = parse_ok(R"({"bf16": {"enabled": true, "check_grad_overflow": false}})");
  EXPECT_TRUE(check->warnings().empty());
  EXPECT_FALSE(resolve_ok(*check).bf16_check_grad_overflow);
  // steps_per_print: DeepSpeed 0.19 prints never unless it is given.
  EXPECT_EQ(t.steps_per_print, 0);
  EXPECT_EQ(resolve_ok(*parse_ok(R"({"steps_per_print": 5})")).steps_per_print, 5);
}

TEST(ConfigDeepSpeedRules, StepsPerPrintInfinityMeansNever) {
  // As Accelerate writes it (Python's json prints float("inf") as Infinity).
  auto config = parse_ok("{\n  \"steps_per_print\": Infinity, // never\n  \"_note\": \"Infinity\"\n}");
  EXPECT_EQ(resolve_ok(*config).steps_per_print, INT64_MAX);
  const std::string shown = config->to_json();
  EXPECT_TRUE(has(shown, "\"steps_per_print\": Infinity")) << shown;
  auto again = parse_ok(shown);
  EXPECT_EQ(resolve_ok(*again).steps_per_print, INT64_MAX);
  // Positions after the word are unchanged, and other keys still refuse infinite values.
  std::string message = parse_error("{\"steps_per_print\": -Infinity, \"gradient_clipping\": Infinity}");
  EXPECT_TRUE(has(message, "test:1:21: steps_per_print: -inf is not a finite number")) << message;
  EXPECT_TRUE(has(message, "test:1:53: gradient_clipping: inf is not a finite number")) << message;
  // Only the whole word: anything else stays a syntax error.
  parse_error("{\"steps_per_print\": Infinityx}");
}

void collect(int32_t level, const char *message, void *user) {
  if (level == DSRT_LOG_WARN) static_cast<std::vector<std::string> *>(user)->push_back(message);
}

TEST(ConfigDeepSpeedRules, WarningsAreLoggedEvenWhenThereAreErrors) {
  std::vector<std::string> logged;
  dsrt_set_log_callback(collect, &logged);
  std::string message = parse_error(R"({"_comment": "x", "zero_optimization": {"stage": 7}})");
  dsrt_set_log_callback(nullptr, nullptr);
  EXPECT_TRUE(has(message, "zero_optimization.stage: 7 is out of range"));
  EXPECT_TRUE(contains(logged, "_comment: unknown top-level key")) << logged.size();
}

TEST(ConfigDeepSpeedRules, DeepSpeedJsonLeavesOutWhatDeepSpeedWouldRefuse) {
  auto config = parse_ok(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.95]}},
                             "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
                             "zero_optimization": {"stage": 2}})");
  std::vector<std::string> apart;
  const std::string json = config->to_deepspeed_json(&apart);
  EXPECT_TRUE(has(json, "\"lr\": 0.01"));
  EXPECT_TRUE(has(json, "\"betas\": [0.9, 0.95]"));
  EXPECT_TRUE(has(json, "\"warmup_num_steps\": 10"));
  EXPECT_FALSE(has(json, "torch_adam"));
  EXPECT_FALSE(has(json, "warmup_max_lr"));
  EXPECT_TRUE(contains(apart, "optimizer.params.eps = 1e-08  (default dsrt applies"));
  EXPECT_TRUE(contains(apart, "scheduler.params.warmup_max_lr = 0.001"));
  for (const KeySpec &spec : all_keys()) {
    if (spec.dsrt_only) {
      EXPECT_TRUE(contains(apart, spec.path + " = ")) << spec.path;
    }
  }
  // It reads back as the same config.
  auto again = parse_ok(json);
  EXPECT_EQ(again->to_json(), config->to_json());
}

TEST(ConfigDeepSpeedRules, OneCycleCyclesMomentumOnlyForOptimizersWithBetas) {
  const char *sched = R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}})";
  auto sgd = parse_ok(std::string(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}, )") +
                      sched + "}");
  EXPECT_TRUE(contains(sgd->warnings(), "SGD has no betas: as in DeepSpeed, OneCycle does not cycle its momentum"));
  EXPECT_FALSE(resolve_ok(*sgd).scheduler.cycle_momentum);
  auto adam = parse_ok(std::string(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.01}}, )") + sched + "}");
  EXPECT_FALSE(contains(adam->warnings(), "no betas"));
  EXPECT_TRUE(resolve_ok(*adam).scheduler.cycle_momentum);
}

}  // namespace
}  // namespace dsrt
