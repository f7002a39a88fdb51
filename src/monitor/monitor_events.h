// monitor_events.h -- the events DeepSpeed's engine gives its monitors (csv_monitor, tensorboard,
// wandb), with the same names, values and steps:
//   Train/Samples/train_loss   the sum of loss / gradient_accumulation_steps over the window's
//                              micro-steps (the losses the host reported), at the samples seen
//                              before the boundary (DeepSpeed writes it during the last backward)
//   Train/Samples/lr           the learning rate after the boundary (the next step's), at the
//                              samples seen after it (global_steps * train_batch_size)
//   Train/Samples/loss_scale   with fp16 only: the loss scale after the boundary
//   with wall_clock_breakdown, in milliseconds over the window, at the samples after it:
//   Train/Samples/elapsed_time_ms_forward, _backward (as the host reported them),
//   _backward_allreduce (dsrt's gradient collectives), _step (the boundary's engine step)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

struct MonitorEvent {
  std::string name;
  double value = 0;
  int64_t step = 0;
};

// What the engine knows at a boundary.
struct BoundaryFacts {
  int64_t samples_before = 0;  // global_steps * train_batch_size before this boundary
  int64_t samples_after = 0;
  double next_lr = 0;
  bool fp16 = false;
  double loss_scale = 1;
  bool wall_clock_breakdown = false;
  double step_seconds = 0;    // the boundary's engine step
  double reduce_seconds = 0;  // gradient collectives since the previous boundary
};

// Collects what the host reports between boundaries and turns a boundary into events.
class MonitorEvents {
 public:
  explicit MonitorEvents(int64_t gradient_accumulation_steps) : gas_(gradient_accumulation_steps) {}
  void add_loss(double loss);
  // phase 0 forward, 1 backward (DSRT_HOST_FORWARD, DSRT_HOST_BACKWARD).
  void add_host_time(int phase, double seconds);
  // The events of this boundary; resets the window.
  std::vector<MonitorEvent> boundary(const BoundaryFacts &facts);
  // The train_loss of the window in progress (false when the host reported no loss in it).
  bool window_loss(double *out) const;

 private:
  int64_t gas_;
  int64_t losses_ = 0;
  double loss_sum_ = 0;  // sum of loss / gas
  double forward_seconds_ = 0, backward_seconds_ = 0;
  bool forward_reported_ = false, backward_reported_ = false;
};

// "name,value,step\n" per event, values as python_float_text writes them.
std::string events_text(const std::vector<MonitorEvent> &events);

}  // namespace dsrt
