// loss_scaler.cpp -- DeepSpeed's DynamicLossScaler / static LossScaler semantics.
//
// Reference: deepspeed/runtime/fp16/loss_scaler.py (DeepSpeed master, 2025: the version whose
// update_scale computes stable_interval = cur_iter - last_overflow_iter - 1 and grows the scale
// only when that interval is a positive multiple of scale_window). The engine maps the JSON keys
// as DeepSpeed's engine does: init_scale = 2^initial_scale_power, scale_window =
// loss_scale_window, delayed_shift = hysteresis, min_scale = min_loss_scale, scale_factor = 2.
#include "engine/loss_scaler.h"
#include "config/config_rules.h"

#include <algorithm>
#include <cmath>

#include "util/log.h"

namespace dsrt {

LossScaler::LossScaler(const Fp16Config &fp16, bool fp16_enabled) {
  if (!fp16_enabled) {
    // bf16 / fp32: DeepSpeed builds a static scaler of 1 so the step pipeline is uniform.
    state_.cur_scale = 1.0;
    return;
  }
  if (fp16.loss_scale != 0.0) {
    state_.cur_scale = fp16.loss_scale;
    return;
  }
  dynamic_ = true;
  scale_factor_ = 2.0;
  // Guard against configs that skipped validate_config(): a zero window would divide by zero and
  // a hysteresis below 1 would never let the scale drop.
  scale_window_ = std::max<int64_t>(1, fp16.loss_scale_window);
  min_scale_ = fp16.min_loss_scale;
  delayed_shift_ = std::max(1, fp16.hysteresis);
  consecutive_hysteresis_ = fp16.consecutive_hysteresis;
  state_.cur_scale = std::ldexp(1.0, fp16.initial_scale_power);
  state_.cur_iter = 0;
  state_.last_overflow_iter = -1;
  state_.cur_hysteresis = delayed_shift_;
}

Status LossScaler::validate_config(const Fp16Config &fp16, bool fp16_enabled) {
  return check_fp16_config(fp16, fp16_enabled);  // the config layer's rule (config_rules.h)
}

void LossScaler::update(bool overflow) {
  at_minimum_overflow_ = false;
  if (!dynamic_) return;  // a static scale never changes; the engine still skips overflowed steps

  if (overflow) {
    if (delayed_shift_ == 1 || state_.cur_hysteresis == 1) {
      if (state_.cur_scale == min_scale_) {
        // DeepSpeed raises "Current loss scale already at minimum" here; we keep training and
        // let the engine report it (the step is skipped like any overflowed step).
        at_minimum_overflow_ = true;
        log_warn_once("loss_scale_at_minimum",
                      Format("fp16 gradients overflowed at the minimum loss scale %g; the step is "
                             "skipped (DeepSpeed would stop the run here)",
                             min_scale_));
      }
      state_.cur_scale = std::max(state_.cur_scale / scale_factor_, min_scale_);
    } else {
      state_.cur_hysteresis -= 1;
    }
    state_.last_overflow_iter = state_.cur_iter;
  } else {
    if (consecutive_hysteresis_) state_.cur_hysteresis = delayed_shift_;
    const int64_t stable_interval = state_.cur_iter - state_.last_overflow_iter - 1;
    if (stable_interval > 0 && stable_interval % scale_window_ == 0) {
      if (!consecutive_hysteresis_) state_.cur_hysteresis = delayed_shift_;
      state_.cur_scale *= scale_factor_;
    }
  }
  state_.cur_iter += 1;
}

}  // namespace dsrt
