// steady_clock.h -- seconds on the monotonic clock, for the time counters the engine reports
// (gather, reduce, swap-in waits).
#pragma once

#include <chrono>

namespace dsrt {

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dsrt
