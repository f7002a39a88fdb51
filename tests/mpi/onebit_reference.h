// onebit_reference.h -- float64 references shared by the 1-bit optimizer tests: fp32-representable
// Gaussian data, DeepSpeed's compressed all-reduce over all W ranks at once (every rank
// simulating every rank), and a relative error with a floor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace dsrt {
namespace {

std::vector<double> gaussian(uint32_t seed, size_t n, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> out(n);
  for (double &x : out) x = static_cast<float>(dist(rng));  // representable in fp32
  return out;
}

// The float64 reference of the compressed all-reduce over all W ranks at once.
struct RefCompressed {
  int world = 1;
  size_t n = 0, padded = 0, chunk = 0;
  std::vector<std::vector<double>> worker_error, server_error;  // per rank

  RefCompressed(int w, size_t count) : world(w), n(count) {
    const size_t lcm = static_cast<size_t>(w) * 8 / std::gcd(static_cast<size_t>(w), size_t{8});
    const size_t unit = static_cast<size_t>(w) * lcm;
    padded = (n + unit - 1) / unit * unit;
    chunk = padded / static_cast<size_t>(w);
    worker_error.assign(static_cast<size_t>(w), std::vector<double>(padded, 0.0));
    server_error.assign(static_cast<size_t>(w), std::vector<double>(chunk, 0.0));
  }
  static double sign(double x) { return x >= 0 ? 1.0 : -1.0; }
  // inputs[r]: rank r's n values; returns the result every rank gets.
  std::vector<double> run(const std::vector<std::vector<double>> &inputs) {
    std::vector<std::vector<double>> y(static_cast<size_t>(world), std::vector<double>(padded, 0.0));
    std::vector<double> worker_scale(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      double sq = 0;
      for (size_t i = 0; i < padded; ++i) {
        y[r][i] = (i < n ? inputs[r][i] : 0.0) + worker_error[r][i];
        sq += y[r][i] * y[r][i];
      }
      worker_scale[r] = std::sqrt(sq) / std::sqrt(static_cast<double>(padded));
      for (size_t i = 0; i < padded; ++i) worker_error[r][i] = y[r][i] - worker_scale[r] * sign(y[r][i]);
    }
    std::vector<double> out(padded);
    for (int s = 0; s < world; ++s) {  // server s reduces chunk s
      std::vector<double> z(chunk, 0.0);
      double sq = 0;
      for (size_t j = 0; j < chunk; ++j) {
        for (int r = 0; r < world; ++r) z[j] += sign(y[r][s * chunk + j]) * worker_scale[r] / world;
        z[j] += server_error[s][j];
        sq += z[j] * z[j];
      }
      const double server_scale = std::sqrt(sq) / std::sqrt(static_cast<double>(chunk));
      for (size_t j = 0; j < chunk; ++j) {
        server_error[s][j] = z[j] - server_scale * sign(z[j]);
        out[s * chunk + j] = server_scale * sign(z[j]);
      }
    }
    out.resize(n);
    return out;
  }
};

// Relative error; the denominator is at least floor_rms^2 per element (an error buffer can be all
// roundoff, e.g. over a chunk of padding whose values are all equal).
double rel(const float *got, const std::vector<double> &want, double floor_rms = 0.0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max({den, floor_rms * floor_rms * static_cast<double>(want.size()), 1e-300}));
}

}  // namespace
}  // namespace dsrt
