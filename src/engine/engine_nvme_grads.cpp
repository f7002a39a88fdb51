// defines: the engine's gradient swapping under NVMe optimizer offload at stage 3 (ZeRO-Infinity
// swaps the gradient partition as it does the optimizer states): the reducer accumulates each
// reduced range into its sub-group's gradient array through GradSwap (src/offload/grad_swap.h)
// instead of a partition-sized host buffer; at the boundary a read-only pass over the arrays gives
// the norm and overflow flag (bitwise what cpu_sum_squares over the in-memory partition gives), and
// the optimizer pass reads each sub-group's gradient with its master and states (engine_nvme.cpp).
// On a GPU (the staged route) the reducer sums the window on the device and nvme_grads_from_device
// moves it sub-group by sub-group into the swap files at the boundary.
//
// A failed gradient write or read (full disk, EIO) fails the whole window on every rank, agreed at
// the boundary: the rank it happens on records it and runs on (its collectives with the other
// ranks go on; the window's remaining ranges are dropped), and the norm pass makes it known to every
// rank (nvme_grads_agree), so that every rank returns DSRT_ERR_IO for the boundary step, none
// applies it, and every rank drops the window. The engine stays usable (docs/offload.md).
#include "engine/engine.h"
#include "optim/sum_squares_stream.h"
#include "util/log.h"
#include "zero/boundary_agreement.h"

namespace dsrt {

bool Engine::nvme_swaps_gradients() const {
  return nvme_gradient_swap_ && part_.stage() == 3 && config_.zero.offload_optimizer.device == OffloadDevice::Nvme;
}

Status Engine::set_nvme_gradient_swap(bool on) {
  if (built_) return Error(DSRT_ERR_STATE, "set_nvme_gradient_swap: call it before dsrt_engine_build");
  nvme_gradient_swap_ = on;
  return Status::Ok();
}

std::string Engine::nvme_grad_array(size_t group) const { return Format("g%zu.grad", group); }

Status Engine::nvme_grads_build() {
  grad_swap_ = std::make_unique<GradSwap>(nvme_->store(), nvme_->pool(), nvme_group_begin_,
                                          [this](size_t g) { return nvme_grad_array(g); });
  return grad_swap_->initialize().with_context("build: the gradient swap files (offload_optimizer nvme)");
}

void Engine::nvme_grad_reducer_options(ReducerOptions *options) {
  GradSwap *swap = grad_swap_.get();
  // A failure is kept for the boundary (nvme_grads_agree), not returned here: a rank whose
  // grad_ready or step failed mid-window would leave the others waiting in its collectives.
  options->map_range = [swap](int64_t offset, int64_t count, float **dst, int64_t *mapped) {
    swap->map_or_discard(offset, count, dst, mapped);
    return Status::Ok();
  };
  options->flush_ranges = [swap]() {
    swap->flush_or_defer();
    return Status::Ok();
  };
  options->on_window_start = [swap]() { swap->begin_window(); };
}

Status Engine::nvme_grads_from_device() {
  // The staged (GPU) route: the reducer summed the window in its device accumulator; each
  // sub-group's range goes device -> its pool buffer (checked copy on the engine's stream, waited
  // for before the buffer is written back) -> its swap file. No partition-sized host buffer.
  grad_swap_->begin_window();
  const int64_t part = part_.partition_elems();
  const float *acc = reducer_.grad_partition();
  for (int64_t offset = 0; offset < part;) {
    float *dst = nullptr;
    int64_t mapped = 0;
    DSRT_RETURN_IF_ERROR(grad_swap_->map(offset, part - offset, &dst, &mapped));
    DSRT_RETURN_IF_ERROR(device_->copy(dst, acc + offset, static_cast<size_t>(mapped) * sizeof(float), nullptr)
                             .with_context("step: copying reduced gradients to the swap buffers (offload_optimizer nvme)"));
    DSRT_RETURN_IF_ERROR(device_->synchronize(nullptr));
    offset += mapped;
  }
  return grad_swap_->flush().with_context("writing the gradient partition to the swap files (offload_optimizer nvme)");
}

Status Engine::nvme_grad_sum_squares(float scale, double *sum, bool *nonfinite) {
  if (grad_swap_->window_failure().ok()) grad_swap_->defer(nvme_grad_norm_pass(scale, sum, nonfinite));
  return nvme_grads_agree();
}

// Every rank learns whether the window failed on any rank. If it did, every rank drops the window
// (the next micro-step starts a new one; nothing was applied, the counters stay) and returns the
// failure: its own, naming its swap file, or the failing rank's.
Status Engine::nvme_grads_agree() {
  const Status local = grad_swap_->window_failure();
  const Status agreed = agree_local_failure(*comm_, local);
  // A failed agreement collective (DSRT_ERR_COMM; a swap failure never has that code) makes the
  // engine unusable anyway (Engine::track).
  if (agreed.ok() || agreed.code() == DSRT_ERR_COMM) return agreed;
  stage_->next_window();
  grad_swap_->begin_window();  // the staged route's reducer does not call it
  const std::string what =
      local.ok() ? Format("another rank's gradient swap files failed in this accumulation window (rank %d's are "
                          "complete)", rank())
                 : Format("rank %d's gradient swap files failed in this accumulation window", rank());
  return Error(agreed.code(),
               "%s: %s; no rank applied the step and every rank dropped the window (weights, optimizer states, "
               "loss scale and step count are unchanged, checkpoints can be saved): run the window's micro-steps "
               "again on every rank (free space on the nvme_path drive first), or destroy the engine",
               what.c_str(), agreed.message().c_str());
}

Status Engine::nvme_grad_norm_pass(float scale, double *sum, bool *nonfinite) {
  DSRT_RETURN_IF_ERROR(grad_swap_->finish_window());
  const size_t groups = grad_swap_->sub_groups();
  std::vector<SubGroup> todo(groups);
  for (size_t g = 0; g < groups; ++g)
    todo[g].arrays.push_back(SubGroupArray{nvme_grad_array(g), grad_swap_->array_bytes(g), false});
  SumSquaresStream stream(static_cast<size_t>(part_.partition_elems()));
  auto add = [&stream](const SubGroupView &view) -> Status {
    stream.add(view.f32(0), static_cast<size_t>(view.count_f32(0)));
    return Status::Ok();
  };
  SubGroupPipelineStats stats;
  const Status status = nvme_->pipeline().run(todo, add, &stats);
  nvme_norm_stats_ = stats;
  DSRT_RETURN_IF_ERROR(status.with_context("reading the swapped gradients for their norm"));
  if (stream.added() != static_cast<size_t>(part_.partition_elems()))
    return Error(DSRT_ERR_INTERNAL, "gradient norm pass: %zu of %lld elements read", stream.added(),
                 static_cast<long long>(part_.partition_elems()));
  *sum = stream.finish(scale, nonfinite);
  return Status::Ok();
}

}  // namespace dsrt
