// defines: the engine's 0/1 Adam step -- DeepSpeed's ZeroOneAdam on the stage-0 flat buffers:
// an initialization step; until var_freeze_step, Adam steps whose variance is updated on an
// exponentially spaced schedule (gradients all-reduced on those steps only, 1-bit compressed
// otherwise); after it, local steps with the variance frozen, synchronized by a 1-bit compressed
// all-reduce of the accumulated update at intervals that grow up to local_step_clipper.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "optim/onebit_adam.h"
#include "optim/onebit_dispatch.h"
#include "optim/zero_one_adam.h"
#include "util/log.h"

namespace dsrt {

Status Engine::zero_one_accumulator_to_host(size_t g, std::vector<float> *out) const {
  if (g >= onebit_.size()) return Error(DSRT_ERR_INVALID_ARGUMENT, "ZeroOneAdam: no parameter group %zu", g);
  const OneBitGroup &group = onebit_[g];
  if (group.d_accumulator.bytes() == 0) {
    *out = group.accumulator;
    return Status::Ok();
  }
  out->assign(group.reduce.size(), 0.0f);
  if (!out->empty()) DSRT_RETURN_IF_ERROR(device_->copy(out->data(), group.d_accumulator.data(), out->size() * sizeof(float), nullptr));
  return device_->synchronize(nullptr);
}

bool Engine::zero_one_frozen() const {
  if (config_.optimizer.type != OptimizerType::ZeroOneAdam) return false;
  // DeepSpeed freezes after the update of step t when t > var_freeze_step, never after its first
  // (initialization) step: step t + 1 = applied_steps + 1 is frozen when applied_steps > var_freeze_step.
  return counters_.applied_steps >= std::max<int64_t>(config_.optimizer.var_freeze_step + 1, 2);
}

Status Engine::zero_one_update(const std::vector<OptimizerSlice> &slices,
                               const std::vector<std::vector<size_t>> &by_group, float grad_scale) {
  if (counters_.applied_steps == 0) return Status::Ok();  // DeepSpeed's first step() only initializes
  const int64_t step = counters_.applied_steps + 1;       // DeepSpeed's state['step']
  const OptimizerConfig &o = config_.optimizer;
  const bool gpu = onebit_on_device();  // device slices: the CUDA kernels (onebit_dispatch.h)
  if (zero_one_frozen()) {
    if (!zero_one_.errors_zeroed) {
      // The errors now compress accumulated updates, not gradients: DeepSpeed restarts them.
      for (OneBitGroup &group : onebit_) group.reduce.reset_errors();
      zero_one_.errors_zeroed = true;
      if (rank() == 0)
        log_progress(Format("ZeroOneAdam: variance frozen, local steps start at step %lld", static_cast<long long>(step)));
    }
    const bool sync = step % zero_one_.local_interval == 0;
    for (size_t g = 0; g < by_group.size() && g < onebit_.size(); ++g) {
      const OptimizerHyper hyper = group_hyper(g);
      OneBitGroup &group = onebit_[g];
      group.lrs += hyper.lr;
      size_t at = 0;
      for (size_t i : by_group[g]) {
        DSRT_RETURN_IF_ERROR(zero_one_local_step_on(gpu, hyper, slices[i], grad_scale, group.accumulator_ptr() + at, nullptr)
                                 .with_context(Format("ZeroOneAdam local step (group %zu)", g)));
        at += slices[i].n;
      }
      if (!sync) continue;
      at = 0;
      for (size_t i : by_group[g]) {
        DSRT_RETURN_IF_ERROR(zero_one_sync_begin_on(gpu, hyper, slices[i], group.accumulator_ptr() + at, nullptr));
        at += slices[i].n;
      }
      DSRT_RETURN_IF_ERROR(group.reduce.run(group.accumulator_ptr())
                               .with_context(Format("ZeroOneAdam: the compressed all-reduce of group %zu's update", g)));
      at = 0;
      for (size_t i : by_group[g]) {
        DSRT_RETURN_IF_ERROR(zero_one_sync_end_on(gpu, hyper, slices[i], group.accumulator_ptr() + at, group.lrs, nullptr));
        at += slices[i].n;
      }
      group.lrs = 0.0;
    }
    if (++zero_one_.local_counter == o.local_step_scaler) {
      zero_one_.local_counter = 0;
      zero_one_.local_interval = std::min(o.local_step_clipper, zero_one_.local_interval * 2);
    }
    return gpu ? device_->synchronize(nullptr) : Status::Ok();
  }

  const bool var_step = step % zero_one_.var_interval == 0;  // the gradients were all-reduced
  for (size_t g = 0; g < by_group.size() && g < onebit_.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    if (var_step) {
      for (size_t i : by_group[g])
        DSRT_RETURN_IF_ERROR(onebit_warmup_on(gpu, hyper, slices[i], grad_scale, nullptr)
                                 .with_context(Format("ZeroOneAdam variance step (group %zu)", g)));
      continue;
    }
    // The local gradients go through the 1-bit all-reduce (unscaled and clipped first).
    OneBitGroup &group = onebit_[g];
    float *momentum = group.momentum_ptr();
    size_t at = 0;
    for (size_t i : by_group[g]) {
      const auto *grad = static_cast<const float *>(slices[i].grad);
      if (slices[i].n > 0 && (grad == nullptr || slices[i].grad_dtype != DSRT_F32))
        return Error(DSRT_ERR_INTERNAL, "ZeroOneAdam: group %zu's gradient is not fp32", g);
      DSRT_RETURN_IF_ERROR(scaled_copy_on(gpu, grad, momentum + at, slices[i].n, grad_scale, nullptr));
      at += slices[i].n;
    }
    DSRT_RETURN_IF_ERROR(group.reduce.run(momentum)
                             .with_context(Format("ZeroOneAdam: the compressed gradient all-reduce of group %zu", g)));
    at = 0;
    for (size_t i : by_group[g]) {
      OptimizerSlice reduced = slices[i];
      reduced.grad = momentum + at;
      reduced.grad_dtype = DSRT_F32;
      at += slices[i].n;
      DSRT_RETURN_IF_ERROR(onebit_momentum_on(gpu, hyper, reduced, 1.0f, nullptr));
      DSRT_RETURN_IF_ERROR(onebit_apply_on(gpu, hyper, reduced, nullptr).with_context(Format("ZeroOneAdam step (group %zu)", g)));
    }
  }
  if (var_step && ++zero_one_.var_counter == o.var_update_scaler) {
    zero_one_.var_counter = 0;
    zero_one_.var_interval *= 2;
  }
  return gpu ? device_->synchronize(nullptr) : Status::Ok();
}

}  // namespace dsrt
