// defines: MonitorEvents (the window's losses and host times -> DeepSpeed's boundary events) and events_text.
#include "monitor/monitor_events.h"

#include "monitor/monitor_csv.h"

namespace dsrt {

void MonitorEvents::add_loss(double loss) {
  losses_ += 1;
  loss_sum_ += loss / static_cast<double>(gas_ > 0 ? gas_ : 1);
}

void MonitorEvents::add_host_time(int phase, double seconds) {
  if (phase == 0) {
    forward_seconds_ += seconds;
    forward_reported_ = true;
  } else {
    backward_seconds_ += seconds;
    backward_reported_ = true;
  }
}

bool MonitorEvents::window_loss(double *out) const {
  if (losses_ == 0) return false;
  *out = loss_sum_;
  return true;
}

std::vector<MonitorEvent> MonitorEvents::boundary(const BoundaryFacts &facts) {
  std::vector<MonitorEvent> events;
  if (losses_ > 0) events.push_back({"Train/Samples/train_loss", loss_sum_, facts.samples_before});
  events.push_back({"Train/Samples/lr", facts.next_lr, facts.samples_after});
  if (facts.fp16) events.push_back({"Train/Samples/loss_scale", facts.loss_scale, facts.samples_after});
  if (facts.wall_clock_breakdown) {
    if (forward_reported_)
      events.push_back({"Train/Samples/elapsed_time_ms_forward", 1e3 * forward_seconds_, facts.samples_after});
    if (backward_reported_)
      events.push_back({"Train/Samples/elapsed_time_ms_backward", 1e3 * backward_seconds_, facts.samples_after});
    events.push_back(
        {"Train/Samples/elapsed_time_ms_backward_allreduce", 1e3 * facts.reduce_seconds, facts.samples_after});
    events.push_back({"Train/Samples/elapsed_time_ms_step", 1e3 * facts.step_seconds, facts.samples_after});
  }
  losses_ = 0;
  loss_sum_ = 0;
  forward_seconds_ = backward_seconds_ = 0;
  forward_reported_ = backward_reported_ = false;
  return events;
}

std::string events_text(const std::vector<MonitorEvent> &events) {
  std::string out;
  for (const MonitorEvent &event : events)
    out += event.name + "," + python_float_text(event.value) + "," + std::to_string(event.step) + "\n";
  return out;
}

}  // namespace dsrt
