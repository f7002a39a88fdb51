// env_number.cpp -- see env_number.h.
#include "util/env_number.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "util/log.h"
#include "util/status.h"

namespace dsrt {

double env_number(const char *name, double fallback, const EnvNumberRule &rule) {
  const char *text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char *end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  const bool number = errno == 0 && end != text && *end == '\0' && std::isfinite(value);
  if (number && (!rule.whole || value == std::floor(value)) && value >= rule.lo && value <= rule.hi) return value;
  log_warn_once(name, Format("%s='%s' is not a%s number of %s in %.10g .. %.10g; using %.10g", name, text,
                             rule.whole ? " whole" : "", rule.unit, rule.lo, rule.hi, fallback));
  return fallback;
}

}  // namespace dsrt
