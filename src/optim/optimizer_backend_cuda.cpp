// defines: the CUDA optimizer backend -- OptimizerBackend over the launchers of
// cuda/fused_optimizers.h on one stream, with the reduction workspace and the few device doubles
// it needs taken from the device's caching pool. Sums come back to the host with one small copy
// and a stream synchronization (the engine all-reduces them through a host communicator).
// Compiled only with CUDA (DSRT_HAVE_CUDA).
#ifdef DSRT_HAVE_CUDA

#include <cstring>
#include <vector>

#include "cuda/fused_optimizers.h"
#include "optim/optimizer_backend.h"

namespace dsrt {
namespace {

class CudaBackend final : public OptimizerBackend {
 public:
  CudaBackend(Device &device, DeviceStream stream) : device_(device), stream_(stream) {}
  const char *name() const override { return "cuda"; }

  Status sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, double *sum,
                     bool *nonfinite) override {
    CudaTensorRef ref;
    ref.data = data;
    ref.dtype = dtype;
    ref.n = n;
    DSRT_RETURN_IF_ERROR(ensure(&workspace_, cuda_reduction_workspace_bytes(&n, 1), "the norm workspace"));
    DSRT_RETURN_IF_ERROR(ensure(&scalars_, 2 * sizeof(double), "the norm result"));
    double *out = scalars_.as<double>();
    int *flag = reinterpret_cast<int *>(out + 1);
    DSRT_RETURN_IF_ERROR(
        cuda_sum_squares_many(&ref, 1, scale, out, flag, workspace_.data(), workspace_.bytes(), stream_));
    double host[2] = {0.0, 0.0};
    DSRT_RETURN_IF_ERROR(device_.copy(host, out, sizeof host, stream_));
    DSRT_RETURN_IF_ERROR(device_.synchronize(stream_));
    int bad = 0;
    static_assert(sizeof(int) <= sizeof(double), "flag fits a double slot");
    std::memcpy(&bad, &host[1], sizeof bad);
    if (sum != nullptr) *sum = host[0];
    if (nonfinite != nullptr) *nonfinite = bad != 0;
    return Status::Ok();
  }

  Status step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                   float grad_scale) override {
    return cuda_optimizer_step_many(hyper, slices, count, grad_scale, stream_);
  }

  Status lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count, float grad_scale,
                          float *const *updates, double *param_sq, double *update_sq) override {
    if (count == 0) return Status::Ok();
    if (param_sq == nullptr || update_sq == nullptr)
      return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 1: both norm outputs are required");
    std::vector<size_t> sizes(count);
    for (size_t i = 0; i < count; ++i) sizes[i] = slices[i].n;
    DSRT_RETURN_IF_ERROR(
        ensure(&workspace_, cuda_reduction_workspace_bytes(sizes.data(), count), "Lamb's reduction workspace"));
    DSRT_RETURN_IF_ERROR(ensure(&scalars_, 2 * count * sizeof(double), "Lamb's sums"));
    double *sums = scalars_.as<double>();
    DSRT_RETURN_IF_ERROR(device_.memset(sums, 0, 2 * count * sizeof(double), stream_));
    DSRT_RETURN_IF_ERROR(cuda_lamb_phase1_many(hyper, slices, count, grad_scale, updates, sums, sums + count,
                                               workspace_.data(), workspace_.bytes(), stream_));
    std::vector<double> host(2 * count);
    DSRT_RETURN_IF_ERROR(device_.copy(host.data(), sums, host.size() * sizeof(double), stream_));
    DSRT_RETURN_IF_ERROR(device_.synchronize(stream_));
    for (size_t i = 0; i < count; ++i) {
      param_sq[i] += host[i];
      update_sq[i] += host[count + i];
    }
    return Status::Ok();
  }

  Status lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                          const float *const *updates, const double *param_norms,
                          const double *update_norms) override {
    if (count == 0) return Status::Ok();
    if (param_norms == nullptr || update_norms == nullptr)
      return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 2: both norms are required");
    DSRT_RETURN_IF_ERROR(ensure(&scalars_, 2 * count * sizeof(double), "Lamb's norms"));
    double *norms = scalars_.as<double>();
    // The host arrays must stay readable until the copies complete: wait before returning.
    DSRT_RETURN_IF_ERROR(device_.copy(norms, param_norms, count * sizeof(double), stream_));
    DSRT_RETURN_IF_ERROR(device_.copy(norms + count, update_norms, count * sizeof(double), stream_));
    DSRT_RETURN_IF_ERROR(cuda_lamb_phase2_many(hyper, slices, count, updates, norms, norms + count, stream_));
    return device_.synchronize(stream_);
  }

  Status convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n,
                 float scale) override {
    if (scale == 1.0f) return cuda_convert(src, src_dtype, dst, dst_dtype, n, stream_);
    return cuda_convert_scaled(src, src_dtype, dst, dst_dtype, n, scale, stream_);
  }

  Status accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale) override {
    return cuda_accumulate(dst, src, src_dtype, n, scale, stream_);
  }

  Status synchronize() override { return device_.synchronize(stream_); }

 private:
  // Grows a scratch buffer; the old one is released to the pool, which reuses it only after the
  // work already enqueued on this device's streams has finished.
  Status ensure(DeviceBuffer *buffer, size_t bytes, const char *what) {
    if (buffer->bytes() >= bytes) return Status::Ok();
    buffer->reset();
    return device_.allocate(bytes, buffer, false).with_context(Format("CUDA optimizer backend: allocating %s", what));
  }

  Device &device_;
  DeviceStream stream_;
  DeviceBuffer workspace_;
  DeviceBuffer scalars_;
};

}  // namespace

Status optimizer_backend_cuda(Device &device, DeviceStream stream, std::unique_ptr<OptimizerBackend> *out) {
  if (device.type() != DSRT_DEVICE_CUDA)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "the CUDA optimizer backend needs a CUDA device, not %s", device.name());
  *out = std::make_unique<CudaBackend>(device, stream);
  return Status::Ok();
}

}  // namespace dsrt

#endif  // DSRT_HAVE_CUDA
