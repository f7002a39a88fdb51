// onebit_adam.h -- the arithmetic of DeepSpeed's 1-bit Adam (arXiv:2102.02888) on host memory:
// the element-wise updates of its two stages, and the 1-bit compression with error feedback that
// its compressed all-reduce runs on each rank (the communication itself is
// zero/compressed_allreduce.h).
//
// 1-bit Adam, as DeepSpeed's OnebitAdam computes it (no bias correction in either stage):
//   warm-up stage (gradients all-reduced):  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   compression stage (g local to the rank): m = b1 m + (1-b1) g;  m = compressed_allreduce(m); v frozen
//   both: p -= lr * (m / (sqrt(v) + eps) + weight_decay * p)
// g is the gradient times grad_scale (unscale and clipping folded in).
//
// 1-bit compression of x with error e (n elements):
//   y = x + e;  scale = ||y||_2 / sqrt(n);  s_i = +1 if y_i >= 0 else -1;  e = y - scale * s
// The signs are packed 8 per byte, element 8k+j in bit (7-j) of byte k (numpy's packbits order).
// All loops are OpenMP-parallel; sums of squares are accumulated in double.
#pragma once

#include <cstddef>
#include <cstdint>

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

// Warm-up step over one slice: updates state0 (m), state1 (v) and master, then writes the
// working copy when slice.working is set. hyper.type must be OneBitAdam or ZeroOneAdam (0/1 Adam
// runs the same arithmetic on its variance-update steps; see zero_one_adam.h).
Status onebit_adam_warmup_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale);

// Compression stage, before the all-reduce: state0 (m) = b1 m + (1-b1) grad * grad_scale.
Status onebit_adam_momentum(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale);

// Compression stage, after the all-reduce: master -= lr * (m / (sqrt(v) + eps) + wd * master) with
// state0 holding the all-reduced momentum and state1 the frozen variance; then the working copy.
Status onebit_adam_apply(const OptimizerHyper &hyper, const OptimizerSlice &slice);

// 1-bit compression of x[0, n) with error feedback (n a multiple of 8): adds error into x, returns
// the scale, writes the packed signs (n / 8 bytes) and the new error. x is left holding x + error.
double onebit_compress(float *x, float *error, size_t n, uint8_t *packed_signs);

// out[i] (+)= sign_i * scale for the n elements packed in packed_signs (n a multiple of 8):
// accumulate false overwrites out, true adds into it.
void onebit_decompress(const uint8_t *packed_signs, float scale, size_t n, float *out, bool accumulate);

}  // namespace dsrt
