// defines: struct dsrt_config and every dsrt_config_* entry point, over dsrt::Config.
#include <memory>
#include <string>

#include "capi/guard.h"
#include "capi/handles.h"
#include "config/config.h"
#include "dsrt.h"
#include "capi/features.h"

struct dsrt_config {
  std::unique_ptr<dsrt::Config> config;
};

namespace dsrt {

const Config *config_from_handle(const dsrt_config *handle) {
  return handle == nullptr ? nullptr : handle->config.get();
}

namespace {

std::string join_lines(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &line : lines) out += line + "\n";
  return out;
}

// Wraps a freshly parsed Config in a handle (make_unique so nothing leaks if allocation throws).
dsrt_config *wrap(std::unique_ptr<Config> config) {
  auto handle = std::make_unique<dsrt_config>();
  handle->config = std::move(config);
  return handle.release();
}

}  // namespace
}  // namespace dsrt

extern "C" {

DSRT_API dsrt_status dsrt_config_parse(const char *json, dsrt_config **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(json);
    DSRT_REQUIRE_ARG(out);
    std::unique_ptr<dsrt::Config> config;
    DSRT_RETURN_IF_ERROR(dsrt::Config::parse(json, "config", &config));
    *out = dsrt::wrap(std::move(config));
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_load(const char *path, dsrt_config **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(path);
    DSRT_REQUIRE_ARG(out);
    std::unique_ptr<dsrt::Config> config;
    DSRT_RETURN_IF_ERROR(dsrt::Config::load(path, &config));
    *out = dsrt::wrap(std::move(config));
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_set_number(dsrt_config *config, const char *key_path, double value) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    return config->config->set_number(key_path, value);
  });
}

DSRT_API dsrt_status dsrt_config_set_string(dsrt_config *config, const char *key_path, const char *value) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    DSRT_REQUIRE_ARG(value);
    return config->config->set_string(key_path, value);
  });
}

DSRT_API dsrt_status dsrt_config_set_bool(dsrt_config *config, const char *key_path, int value) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    return config->config->set_bool(key_path, value != 0);
  });
}

DSRT_API dsrt_status dsrt_config_set_hidden_size(dsrt_config *config, int64_t hidden_size) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    return config->config->set_hidden_size(hidden_size);
  });
}

DSRT_API dsrt_status dsrt_config_set_world_size(dsrt_config *config, int32_t world_size) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    return config->config->set_world_size(world_size);
  });
}

DSRT_API dsrt_status dsrt_config_get_number(const dsrt_config *config, const char *key_path, double *out) {
  if (out) *out = 0.0;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    DSRT_REQUIRE_ARG(out);
    return config->config->get_number(key_path, out);
  });
}

DSRT_API dsrt_status dsrt_config_get_string(const dsrt_config *config, const char *key_path, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    DSRT_REQUIRE_ARG(out);
    std::string value;
    DSRT_RETURN_IF_ERROR(config->config->get_string(key_path, &value));
    *out = dsrt::dup_for_caller(value);
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_get_string: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_to_json(const dsrt_config *config, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(out);
    *out = dsrt::dup_for_caller(config->config->to_json());
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_to_json: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_unresolved(const dsrt_config *config, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(out);
    *out = dsrt::dup_for_caller(dsrt::join_lines(config->config->unresolved()));
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_unresolved: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_warnings(const dsrt_config *config, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(out);
    *out = dsrt::dup_for_caller(dsrt::join_lines(config->config->warnings()));
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_warnings: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_unsupported(const dsrt_config *config, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(out);
    *out = dsrt::dup_for_caller(dsrt::join_lines(config->config->unsupported()));
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_unsupported: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_resolve_hint(const dsrt_config *config, const char *key_path, char **out) {
  if (out) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(key_path);
    DSRT_REQUIRE_ARG(out);
    const std::string hint = config->config->how_to_resolve(key_path);
    if (hint.empty())
      return dsrt::Error(DSRT_ERR_CONFIG, "dsrt_config_resolve_hint: %s: unknown key (or not part of this config's "
                         "optimizer/scheduler type)", key_path);
    *out = dsrt::dup_for_caller(hint);
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_resolve_hint: out of memory");
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_to_deepspeed_json(const dsrt_config *config, char **json, char **dsrt_only) {
  if (json) *json = nullptr;
  if (dsrt_only) *dsrt_only = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    DSRT_REQUIRE_ARG(json);
    std::vector<std::string> apart;
    std::string text = config->config->to_deepspeed_json(&apart);
    char *json_copy = dsrt::dup_for_caller(text);
    if (json_copy == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_to_deepspeed_json: out of memory");
    if (dsrt_only != nullptr) {
      *dsrt_only = dsrt::dup_for_caller(dsrt::join_lines(apart));
      if (*dsrt_only == nullptr) {
        dsrt_free(json_copy);
        return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_config_to_deepspeed_json: out of memory");
      }
    }
    *json = json_copy;
    return dsrt::Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_config_check(const dsrt_config *config, int32_t world_size) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    DSRT_REQUIRE_ARG(config);
    if (world_size < 0)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_config_check: world_size is %d; pass 0 or a world size",
                         static_cast<int>(world_size));
    return config->config->validate(world_size);
  });
}

DSRT_API void dsrt_config_destroy(dsrt_config *config) { std::unique_ptr<dsrt_config> owned(config); }

}  // extern "C"
