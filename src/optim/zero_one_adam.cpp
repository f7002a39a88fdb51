// defines: the local step and the sync arithmetic of 0/1 Adam (see zero_one_adam.h), as OpenMP
// loops over host memory.
#include "optim/zero_one_adam.h"

#include <cmath>

#include "optim/onebit_host_slice.h"

namespace dsrt {
namespace {

Status check(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice, const float *accumulator) {
  if (hyper.type != OptimizerType::ZeroOneAdam)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the hyper-parameters are not ZeroOneAdam's", what);
  if (slice.n == 0) return Status::Ok();
  if (slice.master == nullptr || slice.state0 == nullptr || slice.state1 == nullptr || accumulator == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "%s: master, exp_avg (state0), exp_avg_sq (state1) and the accumulator u are required", what);
  if (!std::isfinite(hyper.lr)) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the learning rate is not finite", what);
  return Status::Ok();
}

}  // namespace

Status zero_one_adam_local_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                                float *accumulator) {
  DSRT_RETURN_IF_ERROR(check("ZeroOneAdam local step", hyper, slice, accumulator));
  if (slice.n == 0) return Status::Ok();
  if (slice.grad == nullptr || slice.grad_dtype != DSRT_F32)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "ZeroOneAdam local step: an fp32 gradient is required");
  if (!std::isfinite(grad_scale))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "ZeroOneAdam local step: grad_scale is %g; skip the step on overflow instead",
                 static_cast<double>(grad_scale));
  const float b1 = hyper.beta1, omb1 = 1.0f - b1, lr = hyper.lr, eps = hyper.eps, wd = hyper.weight_decay;
  const auto *g = static_cast<const float *>(slice.grad);
  float *p = slice.master, *m = slice.state0, *u = accumulator;
  const float *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float mi = b1 * m[i] + omb1 * (g[i] * grad_scale);
    m[i] = mi;
    const float step = lr * (mi / (std::sqrt(v[i]) + eps) + wd * p[i]);
    p[i] -= step;
    u[i] -= step;
  }
  write_working_copy(slice);
  return Status::Ok();
}

Status zero_one_adam_sync_begin(const OptimizerHyper &hyper, const OptimizerSlice &slice, float *accumulator) {
  DSRT_RETURN_IF_ERROR(check("ZeroOneAdam sync", hyper, slice, accumulator));
  const float eps = hyper.eps;
  float *p = slice.master, *u = accumulator;
  const float *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    p[i] -= u[i];
    u[i] *= std::sqrt(v[i]) + eps;
  }
  return Status::Ok();
}

Status zero_one_adam_sync_end(const OptimizerHyper &hyper, const OptimizerSlice &slice, float *accumulator, double lrs) {
  DSRT_RETURN_IF_ERROR(check("ZeroOneAdam sync", hyper, slice, accumulator));
  const float eps = hyper.eps;
  const float inv_lrs = lrs > 0.0 ? static_cast<float>(1.0 / lrs) : 0.0f;
  float *p = slice.master, *m = slice.state0, *u = accumulator;
  const float *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = -u[i] * inv_lrs;
    p[i] += u[i] / (std::sqrt(v[i]) + eps);
    u[i] = 0.0f;
  }
  write_working_copy(slice);
  return Status::Ok();
}

}  // namespace dsrt
