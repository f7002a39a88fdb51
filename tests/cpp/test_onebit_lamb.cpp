// 1-bit LAMB's arithmetic (optim/onebit_lamb.h): a warm-up step computed by hand, the factor and
// trust-ratio clamps by hand, and on random data a warm-up step (which must equal LAMB's) and a
// compression step whose momentum goes through 1-bit compression with error feedback, against a
// float64 recomputation of DeepSpeed's OnebitLamb formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "optim/onebit_adam.h"
#include "optim/onebit_lamb.h"

namespace dsrt {
namespace {

OptimizerHyper hyper(double lr, double b1, double b2, double eps, double wd) {
  OptimizerHyper h;
  h.type = OptimizerType::OneBitLamb;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(b1);
  h.beta2 = static_cast<float>(b2);
  h.eps = static_cast<float>(eps);
  h.weight_decay = static_cast<float>(wd);
  h.max_coeff = 10.0f;
  h.min_coeff = 0.01f;
  return h;
}

std::vector<double> gaussian(uint32_t seed, size_t n, double mean, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(mean, scale);
  std::vector<double> out(n);
  for (double &x : out) x = static_cast<float>(dist(rng));
  return out;
}

double rel(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double norm(const std::vector<double> &x) {
  double sq = 0;
  for (double v : x) sq += v * v;
  return std::sqrt(sq);
}

TEST(OneBitLamb, TrustRatioAndFactorClampsByHand) {
  EXPECT_DOUBLE_EQ(onebit_lamb_trust_ratio(3.0, 4.0, 0.01, 10.0), 0.75);
  EXPECT_DOUBLE_EQ(onebit_lamb_trust_ratio(0.0, 4.0, 0.01, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(onebit_lamb_trust_ratio(3.0, 0.0, 0.01, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(onebit_lamb_trust_ratio(100.0, 1.0, 0.01, 10.0), 10.0);
  EXPECT_DOUBLE_EQ(onebit_lamb_trust_ratio(1.0, 1000.0, 0.01, 10.0), 0.01);
  const OneBitLambParams p;  // factor in [0.5, 4], at most 10% from the last one
  // max ratio 3, |q| = 2, |u| = 4: a = 0.5, f = 3 * 0.5 + 0.5 = 2; from 1 only up to 1.1.
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(3.0, 4.0, 16.0, true, p, 1.0), 1.1);
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(3.0, 4.0, 16.0, true, p, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(3.0, 4.0, 16.0, false, p, 2.0), 2.2);   // 3 without weight decay
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(10.0, 1.0, 1.0, false, p, 4.0), 4.0);   // factor_max
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(0.1, 1.0, 1.0, false, p, 0.5), 0.5);    // factor_min
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(0.1, 1.0, 1.0, false, p, 1.0), 0.9);    // down at most 10%
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(2.0, 9.0, 4.0, true, p, 2.0), 2.0);     // a = min(1, 3/2) = 1
  EXPECT_DOUBLE_EQ(onebit_lamb_factor(2.0, 0.0, 0.0, true, p, 2.0), 2.0);     // |u| = 0: a = 1
}

TEST(OneBitLamb, WarmUpStepByHand) {
  // p = (3, 4), g = (1, -1), b1 0.9, b2 0.99, eps 0, wd 0, lr 0.1: m = (0.1, -0.1), v = (0.01, 0.01),
  // u = (1, -1), |p| / |u| = 5 / sqrt(2), p -= 0.1 * 5 / sqrt(2) * u; coeff_freeze = 0.1 * 5 / sqrt(2).
  std::vector<float> p = {3, 4}, g = {1, -1}, m = {0, 0}, v = {0, 0}, fresh = {-1, -1};
  OptimizerSlice s;
  s.master = p.data(), s.grad = g.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = 2;
  OneBitLambTensorState state;
  double c = 0;
  ASSERT_TRUE(onebit_lamb_warmup_step(hyper(0.1, 0.9, 0.99, 0.0, 0.0), OneBitLambParams{}, s, 1.0f, fresh.data(), true,
                                      &state, &c)
                  .ok());
  const double ratio = 5.0 / std::sqrt(2.0);
  EXPECT_NEAR(c, ratio, 1e-5);
  EXPECT_NEAR(state.coeff_freeze, 0.1 * ratio, 1e-6);
  EXPECT_NEAR(p[0], 3 - 0.1 * ratio, 2e-6);
  EXPECT_NEAR(p[1], 4 + 0.1 * ratio, 2e-6);
  EXPECT_NEAR(m[0], 0.1, 1e-7);
  EXPECT_NEAR(v[1], 0.01, 1e-8);
  EXPECT_EQ(fresh[0], v[0]);  // captured on the freeze step
  EXPECT_EQ(state.last_factor, 1.0);
}

// Warm-up then compression on 1000 random elements against float64.
TEST(OneBitLamb, WarmUpAndCompressionStepsMatchFloat64) {
  const size_t n = 1000;
  const double lr = 0.02, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, coeff_beta = 0.9;
  const OptimizerHyper h = hyper(lr, b1, b2, eps, wd);
  std::vector<double> P = gaussian(1, n, 0, 0.5), M = gaussian(2, n, 0, 0.1), V = gaussian(3, n, 0, 0.1);
  for (double &x : V) x = static_cast<float>(x * x + 1e-3);
  std::vector<float> p(P.begin(), P.end()), m(M.begin(), M.end()), v(V.begin(), V.end()), fresh(n, 0.0f);
  const std::vector<double> G1 = gaussian(4, n, 0.05, 0.3), G2 = gaussian(5, n, 0.05, 0.3);
  std::vector<float> g1(G1.begin(), G1.end()), g2(G2.begin(), G2.end());
  OneBitLambTensorState state;
  state.coeff_freeze = 0.5;
  OptimizerSlice s;
  s.master = p.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = n;
  const float grad_scale = 0.5f;

  // Warm-up: LAMB without bias correction.
  s.grad = g1.data();
  double c = 0;
  ASSERT_TRUE(onebit_lamb_warmup_step(h, OneBitLambParams{}, s, grad_scale, fresh.data(), true, &state, &c).ok());
  std::vector<double> U(n), F(n);
  for (size_t i = 0; i < n; ++i) {
    const double gi = G1[i] * 0.5;
    M[i] = b1 * M[i] + (1 - b1) * gi;
    V[i] = b2 * V[i] + (1 - b2) * gi * gi;
    F[i] = V[i];
    U[i] = M[i] / (std::sqrt(V[i]) + eps) + wd * P[i];
  }
  const double want_c = std::min(10.0, std::max(0.01, norm(P) / norm(U)));
  for (size_t i = 0; i < n; ++i) P[i] -= lr * want_c * U[i];
  const double want_freeze = coeff_beta * 0.5 + (1 - coeff_beta) * want_c;
  EXPECT_NEAR(c, want_c, 1e-5 * want_c);
  EXPECT_NEAR(state.coeff_freeze, want_freeze, 1e-5 * want_freeze);
  EXPECT_LT(rel(p, P), 1e-6);
  EXPECT_LT(rel(m, M), 1e-6);
  EXPECT_LT(rel(v, V), 1e-5);
  EXPECT_LT(rel(fresh, F), 1e-5);

  // Compression: momentum scaled, 1-bit compressed with error feedback (one rank's worker side:
  // the vector becomes scale * sign(y), y = m + error), unscaled, then the step.
  state.scaling_coeff = 1.7;
  const std::vector<float> v_frozen = v;
  const double sc = static_cast<float>(state.scaling_coeff);
  std::vector<float> last(n), error(n), err0(n);
  const std::vector<double> E0 = gaussian(6, n, 0, 0.01);
  for (size_t i = 0; i < n; ++i) error[i] = err0[i] = static_cast<float>(E0[i]);
  s.grad = g2.data();
  ASSERT_TRUE(onebit_lamb_momentum(h, s, grad_scale, static_cast<float>(sc), last.data()).ok());
  std::vector<double> Last = M, Y(n);
  double ysq = 0;
  for (size_t i = 0; i < n; ++i) {
    Y[i] = (b1 * M[i] + (1 - b1) * G2[i] * 0.5) * sc + E0[i];
    ysq += Y[i] * Y[i];
  }
  EXPECT_LT(rel(last, Last), 1e-7);
  std::vector<uint8_t> signs(n / 8);
  const float scale = static_cast<float>(onebit_compress(m.data(), error.data(), n, signs.data()));
  onebit_decompress(signs.data(), scale, n, m.data(), false);
  const double want_scale = std::sqrt(ysq / n);
  EXPECT_NEAR(scale, want_scale, 1e-5 * want_scale);
  std::vector<double> Err(n);
  for (size_t i = 0; i < n; ++i) {
    const double sgn = Y[i] >= 0 ? 1.0 : -1.0;
    Err[i] = Y[i] - want_scale * sgn;
    M[i] = want_scale * sgn;
  }
  EXPECT_LT(rel(error, Err), 1e-5);
  const double last_factor = state.last_factor;
  ASSERT_TRUE(onebit_lamb_apply(h, OneBitLambParams{}, s, last.data(), fresh.data(), &state, &c).ok());
  std::vector<double> Q(n);
  double max_ratio = 0;
  for (size_t i = 0; i < n; ++i) {
    M[i] /= sc;
    const double r = (M[i] - Last[i] * b1) / (1 - b1);
    F[i] = b2 * F[i] + (1 - b2) * r * r;
    const double d = std::sqrt(V[i]) + eps;
    Q[i] = M[i] / d;
    U[i] = Q[i] + wd * P[i];
    max_ratio = std::max(max_ratio, d / (std::sqrt(F[i]) + eps));
  }
  const double a = std::min(1.0, norm(Q) / norm(U));
  double f = std::min(4.0, std::max(0.5, max_ratio * a + 1 - a));
  f = std::min(last_factor * 1.1, std::max(last_factor * 0.9, f));
  for (size_t i = 0; i < n; ++i) P[i] -= lr * want_freeze * f * U[i];
  EXPECT_NEAR(state.last_factor, f, 1e-5 * f);
  EXPECT_NEAR(c, want_freeze * f, 1e-5 * want_freeze * f);
  EXPECT_LT(rel(m, M), 1e-6);
  EXPECT_LT(rel(fresh, F), 1e-5);
  EXPECT_LT(rel(p, P), 1e-6);
  EXPECT_EQ(v, v_frozen) << "v must stay frozen";
}

TEST(OneBitLamb, BadArgumentsAreRefused) {
  std::vector<float> p = {1}, g = {1}, m = {0}, v = {0}, last = {0};
  OptimizerSlice s;
  s.master = p.data(), s.grad = g.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = 1;
  OneBitLambTensorState state;
  OptimizerHyper adam = hyper(0.1, 0.9, 0.99, 1e-8, 0);
  adam.type = OptimizerType::Adam;
  EXPECT_EQ(onebit_lamb_warmup_step(adam, {}, s, 1.0f, nullptr, false, &state, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  const OptimizerHyper h = hyper(0.1, 0.9, 0.99, 1e-8, 0);
  EXPECT_EQ(onebit_lamb_warmup_step(h, {}, s, NAN, nullptr, false, &state, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(onebit_lamb_warmup_step(h, {}, s, 1.0f, nullptr, true, &state, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(onebit_lamb_momentum(h, s, 1.0f, 0.0f, last.data()).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(onebit_lamb_momentum(h, s, 1.0f, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(onebit_lamb_apply(h, {}, s, last.data(), nullptr, &state, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  s.state1 = nullptr;
  EXPECT_EQ(onebit_lamb_apply(h, {}, s, last.data(), last.data(), &state, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dsrt
