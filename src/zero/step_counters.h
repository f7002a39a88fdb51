// step_counters.h -- the training loop's counters that checkpoints carry: the step counts and the
// loss scaler's state. Plain values, kept below the engine so that the partitioned-state view
// (partitioned_state.h) and the checkpoint manifest can name them without the engine.
#pragma once

#include <cstdint>

namespace dsrt {

struct EngineCounters {
  int64_t global_step = 0;    // boundaries so far, skipped included (DeepSpeed's global_steps)
  int64_t applied_steps = 0;  // optimizer updates applied (Adam's step count for bias correction)
  int64_t skipped_steps = 0;
  int64_t micro_step = 0;     // micro-steps taken since the last boundary
};

// The fp16 loss scaler's state (engine/loss_scaler.h: DeepSpeed's DynamicLossScaler fields).
struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  int64_t cur_hysteresis = 2;
};

}  // namespace dsrt
