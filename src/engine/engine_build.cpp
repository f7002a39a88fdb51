// defines: Engine::build -- rank agreement on the registered tensors, MiCS groups, partitioning,
// state allocation, masters and working copies from the initial values, the gradient reducer, the
// stage-3 coordinator (hpZ, parameter offload) and the ZeRO stage strategy (zero/zero_stage.h).
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "optim/step_constants.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

std::string shape_text(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t fnv1a(const void *data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace

Status Engine::check_rank_agreement() {
  if (comm_->size() == 1) return Status::Ok();
  const uint64_t count = tensors_.size();
  uint64_t counts[2] = {count, ~count};  // max of ~x is ~min(x): one all-reduce for min and max
  DSRT_RETURN_IF_ERROR(comm_->all_reduce_u64(counts, 2, ReduceOp::Max).with_context("build: comparing tensor counts"));
  if (counts[0] != ~counts[1])
    return Error(DSRT_ERR_COMM,
                 "build: ranks registered different numbers of tensors (between %llu and %llu; rank %d has %llu); "
                 "every rank must add the same tensors in the same order",
                 static_cast<unsigned long long>(~counts[1]), static_cast<unsigned long long>(counts[0]), rank(),
                 static_cast<unsigned long long>(count));
  std::vector<uint64_t> hashes(2 * count);
  for (size_t t = 0; t < count; ++t) {
    uint64_t h = fnv1a(tensors_[t].name.data(), tensors_[t].name.size());
    h = fnv1a(tensors_[t].shape.data(), tensors_[t].shape.size() * sizeof(int64_t), h);
    h = fnv1a(&tensors_[t].group, sizeof tensors_[t].group, h);
    hashes[t] = h;
    hashes[count + t] = ~h;
  }
  DSRT_RETURN_IF_ERROR(comm_->all_reduce_u64(hashes.data(), hashes.size(), ReduceOp::Max)
                           .with_context("build: comparing tensor names and shapes"));
  for (size_t t = 0; t < count; ++t)
    if (hashes[t] != ~hashes[count + t])
      return Error(DSRT_ERR_COMM,
                   "build: ranks disagree on tensor #%zu: rank %d registered '%s' with shape %s in group %d, another "
                   "rank a different name, shape or group; every rank must add the same tensors in the same order "
                   "and groups",
                   t, rank(), tensors_[t].name.c_str(), shape_text(tensors_[t].shape).c_str(), tensors_[t].group);
  return Status::Ok();
}

Status Engine::build() {
  DSRT_RETURN_IF_ERROR(require_usable("build"));
  return track(build_impl());
}

Status Engine::build_impl() {
  if (built_) return Error(DSRT_ERR_STATE, "build: the engine is already built");
  if (tensors_.empty())
    return Error(DSRT_ERR_STATE, "build: no tensors registered; call dsrt_engine_add_param first");
  DSRT_RETURN_IF_ERROR(groups_.check_consistent().with_context("build"));
  DSRT_RETURN_IF_ERROR(check_rank_agreement());
  DSRT_RETURN_IF_ERROR(check_frozen_agreement());
  DSRT_RETURN_IF_ERROR(mics_build());
  std::vector<int64_t> numels;
  for (const TensorInfo &t : tensors_) numels.push_back(t.numel);
  DSRT_RETURN_IF_ERROR(part_.build(numels, config_.zero.stage, part_comm_->size()));
  DSRT_RETURN_IF_ERROR(allocate_states());

  // Masters from the hosts' initial values (identical on every rank by contract), wherever the
  // store keeps them (in memory, or the NVMe sub-groups created here).
  {
    std::vector<StatePiece> pieces;
    for (const OwnedSegment &seg : part_.owned_segments(part_rank())) {
      const TensorInfo &info = tensors_[seg.tensor];
      pieces.push_back(StatePiece{seg.part_offset, seg.count, info.init.empty() ? nullptr : info.init.data() + seg.tensor_begin});
    }
    DSRT_RETURN_IF_ERROR(store_.initialize(pieces));
  }
  if (part_.flat()) {
    // Every rank holds the whole working copy; fill it locally instead of gathering.
    for (size_t t = 0; t < tensors_.size(); ++t)
      if (!tensors_[t].init.empty())
        DSRT_RETURN_IF_ERROR(write_working_from_host(tensors_[t].init.data(), static_cast<size_t>(tensors_[t].numel),
                                                     part_.flat_layout().tensor_offset(t)));
  } else {
    // The masters are a copy of the initial values (or zeros), so convert from those directly.
    for (const OwnedSegment &seg : part_.owned_segments(part_rank())) {
      const TensorInfo &info = tensors_[seg.tensor];
      if (!info.init.empty())
        DSRT_RETURN_IF_ERROR(write_working_from_host(info.init.data() + seg.tensor_begin,
                                                     static_cast<size_t>(seg.count), seg.part_offset));
    }
  }
  for (TensorInfo &t : tensors_) std::vector<float>().swap(t.init);

  ReducerOptions ro;
  ro.bucket_elems = config_.zero.reduce_bucket_size;
  ro.overlap_comm = config_.zero.overlap_comm;
  ro.reduce_scatter = config_.zero.reduce_scatter;
  ro.working_dtype = working_dtype();
  ro.comm_dtype = config_.has_communication_data_type ? config_.communication_data_type : working_dtype();
  ro.prescale_gradients = config_.prescale_gradients;
  ro.predivide_factor = config_.gradient_predivide_factor;
  ro.accumulation_steps = config_.gradient_accumulation_steps;
  ro.replica_comm = replica_comm_.get();
  if (stages_through_host() && !nvme_grad_swap()) {
    // Each range of the gradient partition goes to host memory as soon as it is final, while the
    // host's backward goes on (DeepSpeed's ZeRO-Offload overlaps this copy with backward too).
    ro.on_final_range = [this](int64_t part_offset, int64_t count) {
      return device_
          ->copy(store_.host_grads().as<float>() + part_offset, reducer_.grad_partition() + part_offset,
                 static_cast<size_t>(count) * sizeof(float), nullptr)
          .with_context("copying reduced gradients to host memory (offload_optimizer)");
    };
  }
  if (nvme_grad_swap() && !stages_through_host()) nvme_grad_reducer_options(&ro);  // stage 3 NVMe: the gradient partition is swapped
  // Where the step reads the accumulator in place (no host staging), its norm is taken as the last
  // micro-step writes it. The reducer itself keeps the fold to the CPU device, stages 2-3 and an
  // accumulator of its own (no map_range: stage 3's NVMe gradient swap).
  ro.fold_norm = !stages_through_host();
  const bool zeropp = config_.zero.zero_quantized_weights || config_.zero.zero_quantized_nontrainable_weights ||
                      config_.zero.zero_quantized_gradients;
  if (zeropp && part_.stage() != 3)
    log_warn_once("zeropp-stage", Format("zero_optimization.zero_quantized_*: ZeRO++ quantized communication acts at "
                                         "stage 3 only (as in DeepSpeed); stage %d ignores it", part_.stage()));
  ro.quantized_gradients = part_.stage() == 3 && config_.zero.zero_quantized_gradients;
  if (ro.quantized_gradients) {
    // DeepSpeed's group per tensor shape; 1-D tensors (biases, norms) go unquantized.
    for (const TensorInfo &t : tensors_)
      ro.qgz_groups.push_back(qgz_group_for_shape(t.shape.data(), static_cast<int>(t.shape.size()), part_comm_->size()));
  }
  DSRT_RETURN_IF_ERROR(reducer_.init(&part_, part_comm_.get(), device_.get(), backend_.get(), ro));
  if (onebit_type() && device_->type() != DSRT_DEVICE_CPU && device_->type() != DSRT_DEVICE_CUDA)
    return Error(DSRT_ERR_UNSUPPORTED, "optimizer.type %s runs on the CPU and CUDA devices only",
                 optimizer_type_name(config_.optimizer.type));
  DSRT_RETURN_IF_ERROR(onebit_build());
  reducer_.set_divide_by_accumulation(scale_wrt_gas_);
  reducer_.set_last_micro_step(boundary_override_);

  // Frozen tensors before the coordinator: at stage 3 they are its entries after the trainable ones,
  // sharded over the coordinator's group (MiCS: the shard group).
  DSRT_RETURN_IF_ERROR(frozen_.build(part_comm_.get(), device_.get(), working_dtype(), part_.stage()));
  if (!part_.flat()) {
    CoordinatorOptions co;
    co.working_dtype = working_dtype();
    co.prefetch_bucket_elems = config_.zero.stage3_prefetch_bucket_size;
    co.max_live_elems = config_.zero.stage3_max_live_parameters;
    co.max_reuse_distance = config_.zero.stage3_max_reuse_distance;
    co.persistence_threshold = config_.zero.stage3_param_persistence_threshold;
    co.quantized_weights = config_.zero.zero_quantized_weights;
    co.quantized_nontrainable = config_.zero.zero_quantized_nontrainable_weights;
    std::vector<std::string> names;
    for (const TensorInfo &t : tensors_) names.push_back(t.name);
    coordinator_ = std::make_unique<ParamCoordinator>();
    DSRT_RETURN_IF_ERROR(coordinator_->init(&part_, gather_comm_ ? gather_comm_.get() : part_comm_.get(), device_.get(), co, working_.data(), std::move(names),
                                            frozen_.entries()));
    frozen_.attach(coordinator_.get(), tensors_.size());
    DSRT_RETURN_IF_ERROR(hpz_build());
    if (config_.zero.offload_param.device != OffloadDevice::None) DSRT_RETURN_IF_ERROR(param_offload_build());
  }
  ZeroStageParts zp;
  zp.partitioning = &part_;
  zp.world = comm_.get();
  zp.partition = part_comm_.get();
  zp.replicas = replica_comm_.get();
  zp.device = device_.get();
  zp.reducer = &reducer_;
  zp.coordinator = coordinator_.get();
  zp.working = &working_;
  zp.working_dtype = working_dtype();
  zp.allgather_bucket_elems = config_.zero.allgather_bucket_size;
  DSRT_RETURN_IF_ERROR(make_zero_stage(zp, &stage_));
  fix_step_lrs();
  built_ = true;
  timers_.reset();
  build_time_ = StepTimers::now();
  logf(DSRT_LOG_INFO, "engine built: %zu tensors, ZeRO stage %d, %d rank(s), working dtype %s, optimizer states %d",
       tensors_.size(), part_.stage(), comm_->size(), dtype_name(working_dtype()), num_states_);
  return Status::Ok();
}

}  // namespace dsrt
