// onebit.cu -- see onebit.h: grid-stride loops over the elements with the CPU loops' fp32
// operations in the same order, each explicitly rounded (__fmul_rn, __fadd_rn...) so that no
// contraction changes a result; block sums in double through shared memory, then one double
// atomic per block; the per-tensor scalars of 1-bit LAMB computed by a single thread on the device.
#include <cmath>
#include <initializer_list>

#include "cuda/cuda_common.cuh"
#include "cuda/onebit.h"

namespace dsrt {
namespace cuda_kernels {
namespace {

#define DSRT_GRID_STRIDE(i, n) \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<size_t>(gridDim.x) * blockDim.x)

__device__ inline float f_add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float f_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float f_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float f_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float f_sqrt(float a) { return __fsqrt_rn(a); }

// Adds this block's values of x into *out (thread 0, one atomic). Every thread must call it.
__device__ inline void block_add_f64(double x, double *out) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = x;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
  __syncthreads();
}

// max over the block of non-negative x into *out (IEEE order of non-negative doubles is their bit order).
__device__ inline void block_max_f64(double x, double *out) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = x;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicMax(reinterpret_cast<unsigned long long *>(out), static_cast<unsigned long long>(__double_as_longlong(part[0])));
  __syncthreads();
}

// The Adam-style update m / (sqrt(v) + eps) + wd p.
__device__ inline float adam_update(float m, float v, float p, float eps, float wd) {
  return f_add(f_div(m, f_add(f_sqrt(v), eps)), f_mul(wd, p));
}

__global__ void __launch_bounds__(kThreads) adam_warmup_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                                                CudaOneBitArgs a) {
  const float omb1 = f_sub(1.0f, a.beta1), omb2 = f_sub(1.0f, a.beta2);
  DSRT_GRID_STRIDE(i, n) {
    const float gi = f_mul(g[i], a.grad_scale);
    const float mi = f_add(f_mul(a.beta1, m[i]), f_mul(omb1, gi));
    const float vi = f_add(f_mul(a.beta2, v[i]), f_mul(f_mul(omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    p[i] = f_sub(p[i], f_mul(a.lr, adam_update(mi, vi, p[i], a.eps, a.weight_decay)));
  }
}

__global__ void __launch_bounds__(kThreads) adam_momentum_kernel(const float *g, float *m, size_t n, CudaOneBitArgs a) {
  const float omb1 = f_sub(1.0f, a.beta1);
  DSRT_GRID_STRIDE(i, n) m[i] = f_add(f_mul(a.beta1, m[i]), f_mul(omb1, f_mul(g[i], a.grad_scale)));
}

__global__ void __launch_bounds__(kThreads) adam_apply_kernel(float *p, const float *m, const float *v, size_t n,
                                                               CudaOneBitArgs a) {
  DSRT_GRID_STRIDE(i, n) p[i] = f_sub(p[i], f_mul(a.lr, adam_update(m[i], v[i], p[i], a.eps, a.weight_decay)));
}

__global__ void __launch_bounds__(kThreads) zero_one_local_kernel(float *p, const float *g, float *m, const float *v,
                                                                   float *u, size_t n, CudaOneBitArgs a) {
  const float omb1 = f_sub(1.0f, a.beta1);
  DSRT_GRID_STRIDE(i, n) {
    const float mi = f_add(f_mul(a.beta1, m[i]), f_mul(omb1, f_mul(g[i], a.grad_scale)));
    m[i] = mi;
    const float step = f_mul(a.lr, adam_update(mi, v[i], p[i], a.eps, a.weight_decay));
    p[i] = f_sub(p[i], step);
    u[i] = f_sub(u[i], step);
  }
}

__global__ void __launch_bounds__(kThreads) zero_one_sync_begin_kernel(float *p, const float *v, float *u, size_t n,
                                                                        float eps) {
  DSRT_GRID_STRIDE(i, n) {
    p[i] = f_sub(p[i], u[i]);
    u[i] = f_mul(u[i], f_add(f_sqrt(v[i]), eps));
  }
}

__global__ void __launch_bounds__(kThreads) zero_one_sync_end_kernel(float *p, float *m, const float *v, float *u,
                                                                      size_t n, float eps, float inv_lrs) {
  DSRT_GRID_STRIDE(i, n) {
    m[i] = f_mul(-u[i], inv_lrs);
    p[i] = f_add(p[i], f_div(u[i], f_add(f_sqrt(v[i]), eps)));
    u[i] = 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) add_error_kernel(float *x, const float *e, size_t n, double *sum_sq) {
  double local = 0.0;
  DSRT_GRID_STRIDE(i, n) {
    const float y = f_add(x[i], e[i]);
    x[i] = y;
    local += static_cast<double>(y) * y;
  }
  block_add_f64(local, sum_sq);
}

__global__ void __launch_bounds__(kThreads) sum_squares_kernel(const float *x, size_t n, double *sum_sq) {
  double local = 0.0;
  DSRT_GRID_STRIDE(i, n) local += static_cast<double>(x[i]) * x[i];
  block_add_f64(local, sum_sq);
}

__global__ void __launch_bounds__(kThreads) pack_kernel(const float *x, float *e, size_t bytes, const double *sum_sq,
                                                         double count, uint8_t *packed, float *scale_out) {
  const float s = static_cast<float>(sqrt(*sum_sq) / sqrt(count));
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = s;
  DSRT_GRID_STRIDE(k, bytes) {
    unsigned byte = 0;
    for (int j = 0; j < 8; ++j) {
      const size_t i = k * 8 + static_cast<size_t>(j);
      const bool positive = x[i] >= 0.0f;
      if (positive) byte |= 0x80u >> j;
      e[i] = f_sub(x[i], positive ? s : -s);
    }
    packed[k] = static_cast<uint8_t>(byte);
  }
}

__global__ void __launch_bounds__(kThreads) unpack_kernel(const uint8_t *packed, const float *scale, float multiplier,
                                                           size_t bytes, float *out, bool accumulate) {
  const float s = f_mul(*scale, multiplier);
  DSRT_GRID_STRIDE(k, bytes) {
    const unsigned byte = packed[k];
    for (int j = 0; j < 8; ++j) {
      const size_t i = k * 8 + static_cast<size_t>(j);
      const float value = (byte & (0x80u >> j)) ? s : -s;
      out[i] = accumulate ? f_add(out[i], value) : value;
    }
  }
}

__global__ void __launch_bounds__(kThreads) lamb_warmup_sums_kernel(const float *p, const float *g, float *m, float *v,
                                                                     float *fresh, size_t n, CudaOneBitArgs a,
                                                                     double *sums) {
  const float omb1 = f_sub(1.0f, a.beta1), omb2 = f_sub(1.0f, a.beta2);
  const float wd = a.weight_decay > 0.0f ? a.weight_decay : 0.0f;
  double p_sq = 0.0, u_sq = 0.0;
  DSRT_GRID_STRIDE(i, n) {
    const float gi = f_mul(g[i], a.grad_scale);
    const float mi = f_add(f_mul(a.beta1, m[i]), f_mul(omb1, gi));
    const float vi = f_add(f_mul(a.beta2, v[i]), f_mul(f_mul(omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    if (fresh != nullptr) fresh[i] = vi;
    const float u = adam_update(mi, vi, p[i], a.eps, wd);
    p_sq += static_cast<double>(p[i]) * p[i];
    u_sq += static_cast<double>(u) * u;
  }
  block_add_f64(p_sq, sums);
  block_add_f64(u_sq, sums + 1);
}

__global__ void lamb_warmup_coeff_kernel(const double *sums, CudaOneBitLambTensor *t, CudaOneBitLambArgs l, float lr,
                                         float *step) {
  const double pn = sqrt(sums[0]), un = sqrt(sums[1]);
  double c = 1.0;
  if (pn != 0.0 && un != 0.0) {
    c = pn / un;
    if (c > l.max_coeff) c = l.max_coeff;
    if (c < l.min_coeff) c = l.min_coeff;
  }
  if (c != 1.0) t->coeff_freeze = l.coeff_beta * t->coeff_freeze + (1.0 - l.coeff_beta) * c;
  *step = static_cast<float>(static_cast<double>(lr) * c);
}

__global__ void __launch_bounds__(kThreads) lamb_update_kernel(float *p, const float *m, const float *v, size_t n,
                                                                CudaOneBitArgs a, const float *step) {
  const float s = *step, wd = a.weight_decay > 0.0f ? a.weight_decay : 0.0f;
  DSRT_GRID_STRIDE(i, n) p[i] = f_sub(p[i], f_mul(s, adam_update(m[i], v[i], p[i], a.eps, wd)));
}

__global__ void __launch_bounds__(kThreads) lamb_momentum_kernel(const float *g, float *m, float *last, size_t n,
                                                                  CudaOneBitArgs a, const CudaOneBitLambTensor *t) {
  const float omb1 = f_sub(1.0f, a.beta1), s = static_cast<float>(t->scaling_coeff);
  DSRT_GRID_STRIDE(i, n) {
    last[i] = m[i];
    m[i] = f_mul(f_add(f_mul(a.beta1, m[i]), f_mul(omb1, f_mul(g[i], a.grad_scale))), s);
  }
}

__global__ void __launch_bounds__(kThreads) lamb_apply_sums_kernel(const float *p, float *m, const float *last,
                                                                    float *fresh, const float *v, size_t n,
                                                                    CudaOneBitArgs a, const CudaOneBitLambTensor *t,
                                                                    double *sums) {
  const float omb1 = f_sub(1.0f, a.beta1), omb2 = f_sub(1.0f, a.beta2), s = static_cast<float>(t->scaling_coeff);
  const float wd = a.weight_decay > 0.0f ? a.weight_decay : 0.0f;
  double q_sq = 0.0, u_sq = 0.0, max_ratio = 0.0;
  DSRT_GRID_STRIDE(i, n) {
    const float mi = f_div(m[i], s);
    m[i] = mi;
    const float r = f_div(f_sub(mi, f_mul(last[i], a.beta1)), omb1);
    const float fi = f_add(f_mul(a.beta2, fresh[i]), f_mul(f_mul(omb2, r), r));
    fresh[i] = fi;
    const float d = f_add(f_sqrt(v[i]), a.eps);
    const float q = f_div(mi, d);
    const float u = f_add(q, f_mul(wd, p[i]));
    q_sq += static_cast<double>(q) * q;
    u_sq += static_cast<double>(u) * u;
    max_ratio = fmax(max_ratio, static_cast<double>(f_div(d, f_add(f_sqrt(fi), a.eps))));
  }
  block_add_f64(q_sq, sums);
  block_add_f64(u_sq, sums + 1);
  block_max_f64(max_ratio, sums + 2);
}

__global__ void lamb_factor_kernel(const double *sums, CudaOneBitLambTensor *t, CudaOneBitLambArgs l, float lr,
                                   bool weight_decay, float *step) {
  double f = sums[2];
  if (weight_decay) {
    const double a = sums[1] > 0.0 ? fmin(1.0, sqrt(sums[0]) / sqrt(sums[1])) : 1.0;
    f = f * a + (1.0 - a);
  }
  if (f > l.factor_max) f = l.factor_max;
  if (f < l.factor_min) f = l.factor_min;
  const double last = t->last_factor;
  if (f > last * (1.0 + l.factor_threshold)) f = last * (1.0 + l.factor_threshold);
  if (f < last * (1.0 - l.factor_threshold)) f = last * (1.0 - l.factor_threshold);
  t->last_factor = f;
  *step = static_cast<float>(static_cast<double>(lr) * (t->coeff_freeze * f));
}

cudaStream_t as_stream(void *stream) { return static_cast<cudaStream_t>(stream); }

Status need(const char *what, size_t n, std::initializer_list<const void *> buffers) {
  if (n == 0) return Status::Ok();
  for (const void *b : buffers)
    if (b == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: a NULL device buffer for %zu elements", what, n);
  return Status::Ok();
}

Status need_finite(const char *what, const CudaOneBitArgs &a) {
  if (!std::isfinite(a.lr) || !std::isfinite(a.grad_scale))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: lr %g and grad_scale %g must be finite (skip the step on overflow)", what,
                 static_cast<double>(a.lr), static_cast<double>(a.grad_scale));
  return Status::Ok();
}

Status need_multiple_of_8(const char *what, size_t n) {
  if (n % 8 != 0) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: %zu elements is not a multiple of 8 (pad the buffer)", what, n);
  return Status::Ok();
}

}  // namespace
}  // namespace cuda_kernels

using namespace cuda_kernels;

#define DSRT_ONEBIT_LAUNCH(what, kernel, count, ...)                                               \
  do {                                                                                             \
    kernel<<<grid_for(count), kThreads, 0, as_stream(stream)>>>(__VA_ARGS__);                      \
    DSRT_CUDA_CHECK_LAUNCH(what);                                                                  \
  } while (0)

Status cuda_onebit_adam_warmup(float *p, const float *g, float *m, float *v, size_t n, const CudaOneBitArgs &a,
                               void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_adam_warmup", n, {p, g, m, v}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_onebit_adam_warmup", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_adam_warmup", adam_warmup_kernel, n, p, g, m, v, n, a);
  return Status::Ok();
}

Status cuda_onebit_adam_momentum(const float *g, float *m, size_t n, const CudaOneBitArgs &a, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_adam_momentum", n, {g, m}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_onebit_adam_momentum", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_adam_momentum", adam_momentum_kernel, n, g, m, n, a);
  return Status::Ok();
}

Status cuda_onebit_adam_apply(float *p, const float *m, const float *v, size_t n, const CudaOneBitArgs &a, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_adam_apply", n, {p, m, v}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_onebit_adam_apply", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_adam_apply", adam_apply_kernel, n, p, m, v, n, a);
  return Status::Ok();
}

Status cuda_zero_one_local_step(float *p, const float *g, float *m, const float *v, float *u, size_t n,
                                const CudaOneBitArgs &a, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_zero_one_local_step", n, {p, g, m, v, u}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_zero_one_local_step", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_zero_one_local_step", zero_one_local_kernel, n, p, g, m, v, u, n, a);
  return Status::Ok();
}

Status cuda_zero_one_sync_begin(float *p, const float *v, float *u, size_t n, float eps, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_zero_one_sync_begin", n, {p, v, u}));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_zero_one_sync_begin", zero_one_sync_begin_kernel, n, p, v, u, n, eps);
  return Status::Ok();
}

Status cuda_zero_one_sync_end(float *p, float *m, const float *v, float *u, size_t n, float eps, double lrs,
                              void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_zero_one_sync_end", n, {p, m, v, u}));
  if (!std::isfinite(lrs) || lrs < 0.0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_zero_one_sync_end: the learning-rate sum %g is not a finite number >= 0", lrs);
  if (n == 0) return Status::Ok();
  const float inv_lrs = lrs > 0.0 ? static_cast<float>(1.0 / lrs) : 0.0f;
  DSRT_ONEBIT_LAUNCH("cuda_zero_one_sync_end", zero_one_sync_end_kernel, n, p, m, v, u, n, eps, inv_lrs);
  return Status::Ok();
}

Status cuda_onebit_add_error(float *x, const float *error, size_t n, double *sum_sq, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_add_error", n, {x, error, sum_sq}));
  DSRT_RETURN_IF_ERROR(need_multiple_of_8("cuda_onebit_add_error", n));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_add_error", add_error_kernel, n, x, error, n, sum_sq);
  return Status::Ok();
}

Status cuda_onebit_pack(const float *x, float *error, size_t n, const double *sum_sq, uint8_t *packed, float *scale,
                        void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_pack", n, {x, error, sum_sq, packed, scale}));
  DSRT_RETURN_IF_ERROR(need_multiple_of_8("cuda_onebit_pack", n));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_pack", pack_kernel, n / 8, x, error, n / 8, sum_sq, static_cast<double>(n), packed,
                     scale);
  return Status::Ok();
}

Status cuda_onebit_unpack(const uint8_t *packed, const float *scale, float multiplier, size_t n, float *out,
                          bool accumulate, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_unpack", n, {packed, scale, out}));
  DSRT_RETURN_IF_ERROR(need_multiple_of_8("cuda_onebit_unpack", n));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_unpack", unpack_kernel, n / 8, packed, scale, multiplier, n / 8, out, accumulate);
  return Status::Ok();
}

Status cuda_sum_squares_f64(const float *x, size_t n, double *sum_sq, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_sum_squares_f64", n, {x, sum_sq}));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_sum_squares_f64", sum_squares_kernel, n, x, n, sum_sq);
  return Status::Ok();
}

Status cuda_onebit_lamb_warmup_sums(const float *p, const float *g, float *m, float *v, float *fresh, size_t n,
                                    const CudaOneBitArgs &a, double *sums, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_warmup_sums", n, {p, g, m, v, sums}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_onebit_lamb_warmup_sums", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_lamb_warmup_sums", lamb_warmup_sums_kernel, n, p, g, m, v, fresh, n, a, sums);
  return Status::Ok();
}

Status cuda_onebit_lamb_warmup_coeff(const double *sums, CudaOneBitLambTensor *tensor, const CudaOneBitLambArgs &l,
                                     float lr, float *step, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_warmup_coeff", 1, {sums, tensor, step}));
  if (!(l.min_coeff <= l.max_coeff))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_onebit_lamb_warmup_coeff: min_coeff %g is above max_coeff %g", l.min_coeff,
                 l.max_coeff);
  lamb_warmup_coeff_kernel<<<1, 1, 0, as_stream(stream)>>>(sums, tensor, l, lr, step);
  DSRT_CUDA_CHECK_LAUNCH("cuda_onebit_lamb_warmup_coeff");
  return Status::Ok();
}

Status cuda_onebit_lamb_update(float *p, const float *m, const float *v, size_t n, const CudaOneBitArgs &a,
                               const float *step, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_update", n, {p, m, v, step}));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_lamb_update", lamb_update_kernel, n, p, m, v, n, a, step);
  return Status::Ok();
}

Status cuda_onebit_lamb_momentum(const float *g, float *m, float *last, size_t n, const CudaOneBitArgs &a,
                                 const CudaOneBitLambTensor *tensor, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_momentum", n, {g, m, last, tensor}));
  DSRT_RETURN_IF_ERROR(need_finite("cuda_onebit_lamb_momentum", a));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_lamb_momentum", lamb_momentum_kernel, n, g, m, last, n, a, tensor);
  return Status::Ok();
}

Status cuda_onebit_lamb_apply_sums(const float *p, float *m, const float *last, float *fresh, const float *v, size_t n,
                                   const CudaOneBitArgs &a, const CudaOneBitLambTensor *tensor, double *sums,
                                   void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_apply_sums", n, {p, m, last, fresh, v, tensor, sums}));
  if (n == 0) return Status::Ok();
  DSRT_ONEBIT_LAUNCH("cuda_onebit_lamb_apply_sums", lamb_apply_sums_kernel, n, p, m, last, fresh, v, n, a, tensor, sums);
  return Status::Ok();
}

Status cuda_onebit_lamb_factor(const double *sums, CudaOneBitLambTensor *tensor, const CudaOneBitLambArgs &l, float lr,
                               bool weight_decay, float *step, void *stream) {
  DSRT_RETURN_IF_ERROR(need("cuda_onebit_lamb_factor", 1, {sums, tensor, step}));
  if (!(l.factor_min <= l.factor_max) || !(l.factor_threshold >= 0.0))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_onebit_lamb_factor: factor_min %g, factor_max %g, factor_threshold %g "
                 "(min <= max, threshold >= 0)", l.factor_min, l.factor_max, l.factor_threshold);
  lamb_factor_kernel<<<1, 1, 0, as_stream(stream)>>>(sums, tensor, l, lr, weight_decay, step);
  DSRT_CUDA_CHECK_LAUNCH("cuda_onebit_lamb_factor");
  return Status::Ok();
}

}  // namespace dsrt
