// zero_one_adam.h -- the element-wise arithmetic of DeepSpeed's 0/1 Adam (ZeroOneAdam,
// arXiv:2202.06009) that 1-bit Adam's (onebit_adam.h) does not already cover: its local steps
// and the synchronization that follows them.
//
// 0/1 Adam, as DeepSpeed's ZeroOneAdam computes it (no bias correction), for g = grad * grad_scale:
//   before var_freeze_step, a step t with t % var_interval == 0 (gradients all-reduced):
//       m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (m / (sqrt(v) + eps) + wd p)
//     any other step (g local): m = b1 m + (1-b1) compressed_allreduce(g);  p -= lr (...) as above
//   after it (v frozen, g local):  m = b1 m + (1-b1) g;  lrs += lr;  d = m / (sqrt(v) + eps) + wd p;
//       p -= lr d;  u -= lr d;  and on a step t with t % local_interval == 0 (a sync):
//       p -= u;  u *= sqrt(v) + eps;  u = compressed_allreduce(u);  m = -u / lrs;
//       p += u / (sqrt(v) + eps);  u = 0;  lrs = 0
// The before-the-freeze steps are onebit_adam_warmup_step, or onebit_adam_momentum (on the
// all-reduced gradient) then onebit_adam_apply. These functions are the after-the-freeze ones.
#pragma once

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

// A local step over one slice: m = b1 m + (1-b1) grad * grad_scale, then the update d is
// subtracted from master (times lr) and from u (accumulator, slice.n elements); then the working copy.
Status zero_one_adam_local_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                                float *accumulator);

// A sync, before the all-reduce: master -= u (back to the parameters of the last sync), then
// u *= sqrt(v) + eps (the accumulated update in gradient units).
Status zero_one_adam_sync_begin(const OptimizerHyper &hyper, const OptimizerSlice &slice, float *accumulator);

// A sync, after the all-reduce of u: m = -u / lrs (0 when lrs is 0), master += u / (sqrt(v) + eps),
// u = 0; then the working copy.
Status zero_one_adam_sync_end(const OptimizerHyper &hyper, const OptimizerSlice &slice, float *accumulator, double lrs);

}  // namespace dsrt
