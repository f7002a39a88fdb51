// bench_cuda_check.h -- the CUDA benchmarks' one way to stop on a failed call: a benchmark that
// measured after a failure would print a meaningless ratio, so it exits naming the call.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "util/status.h"

#define BENCH_CHECK(expr)                                                                     \
  do {                                                                                        \
    const ::dsrt::Status s_ = (expr);                                                         \
    if (!s_.ok()) {                                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #expr, s_.message().c_str());                   \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define BENCH_CUDA(expr)                                                                      \
  do {                                                                                        \
    const cudaError_t e_ = (expr);                                                            \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_));                 \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
