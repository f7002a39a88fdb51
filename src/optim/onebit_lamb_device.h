// onebit_lamb_device.h -- 1-bit LAMB's steps (onebit_lamb.h) on device slices through
// cuda/onebit.h's kernels on stream: the per-tensor scalars stay in device memory (state: three
// doubles laid out as OneBitLambTensorState; sums: three doubles the caller zeroes before each
// step; step: one float), so a step needs no host round trip. Without CUDA in the build every call
// fails with DSRT_ERR_UNSUPPORTED. Nothing here synchronizes the stream.
#pragma once

#include <cstddef>

#include "optim/cpu_optimizer.h"
#include "optim/onebit_lamb.h"
#include "util/status.h"

namespace dsrt {

struct OneBitLambDeviceScalars {
  double *state = nullptr;  // OneBitLambTensorState's three doubles, in device memory
  double *sums = nullptr;   // three device doubles, zero on entry
  float *step = nullptr;    // one device float
};

// The warm-up step (fresh: n device floats receiving v, or nullptr), then the working copy.
Status onebit_lamb_warmup_device(const OptimizerHyper &hyper, const OneBitLambParams &params,
                                 const OptimizerSlice &slice, float grad_scale, float *fresh,
                                 const OneBitLambDeviceScalars &scalars, void *stream);
// *sum_sq += sum(m^2) (zero it first): the momentum scale is sqrt(*sum_sq / n).
Status onebit_lamb_momentum_sum_device(const float *m, size_t n, double *sum_sq, void *stream);
// last = m; m = (b1 m + (1-b1) g gs) * state's scaling coefficient.
Status onebit_lamb_momentum_device(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                                   float *last, const double *state, void *stream);
// The rest of a compression step (state0 holds the all-reduced momentum), then the working copy.
Status onebit_lamb_apply_device(const OptimizerHyper &hyper, const OneBitLambParams &params,
                                const OptimizerSlice &slice, const float *last, float *fresh,
                                const OneBitLambDeviceScalars &scalars, void *stream);

}  // namespace dsrt
