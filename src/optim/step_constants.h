// step_constants.h -- the per-step constants of every optimizer, folded once from OptimizerHyper
// and grad_scale in double precision and rounded to float once. The CPU kernels (StepArgs in
// kernel_table.h) and the CUDA kernels (cuda/fused_optimizers.cu) both copy these numbers, so the
// two compute from identical constants and cannot drift apart.
#pragma once

#include <cstdint>

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

struct StepConstants {
  float grad_scale = 1.0f;
  float lr = 0.0f;
  float beta1 = 0.0f, beta2 = 0.0f;
  float one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f;
  float eps = 0.0f;
  float l2_decay = 0.0f;         // added to the gradient as l2_decay * p (Adam L2 mode, SGD, Adagrad)
  float decoupled_decay = 0.0f;  // Lamb phase 1: wd * p added to the update
  float keep_factor = 1.0f;      // AdamW / Lion: p *= 1 - lr * wd before the update
  float step_size = 0.0f;        // Adam: lr / (1 - beta1^t)
  float inv_sqrt_bc2 = 1.0f;     // Adam: 1 / sqrt(1 - beta2^t)
  float momentum = 0.0f;         // SGD
  float one_minus_dampening = 1.0f;
  bool nesterov = false;
  bool first_step = false;       // SGD: the momentum buffer starts as a copy of the gradient
  int states = 0;                // fp32 state arrays each slice must provide (state0, state1)
};

// 1 - beta^step, or 1 without bias correction.
double optimizer_bias_correction(bool enabled, double beta, int64_t step);

// Adam/AdamW, SGD, Adagrad and Lion: validates the type and its hyper-parameters (SGD's nesterov
// rule, a finite learning rate and grad_scale, step >= 1) and folds the constants. Lamb is
// INVALID_ARGUMENT (it runs in two phases), OneBitAdam UNSUPPORTED. `what` prefixes messages.
Status fold_step_constants(const char *what, const OptimizerHyper &hyper, float grad_scale, StepConstants *out);

// Lamb phase 1 (Adam-style update without bias correction plus decoupled weight decay).
Status fold_lamb_phase1_constants(const char *what, const OptimizerHyper &hyper, float grad_scale, StepConstants *out);

// Lamb phase 2: the step size before the trust ratio (lr * sqrt(1 - beta2^t) / (1 - beta1^t), or
// lr without bias correction), and the trust ratio clamp(|p|/|u|, min_coeff, max_coeff), 1 when
// either norm is 0.
double lamb_step_size(const OptimizerHyper &hyper);
double lamb_trust_ratio(const OptimizerHyper &hyper, double param_norm, double update_norm);

// The optimizer's display name ("AdamW", "Lamb", ...).
const char *optimizer_type_name(OptimizerType type);

}  // namespace dsrt
