// defines: the Engine's monitors -- the losses and host times the host reports, DeepSpeed's
// events at each boundary, and rank 0's csv_monitor files.
#include <cmath>

#include "engine/engine.h"
#include "util/log.h"

namespace dsrt {

Status Engine::monitor_open() {
  monitor_ = MonitorEvents(config_.gradient_accumulation_steps);
  if (!config_.csv_monitor.enabled || rank() != 0) return Status::Ok();
  auto csv = std::make_unique<CsvMonitor>();
  DSRT_RETURN_IF_ERROR(CsvMonitor::open(config_.csv_monitor.output_path, config_.csv_monitor.job_name, csv.get()));
  logf(DSRT_LOG_INFO, "csv_monitor: writing events to %s", csv->folder().c_str());
  csv_ = std::move(csv);
  return Status::Ok();
}

Status Engine::report_loss(double loss) {
  DSRT_RETURN_IF_ERROR(require_built("report_loss"));
  monitor_.add_loss(loss);  // nan and inf are recorded as they are, as DeepSpeed logs them
  return Status::Ok();
}

Status Engine::report_host_time(int phase, double seconds) {
  DSRT_RETURN_IF_ERROR(require_built("report_host_time"));
  if (phase != DSRT_HOST_FORWARD && phase != DSRT_HOST_BACKWARD)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "report_host_time: phase is %d; use DSRT_HOST_FORWARD (%d) or "
                 "DSRT_HOST_BACKWARD (%d)", phase, DSRT_HOST_FORWARD, DSRT_HOST_BACKWARD);
  if (!(seconds >= 0) || !std::isfinite(seconds))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "report_host_time: %g seconds; pass the measured duration (>= 0)",
                 seconds);
  monitor_.add_host_time(phase, seconds);
  double &sum = progress_host_seconds_[phase == DSRT_HOST_FORWARD ? 0 : 1];
  sum = (sum < 0 ? 0 : sum) + seconds;
  return Status::Ok();
}

std::string Engine::host_times_text(int64_t steps) const {
  const double div = steps > 0 ? static_cast<double>(steps) : 1.0;
  std::string text;
  const char *names[2] = {"host forward", "host backward"};
  for (int i = 0; i < 2; ++i)
    if (progress_host_seconds_[i] >= 0) text += Format(", %s %.3f ms", names[i], 1e3 * progress_host_seconds_[i] / div);
  return text;
}

// Called by complete_boundary after global_step has advanced.
void Engine::monitor_boundary(double step_start) {
  BoundaryFacts facts;
  facts.samples_after = counters_.global_step * config_.train_batch_size;
  facts.samples_before = facts.samples_after - config_.train_batch_size;
  facts.next_lr = scheduler_->lr();
  facts.fp16 = config_.fp16.enabled;
  facts.loss_scale = scaler_.scale();
  facts.wall_clock_breakdown = config_.wall_clock_breakdown;
  facts.step_seconds = StepTimers::now() - step_start;
  const double reduced = reducer_.reduce_seconds();
  facts.reduce_seconds = reduced >= monitor_reduce_mark_ ? reduced - monitor_reduce_mark_ : reduced;
  has_last_loss_ = monitor_.window_loss(&last_loss_);
  events_ = monitor_.boundary(facts);
  if (!csv_) return;
  Status written = csv_->write(events_);
  if (!written.ok())  // training goes on: a full disk must not cost the run, but it is said once
    log_warn_once("csv_monitor_write", written.message() + " (further failures are not reported)");
}

}  // namespace dsrt
