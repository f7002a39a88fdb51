// onebit_dispatch.h -- the element-wise steps of 1-bit Adam and 0/1 Adam on either memory: host
// slices go to onebit_adam.h / zero_one_adam.h, device slices (on_device) to cuda/onebit.h's
// kernels on stream, followed by the working-copy cast, so the engine runs one sequence for both
// devices. Device slices need an fp32 gradient and fp32 master and states, as the host ones do;
// without CUDA in the build a device request fails with DSRT_ERR_UNSUPPORTED. Nothing here
// synchronizes the stream.
#pragma once

#include <cstddef>

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

Status onebit_warmup_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                        void *stream);
Status onebit_momentum_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                          void *stream);
// onebit_adam_apply, then the working copy.
Status onebit_apply_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, void *stream);
Status zero_one_local_step_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                              float grad_scale, float *accumulator, void *stream);
Status zero_one_sync_begin_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                              float *accumulator, void *stream);
Status zero_one_sync_end_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                            float *accumulator, double lrs, void *stream);
// dst[i] = src[i] * scale over n fp32 elements.
Status scaled_copy_on(bool on_device, const float *src, float *dst, size_t n, float scale, void *stream);

}  // namespace dsrt
