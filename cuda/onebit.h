// onebit.h -- the CUDA kernels of the 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb):
// the GPU form of src/optim/onebit_adam.h, zero_one_adam.h and onebit_lamb.h, element for element
// the same fp32 operations (explicitly rounded, no contraction), plus the 1-bit compression with
// error feedback that zero/compressed_allreduce.h runs on each rank. Config-free: the arguments
// are the plain structs below, device pointers, and a cudaStream_t passed as void* (nullptr: the
// default stream). Every launcher checks its arguments before anything is enqueued
// (DSRT_ERR_INVALID_ARGUMENT), enqueues, and checks the launch (DSRT_ERR_DEVICE); none
// synchronizes. Sums of squares are accumulated in double (atomics: the last bits may vary with
// scheduling); per-tensor scalars stay on the device, so a step needs no host round trip.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

// One step's element-wise constants (fp32, as the CPU loops use them).
struct CudaOneBitArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // the gradient is multiplied by it (unscale, averaging, clipping)
};

// OneBitLamb's scalar constants (OneBitLambParams and the trust-ratio clamps).
struct CudaOneBitLambArgs {
  double max_coeff = 10.0, min_coeff = 0.01;
  double coeff_beta = 0.9, factor_max = 4.0, factor_min = 0.5, factor_threshold = 0.1;
};

// Per-tensor OneBitLamb scalars in device memory: three doubles, in this order.
struct CudaOneBitLambTensor {
  double coeff_freeze;
  double last_factor;
  double scaling_coeff;
};

// --- 1-bit Adam / 0/1 Adam (fp32 device arrays of n elements)
// m = b1 m + (1-b1) g gs;  v = b2 v + (1-b2) (g gs)^2;  p -= lr (m / (sqrt(v) + eps) + wd p)
Status cuda_onebit_adam_warmup(float *p, const float *g, float *m, float *v, size_t n, const CudaOneBitArgs &a,
                               void *stream);
// m = b1 m + (1-b1) g gs
Status cuda_onebit_adam_momentum(const float *g, float *m, size_t n, const CudaOneBitArgs &a, void *stream);
// p -= lr (m / (sqrt(v) + eps) + wd p)
Status cuda_onebit_adam_apply(float *p, const float *m, const float *v, size_t n, const CudaOneBitArgs &a, void *stream);
// 0/1 Adam's local step, sync begin and sync end (zero_one_adam.h); u: the accumulator.
Status cuda_zero_one_local_step(float *p, const float *g, float *m, const float *v, float *u, size_t n,
                                const CudaOneBitArgs &a, void *stream);
Status cuda_zero_one_sync_begin(float *p, const float *v, float *u, size_t n, float eps, void *stream);
Status cuda_zero_one_sync_end(float *p, float *m, const float *v, float *u, size_t n, float eps, double lrs,
                              void *stream);

// --- 1-bit compression with error feedback (onebit_compress / onebit_decompress), n % 8 == 0
// *sum_sq (device double) += sum((x + e)^2), and x = x + e. Zero *sum_sq first (cudaMemsetAsync).
Status cuda_onebit_add_error(float *x, const float *error, size_t n, double *sum_sq, void *stream);
// scale = sqrt(*sum_sq) / sqrt(n) rounded to float, written to *scale (device); signs packed 8 per
// byte, element 8k+j in bit 7-j (sign of 0 is +); error = x - scale * sign(x).
Status cuda_onebit_pack(const float *x, float *error, size_t n, const double *sum_sq, uint8_t *packed, float *scale,
                        void *stream);
// out[i] (+)= sign_i * (*scale * multiplier): scale read on the device.
Status cuda_onebit_unpack(const uint8_t *packed, const float *scale, float multiplier, size_t n, float *out,
                          bool accumulate, void *stream);
// *sum_sq (device double) += sum(x^2) (the momentum scale of 1-bit LAMB). Zero it first.
Status cuda_sum_squares_f64(const float *x, size_t n, double *sum_sq, void *stream);

// --- 1-bit LAMB, one tensor (onebit_lamb.h); sums: device doubles, zeroed first; step: a device float
// Warm-up, pass 1: m, v updated, fresh = v when fresh is non-null, sums[0] += p^2, sums[1] += u^2.
Status cuda_onebit_lamb_warmup_sums(const float *p, const float *g, float *m, float *v, float *fresh, size_t n,
                                    const CudaOneBitArgs &a, double *sums, void *stream);
// Warm-up, the scalars: c = trust ratio from sums, tensor->coeff_freeze updated, *step = lr * c.
Status cuda_onebit_lamb_warmup_coeff(const double *sums, CudaOneBitLambTensor *tensor, const CudaOneBitLambArgs &l,
                                     float lr, float *step, void *stream);
// p -= *step * (m / (sqrt(v) + eps) + wd p)   (wd only when > 0)
Status cuda_onebit_lamb_update(float *p, const float *m, const float *v, size_t n, const CudaOneBitArgs &a,
                               const float *step, void *stream);
// Compression, before the all-reduce: last = m; m = (b1 m + (1-b1) g gs) * tensor->scaling_coeff.
Status cuda_onebit_lamb_momentum(const float *g, float *m, float *last, size_t n, const CudaOneBitArgs &a,
                                 const CudaOneBitLambTensor *tensor, void *stream);
// Compression, after it: m /= scaling; fresh updated; sums[0] += q^2, sums[1] += u^2, sums[2] =
// max(sums[2], d / (sqrt(fresh) + eps)) (sums[2] starts at 0: all ratios are positive).
Status cuda_onebit_lamb_apply_sums(const float *p, float *m, const float *last, float *fresh, const float *v, size_t n,
                                   const CudaOneBitArgs &a, const CudaOneBitLambTensor *tensor, double *sums,
                                   void *stream);
// Compression, the scalars: the factor from sums, tensor->last_factor, *step = lr * coeff_freeze * factor.
Status cuda_onebit_lamb_factor(const double *sums, CudaOneBitLambTensor *tensor, const CudaOneBitLambArgs &l,
                               float lr, bool weight_decay, float *step, void *stream);

}  // namespace dsrt
