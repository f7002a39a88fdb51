// defines: the engine's gradient swapping under NVMe optimizer offload at stage 3 (ZeRO-Infinity
// swaps the gradient partition as it does the optimizer states): the reducer accumulates each
// reduced range into its sub-group's gradient array through the store's GradSwap
// (src/offload/nvme_states.h, grad_swap.h) instead of a partition-sized host buffer; at the
// boundary a read-only pass over the arrays gives the norm and overflow flag (bitwise what
// cpu_sum_squares over the in-memory partition gives), and the optimizer pass reads each
// sub-group's gradient with its master and states (engine_nvme.cpp). On a GPU (the staged route)
// the reducer sums the window on the device and nvme_grads_from_device moves it sub-group by
// sub-group into the swap files at the boundary.
#include "engine/engine.h"

namespace dsrt {

bool Engine::nvme_swaps_gradients() const {
  return nvme_gradient_swap_ && part_.stage() == 3 && config_.zero.offload_optimizer.device == OffloadDevice::Nvme;
}

Status Engine::set_nvme_gradient_swap(bool on) {
  if (built_) return Error(DSRT_ERR_STATE, "set_nvme_gradient_swap: call it before dsrt_engine_build");
  nvme_gradient_swap_ = on;
  return Status::Ok();
}

void Engine::nvme_grad_reducer_options(ReducerOptions *options) {
  GradSwap *swap = store_.nvme()->grad_swap();
  options->map_range = [swap](int64_t offset, int64_t count, float **dst, int64_t *mapped) {
    return swap->map(offset, count, dst, mapped);
  };
  options->flush_ranges = [swap]() {
    return swap->flush().with_context("writing this micro-step's gradients to the swap files (offload_optimizer nvme)");
  };
  options->on_window_start = [swap]() { swap->begin_window(); };
}

Status Engine::nvme_grads_from_device() {
  // The staged (GPU) route: the reducer summed the window in its device accumulator; the store
  // moves it sub-group by sub-group into the swap files.
  return store_.nvme()->grads_from_device(*device_, reducer_.grad_partition());
}

Status Engine::nvme_grad_sum_squares(float scale, double *sum, bool *nonfinite) {
  return store_.nvme()->grad_sum_squares(scale, sum, nonfinite, &nvme_norm_stats_);
}

}  // namespace dsrt
