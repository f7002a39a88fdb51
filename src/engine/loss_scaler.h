// loss_scaler.h -- fp16 loss scaling with DeepSpeed's semantics (DynamicLossScaler and the static
// scaler), and the bf16/fp32 "no scaling, skip non-finite steps" policy.
#pragma once

#include <cstdint>

#include "config/train_config.h"
#include "util/status.h"
#include "zero/step_counters.h"

namespace dsrt {

// LossScalerState: zero/step_counters.h (checkpoints carry it).

class LossScaler {
 public:
  // fp16.enabled with loss_scale 0: dynamic; with loss_scale > 0: static; otherwise scale 1.
  LossScaler(const Fp16Config &fp16, bool fp16_enabled);

  // CONFIG error naming the fp16.* key that is out of range (window < 1, hysteresis < 1,
  // min_loss_scale <= 0, negative loss_scale, ...). The constructor clamps such values so it never
  // misbehaves, but the engine should call this first and refuse the config.
  static Status validate_config(const Fp16Config &fp16, bool fp16_enabled);

  double scale() const { return state_.cur_scale; }
  bool dynamic() const { return dynamic_; }

  // Called once per accumulation boundary with whether the gradients held inf/nan, after the
  // step was applied or skipped. Follows DeepSpeed's DynamicLossScaler.update_scale exactly,
  // except that reaching min_loss_scale never raises: at_minimum_overflow() reports it.
  void update(bool overflow);

  // True when the last update() saw an overflow while already at min_loss_scale (DeepSpeed
  // raises here; dsrt skips the step and reports it).
  bool at_minimum_overflow() const { return at_minimum_overflow_; }

  const LossScalerState &state() const { return state_; }
  void set_state(const LossScalerState &state) { state_ = state; }

 private:
  bool dynamic_ = false;
  double scale_factor_ = 2.0;
  int64_t scale_window_ = 1000;
  double min_scale_ = 1.0;
  int64_t delayed_shift_ = 2;  // hysteresis
  bool consecutive_hysteresis_ = false;
  bool at_minimum_overflow_ = false;
  LossScalerState state_;
};

}  // namespace dsrt
