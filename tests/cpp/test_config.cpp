// Config: reading (comments, trailing commas), the seeds, DeepSpeed's defaults, aliases, "auto",
// the batch rule, unsupported features, and resolve() into TrainConfig.
#include <gtest/gtest.h>

#include <cmath>
#include <dirent.h>
#include <fstream>
#include <sstream>

#include "config/config.h"

namespace dsrt {
namespace {

const std::string kSeeds = DSRT_SOURCE_DIR "/../shared/configs/seeds";

std::vector<std::string> seed_files() {
  std::vector<std::string> files;
  if (DIR *dir = opendir(kSeeds.c_str())) {
    while (dirent *entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".json") files.push_back(kSeeds + "/" + name);
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::unique_ptr<Config> parse_ok(const std::string &text) {
  std::unique_ptr<Config> config;
  Status status = Config::parse(text, "test", &config);
  EXPECT_TRUE(status.ok()) << status.message();
  return config;
}

std::string parse_error(const std::string &text) {
  std::unique_ptr<Config> config;
  Status status = Config::parse(text, "test", &config);
  EXPECT_FALSE(status.ok()) << text;
  EXPECT_EQ(status.code(), DSRT_ERR_CONFIG);
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

TEST(Config, EverySeedConfigLoads) {
  auto files = seed_files();
  ASSERT_GE(files.size(), 20u) << "seed configs not found at " << kSeeds;
  for (const auto &file : files) {
    std::unique_ptr<Config> config;
    Status status = Config::load(file, &config);
    EXPECT_TRUE(status.ok()) << file << ": " << status.message();
  }
}

TEST(Config, EffectiveConfigOfEverySeedReadsBackTheSame) {
  for (const auto &file : seed_files()) {
    std::unique_ptr<Config> config;
    ASSERT_TRUE(Config::load(file, &config).ok()) << file;
    std::string json = config->to_json();
    std::unique_ptr<Config> again;
    Status status = Config::parse(json, "effective", &again);
    ASSERT_TRUE(status.ok()) << file << ": " << status.message() << "\n" << json;
    EXPECT_EQ(again->to_json(), json) << file;
    EXPECT_EQ(again->unresolved(), config->unresolved()) << file;
  }
}

// A torch scheduler/optimizer type dsrt does not step keeps its params exactly as given: the
// schema's every-type keys (last_batch_iteration) are not added, so the text is stable on re-read.
TEST(Config, UnsteppedTypeParamsReadBackUnchanged) {
  for (const char *text : {R"({"scheduler": {"type": "ExponentialLR", "params": {"wage": 3, "eps": 10}}})",
                           R"({"scheduler": {"type": "ExponentialLR"}})"}) {
    auto config = parse_ok(text);
    std::string json = config->to_json();
    EXPECT_EQ(json.find("last_batch_iteration"), std::string::npos) << json;
    std::unique_ptr<Config> again;
    ASSERT_TRUE(Config::parse(json, "effective", &again).ok()) << json;
    EXPECT_EQ(again->to_json(), json);
  }
}

TEST(Config, CommentsAndTrailingCommasAreAccepted) {
  auto config = parse_ok(R"(
    // DeepSpeed reads configs with hjson
    # so shell-style comments work too
    {
      /* block comment */ "zero_optimization": {"stage": 2,},  // trailing comma in an object
      "optimizer": {"type": "Adam", "params": {"betas": [0.8, 0.99,],}},
    }
  )");
  double stage = 0, beta = 0;
  ASSERT_TRUE(config->get_number("zero_optimization.stage", &stage).ok());
  ASSERT_TRUE(config->get_number("optimizer.params.betas.1", &beta).ok());
  EXPECT_EQ(stage, 2);
  EXPECT_EQ(beta, 0.99);
}

TEST(Config, WindowsFilesAreAccepted) {
  auto config = parse_ok("\xEF\xBB\xBF{\r\n  \"zero_optimization\": {\"stage\": 1}\r\n}\r\n");
  double stage = 0;
  ASSERT_TRUE(config->get_number("zero_optimization.stage", &stage).ok());
  EXPECT_EQ(stage, 1);
  EXPECT_EQ(parse_error("{\r\n  \"zero_optimization\": {\"stage\": 9}\r\n}"),
            "test:2:34: zero_optimization.stage: 9 is out of range; allowed: an integer from 0 to 3 "
            "(0 = off, 1 = optimizer states, 2 = + gradients, 3 = + parameters)");
}

TEST(Config, SyntaxErrorsGiveLineAndColumn) {
  EXPECT_EQ(parse_error("{\n  \"fp16\": {\n    \"enabled\": true\n    \"loss_scale\": 0\n  }\n}"),
            "test:4:5: syntax error: expected ',' or '}' after a member but found '\"' (is a comma missing?)");
  EXPECT_EQ(parse_error("{\"a\": 1, \"a\": 2}"),
            "test:1:10: syntax error: duplicate key \"a\" (first given at line 1): remove one of them");
  // Columns count characters, not bytes: "é" is one column.
  EXPECT_EQ(parse_error("{\"x\": \"é\", ]"), "test:1:12: syntax error: expected a key in double quotes or '}' but found ']'");
  EXPECT_NE(parse_error(std::string(200, '[')).find("nesting deeper than 64 levels"), std::string::npos);
  EXPECT_NE(parse_error("{\"steps_per_print\": 1e999}").find("out of range"), std::string::npos);
}

TEST(Config, EmptyConfigMeansDeepSpeedDefaults) {
  auto config = parse_ok("{}");
  TrainConfig resolved = resolve_ok(*config, 4);
  TrainConfig defaults;
  EXPECT_EQ(resolved.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(resolved.gradient_accumulation_steps, 1);
  EXPECT_EQ(resolved.train_batch_size, 4);
  EXPECT_EQ(resolved.world_size, 4);
  EXPECT_EQ(resolved.steps_per_print, defaults.steps_per_print);
  EXPECT_EQ(resolved.gradient_clipping, 1.0);  // DeepSpeed 0.19's GRADIENT_CLIPPING_DEFAULT
  EXPECT_EQ(defaults.gradient_clipping, 1.0);
  EXPECT_FALSE(resolved.fp16.enabled);
  EXPECT_EQ(resolved.fp16.initial_scale_power, 16);
  EXPECT_EQ(resolved.fp16.loss_scale_window, 1000);
  EXPECT_EQ(resolved.fp16.hysteresis, 2);
  EXPECT_EQ(resolved.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(resolved.optimizer.present);
  EXPECT_EQ(resolved.scheduler.type, SchedulerType::None);
  EXPECT_EQ(resolved.zero.stage, 0);
  EXPECT_EQ(resolved.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(resolved.zero.allgather_bucket_size, 500000000);
  EXPECT_FALSE(resolved.zero.overlap_comm);
  EXPECT_EQ(resolved.zero.sub_group_size, 1000000000);
  EXPECT_EQ(resolved.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(resolved.zero.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(resolved.zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(resolved.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(resolved.zero.offload_param.buffer_size, 100000000);
  EXPECT_EQ(resolved.aio.block_size, 1048576);
  EXPECT_EQ(resolved.aio.queue_depth, 8);
  EXPECT_TRUE(resolved.aio.overlap_events);
  EXPECT_FALSE(resolved.has_communication_data_type);
  EXPECT_FALSE(resolved.effective_json.empty());
  EXPECT_TRUE(config->warnings().empty());
}

TEST(Config, OverlapCommDefaultDependsOnStage) {
  EXPECT_TRUE(resolve_ok(*parse_ok(R"({"zero_optimization": {"stage": 3}})")).zero.overlap_comm);
  EXPECT_FALSE(resolve_ok(*parse_ok(R"({"zero_optimization": {"stage": 2}})")).zero.overlap_comm);
  EXPECT_FALSE(resolve_ok(*parse_ok(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})")).zero.overlap_comm);
  EXPECT_TRUE(resolve_ok(*parse_ok(R"({"zero_optimization": {"stage": 1, "overlap_comm": true}})")).zero.overlap_comm);
}

TEST(Config, ManualZero3SeedResolvesToItsValues) {
  std::unique_ptr<Config> config;
  ASSERT_TRUE(Config::load(kSeeds + "/ds_config_zero3_manual.json", &config).ok());
  TrainConfig t = resolve_ok(*config, 2);
  EXPECT_TRUE(t.fp16.enabled);
  EXPECT_EQ(t.optimizer.type, OptimizerType::AdamW);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 3e-5);
  EXPECT_DOUBLE_EQ(t.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(t.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(t.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(t.optimizer.weight_decay, 3e-7);
  EXPECT_TRUE(t.optimizer.adam_w_mode);
  EXPECT_EQ(t.scheduler.type, SchedulerType::WarmupLR);
  EXPECT_EQ(t.scheduler.warmup_num_steps, 500);
  EXPECT_DOUBLE_EQ(t.scheduler.warmup_max_lr, 3e-5);
  EXPECT_EQ(t.scheduler.warmup_type, "log");
  EXPECT_EQ(t.zero.stage, 3);
  EXPECT_EQ(t.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(t.zero.offload_param.device, OffloadDevice::Cpu);
  EXPECT_TRUE(t.zero.offload_param.pin_memory);
  EXPECT_EQ(t.zero.reduce_bucket_size, 1000000);
  EXPECT_EQ(t.zero.stage3_prefetch_bucket_size, 940000);
  EXPECT_EQ(t.zero.stage3_param_persistence_threshold, 10000);
  EXPECT_TRUE(t.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(t.steps_per_print, 2000);
  EXPECT_EQ(t.train_batch_size, 2);  // micro 1 * gas 1 * world 2, as DeepSpeed derives it
}

TEST(Config, AdamWModeFollowsDeepSpeed) {
  auto adam = parse_ok(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})");
  EXPECT_FALSE(resolve_ok(*adam).optimizer.adam_w_mode);
  EXPECT_EQ(resolve_ok(*adam).optimizer.type, OptimizerType::Adam);  // type names are case-insensitive
  auto adamw = parse_ok(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})");
  EXPECT_TRUE(resolve_ok(*adamw).optimizer.adam_w_mode);
  auto lion = parse_ok(R"({"optimizer": {"type": "Lion"}})");
  EXPECT_DOUBLE_EQ(resolve_ok(*lion).optimizer.beta2, 0.99);
  auto adagrad = parse_ok(R"({"optimizer": {"type": "Adagrad"}})");
  EXPECT_DOUBLE_EQ(resolve_ok(*adagrad).optimizer.lr, 1e-2);
}

TEST(Config, ZeroOneAdamKeysResolveWithDeepSpeedDefaults) {
  auto defaults = parse_ok(R"({"optimizer": {"type": "ZeroOneAdam"}})");
  const OptimizerConfig d = resolve_ok(*defaults).optimizer;
  EXPECT_EQ(d.type, OptimizerType::ZeroOneAdam);
  EXPECT_EQ(d.var_freeze_step, 100000);
  EXPECT_EQ(d.var_update_scaler, 16);
  EXPECT_EQ(d.local_step_scaler, 32678);
  EXPECT_EQ(d.local_step_clipper, 16);
  auto set = parse_ok(R"({"optimizer": {"type": "zeroOneAdam", "params": {"var_freeze_step": 7,
      "var_update_scaler": 3, "local_step_scaler": 5, "local_step_clipper": 2, "cuda_aware": false}}})");
  const OptimizerConfig o = resolve_ok(*set).optimizer;
  EXPECT_EQ(o.var_freeze_step, 7);
  EXPECT_EQ(o.var_update_scaler, 3);
  EXPECT_EQ(o.local_step_scaler, 5);
  EXPECT_EQ(o.local_step_clipper, 2);
  EXPECT_NE(parse_error(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"var_update_scaler": 0}}})")
                .find("optimizer.params.var_update_scaler"),
            std::string::npos);
  // OneBitAdam's key is not ZeroOneAdam's.
  EXPECT_FALSE(parse_error(R"({"optimizer": {"type": "OneBitAdam", "params": {"var_freeze_step": 7}}})").empty());
}

TEST(Config, OneBitLambKeysResolveWithDeepSpeedDefaults) {
  auto defaults = parse_ok(R"({"optimizer": {"type": "OneBitLamb"}})");
  const OptimizerConfig d = resolve_ok(*defaults).optimizer;
  EXPECT_EQ(d.type, OptimizerType::OneBitLamb);
  EXPECT_EQ(d.freeze_step, 100000);
  EXPECT_DOUBLE_EQ(d.max_coeff, 10.0);
  EXPECT_DOUBLE_EQ(d.min_coeff, 0.01);
  EXPECT_DOUBLE_EQ(d.coeff_beta, 0.9);
  EXPECT_DOUBLE_EQ(d.factor_max, 4.0);
  EXPECT_DOUBLE_EQ(d.factor_min, 0.5);
  EXPECT_DOUBLE_EQ(d.factor_threshold, 0.1);
  EXPECT_DOUBLE_EQ(d.lr, 1e-3);
  auto set = parse_ok(R"({"optimizer": {"type": "onebitlamb", "params": {"lr": 0.02, "freeze_step": 7,
      "max_coeff": 0.3, "min_coeff": 0.02, "coeff_beta": 0.8, "factor_max": 3.0, "factor_min": 0.6,
      "factor_threshold": 0.2, "cuda_aware": false, "comm_backend_name": "nccl"}}})");
  const OptimizerConfig o = resolve_ok(*set).optimizer;
  EXPECT_EQ(o.freeze_step, 7);
  EXPECT_DOUBLE_EQ(o.lr, 0.02);
  EXPECT_DOUBLE_EQ(o.max_coeff, 0.3);
  EXPECT_DOUBLE_EQ(o.min_coeff, 0.02);
  EXPECT_DOUBLE_EQ(o.coeff_beta, 0.8);
  EXPECT_DOUBLE_EQ(o.factor_max, 3.0);
  EXPECT_DOUBLE_EQ(o.factor_min, 0.6);
  EXPECT_DOUBLE_EQ(o.factor_threshold, 0.2);
  EXPECT_NE(parse_error(R"({"optimizer": {"type": "OneBitLamb", "params": {"coeff_beta": 1.5}}})")
                .find("optimizer.params.coeff_beta"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"optimizer": {"type": "OneBitLamb", "params": {"factor_min": 5.0}}})")
                .find("factor_min"),
            std::string::npos);
  // OneBitLamb's keys are not OneBitAdam's, and ZeRO is refused as for the other 1-bit optimizers.
  EXPECT_FALSE(parse_error(R"({"optimizer": {"type": "OneBitAdam", "params": {"factor_max": 3.0}}})").empty());
  EXPECT_NE(parse_error(R"({"optimizer": {"type": "OneBitLamb"}, "zero_optimization": {"stage": 1}})")
                .find("zero_optimization.stage 0"),
            std::string::npos);
}

TEST(Config, AliasesWorkWithAWarning) {
  std::unique_ptr<Config> config;
  ASSERT_TRUE(Config::load(kSeeds + "/nvme_infinity_trailing_comma.json", &config).ok());
  EXPECT_TRUE(contains(config->warnings(), "zero_optimization.aio belongs at the top level"));
  // Dropped by DeepSpeed 0.17, not renamed: a warning, and intra_op_parallelism keeps its default.
  EXPECT_TRUE(contains(config->warnings(), "DeepSpeed no longer reads aio.thread_count"));
  ASSERT_TRUE(config->set_hidden_size(4096).ok());
  TrainConfig t = resolve_ok(*config);
  EXPECT_EQ(t.aio.block_size, 262144);
  EXPECT_EQ(t.aio.queue_depth, 32);
  EXPECT_EQ(t.aio.intra_op_parallelism, 1);
  EXPECT_EQ(t.zero.offload_param.device, OffloadDevice::Nvme);
  EXPECT_EQ(t.zero.offload_param.nvme_path, "/local_nvme");

  auto oldest = parse_ok(R"({"zero_optimization": true})");
  EXPECT_TRUE(contains(oldest->warnings(), "\"zero_optimization\": true is deprecated"));
  EXPECT_EQ(resolve_ok(*oldest).zero.stage, 1);

  auto old = parse_ok(R"({"zero_optimization": {"stage": 2, "cpu_offload": true},
                          "bfloat16": {"enabled": true}})");
  EXPECT_TRUE(contains(old->warnings(), "zero_optimization.cpu_offload is deprecated"));
  EXPECT_TRUE(contains(old->warnings(), "bfloat16: bfloat16 is a deprecated name; write bf16"));
  TrainConfig o = resolve_ok(*old);
  EXPECT_EQ(o.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_TRUE(o.bf16_enabled);

  auto gather = parse_ok(R"({"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_TRUE(contains(gather->warnings(), "deprecated name; write stage3_gather_16bit_weights_on_model_save"));
  EXPECT_TRUE(resolve_ok(*gather).zero.stage3_gather_16bit_weights_on_model_save);
}

TEST(Config, NvmeOptimizerOffloadBelowStage3RunsWithAWarning) {
  for (int stage : {1, 2}) {
    auto config = parse_ok(Format(R"({"zero_optimization": {"stage": %d, "offload_optimizer":
                                       {"device": "nvme", "nvme_path": "/local_nvme"}}})", stage));
    EXPECT_TRUE(contains(config->warnings(), "DeepSpeed accepts NVMe optimizer offload only at stage 3")) << stage;
    TrainConfig t = resolve_ok(*config);
    EXPECT_EQ(t.zero.offload_optimizer.device, OffloadDevice::Nvme);
    EXPECT_EQ(t.zero.stage, stage);
  }
  auto infinity = parse_ok(R"({"zero_optimization": {"stage": 3, "offload_optimizer":
                                {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  EXPECT_FALSE(contains(infinity->warnings(), "NVMe optimizer offload"));
}

TEST(Config, MinLossScaleTakesFractions) {
  auto config = parse_ok(R"({"fp16": {"enabled": true, "min_loss_scale": 1e-10}})");
  EXPECT_DOUBLE_EQ(resolve_ok(*config).fp16.min_loss_scale, 1e-10);
}

TEST(Config, HiddenSizeResolvesOnlyAutoKeys) {
  auto config = parse_ok(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": 777}})");
  EXPECT_EQ(config->unresolved(), (std::vector<std::string>{"zero_optimization.reduce_bucket_size",
                                                            "zero_optimization.stage3_prefetch_bucket_size"}));
  const int64_t h = 1536;
  ASSERT_TRUE(config->set_hidden_size(h).ok());
  TrainConfig t = resolve_ok(*config);
  EXPECT_EQ(t.zero.reduce_bucket_size, h * h);
  EXPECT_EQ(t.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * h * h));
  EXPECT_EQ(t.zero.stage3_param_persistence_threshold, 777);
  EXPECT_EQ(config->set_hidden_size(0).code(), DSRT_ERR_INVALID_ARGUMENT);
}

TEST(Config, UnresolvedAutoIsAClearError) {
  std::unique_ptr<Config> config;
  ASSERT_TRUE(Config::load(kSeeds + "/zero3_snippet.json", &config).ok());
  TrainConfig t;
  Status status = config->resolve(1, &t);
  ASSERT_EQ(status.code(), DSRT_ERR_CONFIG);
  EXPECT_NE(status.message().find("3 values are still \"auto\""), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("zero_optimization.stage3_prefetch_bucket_size: dsrt_config_set_hidden_size"),
            std::string::npos) << status.message();
}

TEST(Config, SettersValidateLikeTheFile) {
  auto config = parse_ok(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
                             "fp16": {"enabled": "auto"}})");
  EXPECT_EQ(config->unresolved().size(), 4u);
  ASSERT_TRUE(config->set_number("optimizer.params.lr", 2e-4).ok());
  ASSERT_TRUE(config->set_number("optimizer.params.betas.0", 0.9).ok());
  ASSERT_TRUE(config->set_number("optimizer.params.betas.1", 0.95).ok());
  ASSERT_TRUE(config->set_bool("fp16.enabled", true).ok());
  EXPECT_TRUE(config->unresolved().empty());
  TrainConfig t = resolve_ok(*config);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 2e-4);
  EXPECT_DOUBLE_EQ(t.optimizer.beta2, 0.95);
  EXPECT_TRUE(t.fp16.enabled);

  Status bad = config->set_number("zero_optimization.stage", 4);
  EXPECT_EQ(bad.message(), "zero_optimization.stage: 4 is out of range; allowed: an integer from 0 to 3 "
                           "(0 = off, 1 = optimizer states, 2 = + gradients, 3 = + parameters)");
  EXPECT_EQ(config->set_number("train_micro_batch_size_per_gpu", 2.5).message(),
            "train_micro_batch_size_per_gpu: 2.5 is not an integer; allowed: an integer >= 1");
  EXPECT_EQ(config->set_number("zero_optimization.stage3_prefetch_bucket", 1).message(),
            "zero_optimization.stage3_prefetch_bucket: unknown key; did you mean stage3_prefetch_bucket_size?");
  EXPECT_EQ(config->set_number("fp16.enabled", 1).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->set_bool("zero_optimization.stage", true).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->set_string("zero_optimization.offload_param.device", "gpu").code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->set_number("optimizer.params.betas", 0.9).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->set_number("optimizer.params.momentum", 0.9).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->set_number("optimizer.params.lr", std::nan("")).code(), DSRT_ERR_CONFIG);
  // A rejected change leaves the config as it was.
  double stage = -1;
  ASSERT_TRUE(config->get_number("zero_optimization.stage", &stage).ok());
  EXPECT_EQ(stage, 0);
  // A change that breaks a rule across keys is refused as a whole.
  ASSERT_TRUE(config->set_bool("bf16.enabled", false).ok());
  Status both = config->set_bool("bf16.enabled", true);
  EXPECT_NE(both.message().find("fp16.enabled and bf16.enabled are both true"), std::string::npos);
  // Setting the type creates the section; "auto" re-marks a key.
  ASSERT_TRUE(config->set_string("scheduler.type", "WarmupCosineLR").code() == DSRT_ERR_CONFIG);
  ASSERT_TRUE(config->set_string("scheduler.type", "WarmupLR").ok());
  ASSERT_TRUE(config->set_string("scheduler.params.warmup_num_steps", "auto").ok());
  EXPECT_EQ(config->unresolved(), std::vector<std::string>{"scheduler.params.warmup_num_steps"});
}

TEST(Config, GettersGiveEffectiveValues) {
  auto config = parse_ok(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})");
  double value = 0;
  ASSERT_TRUE(config->get_number("zero_optimization.offload_param.buffer_count", &value).ok());
  EXPECT_EQ(value, 5);
  ASSERT_TRUE(config->get_number("zero_optimization.overlap_comm", &value).ok());
  EXPECT_EQ(value, 1);
  std::string text;
  ASSERT_TRUE(config->get_string("zero_optimization.offload_param.device", &text).ok());
  EXPECT_EQ(text, "cpu");
  ASSERT_TRUE(config->get_string("zero_optimization.stage", &text).ok());
  EXPECT_EQ(text, "3");
  EXPECT_EQ(config->get_number("zero_optimization.offload_param.device", &value).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->get_number("zero_optimization.nope", &value).code(), DSRT_ERR_CONFIG);
  EXPECT_EQ(config->get_number("train_batch_size", &value).code(), DSRT_ERR_CONFIG);
  ASSERT_TRUE(config->set_world_size(8).ok());
  ASSERT_TRUE(config->get_number("train_batch_size", &value).ok());
  EXPECT_EQ(value, 8);
}

// DeepSpeed's batch rule: train_batch_size = micro * gas * world; a missing term is derived.
TEST(Config, BatchRuleDerivesMissingTerms) {
  struct Case {
    const char *json;
    int world;
    int64_t train, micro, gas;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2, 32, 4, 4},
      {R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4, 32, 4, 2},
      {R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 2, 30, 3, 5},
      {R"({"train_batch_size": 24})", 3, 24, 8, 1},
      {R"({"train_micro_batch_size_per_gpu": 6})", 4, 24, 6, 1},
      {R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})", 2, 16, 2,
       4},
      {R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 10})", 4,
       80, 2, 10},
  };
  for (const Case &c : cases) {
    TrainConfig t = resolve_ok(*parse_ok(c.json), c.world);
    EXPECT_EQ(t.train_batch_size, c.train) << c.json;
    EXPECT_EQ(t.train_micro_batch_size_per_gpu, c.micro) << c.json;
    EXPECT_EQ(t.gradient_accumulation_steps, c.gas) << c.json;
    EXPECT_EQ(t.train_batch_size, t.train_micro_batch_size_per_gpu * t.gradient_accumulation_steps * c.world);
  }
}

TEST(Config, BatchRuleErrorShowsTheNumbers) {
  auto config = parse_ok(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                             "gradient_accumulation_steps": 2})");
  Status status = config->set_world_size(2);
  EXPECT_EQ(status.message(), "test: train_batch_size (16) must equal train_micro_batch_size_per_gpu (2) * "
                              "gradient_accumulation_steps (2) * world size (2) = 8; change one of them, or "
                              "leave one out and dsrt derives it");
  EXPECT_EQ(config->world_size(), 0);
  ASSERT_TRUE(config->set_world_size(4).ok());
  TrainConfig t;
  EXPECT_EQ(config->resolve(3, &t).code(), DSRT_ERR_CONFIG);
  // Without the world size only divisibility can be checked; with it, the whole rule.
  EXPECT_NE(parse_error(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})").find("not a multiple of 4"),
            std::string::npos);
  auto uneven = parse_ok(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_NE(uneven->set_world_size(2).message().find("train_batch_size (12) is not a multiple of "
                                                     "train_micro_batch_size_per_gpu (4) * world size (2) = 8"),
            std::string::npos);
}

TEST(Config, UnimplementedFeaturesAreRefusedNotDropped) {
  const char *const refused[] = {
      R"({"optimizer": {"type": "Muon", "params": {"lr": 0.01}}})",
      R"({"scheduler": {"type": "StepLR", "params": {"step_size": 10}}})",
      R"({"amp": {"enabled": true, "opt_level": "O1"}})",
      R"({"aio": {"use_gds": true}})",
      R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})",
      R"({"zero_optimization": {"stage": 3, "zenflow": {"topk_ratio": 0.1}}})",
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}}})",
  };
  for (const char *json : refused) {
    auto config = parse_ok(json);
    ASSERT_NE(config, nullptr);
    EXPECT_EQ(config->unsupported().size(), 1u) << json;
    EXPECT_TRUE(config->warnings().empty()) << json << ": " << config->warnings()[0];
    TrainConfig t;
    Status status = config->resolve(1, &t);
    EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED) << json;
    EXPECT_NE(status.message().find("dsrt does not implement"), std::string::npos) << status.message();
  }
  // Disabled or default values are fine.
  auto off = parse_ok(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": false,
                          "zero_hpz_partition_size": 0, "mics_shard_size": 0}, "amp": {"enabled": false}})");
  EXPECT_TRUE(off->unsupported().empty());
  resolve_ok(*off);
  std::unique_ptr<Config> zeropp;
  ASSERT_TRUE(Config::load(kSeeds + "/zeropp.json", &zeropp).ok());
  EXPECT_TRUE(zeropp->unsupported().empty());  // hpZ, qwZ and qgZ are all implemented
}

// hpZ is a stage-3 partitioning: read at stage 3, ignored below (as DeepSpeed), 0 means off.
TEST(Config, HpzPartitionSizeResolves) {
  struct Case {
    const char *json;
    int64_t want;
  } cases[] = {
      {R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})", 8},
      {R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})", 1},
      {R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 8}})", 1},
      {R"({"zero_optimization": {"stage": 3}})", 1},
  };
  for (const Case &c : cases) {
    auto config = parse_ok(c.json);
    ASSERT_NE(config, nullptr);
    EXPECT_TRUE(config->unsupported().empty()) << c.json;
    TrainConfig t;
    ASSERT_TRUE(config->resolve(1, &t).ok()) << c.json;
    EXPECT_EQ(t.zero.zero_hpz_partition_size, c.want) << c.json;
  }
  std::unique_ptr<Config> negative;
  EXPECT_EQ(Config::parse(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": -2}})", "test", &negative)
                .code(),
            DSRT_ERR_CONFIG);
}

// MiCS (a dsrt extension with DeepSpeed 0.18's meaning): stage 3 only, a shard size dividing the
// world, not with hpZ; -1 and 0 are off.
TEST(Config, MicsShardSizeResolves) {
  struct Case {
    const char *json;
    int world;
    int64_t want;  // 0: refused with DSRT_ERR_CONFIG, the message holding `error`
    const char *error;
  } cases[] = {
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2}})", 4, 2, ""},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 4}})", 4, 4, ""},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 0}})", 4, -1, ""},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2, "mics_hierarchical_params_gather": true}})", 4, 2,
       ""},
      {R"({"zero_optimization": {"stage": 3}})", 4, -1, ""},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 4}})", 6, 0, "does not divide the world size 6"},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})", 4, 0, "does not divide the world size 4"},
      {R"({"zero_optimization": {"stage": 2, "mics_shard_size": 2}})", 4, 0, "needs ZeRO stage 3"},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2, "zero_hpz_partition_size": 2}})", 4, 0,
       "choose one"},
  };
  for (const Case &c : cases) {
    auto config = parse_ok(c.json);
    ASSERT_NE(config, nullptr);
    EXPECT_TRUE(config->unsupported().empty()) << c.json;
    TrainConfig t;
    Status s = config->resolve(c.world, &t);
    if (c.want == 0) {
      EXPECT_EQ(s.code(), DSRT_ERR_CONFIG) << c.json;
      EXPECT_NE(s.message().find(c.error), std::string::npos) << s.message();
    } else {
      ASSERT_TRUE(s.ok()) << c.json << ": " << s.message();
      EXPECT_EQ(t.zero.mics_shard_size, c.want) << c.json;
      EXPECT_EQ(t.zero.mics_hierarchical_params_gather, std::string(c.json).find("gather\": true") != std::string::npos)
          << c.json;
    }
  }
}

// Partial optimizer offload (offload_optimizer.ratio < 1) is not built over MiCS shard groups.
TEST(Config, MicsWithOffloadRatioIsRefused) {
  auto config = parse_ok(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2,
      "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  ASSERT_NE(config, nullptr);
  TrainConfig t;
  Status s = config->resolve(4, &t);
  EXPECT_EQ(s.code(), DSRT_ERR_UNSUPPORTED) << s.message();
  EXPECT_NE(s.message().find("ratio"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("mics_shard_size"), std::string::npos) << s.message();
  auto whole = parse_ok(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2,
      "offload_optimizer": {"device": "cpu", "ratio": 1.0}}})");
  ASSERT_NE(whole, nullptr);
  EXPECT_TRUE(whole->resolve(4, &t).ok());
}

TEST(Config, HostSideSectionsOnlyWarn) {
  std::unique_ptr<Config> config;
  ASSERT_TRUE(Config::load(kSeeds + "/classifier_zero3_activation_ckpt.json", &config).ok());
  EXPECT_TRUE(contains(config->warnings(), "activation_checkpointing (cpu_checkpointing = true, "
                                           "partition_activations = true, profile = true)"));
  resolve_ok(*config);
  auto monitors = parse_ok(R"({"tensorboard": {"enabled": true, "output_path": "runs"},
                               "wandb": {"enabled": true}, "flops_profiler": {"enabled": true}})");
  EXPECT_TRUE(contains(monitors->warnings(), "written by dsrt's Python front"));
  EXPECT_TRUE(contains(monitors->warnings(), "the FLOPs profiler measures the host's model"));
  resolve_ok(*monitors);
}

TEST(Config, CloneIsIndependent) {
  auto config = parse_ok(R"({"zero_optimization": {"stage": 1}})");
  auto copy = config->clone();
  ASSERT_TRUE(copy->set_number("zero_optimization.stage", 2).ok());
  double a = 0, b = 0;
  ASSERT_TRUE(config->get_number("zero_optimization.stage", &a).ok());
  ASSERT_TRUE(copy->get_number("zero_optimization.stage", &b).ok());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
}

TEST(Config, LoadReportsUnreadableFiles) {
  std::unique_ptr<Config> config;
  Status status = Config::load("/nonexistent/ds_config.json", &config);
  EXPECT_EQ(status.code(), DSRT_ERR_IO);
  EXPECT_NE(status.message().find("/nonexistent/ds_config.json"), std::string::npos);
}

}  // namespace
}  // namespace dsrt
