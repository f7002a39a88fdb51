// lr_scheduler.cpp -- make_lr_scheduler: refuses what config_rules.h refuses about scheduler.params
// (the way DeepSpeed's constructors need them, plus the checks DeepSpeed leaves to a crash or a
// silent no-op), then builds the schedule. The constant schedule for scheduler type None lives here too.
#include <cmath>
#include <string>

#include "config/config_rules.h"
#include "engine/lr_schedules_internal.h"
#include "util/log.h"

namespace dsrt {

namespace {

class ConstantLr final : public lr_detail::ScheduleBase {
 public:
  ConstantLr(double base_lr, double base_momentum)
      : ScheduleBase(base_momentum), base_lr_(base_lr) {}
  const char *name() const override { return "None"; }
  double lr() const override { return base_lr_; }

 private:
  double base_lr_;
};

// DeepSpeed accepts an unknown warmup_type with a warning and runs the log curve; so do we.
void warn_unknown_warmup_type(const SchedulerConfig &config, const char *schedule) {
  if (config.warmup_type == "log" || config.warmup_type == "linear") return;
  log_warn_once("scheduler.warmup_type." + config.warmup_type,
                Format("scheduler.params.warmup_type \"%s\" is not \"log\" or \"linear\"; %s uses "
                       "\"log\" as DeepSpeed does",
                       config.warmup_type.c_str(), schedule));
}

}  // namespace

Status make_lr_scheduler(const SchedulerConfig &config, double base_lr, double base_momentum,
                         std::unique_ptr<LrScheduler> *out) {
  if (out == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "make_lr_scheduler: out is NULL");
  out->reset();
  // The refusals are the config layer's (config_rules.h), so `dsrt config check` makes them too.
  DSRT_RETURN_IF_ERROR(check_scheduler_config(config, base_lr));
  switch (config.type) {
    case SchedulerType::None:
      *out = std::make_unique<ConstantLr>(base_lr, base_momentum);
      return Status::Ok();
    case SchedulerType::WarmupLR:
      warn_unknown_warmup_type(config, "WarmupLR");
      *out = lr_detail::make_warmup(config, /*with_decay=*/false, base_momentum);
      return Status::Ok();
    case SchedulerType::WarmupDecayLR:
      warn_unknown_warmup_type(config, "WarmupDecayLR");
      *out = lr_detail::make_warmup(config, /*with_decay=*/true, base_momentum);
      return Status::Ok();
    case SchedulerType::WarmupCosineLR:
      warn_unknown_warmup_type(config, "WarmupCosineLR");
      *out = lr_detail::make_warmup_cosine(config, base_lr, base_momentum);
      return Status::Ok();
    case SchedulerType::OneCycle:
      *out = lr_detail::make_one_cycle(config, base_momentum);
      return Status::Ok();
    case SchedulerType::LRRangeTest:
      *out = lr_detail::make_lr_range_test(config, base_momentum);
      return Status::Ok();
  }
  return Error(DSRT_ERR_INTERNAL, "make_lr_scheduler: scheduler type %d passed the config check",
               static_cast<int>(config.type));
}

}  // namespace dsrt
