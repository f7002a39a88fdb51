// param_groups.h -- parameter groups: every tensor belongs to one group, and each group carries its
// own optimizer hyperparameters (lr, weight_decay, betas, eps, and the per-optimizer values:
// SGD's momentum, dampening and nesterov, Lamb's trust-ratio bounds). Group 0 starts as the
// config's optimizer section; every group added later starts as a copy of the config's values.
//
// Who drives what (the rule the engine and docs/engine.md state):
//   - without a config "scheduler" section the host drives every value of every group: it may set
//     them before build and between accumulation windows;
//   - with a config scheduler, the schedule drives lr (and, for OneCycle with cycle_momentum, beta1
//     or SGD's momentum) of every group, as DeepSpeed's schedules set every param group; setting
//     one of those values from the host is then ambiguous and refused with DSRT_ERR_STATE naming
//     the scheduler. The host may still set every other value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

struct GroupHyper {
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double max_coeff = 10.0;
  double min_coeff = 0.01;
};

// What a config schedule sets for a step: the lr, and under OneCycle's momentum cycle the momentum
// (Adam-type beta1, SGD's momentum) and the beta2 it pins.
struct ScheduledHyper {
  double lr = 0.0;
  bool has_momentum = false;
  double momentum = 0.0;
  bool has_beta2 = false;
  double beta2 = 0.0;
};

// The hyperparameter names the C API takes, in a fixed order (checkpoints store them by name).
enum class HyperName { Lr, WeightDecay, Beta1, Beta2, Eps, Momentum, Dampening, Nesterov, MaxCoeff, MinCoeff, Count };
const char *hyper_name_text(HyperName name);

class ParamGroups {
 public:
  // Group 0 from the config's optimizer section. schedule_name is the config scheduler's
  // DeepSpeed name, or nullptr without one; schedule_momentum says whether it cycles momentum.
  void init(const OptimizerConfig &config, const char *schedule_name, bool schedule_momentum);

  size_t size() const { return groups_.size(); }
  int32_t add();  // a new group with the config's values; returns its index
  const GroupHyper &group(size_t g) const { return groups_[g]; }

  // INVALID_ARGUMENT for an unknown group (naming the number of groups).
  Status check_group(const char *what, int32_t group) const;
  // Set / read one value by name ("lr", "weight_decay", "beta1", "beta2", "eps", "momentum",
  // "dampening", "nesterov", "max_coeff", "min_coeff"). Set: INVALID_ARGUMENT for an unknown
  // group or name, a name the optimizer does not use, or an out-of-range value (negative lr,
  // betas outside [0, 1), eps <= 0 ...); STATE for a value the config scheduler drives. The
  // message names the group and the value.
  Status set(int32_t group, const char *name, double value);
  // With schedule: what it drives (as hyper() applies it) instead of the group's value.
  Status get(int32_t group, const char *name, double *out, const ScheduledHyper *schedule = nullptr) const;
  // Values by enum (checkpoints), without validation against the scheduler; set_raw validates range.
  double get_raw(size_t group, HyperName name) const;
  Status set_raw(size_t group, HyperName name, double value);

  // Whether any group runs SGD with momentum (the engine then keeps a momentum buffer).
  bool any_momentum() const;
  // CONFIG error if a group's SGD nesterov setting needs momentum > 0 and dampening 0.
  Status check_consistent() const;

  // The kernels' hyperparameters for group g at step `step`: the group's values, with the lr the
  // step uses (schedule.lr: the group's own without a config schedule) and what the schedule drives.
  OptimizerHyper hyper(size_t g, int64_t step, const ScheduledHyper &schedule) const;

 private:
  // The value the schedule gives `which`, if it drives it.
  bool scheduled(HyperName which, const ScheduledHyper &schedule, double *out) const;
  // The value a momentum schedule drives: SGD's momentum, every other optimizer's beta1.
  bool is_momentum(HyperName which) const;
  Status check_range(int32_t group, HyperName name, double value) const;
  OptimizerConfig config_;
  std::vector<GroupHyper> groups_;
  std::string schedule_name_;  // empty: no config scheduler
  bool schedule_momentum_ = false;
};

}  // namespace dsrt
