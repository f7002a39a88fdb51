// defines: status strings, thread-local last error, version, dsrt_free, dsrt_has_feature,
// dsrt_set_log_callback.
#include <cstdlib>
#include <cstring>
#include <string>

#include "capi/guard.h"
#include "dsrt.h"
#include "capi/features.h"
#include "util/log.h"

namespace dsrt {
namespace {
thread_local std::string t_last_error;
thread_local const char *t_api_function = "dsrt";
}  // namespace

const char *current_api_function() { return t_api_function; }
ApiFunctionScope::ApiFunctionScope(const char *function) : previous_(t_api_function) { t_api_function = function; }
ApiFunctionScope::~ApiFunctionScope() { t_api_function = previous_; }

dsrt_status set_last_error(const Status &status) {
  try {
    t_last_error = status.message();
  } catch (...) {
    // keep the previous message rather than fail while reporting a failure
  }
  return status.code();
}

dsrt_status set_last_error(dsrt_status code, const std::string &message) {
  return set_last_error(Status(code, message));
}

}  // namespace dsrt

extern "C" {

DSRT_API int32_t dsrt_version_number(void) { return DSRT_VERSION_NUMBER; }
DSRT_API const char *dsrt_version_string(void) { return DSRT_VERSION_STRING; }

DSRT_API const char *dsrt_status_string(dsrt_status status) {
  switch (status) {
    case DSRT_OK: return "ok";
    case DSRT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DSRT_ERR_CONFIG: return "invalid configuration";
    case DSRT_ERR_STATE: return "call out of order";
    case DSRT_ERR_OUT_OF_MEMORY: return "out of memory";
    case DSRT_ERR_IO: return "I/O error";
    case DSRT_ERR_COMM: return "communication error";
    case DSRT_ERR_DEVICE: return "device error";
    case DSRT_ERR_CHECKPOINT: return "checkpoint error";
    case DSRT_ERR_UNSUPPORTED: return "unsupported";
    case DSRT_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

DSRT_API const char *dsrt_last_error_message(void) { return dsrt::t_last_error.c_str(); }

DSRT_API void dsrt_free(void *ptr) { std::free(ptr); }

DSRT_API int32_t dsrt_has_feature(const char *name) {
  if (name == nullptr) return 0;
  try {
    return dsrt::has_feature(name) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

DSRT_API void dsrt_set_log_callback(dsrt_log_fn fn, void *user) {
  try {
    dsrt::log_set_callback(fn, user);
  } catch (...) {
  }
}

}  // extern "C"
