// onebit_engine_util.h -- the engine set-up shared by the 1-bit optimizer tests (1-bit Adam, 1-bit
// LAMB, 0/1 Adam): the same two tensors of 5 and 3 elements built from one vector of initial
// values, one boundary step from one vector of this rank's gradients, and the bytes on the wire per
// step of a 100k-element model.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "onebit_reference.h"

namespace dsrt {
namespace onebit_test {

const std::vector<int64_t> kSizes = {5, 3};

// device: Engine::create's device_spec (nullptr: the default).
inline std::unique_ptr<Engine> make_engine(std::shared_ptr<Comm> world, const TrainConfig &config,
                                           const std::vector<double> &init, const char *device = nullptr) {
  std::unique_ptr<Engine> e;
  Status s = Engine::create(config, std::move(world), &e, device);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!e) return e;
  int64_t at = 0;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    std::vector<float> values(init.begin() + at, init.begin() + at + kSizes[t]);
    s = e->add_param("w" + std::to_string(t), &kSizes[t], 1, values.data(), nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
    at += kSizes[t];
  }
  s = e->build();
  EXPECT_TRUE(s.ok()) << s.message();
  return e;
}

// Writes g (both tensors' elements) as the gradients, steps, and expects no overflow.
inline void run_step(Engine &e, const std::vector<double> &g) {
  int64_t at = 0;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    ASSERT_TRUE(testing_util::update_grad(e, t, [&](void *buffer, dsrt_dtype dtype) {
                  for (int64_t i = 0; i < kSizes[t]; ++i)
                    from_float(buffer, dtype, static_cast<size_t>(i), static_cast<float>(g[at + i]));
                }).ok());
    ASSERT_TRUE(e.grad_ready(t).ok());
    at += kSizes[t];
  }
  dsrt_step_result result{};
  result.struct_size = sizeof result;
  Status s = e.step(&result);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(result.overflow, 0);
}

// Builds a model of two tensors (60000 and 40000 elements) on config and device (nullptr: the
// default), runs `steps` boundary steps with fresh Gaussian gradients per rank and step, and
// stores the bytes this rank put on the wire in each: (*bytes)[s] for step s, (*bytes)[0] = 0.
inline void wire_bytes_per_step(const std::shared_ptr<Comm> &world, const TrainConfig &config, const char *device,
                                int steps, std::vector<uint64_t> *bytes) {
  const std::vector<int64_t> sizes = {60000, 40000};
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::create(config, world, &e, device).ok());
  for (size_t t = 0; t < sizes.size(); ++t) {
    const std::vector<double> init = gaussian(30 + static_cast<uint32_t>(t), static_cast<size_t>(sizes[t]), 0.1);
    std::vector<float> values(init.begin(), init.end());
    ASSERT_TRUE(e->add_param("w" + std::to_string(t), &sizes[t], 1, values.data(), nullptr).ok());
  }
  ASSERT_TRUE(e->build().ok());
  bytes->assign(1, 0);
  for (int step = 1; step <= steps; ++step) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      const std::vector<double> g =
          gaussian(900u + 10u * step + 3u * world->rank() + t, static_cast<size_t>(sizes[t]), 1.0);
      ASSERT_TRUE(testing_util::update_grad(*e, t, [&](void *buffer, dsrt_dtype dtype) {
                    for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, static_cast<float>(g[i]));
                  }).ok());
      ASSERT_TRUE(e->grad_ready(t).ok());
    }
    const uint64_t before = world->traffic().total();
    ASSERT_TRUE(e->step(nullptr).ok());
    bytes->push_back(world->traffic().total() - before);
  }
}

}  // namespace onebit_test
}  // namespace dsrt
