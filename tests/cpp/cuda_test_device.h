// cuda_test_device.h -- the CUDA device the GPU test programs share, and their status check.
// Include only under DSRT_HAVE_CUDA.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "device/cuda_device.h"
#include "util/status.h"

namespace dsrt {
namespace cuda_test {

// Created once and never destroyed: buffers of failed tests may outlive any scope, and at exit
// the CUDA runtime may already be gone.
inline Device &gpu() {
  static Device *device = [] {
    std::unique_ptr<Device> d;
    const Status s = device_create_cuda(0, &d);
    if (!s.ok()) {
      std::fprintf(stderr, "device_create_cuda(0) failed: %s\n", s.message().c_str());
      std::abort();
    }
    return d.release();
  }();
  return *device;
}

inline void check(const Status &s) { ASSERT_TRUE(s.ok()) << s.message(); }

}  // namespace cuda_test
}  // namespace dsrt
