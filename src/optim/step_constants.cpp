// defines: the shared folding of optimizer hyper-parameters into per-step constants (see
// step_constants.h); used by the CPU kernels' entry points and the CUDA launchers.
#include "optim/step_constants.h"

#include <cmath>

namespace dsrt {

const char *optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam: return "Adam";
    case OptimizerType::AdamW: return "AdamW";
    case OptimizerType::SGD: return "SGD";
    case OptimizerType::Lamb: return "Lamb";
    case OptimizerType::Adagrad: return "Adagrad";
    case OptimizerType::Lion: return "Lion";
    case OptimizerType::OneBitAdam: return "OneBitAdam";
    case OptimizerType::ZeroOneAdam: return "ZeroOneAdam";
    case OptimizerType::OneBitLamb: return "OneBitLamb";
  }
  return "unknown";
}

double optimizer_bias_correction(bool enabled, double beta, int64_t step) {
  return enabled ? 1.0 - std::pow(beta, static_cast<double>(step)) : 1.0;
}

namespace {

Status check_common(const char *what, const OptimizerHyper &hyper, float grad_scale) {
  if (hyper.step < 1)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: step is %lld; it counts updates including this one, so it starts at 1",
                 what, static_cast<long long>(hyper.step));
  if (!std::isfinite(hyper.lr)) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the learning rate is not finite", what);
  if (!std::isfinite(grad_scale))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: grad_scale is %g; skip the step on overflow instead", what,
                 static_cast<double>(grad_scale));
  return Status::Ok();
}

}  // namespace

Status fold_step_constants(const char *what, const OptimizerHyper &hyper, float grad_scale, StepConstants *out) {
  DSRT_RETURN_IF_ERROR(check_common(what, hyper, grad_scale));
  StepConstants c;
  c.grad_scale = grad_scale;
  c.lr = hyper.lr;
  const double lr = hyper.lr, wd = hyper.weight_decay;
  switch (hyper.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: {
      const bool decoupled = hyper.type == OptimizerType::AdamW || hyper.adam_w_mode;
      c.states = 2;
      c.beta1 = hyper.beta1;
      c.beta2 = hyper.beta2;
      c.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
      c.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
      c.eps = hyper.eps;
      c.l2_decay = decoupled ? 0.0f : hyper.weight_decay;
      c.keep_factor = decoupled ? static_cast<float>(1.0 - lr * wd) : 1.0f;
      c.step_size = static_cast<float>(lr / optimizer_bias_correction(hyper.bias_correction, hyper.beta1, hyper.step));
      c.inv_sqrt_bc2 = static_cast<float>(
          1.0 / std::sqrt(optimizer_bias_correction(hyper.bias_correction, hyper.beta2, hyper.step)));
      break;
    }
    case OptimizerType::SGD:
      if (hyper.nesterov && (hyper.momentum <= 0.0f || hyper.dampening != 0.0f))
        return Error(DSRT_ERR_INVALID_ARGUMENT,
                     "SGD: nesterov momentum requires momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                     static_cast<double>(hyper.momentum), static_cast<double>(hyper.dampening));
      c.states = hyper.momentum != 0.0f ? 1 : 0;
      c.l2_decay = hyper.weight_decay;
      c.momentum = hyper.momentum;
      c.one_minus_dampening = static_cast<float>(1.0 - hyper.dampening);
      c.nesterov = hyper.nesterov;
      c.first_step = hyper.step == 1;
      break;
    case OptimizerType::Adagrad:
      c.states = 1;
      c.l2_decay = hyper.weight_decay;
      c.eps = hyper.eps;
      break;
    case OptimizerType::Lion:
      c.states = 1;
      c.beta1 = hyper.beta1;
      c.beta2 = hyper.beta2;
      c.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
      c.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
      c.keep_factor = static_cast<float>(1.0 - lr * wd);
      break;
    case OptimizerType::Lamb:
      return Error(DSRT_ERR_INVALID_ARGUMENT,
                   "%s: Lamb needs whole-tensor norms: run Lamb phase 1, all-reduce the norms, then phase 2", what);
    case OptimizerType::OneBitAdam:
    case OptimizerType::ZeroOneAdam:
    case OptimizerType::OneBitLamb:
      return Error(DSRT_ERR_UNSUPPORTED, "%s: %s is not one of the fused kernels; the engine runs its own steps "
                   "(optim/onebit_dispatch.h, optim/onebit_lamb.h)",
                   what, optimizer_type_name(hyper.type));
    default:
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: unknown optimizer type %d", what, static_cast<int>(hyper.type));
  }
  *out = c;
  return Status::Ok();
}

Status fold_lamb_phase1_constants(const char *what, const OptimizerHyper &hyper, float grad_scale, StepConstants *out) {
  DSRT_RETURN_IF_ERROR(check_common(what, hyper, grad_scale));
  StepConstants c;
  c.states = 2;
  c.grad_scale = grad_scale;
  c.lr = hyper.lr;
  c.beta1 = hyper.beta1;
  c.beta2 = hyper.beta2;
  c.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  c.eps = hyper.eps;
  c.decoupled_decay = hyper.weight_decay;
  *out = c;
  return Status::Ok();
}

double lamb_step_size(const OptimizerHyper &hyper) {
  if (!hyper.bias_correction) return hyper.lr;
  return hyper.lr * std::sqrt(optimizer_bias_correction(true, hyper.beta2, hyper.step)) /
         optimizer_bias_correction(true, hyper.beta1, hyper.step);
}

double lamb_trust_ratio(const OptimizerHyper &hyper, double param_norm, double update_norm) {
  double trust = 1.0;
  if (param_norm != 0.0 && update_norm != 0.0) {
    trust = param_norm / update_norm;
    if (trust > hyper.max_coeff) trust = hyper.max_coeff;
    if (trust < hyper.min_coeff) trust = hyper.min_coeff;
  }
  return trust;
}

}  // namespace dsrt
