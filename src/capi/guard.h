// guard.h -- the one way a C entry point runs C++ code: exceptions are caught here and turned
// into a status and a thread-local message, so none can cross the ABI.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

// Records the failure for dsrt_last_error_message on this thread and returns its code.
dsrt_status set_last_error(const Status &status);
dsrt_status set_last_error(dsrt_status code, const std::string &message);

// The C function being run on this thread (for messages from inside guarded bodies, where
// __func__ would name the lambda).
const char *current_api_function();
class ApiFunctionScope {
 public:
  explicit ApiFunctionScope(const char *function);
  ~ApiFunctionScope();
  ApiFunctionScope(const ApiFunctionScope &) = delete;
  ApiFunctionScope &operator=(const ApiFunctionScope &) = delete;

 private:
  const char *previous_;
};

// The integer a C caller passed for an enum parameter, read from the parameter's bytes: a C caller
// may pass any int, and loading an out-of-range value as the C++ enum type is undefined. Validate
// the integer, then convert.
template <typename Enum>
int64_t enum_argument(const Enum &value) {
  static_assert(std::is_enum<Enum>::value, "enum_argument takes a C enum parameter");
  using Raw = typename std::underlying_type<Enum>::type;
  Raw raw;
  static_assert(sizeof raw == sizeof value, "an enum and its underlying type have the same size");
  std::memcpy(&raw, &value, sizeof raw);
  return static_cast<int64_t>(raw);
}

// Runs body (returning Status); maps its failure or any exception to a dsrt_status.
template <typename Body>
dsrt_status guarded(const char *function, Body &&body) noexcept {
  ApiFunctionScope scope(function);
  try {
    Status status = body();
    if (status.ok()) return DSRT_OK;
    return set_last_error(status);
  } catch (const std::bad_alloc &) {
    return set_last_error(DSRT_ERR_OUT_OF_MEMORY, std::string(function) + ": host memory exhausted");
  } catch (const std::exception &e) {
    return set_last_error(DSRT_ERR_INTERNAL, std::string(function) + ": unexpected exception: " + e.what());
  } catch (...) {
    return set_last_error(DSRT_ERR_INTERNAL, std::string(function) + ": unexpected non-standard exception");
  }
}

// Returns an INVALID_ARGUMENT status naming the function and the argument when ptr is NULL.
#define DSRT_REQUIRE_ARG(ptr)                                                                  \
  do {                                                                                         \
    if ((ptr) == nullptr)                                                                      \
      return ::dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' is NULL",              \
                           ::dsrt::current_api_function(), #ptr);                              \
  } while (0)

}  // namespace dsrt
