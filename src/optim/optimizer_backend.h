// optimizer_backend.h -- the arithmetic the engine and the gradient reducer run over state
// buffers, behind one interface so that the same step code runs where the buffers live:
//   optimizer_backend_host()      the CPU kernels of cpu_optimizer.h on host memory (the CPU
//                                 device, and the host side of offload_optimizer "cpu" / "nvme");
//   optimizer_backend_create(d)   the backend matching device d's memory: the host backend for the
//                                 CPU device, the CUDA launchers of cuda/fused_optimizers.h on a
//                                 stream for a CUDA device (only in builds with CUDA).
// Pointers are in the backend's memory. Work is ordered on the backend's stream; every value
// returned to the host (sums of squares, the non-finite flag, Lamb's sums) is complete when the
// call returns. Everything else may still be in flight until synchronize().
#pragma once

#include <cstddef>
#include <memory>

#include "device/device.h"
#include "dsrt.h"
#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

class OptimizerBackend {
 public:
  virtual ~OptimizerBackend() = default;
  virtual const char *name() const = 0;

  // Sum of squares of data[0, n) * scale in double, and whether any element is inf or nan (the
  // overflow check and the gradient norm in one read).
  virtual Status sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, double *sum,
                             bool *nonfinite) = 0;
  // Adam/AdamW, SGD, Adagrad, Lion over count slices in one pass (cpu_optimizer_step_many's meaning).
  virtual Status step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                           float grad_scale) = 0;
  // Lamb phase 1: updates[i] receives slice i's update; host doubles param_sq[i] and update_sq[i]
  // are ADDED slice i's sums of squares.
  virtual Status lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                                  float grad_scale, float *const *updates, double *param_sq, double *update_sq) = 0;
  // Lamb phase 2 with slice i's whole-tensor norms (host doubles).
  virtual Status lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                                  const float *const *updates, const double *param_norms,
                                  const double *update_norms) = 0;
  // dst[i] = cast(src[i] * scale) between fp32, fp16 and bf16 (scale 1: an exact conversion or copy).
  virtual Status convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n,
                         float scale = 1.0f) = 0;
  // dst[i] += src[i] * scale, dst fp32.
  virtual Status accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale) = 0;
  // Waits for everything enqueued so far.
  virtual Status synchronize() = 0;
};

std::unique_ptr<OptimizerBackend> optimizer_backend_host();

// The backend for buffers in device's memory, ordered on stream (nullptr: the default stream).
// The device must outlive the backend. UNSUPPORTED for a CUDA device in a build without CUDA.
Status optimizer_backend_create(Device &device, DeviceStream stream, std::unique_ptr<OptimizerBackend> *out);

}  // namespace dsrt
