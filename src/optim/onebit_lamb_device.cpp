// defines: 1-bit LAMB's steps on device slices (onebit_lamb_device.h).
#include "optim/onebit_lamb_device.h"

#ifdef DSRT_HAVE_CUDA
#include "cuda/fused_optimizers.h"
#include "cuda/onebit.h"
#endif

namespace dsrt {
namespace {

#ifdef DSRT_HAVE_CUDA
static_assert(sizeof(OneBitLambTensorState) == sizeof(CudaOneBitLambTensor), "the two layouts must agree");

CudaOneBitArgs args_of(const OptimizerHyper &h, float grad_scale) {
  CudaOneBitArgs a;
  a.lr = h.lr, a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay;
  a.grad_scale = grad_scale;
  return a;
}

CudaOneBitLambArgs lamb_args_of(const OptimizerHyper &h, const OneBitLambParams &p) {
  CudaOneBitLambArgs l;
  l.max_coeff = h.max_coeff, l.min_coeff = h.min_coeff, l.coeff_beta = p.coeff_beta;
  l.factor_max = p.factor_max, l.factor_min = p.factor_min, l.factor_threshold = p.factor_threshold;
  return l;
}

Status check(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &s, bool needs_grad,
             const OneBitLambDeviceScalars *scalars) {
  if (hyper.type != OptimizerType::OneBitLamb)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the hyper-parameters are not OneBitLamb's", what);
  if (scalars != nullptr && (scalars->state == nullptr || scalars->sums == nullptr || scalars->step == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the per-tensor device scalars are required", what);
  if (s.n == 0) return Status::Ok();
  if (s.master == nullptr || s.state0 == nullptr || s.state1 == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: fp32 master, exp_avg and exp_avg_sq device arrays are required", what);
  if (needs_grad && (s.grad == nullptr || s.grad_dtype != DSRT_F32))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: an fp32 device gradient is required", what);
  return Status::Ok();
}

auto *tensor_of(double *state) { return reinterpret_cast<CudaOneBitLambTensor *>(state); }
auto *tensor_of(const double *state) { return reinterpret_cast<const CudaOneBitLambTensor *>(state); }

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

Status onebit_lamb_warmup_device(const OptimizerHyper &hyper, const OneBitLambParams &params,
                                 const OptimizerSlice &slice, float grad_scale, float *fresh,
                                 const OneBitLambDeviceScalars &scalars, void *stream) {
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check("OneBitLamb warm-up step", hyper, slice, true, &scalars));
  const CudaOneBitArgs a = args_of(hyper, grad_scale);
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_warmup_sums(slice.master, static_cast<const float *>(slice.grad), slice.state0,
                                                    slice.state1, fresh, slice.n, a, scalars.sums, stream));
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_warmup_coeff(scalars.sums, tensor_of(scalars.state), lamb_args_of(hyper, params),
                                                     hyper.lr, scalars.step, stream));
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_update(slice.master, slice.state0, slice.state1, slice.n, a, scalars.step, stream));
  return write_working(slice, stream);
#else
  (void)hyper, (void)params, (void)slice, (void)grad_scale, (void)fresh, (void)scalars, (void)stream;
  return no_cuda("OneBitLamb warm-up step");
#endif
}

Status onebit_lamb_momentum_sum_device(const float *m, size_t n, double *sum_sq, void *stream) {
#ifdef DSRT_HAVE_CUDA
  return cuda_sum_squares_f64(m, n, sum_sq, stream);
#else
  (void)m, (void)n, (void)sum_sq, (void)stream;
  return no_cuda("OneBitLamb momentum scale");
#endif
}

Status onebit_lamb_momentum_device(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale,
                                   float *last, const double *state, void *stream) {
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check("OneBitLamb momentum", hyper, slice, true, nullptr));
  if (state == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "OneBitLamb momentum: the device tensor state is required");
  return cuda_onebit_lamb_momentum(static_cast<const float *>(slice.grad), slice.state0, last, slice.n,
                                   args_of(hyper, grad_scale), tensor_of(state), stream);
#else
  (void)hyper, (void)slice, (void)grad_scale, (void)last, (void)state, (void)stream;
  return no_cuda("OneBitLamb momentum");
#endif
}

Status onebit_lamb_apply_device(const OptimizerHyper &hyper, const OneBitLambParams &params,
                                const OptimizerSlice &slice, const float *last, float *fresh,
                                const OneBitLambDeviceScalars &scalars, void *stream) {
#ifdef DSRT_HAVE_CUDA
  DSRT_RETURN_IF_ERROR(check("OneBitLamb compressed step", hyper, slice, false, &scalars));
  const CudaOneBitArgs a = args_of(hyper, 1.0f);
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_apply_sums(slice.master, slice.state0, last, fresh, slice.state1, slice.n, a,
                                                   tensor_of(scalars.state), scalars.sums, stream));
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_factor(scalars.sums, tensor_of(scalars.state), lamb_args_of(hyper, params),
                                               hyper.lr, hyper.weight_decay > 0.0f, scalars.step, stream));
  DSRT_RETURN_IF_ERROR(cuda_onebit_lamb_update(slice.master, slice.state0, slice.state1, slice.n, a, scalars.step, stream));
  return write_working(slice, stream);
#else
  (void)hyper, (void)params, (void)slice, (void)last, (void)fresh, (void)scalars, (void)stream;
  return no_cuda("OneBitLamb compressed step");
#endif
}

}  // namespace dsrt
