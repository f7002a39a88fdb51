// The dsrt_config_* C entry points: handles, NULL arguments, out-parameters on failure, strings
// the caller frees, and the thread-local error message.
#include <gtest/gtest.h>

#include <string>

#include "capi/handles.h"
#include "config/config.h"
#include "dsrt.h"

namespace {

std::string take(char *text) {
  std::string out = text ? text : "";
  dsrt_free(text);
  return out;
}

TEST(ConfigCapi, NullArgumentsAreRejected) {
  dsrt_config *config = reinterpret_cast<dsrt_config *>(0x1);
  EXPECT_EQ(dsrt_config_parse(nullptr, &config), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(config, nullptr);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("'json' is NULL"), std::string::npos);
  EXPECT_EQ(dsrt_config_parse("{}", nullptr), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_load(nullptr, &config), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_number(nullptr, "zero_optimization.stage", 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_string(nullptr, "optimizer.type", "Adam"), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_bool(nullptr, "fp16.enabled", 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_hidden_size(nullptr, 1024), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_world_size(nullptr, 2), DSRT_ERR_INVALID_ARGUMENT);
  double number = 7;
  EXPECT_EQ(dsrt_config_get_number(nullptr, "zero_optimization.stage", &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(number, 0);
  char *text = reinterpret_cast<char *>(0x1);
  EXPECT_EQ(dsrt_config_to_json(nullptr, &text), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(text, nullptr);
  dsrt_config_destroy(nullptr);
  EXPECT_EQ(dsrt::config_from_handle(nullptr), nullptr);

  ASSERT_EQ(dsrt_config_parse("{}", &config), DSRT_OK);
  EXPECT_EQ(dsrt_config_set_number(config, nullptr, 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_string(config, "optimizer.type", nullptr), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_get_number(config, "zero_optimization.stage", nullptr), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_get_string(config, "optimizer.type", nullptr), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_config_destroy(config);
}

TEST(ConfigCapi, ParseErrorsListEveryProblem) {
  dsrt_config *config = nullptr;
  const char *json = R"({"zero_optimization": {"stage": 5, "overlap_com": true}, "fp16": {"enabled": "yes"}})";
  EXPECT_EQ(dsrt_config_parse(json, &config), DSRT_ERR_CONFIG);
  EXPECT_EQ(config, nullptr);
  std::string message = dsrt_last_error_message();
  EXPECT_NE(message.find("3 errors in config:"), std::string::npos) << message;
  EXPECT_NE(message.find("config:1:33: zero_optimization.stage: 5 is out of range"), std::string::npos) << message;
  EXPECT_NE(message.find("zero_optimization.overlap_com: unknown key; did you mean overlap_comm?"),
            std::string::npos) << message;
  EXPECT_NE(message.find("fp16.enabled: expected true or false (or \"auto\"), got the string \"yes\""),
            std::string::npos) << message;
  EXPECT_EQ(dsrt_config_load("/nonexistent/ds.json", &config), DSRT_ERR_IO);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("/nonexistent/ds.json"), std::string::npos);
}

TEST(ConfigCapi, ResolveAutoThroughTheApi) {
  dsrt_config *config = nullptr;
  ASSERT_EQ(dsrt_config_parse(R"({
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                            "stage3_param_persistence_threshold": "auto", "aio": {"intra_op_parallelism": 2}}})",
                              &config),
            DSRT_OK);
  EXPECT_EQ(take([&] { char *t = nullptr; dsrt_config_unresolved(config, &t); return t; }()),
            "train_micro_batch_size_per_gpu\nzero_optimization.reduce_bucket_size\n"
            "zero_optimization.stage3_prefetch_bucket_size\nzero_optimization.stage3_param_persistence_threshold\n"
            "optimizer.params.lr\noptimizer.params.betas.0\noptimizer.params.betas.1\n");
  std::string warnings = take([&] { char *t = nullptr; dsrt_config_warnings(config, &t); return t; }());
  EXPECT_NE(warnings.find("zero_optimization.aio belongs at the top level"), std::string::npos);
  double value = 0;
  EXPECT_EQ(dsrt_config_get_number(config, "optimizer.params.lr", &value), DSRT_ERR_CONFIG);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("still \"auto\""), std::string::npos);

  ASSERT_EQ(dsrt_config_set_hidden_size(config, 64), DSRT_OK);
  ASSERT_EQ(dsrt_config_set_number(config, "optimizer.params.lr", 1e-4), DSRT_OK);
  ASSERT_EQ(dsrt_config_set_number(config, "optimizer.params.betas.0", 0.9), DSRT_OK);
  ASSERT_EQ(dsrt_config_set_number(config, "optimizer.params.betas.1", 0.95), DSRT_OK);
  ASSERT_EQ(dsrt_config_set_number(config, "train_micro_batch_size_per_gpu", 4), DSRT_OK);
  ASSERT_EQ(dsrt_config_set_world_size(config, 2), DSRT_OK);
  EXPECT_EQ(take([&] { char *t = nullptr; dsrt_config_unresolved(config, &t); return t; }()), "");
  ASSERT_EQ(dsrt_config_get_number(config, "zero_optimization.stage3_prefetch_bucket_size", &value), DSRT_OK);
  EXPECT_EQ(value, 3686);  // int(0.9 * 64 * 64)
  ASSERT_EQ(dsrt_config_get_number(config, "train_batch_size", &value), DSRT_OK);
  EXPECT_EQ(value, 16);
  ASSERT_EQ(dsrt_config_get_number(config, "aio.intra_op_parallelism", &value), DSRT_OK);
  EXPECT_EQ(value, 2);
  char *type = nullptr;
  ASSERT_EQ(dsrt_config_get_string(config, "optimizer.type", &type), DSRT_OK);
  EXPECT_EQ(take(type), "AdamW");
  char *json = nullptr;
  ASSERT_EQ(dsrt_config_to_json(config, &json), DSRT_OK);
  std::string effective = take(json);
  EXPECT_NE(effective.find("\"betas\": [0.9, 0.95]"), std::string::npos) << effective;
  EXPECT_NE(effective.find("\"train_batch_size\": 16"), std::string::npos) << effective;

  const dsrt::Config *inner = dsrt::config_from_handle(config);
  ASSERT_NE(inner, nullptr);
  dsrt::TrainConfig resolved;
  dsrt::Status status = inner->resolve(2, &resolved);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(resolved.zero.reduce_bucket_size, 4096);
  EXPECT_EQ(resolved.zero.stage3_param_persistence_threshold, 640);
  EXPECT_EQ(resolved.effective_json, effective);

  ASSERT_EQ(dsrt_config_set_world_size(config, 3), DSRT_OK);  // train_batch_size is derived: 24
  ASSERT_EQ(dsrt_config_get_number(config, "train_batch_size", &value), DSRT_OK);
  EXPECT_EQ(value, 24);
  ASSERT_EQ(dsrt_config_set_number(config, "train_batch_size", 24), DSRT_OK);
  EXPECT_EQ(dsrt_config_set_world_size(config, 2), DSRT_ERR_CONFIG);  // 24 != 4 * 2 * 2
  EXPECT_NE(std::string(dsrt_last_error_message()).find("world size (2) = 16"), std::string::npos);
  EXPECT_EQ(dsrt_config_set_world_size(config, 0), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_config_set_hidden_size(config, -5), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_config_destroy(config);
}

// The documented contract of dsrt_config_get_string: a numeric key gives its value as text (the
// shortest form that reads back), a boolean "true" or "false"; an unknown key is DSRT_ERR_CONFIG.
TEST(ConfigCapi, GetStringOfNumbersAndBooleansGivesTheirText) {
  dsrt_config *config = nullptr;
  ASSERT_EQ(dsrt_config_parse("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                              "{\"lr\": 0.00025, \"betas\": [0.9, 0.95]}}, \"fp16\": {\"enabled\": true}}",
                              &config),
            DSRT_OK);
  const std::pair<const char *, const char *> cases[] = {
      {"optimizer.params.lr", "0.00025"}, {"train_batch_size", "8"}, {"fp16.enabled", "true"},
      {"optimizer.params.betas.1", "0.95"}, {"bf16.enabled", "false"}};
  for (const auto &[key, text] : cases) {
    char *out = nullptr;
    ASSERT_EQ(dsrt_config_get_string(config, key, &out), DSRT_OK) << key;
    EXPECT_EQ(take(out), text) << key;
  }
  char *out = nullptr;
  EXPECT_EQ(dsrt_config_get_string(config, "no_such_key", &out), DSRT_ERR_CONFIG);
  EXPECT_EQ(out, nullptr);
  dsrt_config_destroy(config);
}

}  // namespace
