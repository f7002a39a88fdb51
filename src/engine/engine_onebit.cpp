// defines: the engine's 1-bit Adam step -- DeepSpeed's OnebitAdam on the stage-0 flat buffers:
// an initialization step, the uncompressed warm-up stage (gradients all-reduced as usual), then
// the compression stage (gradients kept local, the momentum of each parameter group all-reduced
// with 1-bit compression and error feedback, the variance frozen).
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "optim/onebit_adam.h"
#include "optim/onebit_dispatch.h"
#include "optim/step_constants.h"
#include "util/log.h"

namespace dsrt {

bool Engine::onebit_compressing() const {
  if (config_.optimizer.type == OptimizerType::ZeroOneAdam) {
    if (counters_.applied_steps == 0) return false;  // the initialization step
    return zero_one_frozen() || (counters_.applied_steps + 1) % zero_one_.var_interval != 0;
  }
  if (config_.optimizer.type != OptimizerType::OneBitAdam && config_.optimizer.type != OptimizerType::OneBitLamb)
    return false;
  // DeepSpeed's state['step'] counts every applied step() call, its first (which only sets up
  // buffers) included; the freeze check runs after each warm-up update, never after the first call
  // (OnebitLamb's too).
  const int64_t previous = counters_.applied_steps;
  return previous >= std::max<int64_t>(config_.optimizer.freeze_step, 2);
}

void Engine::onebit_reset_errors() {
  for (OneBitGroup &group : onebit_) {
    group.reduce.reset_errors();
    std::fill(group.accumulator.begin(), group.accumulator.end(), 0.0f);
    if (group.d_accumulator.bytes() > 0) {
      (void)device_->memset(group.d_accumulator.data(), 0, group.d_accumulator.bytes(), nullptr);
      (void)device_->synchronize(nullptr);
    }
    group.lrs = 0.0;
  }
  // 1-bit LAMB's per-tensor scalars, fresh variance and previous momentum are not errors: they
  // stay (a checkpoint load restores them).
  zero_one_ = ZeroOnePolicy{};
}

Status Engine::onebit_build() {
  onebit_.clear();
  zero_one_ = ZeroOnePolicy{};
  onebit_lamb_ = OneBitLambEngineState{};
  if (!onebit_type()) return Status::Ok();
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  std::vector<size_t> group_elems(groups_.size(), 0);
  for (const OwnedSegment &seg : segments)
    group_elems[static_cast<size_t>(tensors_[seg.tensor].group)] += static_cast<size_t>(seg.count);
  if (config_.optimizer.type == OptimizerType::OneBitLamb) {
    // DeepSpeed's OnebitLamb fuses the momentum of every parameter group into one vector.
    size_t total = 0;
    for (size_t elems : group_elems) total += elems;
    group_elems.assign(1, total);
    onebit_lamb_.tensors.assign(tensors_.size(), OneBitLambTensorState{});
    if (onebit_on_device()) {
      DSRT_RETURN_IF_ERROR(onebit_lamb_build_device(total));
    } else {
      onebit_lamb_.fresh.assign(total, 0.0f);
      onebit_lamb_.last.assign(total, 0.0f);
    }
  }
  onebit_.resize(group_elems.size());  // one per parameter group; OneBitLamb: one for all
  const bool zero_one = config_.optimizer.type == OptimizerType::ZeroOneAdam;
  for (size_t g = 0; g < onebit_.size(); ++g) {
    OneBitGroup &group = onebit_[g];
    if (onebit_on_device()) {  // the buffers and the all-reduce's work in device memory (CUDA kernels)
      DSRT_RETURN_IF_ERROR(group.reduce.init_device(comm_.get(), group_elems[g], device_.get(), nullptr));
      DSRT_RETURN_IF_ERROR(device_->allocate(std::max<size_t>(group_elems[g], 1) * sizeof(float), &group.d_momentum));
      if (zero_one)
        DSRT_RETURN_IF_ERROR(device_->allocate(std::max<size_t>(group_elems[g], 1) * sizeof(float), &group.d_accumulator));
      continue;
    }
    DSRT_RETURN_IF_ERROR(group.reduce.init(comm_.get(), group_elems[g]));
    group.momentum.assign(group_elems[g], 0.0f);
    if (zero_one) group.accumulator.assign(group_elems[g], 0.0f);
  }
  if (!config_.fp16.enabled && rank() == 0)
    logf(DSRT_LOG_WARN, "%s: DeepSpeed verified the convergence of its 1-bit optimizers under fp16 only",
         optimizer_type_name(config_.optimizer.type));
  return Status::Ok();
}

Status Engine::onebit_update(const std::vector<OptimizerSlice> &slices,
                             const std::vector<std::vector<size_t>> &by_group, float grad_scale) {
  // DeepSpeed's first step() allocates the error buffers and returns: no parameter or state moves.
  if (counters_.applied_steps == 0) return Status::Ok();
  if (config_.optimizer.type == OptimizerType::OneBitLamb) return onebit_lamb_update(slices, by_group, grad_scale);
  const bool compressing = onebit_compressing();
  if (compressing && counters_.applied_steps == std::max<int64_t>(config_.optimizer.freeze_step, 2) && rank() == 0)
    log_progress(Format("OneBitAdam: compressed communication starts at step %lld",  // DeepSpeed prints it too
                        static_cast<long long>(counters_.applied_steps + 1)));
  // Host slices run the host loops, device slices the CUDA kernels (onebit_dispatch.h), in one sequence.
  const bool gpu = onebit_on_device();
  for (size_t g = 0; g < by_group.size() && g < onebit_.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    if (!compressing) {
      for (size_t i : by_group[g])
        DSRT_RETURN_IF_ERROR(onebit_warmup_on(gpu, hyper, slices[i], grad_scale, nullptr)
                                 .with_context(Format("OneBitAdam warm-up step (group %zu)", g)));
      continue;
    }
    OneBitGroup &group = onebit_[g];
    float *momentum = group.momentum_ptr();
    size_t at = 0;
    for (size_t i : by_group[g]) {
      DSRT_RETURN_IF_ERROR(onebit_momentum_on(gpu, hyper, slices[i], grad_scale, nullptr));
      if (slices[i].n > 0)
        DSRT_RETURN_IF_ERROR(device_->copy(momentum + at, slices[i].state0, slices[i].n * sizeof(float), nullptr));
      at += slices[i].n;
    }
    DSRT_RETURN_IF_ERROR(group.reduce.run(momentum)
                             .with_context(Format("OneBitAdam: the compressed momentum all-reduce of group %zu", g)));
    at = 0;
    for (size_t i : by_group[g]) {
      if (slices[i].n > 0)
        DSRT_RETURN_IF_ERROR(device_->copy(slices[i].state0, momentum + at, slices[i].n * sizeof(float), nullptr));
      at += slices[i].n;
      DSRT_RETURN_IF_ERROR(onebit_apply_on(gpu, hyper, slices[i], nullptr).with_context(Format("OneBitAdam step (group %zu)", g)));
    }
  }
  return gpu ? device_->synchronize(nullptr) : Status::Ok();
}

}  // namespace dsrt
