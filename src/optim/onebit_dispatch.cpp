// defines: the host-or-device dispatch of the 1-bit Adam and 0/1 Adam steps (onebit_dispatch.h).
#include "optim/onebit_dispatch.h"

#include "optim/onebit_adam.h"
#include "optim/zero_one_adam.h"
#ifdef DSRT_HAVE_CUDA
#include "cuda/fused_optimizers.h"
#include "cuda/onebit.h"
#endif

namespace dsrt {
namespace {

#ifdef DSRT_HAVE_CUDA
CudaOneBitArgs args_of(const OptimizerHyper &h, float grad_scale) {
  CudaOneBitArgs a;
  a.lr = h.lr, a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay;
  a.grad_scale = grad_scale;
  return a;
}

Status check_device_slice(const char *what, const OptimizerSlice &s, bool needs_grad) {
  if (s.n == 0) return Status::Ok();
  if (s.master == nullptr || s.state0 == nullptr || s.state1 == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: fp32 master, exp_avg and exp_avg_sq device arrays are required", what);
  if (needs_grad && (s.grad == nullptr || s.grad_dtype != DSRT_F32))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: an fp32 device gradient is required", what);
  return Status::Ok();
}

Status write_working(const OptimizerSlice &s, void *stream) {
  if (s.working == nullptr || s.n == 0) return Status::Ok();
  return cuda_convert(s.master, DSRT_F32, s.working, s.working_dtype, s.n, stream);
}
#else
Status no_cuda(const char *what) {
  return Error(DSRT_ERR_UNSUPPORTED, "%s: this build has no CUDA; rebuild with DSRT_CUDA=ON", what);
}
#endif

}  // namespace

Status onebit_warmup_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                        void *stream) {
  if (!on_device) return onebit_adam_warmup_step(hyper, slice, grad_scale);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("1-bit warm-up step", slice, true));
  DSRT_RETURN_IF_ERROR(cuda_onebit_adam_warmup(slice.master, static_cast<const float *>(slice.grad), slice.state0,
                                               slice.state1, slice.n, args_of(hyper, grad_scale), stream));
  return write_working(slice, stream);
#else
  (void)stream;
  return no_cuda("1-bit warm-up step");
#endif
}

Status onebit_momentum_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                          void *stream) {
  if (!on_device) return onebit_adam_momentum(hyper, slice, grad_scale);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("1-bit momentum", slice, true));
  return cuda_onebit_adam_momentum(static_cast<const float *>(slice.grad), slice.state0, slice.n,
                                   args_of(hyper, grad_scale), stream);
#else
  (void)stream;
  return no_cuda("1-bit momentum");
#endif
}

Status onebit_apply_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice, void *stream) {
  if (!on_device) return onebit_adam_apply(hyper, slice);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("1-bit step", slice, false));
  DSRT_RETURN_IF_ERROR(cuda_onebit_adam_apply(slice.master, slice.state0, slice.state1, slice.n, args_of(hyper, 1.0f), stream));
  return write_working(slice, stream);
#else
  (void)stream;
  return no_cuda("1-bit step");
#endif
}

Status zero_one_local_step_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                              float grad_scale, float *accumulator, void *stream) {
  if (!on_device) return zero_one_adam_local_step(hyper, slice, grad_scale, accumulator);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("ZeroOneAdam local step", slice, true));
  DSRT_RETURN_IF_ERROR(cuda_zero_one_local_step(slice.master, static_cast<const float *>(slice.grad), slice.state0,
                                                slice.state1, accumulator, slice.n, args_of(hyper, grad_scale), stream));
  return write_working(slice, stream);
#else
  (void)stream;
  return no_cuda("ZeroOneAdam local step");
#endif
}

Status zero_one_sync_begin_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                              float *accumulator, void *stream) {
  if (!on_device) return zero_one_adam_sync_begin(hyper, slice, accumulator);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("ZeroOneAdam sync", slice, false));
  return cuda_zero_one_sync_begin(slice.master, slice.state1, accumulator, slice.n, hyper.eps, stream);
#else
  (void)stream;
  return no_cuda("ZeroOneAdam sync");
#endif
}

Status zero_one_sync_end_on(bool on_device, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                            float *accumulator, double lrs, void *stream) {
  if (!on_device) return zero_one_adam_sync_end(hyper, slice, accumulator, lrs);
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check_device_slice("ZeroOneAdam sync", slice, false));
  DSRT_RETURN_IF_ERROR(cuda_zero_one_sync_end(slice.master, slice.state0, slice.state1, accumulator, slice.n, hyper.eps,
                                              lrs, stream));
  return write_working(slice, stream);
#else
  (void)stream;
  return no_cuda("ZeroOneAdam sync");
#endif
}

Status scaled_copy_on(bool on_device, const float *src, float *dst, size_t n, float scale, void *stream) {
  if (n > 0 && (src == nullptr || dst == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "scaled copy: NULL buffer for %zu elements", n);
  if (!on_device) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
    return Status::Ok();
  }
#ifdef DSRT_HAVE_CUDA
  return cuda_convert_scaled(src, DSRT_F32, dst, DSRT_F32, n, scale, stream);
#else
  (void)stream;
  return no_cuda("scaled copy");
#endif
}

}  // namespace dsrt
