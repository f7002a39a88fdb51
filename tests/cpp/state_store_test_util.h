// state_store_test_util.h -- what the StateStore tests share: fresh random values and a bit-level
// bf16 reference (round to nearest-even in, exact widening out) written independently of the
// library's conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace dsrt {
namespace state_store_test {

inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float &x : v) x = dist(rng);
  return v;
}

// Round-to-nearest-even of a finite float to bf16, from its bits.
inline uint16_t reference_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float widen(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace state_store_test
}  // namespace dsrt
