// defines: the engine's parameter groups, host-driven hyperparameters and host-driven accumulation
// boundaries (the calls a host uses to own the LR schedule and the window; see param_groups.h).
#include "engine/engine.h"
#include "util/log.h"

namespace dsrt {

Status Engine::add_group(int32_t *out) {
  DSRT_RETURN_IF_ERROR(require_usable("add_group"));
  if (built_)
    return Error(DSRT_ERR_STATE, "add_group: the engine is already built; add every group before dsrt_engine_build");
  const int32_t g = groups_.add();
  if (out != nullptr) *out = g;
  return Status::Ok();
}

Status Engine::set_tensor_group(size_t t, int32_t group) {
  DSRT_RETURN_IF_ERROR(require_usable("tensor_set_group"));
  if (built_)
    return Error(DSRT_ERR_STATE,
                 "tensor_set_group('%s', %d): the engine is already built; put tensors in their groups before "
                 "dsrt_engine_build",
                 tensor_name(t).c_str(), group);
  DSRT_RETURN_IF_ERROR(groups_.check_group(Format("tensor_set_group('%s')", tensor_name(t).c_str()).c_str(), group));
  tensors_[t].group = group;
  return Status::Ok();
}

bool Engine::window_open() const {
  if (!built_) return false;
  return counters_.micro_step != 0 || reducer_.window_open();
}

Status Engine::set_group_hyper(int32_t group, const char *name, double value) {
  DSRT_RETURN_IF_ERROR(require_usable("set_group_hyper"));
  DSRT_RETURN_IF_ERROR(require_no_pending("set_group_hyper"));
  if (window_open())
    return Error(DSRT_ERR_STATE,
                 "set_group_hyper(group %d, '%s'): an accumulation window is open (%lld micro-step(s) since the last "
                 "boundary, gradients requested); set hyperparameters between windows, after the boundary step",
                 group, name ? name : "(null)", static_cast<long long>(counters_.micro_step));
  const bool momentum_before = groups_.any_momentum();
  const int32_t checked_group = group;
  DSRT_RETURN_IF_ERROR(groups_.set(checked_group, name, value));
  if (built_ && !momentum_before && groups_.any_momentum()) {
    // SGD's momentum buffer is allocated at build only when a group uses momentum.
    (void)groups_.set_raw(static_cast<size_t>(group), HyperName::Momentum, 0.0);
    return Error(DSRT_ERR_STATE,
                 "set_group_hyper(group %d, 'momentum'): no group used momentum at build, so the engine keeps no "
                 "momentum buffer; give a group momentum before dsrt_engine_build",
                 group);
  }
  if (built_) {
    Status consistent = groups_.check_consistent();
    if (!consistent.ok()) {
      (void)groups_.set_raw(static_cast<size_t>(group), HyperName::Nesterov, 0.0);
      return Error(DSRT_ERR_INVALID_ARGUMENT, "set_group_hyper: %s (nesterov turned off)", consistent.message().c_str());
    }
  }
  return Status::Ok();
}

Status Engine::get_group_hyper(int32_t group, const char *name, double *out) const {
  if (config_.scheduler.type == SchedulerType::None) return groups_.get(group, name, out);
  const ScheduledHyper next = scheduled_hyper(scheduler_->lr());
  return groups_.get(group, name, out, &next);
}

ScheduledHyper Engine::scheduled_hyper(double lr) const {
  ScheduledHyper s;
  s.lr = lr;
  s.has_momentum = scheduler_->has_momentum();
  s.momentum = scheduler_->momentum();
  s.has_beta2 = scheduler_->has_beta2();
  s.beta2 = scheduler_->beta2();
  return s;
}

Status Engine::group_lr_used(int32_t group, double *out) const {
  DSRT_RETURN_IF_ERROR(groups_.check_group("group_lr", group));
  if (step_lrs_valid_ && static_cast<size_t>(group) < step_lrs_.size()) {
    *out = step_lrs_[static_cast<size_t>(group)];
    return Status::Ok();
  }
  return get_group_hyper(group, "lr", out);
}

void Engine::fix_step_lrs() {
  step_lrs_.assign(groups_.size(), 0.0);
  const bool scheduled = config_.scheduler.type != SchedulerType::None;
  for (size_t g = 0; g < groups_.size(); ++g) step_lrs_[g] = scheduled ? scheduler_->lr() : groups_.group(g).lr;
}

OptimizerHyper Engine::group_hyper(size_t g) const {
  return groups_.hyper(g, counters_.applied_steps + 1, scheduled_hyper(step_lrs_[g]));
}

Status Engine::set_accumulation_boundary(int32_t mode) {
  DSRT_RETURN_IF_ERROR(require_usable("set_accumulation_boundary"));
  if (mode < -1 || mode > 1)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "set_accumulation_boundary: %d; use 1 (this micro-step closes the window), 0 (it does not) or -1 "
                 "(count gradient_accumulation_steps)",
                 mode);
  boundary_override_ = mode;
  if (built_) reducer_.set_last_micro_step(mode >= 0 ? mode : -1);
  return Status::Ok();
}

Status Engine::set_scale_wrt_gas(bool enabled) {
  DSRT_RETURN_IF_ERROR(require_usable("set_scale_wrt_gas"));
  if (window_open() && enabled != scale_wrt_gas_)
    return Error(DSRT_ERR_STATE,
                 "set_scale_wrt_gas(%d): an accumulation window is open; change it between windows (after the "
                 "boundary step) so that every micro-step of a window is scaled alike",
                 enabled ? 1 : 0);
  scale_wrt_gas_ = enabled;
  if (built_) reducer_.set_divide_by_accumulation(enabled);
  return Status::Ok();
}

}  // namespace dsrt
