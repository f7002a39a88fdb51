// defines: the training step -- micro-step end, and at the accumulation boundary: reduction,
// agreed overflow check, global norm, clipping, the optimizer on this rank's partition, publishing
// the working copies, scheduler and loss-scaler updates, and the progress line. What each ZeRO
// stage does at each of these points is its strategy's (zero/zero_stage.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/engine.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

Status Engine::set_stream(void *stream) {
  if (built_) return Error(DSRT_ERR_STATE, "set_stream: call it before dsrt_engine_build");
  host_stream_ = stream;
  return Status::Ok();
}

Status Engine::set_host_staging_on_cpu(bool on) {
  if (built_) return Error(DSRT_ERR_STATE, "set_host_staging_on_cpu: call it before dsrt_engine_build");
  host_staging_on_cpu_ = on;
  return Status::Ok();
}

Status Engine::order_after_host() {
  if (host_stream_ == nullptr || device_->type() == DSRT_DEVICE_CPU) return Status::Ok();
  DSRT_RETURN_IF_ERROR(device_->record_event(order_event_, host_stream_));
  return device_->stream_wait_event(nullptr, order_event_).with_context("ordering after the host's stream");
}

Status Engine::order_host_after_engine() {
  if (host_stream_ == nullptr || device_->type() == DSRT_DEVICE_CPU) return Status::Ok();
  DSRT_RETURN_IF_ERROR(device_->record_event(order_event_, nullptr));
  return device_->stream_wait_event(host_stream_, order_event_).with_context("ordering the host's stream after dsrt");
}

int64_t Engine::working_partition_base() const {
  return part_.flat() && part_.stage() > 0 ? part_.flat_layout().partition(part_rank()).begin : 0;
}

const float *Engine::step_grads() const {
  return stages_through_host() ? store_.host_grads().as<float>() : reducer_.grad_partition();
}

Status Engine::stage_host_grads() {
  if (!stages_through_host()) return Status::Ok();
  // Stage 3 NVMe: into the swap files; a failure is agreed in the norm pass.
  if (GradSwap *swap = nvme_grad_swap()) {
    swap->defer(nvme_grads_from_device());
    return Status::Ok();
  }
  // Normally every range was copied as it became final; only wait for those copies.
  if (reducer_.final_ranges_delivered()) return device_->synchronize(nullptr);
  const size_t bytes = static_cast<size_t>(part_.partition_elems()) * sizeof(float);
  DSRT_RETURN_IF_ERROR(device_->copy(store_.host_grads().data(), reducer_.grad_partition(), bytes, nullptr)
                           .with_context("step: copying the gradient partition to host memory (offload_optimizer cpu)"));
  return device_->synchronize(nullptr);
}

Status Engine::upload_working_partition() {
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  const int64_t wsize = static_cast<int64_t>(dtype_size(working_dtype()));
  char *working = static_cast<char *>(working_.data()) + working_partition_base() * wsize;
  const char *staged = store_.host_working().as<char>();
  for (size_t i = 0; i < segments.size();) {
    // One copy per run of adjacent segments: padding between runs is never written. With
    // offload_optimizer.ratio the device part [0, store_.split()) was written on the device.
    int64_t begin = segments[i].part_offset;
    int64_t end = begin + segments[i].count;
    for (++i; i < segments.size() && segments[i].part_offset == end; ++i) end += segments[i].count;
    begin = std::max(begin, store_.split());
    if (end <= begin) continue;
    DSRT_RETURN_IF_ERROR(device_->copy(working + begin * wsize, staged + begin * wsize,
                                       static_cast<size_t>((end - begin) * wsize), nullptr)
                             .with_context("copying the updated working partition to the device"));
  }
  return device_->synchronize(nullptr);
}

Status Engine::write_working_from_host(const float *src, size_t n, int64_t elem_offset) {
  if (n == 0) return Status::Ok();
  const dsrt_dtype wdt = working_dtype();
  char *dst = static_cast<char *>(working_.data()) + elem_offset * static_cast<int64_t>(dtype_size(wdt));
  if (device_->type() == DSRT_DEVICE_CPU) {
    cpu_convert(src, DSRT_F32, dst, wdt, n);
    return Status::Ok();
  }
  std::vector<char> staged(n * dtype_size(wdt));
  cpu_convert(src, DSRT_F32, staged.data(), wdt, n);
  DSRT_RETURN_IF_ERROR(device_->copy(dst, staged.data(), staged.size(), nullptr));
  return device_->synchronize(nullptr);
}

Status Engine::optimizer_update(float grad_scale) {
  if (store_.nvme()) return nvme_optimizer_update(grad_scale, 0);
  if (store_.split() > 0) return split_optimizer_update(grad_scale);
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  const dsrt_dtype wdt = working_dtype();
  const int64_t wsize = static_cast<int64_t>(dtype_size(wdt));
  // Offloaded, the update runs on host memory; on a GPU it writes the working values into the
  // host staging (partition coordinates), copied to the device afterwards, and on the CPU device
  // straight into the working copy.
  const bool on_host = host_optimizer();
  const bool staged = stages_through_host();
  const int64_t working_base = staged ? 0 : working_partition_base();
  const float *grads = step_grads();
  char *working = staged ? store_.host_working().as<char>() : static_cast<char *>(working_.data());
  const bool bf16_master = store_.master_dtype() == DSRT_BF16, bf16_states = store_.state_dtype() == DSRT_BF16;
  // The kept shards are the masters (engine_param_nvme.cpp): the update writes them once.
  const bool masters_are_working = !staged && wdt == DSRT_F32 && !bf16_master && working != nullptr &&
                                   working + working_base * wsize == store_.buffer(-1).as<char>();
  auto slice_of = [&](const OwnedSegment &seg) {
    OptimizerSlice s;
    // bf16.bf16_master_weights_and_grads / bf16_optimizer_states: bf16 storage (cpu_optimizer.h).
    if (bf16_master) s.master_bf16 = store_.buffer(-1).as<uint16_t>() + seg.part_offset;
    else s.master = store_.buffer(-1).as<float>() + seg.part_offset;
    s.grad = grads + seg.part_offset;
    s.grad_dtype = DSRT_F32;
    for (int i = 0; i < num_states_; ++i) {
      if (bf16_states) (i == 0 ? s.state0_bf16 : s.state1_bf16) = store_.buffer(i).as<uint16_t>() + seg.part_offset;
      else (i == 0 ? s.state0 : s.state1) = store_.buffer(i).as<float>() + seg.part_offset;
    }
    if (!masters_are_working) s.working = working + (working_base + seg.part_offset) * wsize;
    s.working_dtype = wdt;
    s.n = static_cast<size_t>(seg.count);
    return s;
  };

  // Every owned segment of a group in one multi-tensor pass with the group's hyperparameters, on
  // the backend that matches where the buffers are. A segment is a piece of one tensor, so a
  // tensor straddling partitions is stepped with its own group's values on every rank.
  OptimizerBackend &backend = on_host ? *host_backend_ : *backend_;
  std::vector<OptimizerSlice> slices;
  slices.reserve(segments.size());
  for (const OwnedSegment &seg : segments) slices.push_back(slice_of(seg));
  const size_t num_groups = groups_.size();
  // by_group[g]: indices into segments/slices of group g's pieces.
  std::vector<std::vector<size_t>> by_group(num_groups);
  for (size_t i = 0; i < segments.size(); ++i)
    by_group[static_cast<size_t>(tensors_[segments[i].tensor].group)].push_back(i);
  if (onebit_type()) {
    DSRT_RETURN_IF_ERROR(config_.optimizer.type == OptimizerType::ZeroOneAdam
                             ? zero_one_update(slices, by_group, grad_scale)
                             : onebit_update(slices, by_group, grad_scale));
    return on_host ? upload_working_partition() : Status::Ok();
  }
  if (config_.optimizer.type != OptimizerType::Lamb) {
    std::vector<OptimizerSlice> group_slices;
    for (size_t g = 0; g < num_groups; ++g) {
      if (by_group[g].empty()) continue;
      group_slices.clear();
      for (size_t i : by_group[g]) group_slices.push_back(slices[i]);
      DSRT_RETURN_IF_ERROR(backend.step_many(group_hyper(g), group_slices.data(), group_slices.size(), grad_scale)
                               .with_context(Format("optimizer step over this rank's %zu tensor pieces of group %zu",
                                                    group_slices.size(), g)));
    }
    DSRT_RETURN_IF_ERROR(backend.synchronize());
    return staged ? upload_working_partition() : Status::Ok();
  }

  // Lamb: the trust ratio needs whole-tensor norms, summed over the ranks' pieces (each tensor has
  // at most one piece per rank, so slice i is tensor segments[i].tensor).
  const size_t part_bytes = static_cast<size_t>(part_.partition_elems()) * sizeof(float);
  if (lamb_update_.bytes() < part_bytes)
    DSRT_RETURN_IF_ERROR((on_host ? device_->allocate_pinned(part_bytes, &lamb_update_)
                                  : device_->allocate(part_bytes, &lamb_update_))
                             .with_context("allocating Lamb's update buffer"));
  float *update = lamb_update_.as<float>();
  const size_t n = tensors_.size();
  std::vector<float *> updates;
  for (const OwnedSegment &seg : segments) updates.push_back(update + seg.part_offset);
  std::vector<double> param_sq(slices.size(), 0.0), update_sq(slices.size(), 0.0);
  // One pass per group; the group's pieces are gathered into contiguous arrays for the backend.
  auto per_group = [&](size_t g, auto &&run) -> Status {
    std::vector<OptimizerSlice> gs;
    std::vector<size_t> idx = by_group[g];
    for (size_t i : idx) gs.push_back(slices[i]);
    return run(group_hyper(g), gs, idx);
  };
  for (size_t g = 0; g < num_groups; ++g) {
    if (by_group[g].empty()) continue;
    DSRT_RETURN_IF_ERROR(per_group(g, [&](const OptimizerHyper &hyper, std::vector<OptimizerSlice> &gs,
                                          const std::vector<size_t> &idx) -> Status {
      std::vector<float *> gu;
      std::vector<double> gp(gs.size(), 0.0), gq(gs.size(), 0.0);
      for (size_t i : idx) gu.push_back(updates[i]);
      DSRT_RETURN_IF_ERROR(backend.lamb_phase1_many(hyper, gs.data(), gs.size(), grad_scale, gu.data(), gp.data(), gq.data())
                               .with_context(Format("Lamb phase 1 (group %zu)", g)));
      for (size_t k = 0; k < idx.size(); ++k) {
        param_sq[idx[k]] += gp[k];
        update_sq[idx[k]] += gq[k];
      }
      return Status::Ok();
    }));
  }
  std::vector<double> sums(2 * n, 0.0);
  for (size_t i = 0; i < segments.size(); ++i) {
    sums[segments[i].tensor] += param_sq[i];
    sums[n + segments[i].tensor] += update_sq[i];
  }
  DSRT_RETURN_IF_ERROR(stage_->agree_tensor_sums(sums.data(), sums.size()));
  std::vector<double> param_norms, update_norms;
  for (const OwnedSegment &seg : segments) {
    param_norms.push_back(std::sqrt(sums[seg.tensor]));
    update_norms.push_back(std::sqrt(sums[n + seg.tensor]));
  }
  for (size_t g = 0; g < num_groups; ++g) {
    if (by_group[g].empty()) continue;
    DSRT_RETURN_IF_ERROR(per_group(g, [&](const OptimizerHyper &hyper, std::vector<OptimizerSlice> &gs,
                                          const std::vector<size_t> &idx) -> Status {
      std::vector<const float *> gu;
      std::vector<double> pn, un;
      for (size_t i : idx) {
        gu.push_back(updates[i]);
        pn.push_back(param_norms[i]);
        un.push_back(update_norms[i]);
      }
      return backend.lamb_phase2_many(hyper, gs.data(), gs.size(), gu.data(), pn.data(), un.data())
          .with_context(Format("Lamb phase 2 (group %zu)", g));
    }));
  }
  DSRT_RETURN_IF_ERROR(backend.synchronize());
  return staged ? upload_working_partition() : Status::Ok();
}

Status Engine::step(dsrt_step_result *out) {
  DSRT_RETURN_IF_ERROR(require_usable("step"));
  return track(step_impl(out));
}

// One optimizer step (DESIGN.md): the micro-step's gradients reduced; at the boundary the window's
// reduction, the norm and overflow agreed by the ranks, then either a skipped step or unscale, clip
// and the optimizer on this rank's partition; then the working copies published, the scheduler
// and the loss scaler (complete_boundary). The ZeRO stage decides the collectives (zero_stage.h).
Status Engine::step_impl(dsrt_step_result *out) {
  DSRT_RETURN_IF_ERROR(require_built("step"));
  if (pending_) return nvme_resume_step(out);
  events_.clear();
  const double step_start = StepTimers::now();
  comm_->set_step(counters_.global_step);
  for (const std::shared_ptr<Comm> &group : {part_comm_, replica_comm_, gather_comm_})
    if (group && group != comm_) group->set_step(counters_.global_step);

  dsrt_step_result result;
  std::memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;

  // end_backward may have finished this micro-step already (the host's backward ended it).
  if (!micro_step_ended_) DSRT_RETURN_IF_ERROR(finish_micro_step());
  micro_step_ended_ = false;
  counters_.micro_step += 1;
  // The boundary: the host's word when it gave one (set_accumulation_boundary), else the count.
  const bool boundary = boundary_override_ >= 0 ? boundary_override_ == 1
                                                : counters_.micro_step >= config_.gradient_accumulation_steps;
  if (!boundary) {
    DSRT_RETURN_IF_ERROR(get_group_hyper(0, "lr", &result.lr));
    result.global_step = counters_.global_step;
    result.loss_scale = scaler_.scale();
    if (out != nullptr) *out = result;
    return Status::Ok();
  }
  counters_.micro_step = 0;
  result.boundary = 1;
  fix_step_lrs();
  step_lrs_valid_ = true;
  result.lr = step_lrs_[0];

  DSRT_RETURN_IF_ERROR(reduce_window());
  const double unscale = reducer_.post_scale() / scaler_.scale();
  DSRT_RETURN_IF_ERROR(agreed_grad_norm(unscale, &result.grad_norm));
  const bool overflow = !std::isfinite(result.grad_norm);
  if (overflow) {
    skip_step(&result);
  } else {
    DSRT_RETURN_IF_ERROR(apply_step(unscale, result, step_start));
  }
  return complete_boundary(!overflow, result, out, step_start);
}

Status Engine::end_backward() {
  DSRT_RETURN_IF_ERROR(require_usable("end_backward"));
  return track(end_backward_impl());
}

// What step() does first, run when the host's backward ends (DeepSpeed reduces the last buckets
// at the end of its backward too): the same calls in the same order, so the results are the same
// bit for bit; step() then skips them. Its time is the reduce phase's, outside the step's total.
Status Engine::end_backward_impl() {
  DSRT_RETURN_IF_ERROR(require_built("end_backward"));
  DSRT_RETURN_IF_ERROR(require_no_pending("end_backward"));
  if (micro_step_ended_) return Status::Ok();  // already ended; no gradient since
  DSRT_RETURN_IF_ERROR(finish_micro_step());
  micro_step_ended_ = true;
  return Status::Ok();
}

Status Engine::finish_micro_step() {
  // Unready buffers are zeroed and every bucket reduced: after the host's work on its stream.
  DSRT_RETURN_IF_ERROR(order_after_host());
  DSRT_RETURN_IF_ERROR(stage_->end_micro_step());
  const double start = StepTimers::now();
  DSRT_RETURN_IF_ERROR(stage_->reduce_micro_step().with_context("step: reducing gradients"));
  timers_.add(StepPhase::Reduce, StepTimers::now() - start);
  return Status::Ok();
}

Status Engine::reduce_window() {
  const double start = StepTimers::now();
  // 1-bit Adam's compression stage keeps the gradients local (the momentum is all-reduced instead),
  // and so do 0/1 Adam's steps between variance updates and its local steps.
  DSRT_RETURN_IF_ERROR(stage_->reduce_boundary(onebit_compressing()).with_context("step: reducing accumulated gradients"));
  DSRT_RETURN_IF_ERROR(stage_host_grads());
  timers_.add(StepPhase::Reduce, StepTimers::now() - start);
  return Status::Ok();
}

Status Engine::agreed_grad_norm(double unscale, double *norm) {
  // Overflow and norm in one pass over this rank's partition; the ranks agree on both.
  double norm_sq = 0.0;
  bool nonfinite = false;
  {
    ScopedPhase phase(timers_, StepPhase::Norm);
    OptimizerBackend &backend = host_optimizer() || store_.nvme() ? *host_backend_ : *backend_;
    // Taken while the last micro-step wrote the gradient (the same sum bit for bit), else a pass.
    const bool folded = !nvme_grad_swap() && step_grads() == reducer_.grad_partition() &&
                        reducer_.folded_sum_squares(static_cast<float>(unscale), &norm_sq, &nonfinite);
    if (!folded)
      DSRT_RETURN_IF_ERROR((nvme_grad_swap() ? nvme_grad_sum_squares(static_cast<float>(unscale), &norm_sq, &nonfinite)
                                       : backend.sum_squares(step_grads(), DSRT_F32, static_cast<size_t>(part_.partition_elems()),
                                                             static_cast<float>(unscale), &norm_sq, &nonfinite))
                               .with_context("step: the gradient norm"));
    // The ranks agree on both (zero_stage.h: over the partitioning group and MiCS's replicas).
    DSRT_RETURN_IF_ERROR(stage_->agree_norm(&norm_sq, &nonfinite));
  }
  const bool overflow = nonfinite || !std::isfinite(norm_sq);
  *norm = overflow ? std::numeric_limits<double>::infinity() : std::sqrt(norm_sq);
  return Status::Ok();
}

void Engine::skip_step(dsrt_step_result *result) {
  counters_.skipped_steps += 1;
  scaler_.update(true);
  result->overflow = 1;
  if (scaler_.at_minimum_overflow())
    logf(DSRT_LOG_WARN, "step %lld: fp16 gradients overflowed at the minimum loss scale %g; the step is skipped",
         static_cast<long long>(counters_.global_step + 1), scaler_.scale());
  else
    logf(DSRT_LOG_INFO, "step %lld: %s gradients; step skipped, loss scale now %g",
         static_cast<long long>(counters_.global_step + 1), config_.fp16.enabled ? "fp16 overflow in" : "non-finite",
         scaler_.scale());
}

Status Engine::apply_step(double unscale, const dsrt_step_result &result, double step_start) {
  const double norm = result.grad_norm;
  double grad_scale = unscale;
  if (config_.gradient_clipping > 0.0) {
    const double coefficient = config_.gradient_clipping / (norm + 1e-6);
    if (coefficient < 1.0) grad_scale *= coefficient;
  }
  if (store_.nvme()) {
    // Kept until the NVMe pass commits: a failed pass is resumed by the next step() call.
    pending_ = std::make_unique<PendingStep>();
    pending_->lrs = step_lrs_;
    pending_->grad_scale = static_cast<float>(grad_scale);
    pending_->result = result;
    pending_->step_start = step_start;
  }
  {
    ScopedPhase phase(timers_, StepPhase::Optimizer);
    DSRT_RETURN_IF_ERROR(param_nvme_open());
    DSRT_RETURN_IF_ERROR(optimizer_update(static_cast<float>(grad_scale)));
  }
  pending_.reset();
  return Status::Ok();
}

Status Engine::complete_boundary(bool applied, dsrt_step_result &result, dsrt_step_result *out, double step_start) {
  if (applied) {
    {
      ScopedPhase phase(timers_, StepPhase::AllGather);
      DSRT_RETURN_IF_ERROR(stage_->publish_working_copies().with_context("step"));
    }
    counters_.applied_steps += 1;
    scheduler_->step();
    scaler_.update(false);
  }
  stage_->next_window();
  DSRT_RETURN_IF_ERROR(order_host_after_engine());
  counters_.global_step += 1;
  result.global_step = counters_.global_step;
  result.loss_scale = scaler_.scale();
  timers_.add(StepPhase::Total, StepTimers::now() - step_start);
  monitor_boundary(step_start);
  report_progress(result);
  monitor_reduce_mark_ = reducer_.reduce_seconds();  // after report_progress, which may reset it
  if (out != nullptr) *out = result;  // whole; dsrt_engine_step copies the caller's struct_size bytes
  return param_nvme_close().with_context("step: writing the updated shards to NVMe");  // a failure keeps them
}

void Engine::report_progress(const dsrt_step_result &result) {
  const int64_t every = config_.steps_per_print;
  if (every <= 0 || result.global_step % every != 0) return;
  const double now = StepTimers::now();
  if (progress_last_time_ <= 0) progress_last_time_ = build_time_;
  const double elapsed = now - progress_last_time_;
  const int64_t steps = result.global_step - progress_last_step_;
  const double samples_per_s =
      elapsed > 0 ? static_cast<double>(steps * config_.train_batch_size) / elapsed : 0.0;
  progress_last_time_ = now;
  progress_last_step_ = result.global_step;
  if (rank() == 0) {
    log_progress(Format("step %lld: loss_scale %g, lr %.6g, grad_norm %.6g, skipped %lld, samples/s %.2f%s",
                        static_cast<long long>(result.global_step), result.loss_scale, result.lr, result.grad_norm,
                        static_cast<long long>(counters_.skipped_steps), samples_per_s,
                        has_last_loss_ ? (", loss " + python_float_text(last_loss_)).c_str() : ""));
    if (config_.wall_clock_breakdown)
      log_progress(Format("step %lld time per step: %s, gradient collectives %.3f ms%s",
                          static_cast<long long>(result.global_step), timers_.summary(steps).c_str(),
                          steps > 0 ? 1e3 * reducer_.reduce_seconds() / static_cast<double>(steps) : 0.0,
                          host_times_text(steps).c_str()));
    if (config_.wall_clock_breakdown && store_.nvme())
      log_progress(Format("step %lld NVMe optimizer pass: %zu sub-groups, read wait %.3f ms, write wait %.3f ms, "
                          "kernels %.3f ms, total %.3f ms, %zu of %zu swap buffers in use at peak; "
                          "swapped %.2f MB in + %.2f MB out = %.2f GB/s",
                          static_cast<long long>(result.global_step), nvme_stats_.sub_groups,
                          1e3 * nvme_stats_.read_wait_seconds, 1e3 * nvme_stats_.write_wait_seconds,
                          1e3 * nvme_stats_.step_seconds, 1e3 * nvme_stats_.total_seconds, nvme_stats_.peak_buffers,
                          store_.nvme()->swapper().pool().buffer_count(), 1e-6 * static_cast<double>(nvme_stats_.bytes_read),
                          1e-6 * static_cast<double>(nvme_stats_.bytes_written),
                          nvme_stats_.total_seconds > 0
                              ? 1e-9 * static_cast<double>(nvme_stats_.bytes_read + nvme_stats_.bytes_written) /
                                    nvme_stats_.total_seconds
                              : 0.0));
    if (config_.wall_clock_breakdown && param_nvme_offload() && coordinator_) {
      // The coordinator's totals since the last line; the rate is over the steps' wall time,
      // since reads ahead overlap the host's work and their wait alone would overstate it.
      const SwapInStats &total = coordinator_->swap_in_stats();
      const SwapInStats &last = progress_swap_last_;
      const uint64_t bytes = total.bytes_read - last.bytes_read;
      const int64_t hits = total.read_hits - last.read_hits;
      const int64_t on_demand = total.reads_on_demand - last.reads_on_demand;
      log_progress(Format("step %lld NVMe parameter swap-in over %lld steps: read wait %.3f ms, read %.2f MB "
                          "(%llu bytes) in %.3f ms = %.3f GB/s, prefetch hits %lld of %lld shard gathers (%lld read "
                          "on demand), %lld reads ahead, %lld buffers reclaimed, %lld reads cancelled",
                          static_cast<long long>(result.global_step), static_cast<long long>(steps),
                          1e3 * (total.read_wait_seconds - last.read_wait_seconds), 1e-6 * static_cast<double>(bytes),
                          static_cast<unsigned long long>(bytes), 1e3 * elapsed,
                          elapsed > 0 ? 1e-9 * static_cast<double>(bytes) / elapsed : 0.0,
                          static_cast<long long>(hits), static_cast<long long>(hits + on_demand),
                          static_cast<long long>(on_demand),
                          static_cast<long long>(total.reads_ahead - last.reads_ahead),
                          static_cast<long long>(total.buffers_reclaimed - last.buffers_reclaimed),
                          static_cast<long long>(total.reads_cancelled - last.reads_cancelled)));
    }
  }
  if (coordinator_) progress_swap_last_ = coordinator_->swap_in_stats();
  for (double &seconds : progress_host_seconds_)
    if (seconds > 0) seconds = 0;  // -1 stays: the host never reported that phase
  timers_.reset();
  reducer_.reset_timers();
}

}  // namespace dsrt
