// defines: the slice checks and the working-copy cast the 1-bit optimizers' host loops share
// (see onebit_host_slice.h).
#include "optim/onebit_host_slice.h"

#include <cmath>

namespace dsrt {

Status check_onebit_slice(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                          bool needs_grad, float grad_scale) {
  if (slice.n == 0) return Status::Ok();
  if (slice.master == nullptr || slice.state0 == nullptr || slice.state1 == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: master, exp_avg (state0) and exp_avg_sq (state1) are required", what);
  if (needs_grad && (slice.grad == nullptr || slice.grad_dtype != DSRT_F32))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: an fp32 gradient is required", what);
  if (needs_grad && !std::isfinite(grad_scale))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: grad_scale is %g; skip the step on overflow instead", what,
                 static_cast<double>(grad_scale));
  if (!std::isfinite(hyper.lr)) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the learning rate is not finite", what);
  return Status::Ok();
}

void write_working_copy(const OptimizerSlice &slice) {
  if (slice.working != nullptr) cpu_convert(slice.master, DSRT_F32, slice.working, slice.working_dtype, slice.n);
}

}  // namespace dsrt
