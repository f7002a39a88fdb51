// defines: the element-wise arithmetic of 1-bit Adam's two stages and the 1-bit compression with
// error feedback (see onebit_adam.h), as OpenMP loops over host memory.
#include "optim/onebit_adam.h"

#include <cmath>
#include <cstring>

#include "optim/onebit_host_slice.h"

namespace dsrt {
namespace {

Status check(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice, bool needs_grad,
             float grad_scale) {
  if (hyper.type != OptimizerType::OneBitAdam && hyper.type != OptimizerType::ZeroOneAdam)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the hyper-parameters are not OneBitAdam's or ZeroOneAdam's", what);
  return check_onebit_slice(what, hyper, slice, needs_grad, grad_scale);
}

}  // namespace

Status onebit_adam_warmup_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale) {
  DSRT_RETURN_IF_ERROR(check("OneBitAdam warm-up step", hyper, slice, true, grad_scale));
  const float b1 = hyper.beta1, b2 = hyper.beta2, omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const float lr = hyper.lr, eps = hyper.eps, wd = hyper.weight_decay;
  const auto *g = static_cast<const float *>(slice.grad);
  float *p = slice.master, *m = slice.state0, *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = mi / (std::sqrt(vi) + eps) + wd * p[i];
    p[i] -= lr * update;
  }
  write_working_copy(slice);
  return Status::Ok();
}

Status onebit_adam_momentum(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale) {
  DSRT_RETURN_IF_ERROR(check("OneBitAdam momentum", hyper, slice, true, grad_scale));
  const float b1 = hyper.beta1, omb1 = 1.0f - b1;
  const auto *g = static_cast<const float *>(slice.grad);
  float *m = slice.state0;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) m[i] = b1 * m[i] + omb1 * (g[i] * grad_scale);
  return Status::Ok();
}

Status onebit_adam_apply(const OptimizerHyper &hyper, const OptimizerSlice &slice) {
  DSRT_RETURN_IF_ERROR(check("OneBitAdam compressed step", hyper, slice, false, 1.0f));
  const float lr = hyper.lr, eps = hyper.eps, wd = hyper.weight_decay;
  float *p = slice.master;
  const float *m = slice.state0, *v = slice.state1;
  const int64_t n = static_cast<int64_t>(slice.n);
#pragma omp parallel for schedule(static) if (slice.n >= kOneBitParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float update = m[i] / (std::sqrt(v[i]) + eps) + wd * p[i];
    p[i] -= lr * update;
  }
  write_working_copy(slice);
  return Status::Ok();
}

double onebit_compress(float *x, float *error, size_t n, uint8_t *packed_signs) {
  const int64_t bytes = static_cast<int64_t>(n / 8);
  double sum_sq = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : sum_sq) if (n >= kOneBitParallelMin)
  for (int64_t k = 0; k < bytes; ++k) {
    double local = 0.0;
    for (int j = 0; j < 8; ++j) {
      const size_t i = static_cast<size_t>(k) * 8 + static_cast<size_t>(j);
      const float y = x[i] + error[i];
      x[i] = y;
      local += static_cast<double>(y) * y;
    }
    sum_sq += local;
  }
  const double scale = n > 0 ? std::sqrt(sum_sq) / std::sqrt(static_cast<double>(n)) : 0.0;
  const float s = static_cast<float>(scale);
#pragma omp parallel for schedule(static) if (n >= kOneBitParallelMin)
  for (int64_t k = 0; k < bytes; ++k) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) {
      const size_t i = static_cast<size_t>(k) * 8 + static_cast<size_t>(j);
      const bool positive = x[i] >= 0.0f;  // 0 counts as +1, as torch.sign(y) + 1 > 0 does
      if (positive) byte = static_cast<uint8_t>(byte | (0x80u >> j));
      error[i] = x[i] - (positive ? s : -s);
    }
    packed_signs[k] = byte;
  }
  return static_cast<double>(s);
}

void onebit_decompress(const uint8_t *packed_signs, float scale, size_t n, float *out, bool accumulate) {
  const int64_t bytes = static_cast<int64_t>(n / 8);
#pragma omp parallel for schedule(static) if (n >= kOneBitParallelMin)
  for (int64_t k = 0; k < bytes; ++k) {
    const uint8_t byte = packed_signs[k];
    for (int j = 0; j < 8; ++j) {
      const size_t i = static_cast<size_t>(k) * 8 + static_cast<size_t>(j);
      const float value = (byte & (0x80u >> j)) ? scale : -scale;
      out[i] = accumulate ? out[i] + value : value;
    }
  }
}

}  // namespace dsrt
