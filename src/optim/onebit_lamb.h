// onebit_lamb.h -- the arithmetic of DeepSpeed's 1-bit LAMB (OnebitLamb, arXiv:2104.06069) on
// host memory, one parameter tensor at a time (its trust ratio needs whole-tensor norms). The
// compressed all-reduce of the momentum between the two compression-stage calls is
// zero/compressed_allreduce.h's, over every tensor's momentum in one vector.
//
// For g = grad * grad_scale, per tensor (no bias correction in either stage, as in DeepSpeed):
//   warm-up (gradients all-reduced):
//     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  fresh = v on the step t == freeze_step;
//     u = m / (sqrt(v) + eps) + wd p   (the wd term only when wd > 0);
//     c = clamp(|p| / |u|, min_coeff, max_coeff), 1 when either norm is 0 (|p| before the update);
//     if c != 1: coeff_freeze = coeff_beta coeff_freeze + (1 - coeff_beta) c;   p -= lr c u
//   compression (g local to the rank), at its first step the scaling coefficients are fixed:
//     s_t = mean_k(|m_k| / sqrt(n_k)) / (|m_t| / sqrt(n_t)) over every tensor k (1 when |m_t| = 0);
//     m_last = m;  m = (b1 m + (1-b1) g) s;  m = compressed_allreduce(m);  m = m / s;
//     r = (m - b1 m_last) / (1-b1);  fresh = b2 fresh + (1-b2) r^2;
//     d = sqrt(v) + eps;  q = m / d;  u = q + wd p;
//     f = max_i(d_i / (sqrt(fresh_i) + eps));  if wd > 0: a = min(1, |q| / |u|), f = f a + 1 - a;
//     f = clamp(f, factor_min, factor_max), then into last_factor (1 -+ factor_threshold);
//     last_factor = f;  p -= lr (coeff_freeze f) u        (v stays frozen)
// Sums of squares and the maximum are accumulated in double; element arithmetic is fp32.
#pragma once

#include <cstddef>

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

// The keys of OneBitLamb that OptimizerHyper does not carry (DeepSpeed's defaults).
struct OneBitLambParams {
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
};

// Per parameter tensor: DeepSpeed's state['lamb_coeff_freeze'], ['last_factor'], ['scaling_coeff'].
struct OneBitLambTensorState {
  double coeff_freeze = 0.0;
  double last_factor = 1.0;
  double scaling_coeff = 1.0;  // fixed at the first compression step
};

// The trust ratio of the warm-up stage: clamp(param_norm / update_norm, min, max), 1 when either is 0.
double onebit_lamb_trust_ratio(double param_norm, double update_norm, double min_coeff, double max_coeff);

// The factor of a compression step from max_i(d_i / d_real_i), |q|^2 and |u|^2, with the clamps
// and last_factor's threshold (see above). Does not store it.
double onebit_lamb_factor(double max_ratio, double prelim_sq, double update_sq, bool weight_decay,
                          const OneBitLambParams &params, double last_factor);

// Warm-up step over one whole tensor (slice: master, state0 = m, state1 = v, fp32 grad). fresh
// (slice.n floats) receives v when capture_fresh is set. Updates state.coeff_freeze; *coeff_out
// (optional) receives the trust ratio applied. Then the working copy when slice.working is set.
Status onebit_lamb_warmup_step(const OptimizerHyper &hyper, const OneBitLambParams &params, const OptimizerSlice &slice,
                               float grad_scale, float *fresh, bool capture_fresh, OneBitLambTensorState *state,
                               double *coeff_out);

// |m| / sqrt(n) of one tensor's momentum (DeepSpeed's momentum scale at the end of the warm-up).
double onebit_lamb_momentum_scale(const float *m, size_t n);

// Compression stage, before the all-reduce: last = m; m = (b1 m + (1-b1) grad * grad_scale) * scaling.
Status onebit_lamb_momentum(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                            float scaling, float *last);

// Compression stage, after the all-reduce (state0 holds the all-reduced, scaled momentum): the
// rest of the step above; updates fresh, state.last_factor and the master, then the working copy.
Status onebit_lamb_apply(const OptimizerHyper &hyper, const OneBitLambParams &params, const OptimizerSlice &slice,
                         const float *last, float *fresh, OneBitLambTensorState *state, double *coeff_out);

}  // namespace dsrt
