// defines: the engine's NVMe optimizer offload (ZeRO-Infinity's offload_optimizer.device "nvme"):
// this rank's fp32 masters and optimizer states live in the StateStore's NVMe sub-groups
// (offload/nvme_states.h), and the step runs over them through the SubGroupPipeline with the same
// CPU kernels and grad_scale as the in-memory path. A failed pass leaves a PendingStep that the
// next step() call resumes (see docs/offload.md, "Engine").
#include <algorithm>

#include "engine/engine.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

PinnedPool::Allocator Engine::swap_buffer_allocator() const {
  // Holds the device: a swapper may outlive device_ during the engine's destruction.
  std::shared_ptr<Device> device = device_;
  return [device](size_t bytes, DeviceBuffer *out) { return device->allocate_pinned(bytes, out); };
}

NvmeStatesOptions Engine::nvme_options() const {
  NvmeStatesOptions options;  // the sizes and dtypes are the store's (StateStore::initialize)
  options.sub_group_size = config_.zero.sub_group_size;
  options.swap_gradients = nvme_swaps_gradients();
  options.swapper.aio = config_.aio;
  options.swapper.offload = config_.zero.offload_optimizer;
  options.swapper.config_key = "zero_optimization.offload_optimizer";
  options.swapper.allocator = swap_buffer_allocator();
  options.swapper.rank = rank();
  return options;
}

Status Engine::nvme_optimizer_update(float grad_scale, size_t first_group) {
  std::vector<OptimizerHyper> hypers;  // per parameter group
  for (size_t g = 0; g < groups_.size(); ++g) hypers.push_back(group_hyper(g));
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  const dsrt_dtype wdt = working_dtype();
  const int64_t wsize = static_cast<int64_t>(dtype_size(wdt));
  // On a GPU the sub-groups read the host copy of the gradients and write the host staging of the
  // working partition (copied to the device after the pass); on the CPU both are used in place.
  const bool staged = stages_through_host();
  const int64_t working_base = staged ? 0 : working_partition_base();
  const float *grads = step_grads();
  char *working = staged ? store_.host_working().as<char>() : static_cast<char *>(working_.data());
  NvmeStates &nvme = *store_.nvme();
  GradSwap *grad_swap = nvme.grad_swap();
  if (grad_swap) DSRT_RETURN_IF_ERROR(grad_swap->finish_window());  // done by the norm pass, unless resumed
  first_group = std::min(first_group, nvme.sub_groups());

  auto step = [&](size_t g, const SubGroupView &view) -> Status {
    const int64_t begin = nvme.group_begin(g);
    const int64_t end = nvme.group_end(g);
    auto it = std::lower_bound(segments.begin(), segments.end(), begin, [](const OwnedSegment &s, int64_t at) {
      return s.part_offset + s.count <= at;
    });
    for (; it != segments.end() && it->part_offset < end; ++it) {
      const int64_t lo = std::max(begin, it->part_offset), hi = std::min(end, it->part_offset + it->count);
      if (hi <= lo) continue;
      OptimizerSlice s;
      if (store_.master_dtype() == DSRT_BF16) s.master_bf16 = static_cast<uint16_t *>(view.data[0]) + (lo - begin);
      else s.master = view.f32(0) + (lo - begin);
      // Swapped gradients arrive with the sub-group (its last array); else the partition in memory.
      s.grad = grad_swap ? view.f32(view.data.size() - 1) + (lo - begin) : grads + lo;
      s.grad_dtype = DSRT_F32;
      for (int i = 0; i < num_states_; ++i) {
        if (store_.state_dtype() == DSRT_BF16)
          (i == 0 ? s.state0_bf16 : s.state1_bf16) = static_cast<uint16_t *>(view.data[1 + i]) + (lo - begin);
        else (i == 0 ? s.state0 : s.state1) = view.f32(1 + i) + (lo - begin);
      }
      s.working = working + (working_base + lo) * wsize;
      s.working_dtype = wdt;
      s.n = static_cast<size_t>(hi - lo);
      DSRT_RETURN_IF_ERROR(cpu_optimizer_step(hypers[static_cast<size_t>(tensors_[it->tensor].group)], s, grad_scale)
                               .with_context(Format("optimizer step on '%s'", tensor_name(it->tensor).c_str())));
    }
    return Status::Ok();
  };
  SubGroupPipelineStats stats;
  Status local = nvme.run_pass(first_group, step, &stats);
  nvme_stats_ = stats;
  if (pending_) pending_->next_group = local.ok() ? nvme.sub_groups() : first_group + stats.committed;
  DSRT_RETURN_IF_ERROR(nvme_agree(local));
  return staged ? upload_working_partition() : Status::Ok();
}

// Every rank learns whether any rank's pass failed, so that all of them report the step failed
// and all resume it on the next step() call (a rank whose pass committed resumes with nothing to do).
Status Engine::nvme_agree(Status local) {
  if (comm_->size() > 1) {
    double failed = local.ok() ? 0.0 : 1.0;
    DSRT_RETURN_IF_ERROR(comm_->all_reduce_f64(&failed, 1, ReduceOp::Max)
                             .with_context("step: agreeing on the NVMe optimizer pass"));
    if (failed > 0.0 && local.ok())
      return Error(DSRT_ERR_IO,
                   "step: another rank's NVMe optimizer pass failed (see its message); this rank's pass is "
                   "committed; call dsrt_engine_step again on every rank to retry the step, or destroy the engine");
  }
  if (!local.ok())
    return local.with_context(
        "step (the step is not applied yet: call dsrt_engine_step again to retry it, or destroy the engine)");
  return Status::Ok();
}

Status Engine::nvme_resume_step(dsrt_step_result *out) {
  {
    ScopedPhase phase(timers_, StepPhase::Optimizer);
    DSRT_RETURN_IF_ERROR(param_nvme_open());
    step_lrs_ = pending_->lrs;
    DSRT_RETURN_IF_ERROR(nvme_optimizer_update(pending_->grad_scale, pending_->next_group));
  }
  dsrt_step_result result = pending_->result;
  const double step_start = pending_->step_start;
  pending_.reset();
  logf(DSRT_LOG_INFO, "step %lld: the NVMe optimizer pass was resumed and completed",
       static_cast<long long>(counters_.global_step + 1));
  return complete_boundary(true, result, out, step_start);
}

}  // namespace dsrt
