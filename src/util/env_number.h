// env_number.h -- tuning numbers read from the environment (DSRT_COMM_TIMEOUT_S,
// DSRT_COMM_CHUNK_BYTES, DSRT_COMM_SPIN_US, ...), parsed and range-checked one way: an unset or
// empty variable gives the default silently; a value that is not a number, or not a whole number
// where one is needed, or outside [lo, hi] gives the default with one warning per variable that
// names it, its value, the accepted range and the value used.
#pragma once

namespace dsrt {

struct EnvNumberRule {
  double lo, hi;     // accepted range, inclusive
  bool whole;        // whole numbers only
  const char *unit;  // for the warning: "seconds", "bytes", "microseconds"
};

double env_number(const char *name, double fallback, const EnvNumberRule &rule);

}  // namespace dsrt
