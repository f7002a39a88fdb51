// onebit_engine_util.h -- the engine set-up shared by the 1-bit optimizer tests (1-bit Adam, 1-bit
// LAMB, 0/1 Adam): the same two tensors of 5 and 3 elements built from one vector of initial
// values, and one boundary step from one vector of this rank's gradients.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"

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

}  // namespace onebit_test
}  // namespace dsrt
