// defines: the engine's NVMe optimizer offload (ZeRO-Infinity's offload_optimizer.device "nvme"):
// this rank's fp32 masters and optimizer states live in SwapStore arrays, one set per sub-group of
// zero_optimization.sub_group_size partition elements (0: one per parameter), and the step runs through the
// SubGroupPipeline with the same CPU kernels and grad_scale as the in-memory path. A failed pass
// leaves a PendingStep that the next step() call resumes (see docs/offload.md, "Engine").
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

// buffer[0, n) fp32 -> its first 2n bytes bf16 (nearest): front to back, element i's bf16 goes to
// bytes [2i, 2i+2), below every float not yet read, so the pool buffer serves both.
void narrow_to_bf16_in_place(float *buffer, size_t n) {
  uint16_t *out = reinterpret_cast<uint16_t *>(buffer);
  for (size_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, buffer + i, sizeof x);
    const uint16_t b = float_to_bf16(x);
    std::memcpy(out + i, &b, sizeof b);
  }
}

}  // namespace

std::string Engine::nvme_array(size_t group, int state) const {
  return Format("g%zu.%s", group, state < 0 ? "master" : (state == 0 ? "s0" : "s1"));
}

PinnedPool::Allocator Engine::swap_buffer_allocator() const {
  // Holds the device: a swapper may outlive device_ during the engine's destruction.
  std::shared_ptr<Device> device = device_;
  return [device](size_t bytes, DeviceBuffer *out) { return device->allocate_pinned(bytes, out); };
}

Status Engine::nvme_build(const std::vector<OwnedSegment> &segments) {
  const int64_t part = part_.partition_elems();
  nvme_group_begin_.assign(1, 0);
  if (config_.zero.sub_group_size == 0) {
    // DeepSpeed's meaning of 0: every parameter's piece of the partition is a sub-group of its own
    // (alignment padding after a piece stays with it).
    for (const OwnedSegment &seg : segments)
      if (seg.part_offset > nvme_group_begin_.back() && seg.part_offset < part) nvme_group_begin_.push_back(seg.part_offset);
  } else {
    const int64_t elems = std::max<int64_t>(1, std::min<int64_t>(config_.zero.sub_group_size, std::max<int64_t>(part, 1)));
    for (int64_t at = elems; at < part; at += elems) nvme_group_begin_.push_back(at);
  }
  if (part > 0) nvme_group_begin_.push_back(part);  // an empty partition has no sub-group
  const size_t groups = nvme_group_begin_.size() - 1;
  nvme_groups_.assign(groups, SubGroup());
  uint64_t buffer_bytes = 4096;
  int64_t largest = 0;
  for (size_t g = 0; g < groups; ++g) {
    const int64_t begin = nvme_group_begin_[g];
    largest = std::max(largest, nvme_group_begin_[g + 1] - begin);
    // Each array in its storage dtype (bf16 with bf16_master_weights_and_grads / bf16_optimizer_states).
    const uint64_t elems = static_cast<uint64_t>(std::min(nvme_group_begin_[g + 1], part) - begin);
    for (int s = -1; s < num_states_; ++s)
      nvme_groups_[g].arrays.push_back(SubGroupArray{nvme_array(g, s), elems * dtype_size(s < 0 ? master_dtype_ : state_dtype_)});
    // Stage 3 swaps the fp32 gradient too (engine_nvme_grads.cpp): read for the step, not written back.
    if (nvme_swaps_gradients())
      nvme_groups_[g].arrays.push_back(SubGroupArray{nvme_grad_array(g), elems * sizeof(float), false});
    buffer_bytes = std::max(buffer_bytes, SubGroupPipeline::buffer_bytes(nvme_groups_[g]));
  }
  NvmeSwapperOptions options;
  options.aio = config_.aio;
  options.offload = config_.zero.offload_optimizer;
  options.config_key = "zero_optimization.offload_optimizer";
  options.allocator = swap_buffer_allocator();
  options.rank = rank();
  options.buffer_bytes = buffer_bytes;
  DSRT_RETURN_IF_ERROR(NvmeSwapper::create(options, &nvme_).with_context("build: NVMe optimizer offload"));

  // Initial values, one sub-group at a time through a pool buffer: resident memory stays bounded.
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(nvme_->pool().acquire(&lease));
  float *buffer = lease.as<float>();
  auto seg = segments.begin();
  for (size_t g = 0; g < groups; ++g) {
    const int64_t begin = nvme_group_begin_[g];
    const int64_t end = std::min(nvme_group_begin_[g + 1], part);
    const size_t n = static_cast<size_t>(end - begin);
    std::fill(buffer, buffer + n, 0.0f);
    while (seg != segments.end() && seg->part_offset + seg->count <= begin) ++seg;
    for (auto it = seg; it != segments.end() && it->part_offset < end; ++it) {
      const TensorInfo &info = tensors_[it->tensor];
      if (info.init.empty()) continue;
      const int64_t lo = std::max(begin, it->part_offset), hi = std::min(end, it->part_offset + it->count);
      std::memcpy(buffer + (lo - begin), info.init.data() + it->tensor_begin + (lo - it->part_offset),
                  static_cast<size_t>(hi - lo) * sizeof(float));
    }
    if (master_dtype_ != DSRT_F32) narrow_to_bf16_in_place(buffer, n);
    DSRT_RETURN_IF_ERROR(nvme_->store().write(nvme_array(g, -1), buffer, n * dtype_size(master_dtype_)));
    for (int s = 0; s < num_states_; ++s) {
      std::fill(buffer, buffer + n, optimizer_state_initial_value(config_.optimizer, s));
      if (state_dtype_ != DSRT_F32) narrow_to_bf16_in_place(buffer, n);
      DSRT_RETURN_IF_ERROR(nvme_->store().write(nvme_array(g, s), buffer, n * dtype_size(state_dtype_)));
    }
  }
  lease.release();  // buffer_count may be 1
  if (nvme_swaps_gradients()) DSRT_RETURN_IF_ERROR(nvme_grads_build());
  logf(DSRT_LOG_INFO, "NVMe optimizer offload: %zu sub-group(s) of up to %lld elements, %zu buffers of %zu bytes in '%s'",
       groups, static_cast<long long>(largest), nvme_->pool().buffer_count(), nvme_->pool().buffer_size(),
       nvme_->store().folder().c_str());
  return Status::Ok();
}

Status Engine::nvme_range(int state, size_t offset, size_t count, float *data, bool write) {
  SwapStore &store = nvme_->store();
  const size_t end = offset + count;
  PinnedLease lease;
  for (size_t at = offset; at < end;) {
    // The sub-group holding element at: the last one that begins at or before it.
    const auto next = std::upper_bound(nvme_group_begin_.begin(), nvme_group_begin_.end() - 1, static_cast<int64_t>(at));
    const size_t g = static_cast<size_t>(next - nvme_group_begin_.begin()) - 1;
    const size_t group_begin = static_cast<size_t>(nvme_group_begin_[g]);
    const size_t hi = std::min(end, static_cast<size_t>(nvme_group_begin_[g + 1]));
    const std::string name = nvme_array(g, state);
    float *dst = data + (at - offset);
    const size_t n = hi - at;
    const dsrt_dtype dtype = state < 0 ? master_dtype_ : state_dtype_;
    const size_t esize = dtype_size(dtype);
    if (!write) {
      if (dtype == DSRT_F32) {
        DSRT_RETURN_IF_ERROR(store.read(name, dst, n * sizeof(float), (at - group_begin) * sizeof(float)));
      } else {
        std::vector<uint16_t> staged(n);  // bf16 on disk, widened exactly
        DSRT_RETURN_IF_ERROR(store.read(name, staged.data(), n * esize, (at - group_begin) * esize));
        cpu_convert(staged.data(), dtype, dst, DSRT_F32, n);
      }
    } else {
      // Read-modify-write of the whole array: SwapStore commits whole arrays, never in place.
      if (!lease.valid()) DSRT_RETURN_IF_ERROR(nvme_->pool().acquire(&lease));
      const uint64_t bytes = store.stored_bytes(name);
      DSRT_RETURN_IF_ERROR(store.read(name, lease.data(), bytes));
      cpu_convert(dst, DSRT_F32, lease.as<char>() + (at - group_begin) * esize, dtype, n);
      DSRT_RETURN_IF_ERROR(store.write(name, lease.data(), bytes));
    }
    at = hi;
  }
  return Status::Ok();
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
  char *working = staged ? host_working_.as<char>() : static_cast<char *>(working_.data());
  const int64_t part = part_.partition_elems();
  if (grad_swap_) DSRT_RETURN_IF_ERROR(grad_swap_->finish_window());  // done by the norm pass, unless resumed
  first_group = std::min(first_group, nvme_groups_.size());
  const std::vector<SubGroup> todo(nvme_groups_.begin() + static_cast<std::ptrdiff_t>(first_group), nvme_groups_.end());

  auto step = [&](const SubGroupView &view) -> Status {
    const size_t g = first_group + view.index;
    const int64_t begin = nvme_group_begin_[g];
    const int64_t end = std::min(nvme_group_begin_[g + 1], part);
    auto it = std::lower_bound(segments.begin(), segments.end(), begin, [](const OwnedSegment &s, int64_t at) {
      return s.part_offset + s.count <= at;
    });
    for (; it != segments.end() && it->part_offset < end; ++it) {
      const int64_t lo = std::max(begin, it->part_offset), hi = std::min(end, it->part_offset + it->count);
      if (hi <= lo) continue;
      OptimizerSlice s;
      if (master_dtype_ == DSRT_BF16) s.master_bf16 = static_cast<uint16_t *>(view.data[0]) + (lo - begin);
      else s.master = view.f32(0) + (lo - begin);
      // Swapped gradients arrive with the sub-group (its last array); else the partition in memory.
      s.grad = grad_swap_ ? view.f32(view.data.size() - 1) + (lo - begin) : grads + lo;
      s.grad_dtype = DSRT_F32;
      for (int i = 0; i < num_states_; ++i) {
        if (state_dtype_ == DSRT_BF16)
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
  Status local = nvme_->pipeline().run(todo, step, &stats);
  nvme_stats_ = stats;
  if (pending_) pending_->next_group = local.ok() ? nvme_groups_.size() : first_group + stats.committed;
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
