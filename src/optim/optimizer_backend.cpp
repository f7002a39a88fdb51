// defines: the host optimizer backend (the CPU kernels over host memory) and the factory that picks
// the backend matching a device (the CUDA one is in optimizer_backend_cuda.cpp).
#include "optim/optimizer_backend.h"

#include <cstring>

#include "util/half.h"

namespace dsrt {

#ifdef DSRT_HAVE_CUDA
// optimizer_backend_cuda.cpp
Status optimizer_backend_cuda(Device &device, DeviceStream stream, std::unique_ptr<OptimizerBackend> *out);
#endif

namespace {

class HostBackend final : public OptimizerBackend {
 public:
  const char *name() const override { return "host"; }

  Status sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, double *sum,
                     bool *nonfinite) override {
    bool bad = false;
    const double value = cpu_sum_squares(data, dtype, n, scale, &bad);
    if (sum != nullptr) *sum = value;
    if (nonfinite != nullptr) *nonfinite = bad;
    return Status::Ok();
  }
  Status step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                   float grad_scale) override {
    return cpu_optimizer_step_many(hyper, slices, count, grad_scale);
  }
  Status lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count, float grad_scale,
                          float *const *updates, double *param_sq, double *update_sq) override {
    return cpu_lamb_phase1_many(hyper, slices, count, grad_scale, updates, param_sq, update_sq);
  }
  Status lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                          const float *const *updates, const double *param_norms,
                          const double *update_norms) override {
    return cpu_lamb_phase2_many(hyper, slices, count, updates, param_norms, update_norms);
  }
  Status convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n,
                 float scale) override {
    if (n == 0) return Status::Ok();
    if (src == nullptr || dst == nullptr)
      return Error(DSRT_ERR_INVALID_ARGUMENT, "host convert: NULL src or dst for %zu elements", n);
    if (scale == 1.0f) {
      if (src_dtype == dst_dtype)
        std::memmove(dst, src, n * dtype_size(src_dtype));
      else
        cpu_convert(src, src_dtype, dst, dst_dtype, n);
      return Status::Ok();
    }
    const int64_t count = static_cast<int64_t>(n);
#pragma omp parallel for if (count > 65536) schedule(static)
    for (int64_t i = 0; i < count; ++i) from_float(dst, dst_dtype, i, to_float(src, src_dtype, i) * scale);
    return Status::Ok();
  }
  Status accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale) override {
    cpu_accumulate(dst, src, src_dtype, n, scale);
    return Status::Ok();
  }
  Status synchronize() override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<OptimizerBackend> optimizer_backend_host() { return std::make_unique<HostBackend>(); }

Status optimizer_backend_create(Device &device, DeviceStream stream, std::unique_ptr<OptimizerBackend> *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "optimizer_backend_create: out is NULL");
  out->reset();
  if (device.type() == DSRT_DEVICE_CPU) {
    *out = optimizer_backend_host();
    return Status::Ok();
  }
#ifdef DSRT_HAVE_CUDA
  if (device.type() == DSRT_DEVICE_CUDA) return optimizer_backend_cuda(device, stream, out);
#else
  (void)stream;
#endif
  return Error(DSRT_ERR_UNSUPPORTED, "no optimizer backend for device %s in this build (built without CUDA)",
               device.name());
}

}  // namespace dsrt
