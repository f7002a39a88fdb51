// defines: ParamGroups -- per-group hyperparameters, their names, ranges and the scheduler rule.
#include "engine/param_groups.h"

#include <cmath>
#include <cstring>

#include "optim/step_constants.h"

namespace dsrt {
namespace {

constexpr const char *kNames[] = {"lr",       "weight_decay", "beta1",    "beta2",     "eps",
                                  "momentum", "dampening",    "nesterov", "max_coeff", "min_coeff"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(HyperName::Count), "one name per value");

bool parse_name(const char *text, HyperName *out) {
  for (size_t i = 0; i < static_cast<size_t>(HyperName::Count); ++i)
    if (std::strcmp(text, kNames[i]) == 0) {
      *out = static_cast<HyperName>(i);
      return true;
    }
  return false;
}

// Which values an optimizer reads.
bool applies(OptimizerType type, HyperName name) {
  switch (name) {
    case HyperName::Lr:
    case HyperName::WeightDecay: return true;
    case HyperName::Beta1:
    case HyperName::Beta2:
      return type == OptimizerType::Adam || type == OptimizerType::AdamW || type == OptimizerType::Lamb ||
             type == OptimizerType::Lion || type == OptimizerType::OneBitAdam ||
             type == OptimizerType::ZeroOneAdam || type == OptimizerType::OneBitLamb;
    case HyperName::Eps:
      return type == OptimizerType::Adam || type == OptimizerType::AdamW || type == OptimizerType::Lamb ||
             type == OptimizerType::Adagrad || type == OptimizerType::OneBitAdam ||
             type == OptimizerType::ZeroOneAdam || type == OptimizerType::OneBitLamb;
    case HyperName::Momentum:
    case HyperName::Dampening:
    case HyperName::Nesterov: return type == OptimizerType::SGD;
    case HyperName::MaxCoeff:
    case HyperName::MinCoeff: return type == OptimizerType::Lamb || type == OptimizerType::OneBitLamb;
    case HyperName::Count: break;
  }
  return false;
}

std::string names_for(OptimizerType type) {
  std::string out;
  for (size_t i = 0; i < static_cast<size_t>(HyperName::Count); ++i)
    if (applies(type, static_cast<HyperName>(i))) out += (out.empty() ? "" : ", ") + std::string(kNames[i]);
  return out;
}

double &field(GroupHyper &g, HyperName name, double &scratch) {
  switch (name) {
    case HyperName::Lr: return g.lr;
    case HyperName::WeightDecay: return g.weight_decay;
    case HyperName::Beta1: return g.beta1;
    case HyperName::Beta2: return g.beta2;
    case HyperName::Eps: return g.eps;
    case HyperName::Momentum: return g.momentum;
    case HyperName::Dampening: return g.dampening;
    case HyperName::MaxCoeff: return g.max_coeff;
    case HyperName::MinCoeff: return g.min_coeff;
    case HyperName::Nesterov:
    case HyperName::Count: break;
  }
  return scratch;
}

}  // namespace

const char *hyper_name_text(HyperName name) {
  const size_t i = static_cast<size_t>(name);
  return i < static_cast<size_t>(HyperName::Count) ? kNames[i] : "?";
}

void ParamGroups::init(const OptimizerConfig &config, const char *schedule_name, bool schedule_momentum) {
  config_ = config;
  schedule_name_ = schedule_name != nullptr ? schedule_name : "";
  schedule_momentum_ = schedule_momentum;
  groups_.clear();
  add();
}

int32_t ParamGroups::add() {
  GroupHyper g;
  g.lr = config_.lr;
  g.weight_decay = config_.weight_decay;
  g.beta1 = config_.beta1;
  g.beta2 = config_.beta2;
  g.eps = config_.eps;
  g.momentum = config_.momentum;
  g.dampening = config_.dampening;
  g.nesterov = config_.nesterov;
  g.max_coeff = config_.max_coeff;
  g.min_coeff = config_.min_coeff;
  groups_.push_back(g);
  return static_cast<int32_t>(groups_.size() - 1);
}

Status ParamGroups::check_group(const char *what, int32_t group) const {
  if (group < 0 || static_cast<size_t>(group) >= groups_.size())
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "%s: group %d does not exist; the engine has %zu group(s) (0..%zu); add one with "
                 "dsrt_engine_add_group before build",
                 what, group, groups_.size(), groups_.size() - 1);
  return Status::Ok();
}

Status ParamGroups::check_range(int32_t group, HyperName name, double value) const {
  const char *n = hyper_name_text(name);
  if (!std::isfinite(value))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "group %d: %s is %g; it must be a finite number", group, n, value);
  switch (name) {
    case HyperName::Lr:
    case HyperName::WeightDecay:
    case HyperName::Eps:
    case HyperName::Momentum:
    case HyperName::MinCoeff:
      if (value < 0.0)
        return Error(DSRT_ERR_INVALID_ARGUMENT, "group %d: %s is %g; it must not be negative", group, n, value);
      break;
    case HyperName::Beta1:
    case HyperName::Beta2:
      if (value < 0.0 || value >= 1.0)
        return Error(DSRT_ERR_INVALID_ARGUMENT, "group %d: %s is %g; it must be in [0, 1)", group, n, value);
      break;
    case HyperName::MaxCoeff:
      if (value <= 0.0)
        return Error(DSRT_ERR_INVALID_ARGUMENT, "group %d: max_coeff is %g; it must be positive", group, value);
      break;
    case HyperName::Nesterov:
      if (value != 0.0 && value != 1.0)
        return Error(DSRT_ERR_INVALID_ARGUMENT, "group %d: nesterov is %g; use 0 or 1", group, value);
      break;
    case HyperName::Dampening:
    case HyperName::Count: break;
  }
  return Status::Ok();
}

Status ParamGroups::set(int32_t group, const char *name, double value) {
  DSRT_RETURN_IF_ERROR(check_group("set_group_hyper", group));
  HyperName which;
  if (name == nullptr || !parse_name(name, &which))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "set_group_hyper(group %d): unknown hyperparameter '%s'; %s uses: %s",
                 group, name ? name : "(null)", optimizer_type_name(config_.type), names_for(config_.type).c_str());
  if (!applies(config_.type, which))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "set_group_hyper(group %d): %s does not use '%s'; it uses: %s", group,
                 optimizer_type_name(config_.type), name, names_for(config_.type).c_str());
  if (!schedule_name_.empty()) {
    if (which == HyperName::Lr || (schedule_momentum_ && is_momentum(which)))
      return Error(DSRT_ERR_STATE,
                   "set_group_hyper(group %d, '%s'): the config's scheduler %s sets %s of every group; the host and "
                   "the config cannot both drive it -- remove the \"scheduler\" section to drive it from the host, "
                   "or stop setting it",
                   group, name, schedule_name_.c_str(), name);
  }
  DSRT_RETURN_IF_ERROR(set_raw(static_cast<size_t>(group), which, value).with_context("set_group_hyper"));
  return Status::Ok();
}

Status ParamGroups::set_raw(size_t group, HyperName name, double value) {
  DSRT_RETURN_IF_ERROR(check_range(static_cast<int32_t>(group), name, value));
  GroupHyper &g = groups_[group];
  if (name == HyperName::Nesterov) {
    g.nesterov = value != 0.0;
    return Status::Ok();
  }
  if (name == HyperName::MinCoeff && value > g.max_coeff)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "group %zu: min_coeff %g is above max_coeff %g", group, value, g.max_coeff);
  if (name == HyperName::MaxCoeff && value < g.min_coeff)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "group %zu: max_coeff %g is below min_coeff %g", group, value, g.min_coeff);
  double scratch = 0;
  field(g, name, scratch) = value;
  return Status::Ok();
}

Status ParamGroups::get(int32_t group, const char *name, double *out, const ScheduledHyper *schedule) const {
  DSRT_RETURN_IF_ERROR(check_group("get_group_hyper", group));
  HyperName which;
  if (name == nullptr || !parse_name(name, &which))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "get_group_hyper(group %d): unknown hyperparameter '%s'; names: %s", group,
                 name ? name : "(null)", names_for(config_.type).c_str());
  if (schedule == nullptr || !scheduled(which, *schedule, out)) *out = get_raw(static_cast<size_t>(group), which);
  return Status::Ok();
}

bool ParamGroups::is_momentum(HyperName which) const {
  return which == (config_.type == OptimizerType::SGD ? HyperName::Momentum : HyperName::Beta1);
}

bool ParamGroups::scheduled(HyperName which, const ScheduledHyper &schedule, double *out) const {
  if (which == HyperName::Lr) {
    *out = schedule.lr;
    return true;
  }
  if (schedule.has_momentum && is_momentum(which)) {
    *out = schedule.momentum;
    return true;
  }
  if (schedule.has_beta2 && which == HyperName::Beta2 && config_.type != OptimizerType::SGD &&
      config_.type != OptimizerType::Adagrad) {
    *out = schedule.beta2;
    return true;
  }
  return false;
}

double ParamGroups::get_raw(size_t group, HyperName name) const {
  GroupHyper g = groups_[group];
  if (name == HyperName::Nesterov) return g.nesterov ? 1.0 : 0.0;
  double scratch = 0;
  return field(g, name, scratch);
}

bool ParamGroups::any_momentum() const {
  if (config_.type != OptimizerType::SGD) return false;
  for (const GroupHyper &g : groups_)
    if (g.momentum != 0.0) return true;
  return schedule_momentum_;
}

Status ParamGroups::check_consistent() const {
  if (config_.type != OptimizerType::SGD) return Status::Ok();
  for (size_t i = 0; i < groups_.size(); ++i) {
    const GroupHyper &g = groups_[i];
    if (g.nesterov && (g.momentum <= 0.0 || g.dampening != 0.0))
      return Error(DSRT_ERR_CONFIG, "group %zu: nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                   i, g.momentum, g.dampening);
  }
  return Status::Ok();
}

OptimizerHyper ParamGroups::hyper(size_t g, int64_t step, const ScheduledHyper &schedule) const {
  OptimizerConfig c = config_;
  const GroupHyper &v = groups_[g];
  c.weight_decay = v.weight_decay;
  c.beta1 = v.beta1;
  c.beta2 = v.beta2;
  c.eps = v.eps;
  c.momentum = v.momentum;
  c.dampening = v.dampening;
  c.nesterov = v.nesterov;
  c.max_coeff = v.max_coeff;
  c.min_coeff = v.min_coeff;
  (void)scheduled(HyperName::Beta1, schedule, &c.beta1);
  (void)scheduled(HyperName::Beta2, schedule, &c.beta2);
  (void)scheduled(HyperName::Momentum, schedule, &c.momentum);
  return make_optimizer_hyper(c, schedule.lr, step);
}

}  // namespace dsrt
