// defines: the element-wise arithmetic of 1-bit LAMB's two stages and its per-tensor scalars
// (see onebit_lamb.h), as OpenMP loops over host memory.
#include "optim/onebit_lamb.h"

#include <algorithm>
#include <cmath>

#include "optim/onebit_host_slice.h"

namespace dsrt {
namespace {

Status check(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice, bool needs_grad,
             float grad_scale) {
  if (hyper.type != OptimizerType::OneBitLamb)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the hyper-parameters are not OneBitLamb's", what);
  return check_onebit_slice(what, hyper, slice, needs_grad, grad_scale);
}

// p -= step * (m / (sqrt(v) + eps) + wd p), the update recomputed from the unchanged p.
void apply_update(const OptimizerHyper &hyper, const OptimizerSlice &slice, float step) {
  const float eps = hyper.eps, wd = hyper.weight_decay > 0.0f ? hyper.weight_decay : 0.0f;
  float *p = slice.master;
  const float *m = slice.state0, *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float u = m[i] / (std::sqrt(v[i]) + eps) + wd * p[i];
    p[i] -= step * u;
  }
}

}  // namespace

double onebit_lamb_trust_ratio(double param_norm, double update_norm, double min_coeff, double max_coeff) {
  if (param_norm == 0.0 || update_norm == 0.0) return 1.0;
  double c = param_norm / update_norm;
  if (c > max_coeff) c = max_coeff;
  if (c < min_coeff) c = min_coeff;
  return c;
}

double onebit_lamb_factor(double max_ratio, double prelim_sq, double update_sq, bool weight_decay,
                          const OneBitLambParams &params, double last_factor) {
  double f = max_ratio;
  if (weight_decay) {
    // |u| = 0 gives 0/0 in DeepSpeed, which min(1.0, nan) turns into 1.
    const double a = update_sq > 0.0 ? std::min(1.0, std::sqrt(prelim_sq) / std::sqrt(update_sq)) : 1.0;
    f = f * a + (1.0 - a);
  }
  if (f > params.factor_max) f = params.factor_max;
  if (f < params.factor_min) f = params.factor_min;
  if (f > last_factor * (1.0 + params.factor_threshold)) f = last_factor * (1.0 + params.factor_threshold);
  if (f < last_factor * (1.0 - params.factor_threshold)) f = last_factor * (1.0 - params.factor_threshold);
  return f;
}

Status onebit_lamb_warmup_step(const OptimizerHyper &hyper, const OneBitLambParams &params, const OptimizerSlice &slice,
                               float grad_scale, float *fresh, bool capture_fresh, OneBitLambTensorState *state,
                               double *coeff_out) {
  DSRT_RETURN_IF_ERROR(check("OneBitLamb warm-up step", hyper, slice, true, grad_scale));
  if (state == nullptr || (capture_fresh && slice.n > 0 && fresh == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "OneBitLamb warm-up step: the tensor state (and fresh, when captured) is required");
  const float b1 = hyper.beta1, b2 = hyper.beta2, omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const float eps = hyper.eps, wd = hyper.weight_decay > 0.0f ? hyper.weight_decay : 0.0f;
  const auto *g = static_cast<const float *>(slice.grad);
  float *p = slice.master, *m = slice.state0, *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
  double p_sq = 0.0, u_sq = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : p_sq, u_sq) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    if (capture_fresh) fresh[i] = vi;
    const float u = mi / (std::sqrt(vi) + eps) + wd * p[i];
    p_sq += static_cast<double>(p[i]) * p[i];
    u_sq += static_cast<double>(u) * u;
  }
  const double c = onebit_lamb_trust_ratio(std::sqrt(p_sq), std::sqrt(u_sq), hyper.min_coeff, hyper.max_coeff);
  if (c != 1.0) state->coeff_freeze = params.coeff_beta * state->coeff_freeze + (1.0 - params.coeff_beta) * c;
  apply_update(hyper, slice, static_cast<float>(static_cast<double>(hyper.lr) * c));
  write_working_copy(slice);
  if (coeff_out != nullptr) *coeff_out = c;
  return Status::Ok();
}

double onebit_lamb_momentum_scale(const float *m, size_t n) {
  if (n == 0) return 0.0;
  double sq = 0.0;
  const int64_t count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) reduction(+ : sq) if (n >= kOneBitParallelMin)
  for (int64_t i = 0; i < count; ++i) sq += static_cast<double>(m[i]) * m[i];
  return std::sqrt(sq) / std::sqrt(static_cast<double>(n));
}

Status onebit_lamb_momentum(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                            float scaling, float *last) {
  DSRT_RETURN_IF_ERROR(check("OneBitLamb momentum", hyper, slice, true, grad_scale));
  if (slice.n > 0 && last == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "OneBitLamb momentum: the buffer for the previous momentum is required");
  if (!std::isfinite(scaling) || scaling <= 0.0f)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "OneBitLamb momentum: the scaling coefficient %g is not a positive number",
                 static_cast<double>(scaling));
  const float b1 = hyper.beta1, omb1 = 1.0f - b1;
  const auto *g = static_cast<const float *>(slice.grad);
  float *m = slice.state0;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    last[i] = m[i];
    m[i] = (b1 * m[i] + omb1 * (g[i] * grad_scale)) * scaling;
  }
  return Status::Ok();
}

Status onebit_lamb_apply(const OptimizerHyper &hyper, const OneBitLambParams &params, const OptimizerSlice &slice,
                         const float *last, float *fresh, OneBitLambTensorState *state, double *coeff_out) {
  DSRT_RETURN_IF_ERROR(check("OneBitLamb compressed step", hyper, slice, false, 1.0f));
  if (state == nullptr || (slice.n > 0 && (last == nullptr || fresh == nullptr)))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "OneBitLamb compressed step: the tensor state, previous momentum and fresh "
                 "variance are required");
  const float scaling = static_cast<float>(state->scaling_coeff);
  const float b1 = hyper.beta1, b2 = hyper.beta2, omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const float eps = hyper.eps, wd = hyper.weight_decay > 0.0f ? hyper.weight_decay : 0.0f;
  const float *p = slice.master, *v = slice.state1;
  float *m = slice.state0;
  const int64_t n = static_cast<int64_t>(slice.n);
  double q_sq = 0.0, u_sq = 0.0, max_ratio = -INFINITY;
#pragma omp parallel for schedule(static) reduction(+ : q_sq, u_sq) reduction(max : max_ratio) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float mi = m[i] / scaling;
    m[i] = mi;
    const float r = (mi - last[i] * b1) / omb1;
    const float fi = b2 * fresh[i] + omb2 * r * r;
    fresh[i] = fi;
    const float d = std::sqrt(v[i]) + eps;
    const float q = mi / d;
    const float u = q + wd * p[i];
    const float ratio = d / (std::sqrt(fi) + eps);
    q_sq += static_cast<double>(q) * q;
    u_sq += static_cast<double>(u) * u;
    max_ratio = std::max(max_ratio, static_cast<double>(ratio));
  }
  if (n == 0) max_ratio = 1.0;
  const double f = onebit_lamb_factor(max_ratio, q_sq, u_sq, wd > 0.0f, params, state->last_factor);
  state->last_factor = f;
  const double c = state->coeff_freeze * f;
  apply_update(hyper, slice, static_cast<float>(static_cast<double>(hyper.lr) * c));
  write_working_copy(slice);
  if (coeff_out != nullptr) *coeff_out = c;
  return Status::Ok();
}

}  // namespace dsrt
