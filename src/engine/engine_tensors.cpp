// defines: the tensors' access calls -- acquire/release of working copies, gradient buffers and
// grad_ready, fp32 reads and writes of the masters, refresh_working_copies.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/engine.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {

Status Engine::acquire(size_t t, void **data, dsrt_dtype *dtype) {
  DSRT_RETURN_IF_ERROR(require_usable("acquire"));
  return track(acquire_impl(t, data, dtype));
}

Status Engine::acquire_impl(size_t t, void **data, dsrt_dtype *dtype) {
  DSRT_RETURN_IF_ERROR(require_built("acquire"));
  DSRT_RETURN_IF_ERROR(require_no_pending("acquire"));
  void *ptr = nullptr;
  if (coordinator_) {
    // A gather may reuse a buffer the host's kernels read before its release: dsrt's stream waits
    // for them (on the device) first.
    DSRT_RETURN_IF_ERROR(order_after_host());
    DSRT_RETURN_IF_ERROR(coordinator_->acquire(t, &ptr).with_context(Format("acquire('%s')", tensor_name(t).c_str())));
  } else {
    ptr = static_cast<char *>(working_.data()) +
          part_.flat_layout().tensor_offset(t) * static_cast<int64_t>(dtype_size(working_dtype()));
  }
  DSRT_RETURN_IF_ERROR(order_host_after_engine());
  ++tensors_[t].acquired;
  if (data != nullptr) *data = ptr;
  if (dtype != nullptr) *dtype = working_dtype();
  return Status::Ok();
}

Status Engine::release(size_t t) {
  DSRT_RETURN_IF_ERROR(require_built("release"));
  if (tensors_[t].acquired == 0)
    return Error(DSRT_ERR_STATE, "release('%s'): the tensor is not acquired; pair each release with an acquire",
                 tensor_name(t).c_str());
  if (coordinator_) DSRT_RETURN_IF_ERROR(coordinator_->release(t));
  --tensors_[t].acquired;
  return Status::Ok();
}

Status Engine::grad(size_t t, void **grad, dsrt_dtype *dtype) {
  DSRT_RETURN_IF_ERROR(require_built("grad"));
  DSRT_RETURN_IF_ERROR(require_no_pending("grad"));
  if (reducer_.tensor_state(t) == 2) {
    // A second backward before step() (DeepSpeed's engines allow several backward calls per
    // step() call): the gradients signalled so far are reduced into the window's accumulation
    // and a new micro-step of the same window begins. Unready tensors count as zero, as at step().
    DSRT_RETURN_IF_ERROR(order_after_host());
    DSRT_RETURN_IF_ERROR(track(reducer_.finish_micro_step())
                             .with_context(Format("grad('%s'): ending the previous backward of this step", tensor_name(t).c_str())));
  }
  void *ptr = nullptr;
  DSRT_RETURN_IF_ERROR(reducer_.grad(t, &ptr).with_context(Format("grad('%s')", tensor_name(t).c_str())));
  micro_step_ended_ = false;  // after end_backward: a new micro-step of the same window has begun
  // The buffer was zeroed on the engine's stream; the host writes it on its own.
  DSRT_RETURN_IF_ERROR(order_host_after_engine());
  if (grad != nullptr) *grad = ptr;
  if (dtype != nullptr) *dtype = working_dtype();
  return Status::Ok();
}

Status Engine::grad_ready(size_t t) {
  DSRT_RETURN_IF_ERROR(require_built("grad_ready"));
  DSRT_RETURN_IF_ERROR(require_no_pending("grad_ready"));
  if (reducer_.tensor_state(t) == 2)
    return Error(DSRT_ERR_STATE,
                 "grad_ready('%s'): already signalled in this micro-step; signal each tensor once per micro-step",
                 tensor_name(t).c_str());
  // The reducer reads what the host's kernels wrote into the buffer.
  DSRT_RETURN_IF_ERROR(order_after_host());
  micro_step_ended_ = false;  // the reducer counts t in a new micro-step from here, even if ready fails
  return reducer_.ready(t).with_context(Format("grad_ready('%s')", tensor_name(t).c_str()));
}

Status Engine::read_fp32(size_t t, float *out, uint64_t count) {
  DSRT_RETURN_IF_ERROR(require_usable("read_fp32"));
  return track(read_fp32_impl(t, out, count));
}

Status Engine::read_fp32_impl(size_t t, float *out, uint64_t count) {
  DSRT_RETURN_IF_ERROR(require_built("read_fp32"));
  const TensorInfo &info = tensors_[t];
  if (count != static_cast<uint64_t>(info.numel))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "read_fp32('%s'): count is %llu but the tensor has %lld elements",
                 info.name.c_str(), static_cast<unsigned long long>(count), static_cast<long long>(info.numel));
  const OwnedSegment mine = part_.owned_piece(t, part_rank());
  if (part_.stage() == 0 || part_comm_->size() == 1)
    return read_partition_state(-1, static_cast<size_t>(mine.part_offset), static_cast<size_t>(info.numel), out)
        .with_context(Format("read_fp32('%s')", info.name.c_str()));
  // Every rank contributes its piece into zeros; a sum with zeros is exact. A local read failure
  // still joins the all-reduce (with zeros) so that the ranks stay in step.
  std::fill(out, out + info.numel, 0.0f);
  Status local;
  if (mine.count > 0)
    local = read_partition_state(-1, static_cast<size_t>(mine.part_offset), static_cast<size_t>(mine.count),
                                 out + mine.tensor_begin);
  if (!local.ok()) std::fill(out, out + info.numel, 0.0f);
  Status gathered = part_comm_->all_reduce_sync(out, static_cast<size_t>(info.numel), DSRT_F32, ReduceOp::Sum)
      .with_context(Format("read_fp32('%s'): gathering the master value", info.name.c_str()));
  if (!gathered.ok()) return gathered;
  return local.with_context(Format("read_fp32('%s')", info.name.c_str()));
}

Status Engine::write_fp32(size_t t, const float *src, uint64_t count) {
  DSRT_RETURN_IF_ERROR(require_built("write_fp32"));
  DSRT_RETURN_IF_ERROR(require_no_pending("write_fp32"));
  const TensorInfo &info = tensors_[t];
  if (count != static_cast<uint64_t>(info.numel))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "write_fp32('%s'): count is %llu but the tensor has %lld elements",
                 info.name.c_str(), static_cast<unsigned long long>(count), static_cast<long long>(info.numel));
  for (int64_t i = 0; i < info.numel; ++i)
    if (!std::isfinite(src[i]))
      return Error(DSRT_ERR_INVALID_ARGUMENT, "write_fp32('%s'): src[%lld] is not finite", info.name.c_str(),
                   static_cast<long long>(i));
  const OwnedSegment mine = part_.owned_piece(t, part_rank());
  if (mine.count > 0)
    DSRT_RETURN_IF_ERROR(write_partition_state(-1, static_cast<size_t>(mine.part_offset),
                                               static_cast<size_t>(mine.count), src + mine.tensor_begin)
                             .with_context(Format("write_fp32('%s')", info.name.c_str())));
  if (part_.flat()) {
    DSRT_RETURN_IF_ERROR(write_working_from_host(src, static_cast<size_t>(info.numel), part_.flat_layout().tensor_offset(t))
                             .with_context(Format("write_fp32('%s')", info.name.c_str())));
  } else {
    if (working_.empty()) {
      DSRT_RETURN_IF_ERROR(param_nvme_write_shard(t, src).with_context(Format("write_fp32('%s')", info.name.c_str())));
    } else if (mine.count > 0) {
      DSRT_RETURN_IF_ERROR(write_working_from_host(src + mine.tensor_begin, static_cast<size_t>(mine.count), mine.part_offset)
                               .with_context(Format("write_fp32('%s')", info.name.c_str())));
    }
    DSRT_RETURN_IF_ERROR(coordinator_->overwrite(t, src).with_context(Format("write_fp32('%s')", info.name.c_str())));
  }
  return Status::Ok();
}

Status Engine::refresh_working_copies() {
  DSRT_RETURN_IF_ERROR(require_usable("refresh_working_copies"));
  return track(refresh_working_copies_impl());
}

Status Engine::refresh_working_copies_impl() {
  DSRT_RETURN_IF_ERROR(require_built("refresh_working_copies"));
  DSRT_RETURN_IF_ERROR(param_nvme_open());
  const size_t wsize = dtype_size(working_dtype());
  char *working = static_cast<char *>(working_.data());
  const int64_t base = working_partition_base();
  const int64_t master_elem = static_cast<int64_t>(dtype_size(store_.master_dtype()));
  if (stages_through_host()) {
    if (store_.split() == 0) {
      // Host masters: convert into the host staging and copy it up, as the step does. With the
      // optimizer on NVMe there is no in-memory master: each segment is read from the swap files.
      std::vector<float> from_nvme;
      for (const OwnedSegment &seg : part_.owned_segments(part_rank())) {
        const void *master = from_nvme.data();
        dsrt_dtype master_dtype = DSRT_F32;
        if (store_.nvme()) {
          from_nvme.resize(static_cast<size_t>(seg.count));
          DSRT_RETURN_IF_ERROR(read_partition_state(-1, static_cast<size_t>(seg.part_offset), from_nvme.size(),
                                                    from_nvme.data()));
          master = from_nvme.data();
        } else {
          master = store_.buffer(-1).as<char>() + seg.part_offset * master_elem;
          master_dtype = store_.master_dtype();
        }
        DSRT_RETURN_IF_ERROR(host_backend_->convert(master, master_dtype,
                                                    store_.host_working().as<char>() + seg.part_offset * static_cast<int64_t>(wsize),
                                                    working_dtype(), static_cast<size_t>(seg.count)));
      }
    } else {
      // The device part of a split (offload_optimizer.ratio, fp32 masters) converts on the device
      // straight into the working shards; the host part through the host staging.
      for (const OwnedSegment &seg : part_.owned_segments(part_rank())) {
        for (int64_t lo = seg.part_offset, end = seg.part_offset + seg.count; lo < end;) {
          const bool on_device = lo < store_.split();
          const int64_t hi = on_device ? std::min(end, store_.split()) : end;
          if (on_device) {
            DSRT_RETURN_IF_ERROR(backend_->convert(store_.at(-1, lo), DSRT_F32,
                                                   working + (base + lo) * static_cast<int64_t>(wsize), working_dtype(),
                                                   static_cast<size_t>(hi - lo)));
          } else {
            DSRT_RETURN_IF_ERROR(host_backend_->convert(store_.at(-1, lo), DSRT_F32,
                                                        store_.host_working().as<char>() + lo * static_cast<int64_t>(wsize),
                                                        working_dtype(), static_cast<size_t>(hi - lo)));
          }
          lo = hi;
        }
      }
      DSRT_RETURN_IF_ERROR(backend_->synchronize());
    }
    DSRT_RETURN_IF_ERROR(upload_working_partition());
  }
  std::vector<float> staged;  // NVMe: one segment at a time
  for (const OwnedSegment &seg : part_.owned_segments(part_rank())) {
    if (stages_through_host()) break;
    const int64_t at = base + seg.part_offset;
    if (store_.nvme()) {
      staged.resize(static_cast<size_t>(seg.count));
      DSRT_RETURN_IF_ERROR(read_partition_state(-1, static_cast<size_t>(seg.part_offset), staged.size(), staged.data()));
      DSRT_RETURN_IF_ERROR(write_working_from_host(staged.data(), staged.size(), at));
      continue;
    }
    // Host masters on the CPU device (offload "cpu") convert straight into the working copy.
    OptimizerBackend &backend = host_optimizer() ? *host_backend_ : *backend_;
    DSRT_RETURN_IF_ERROR(backend.convert(store_.buffer(-1).as<char>() + seg.part_offset * master_elem, store_.master_dtype(),
                                         working + at * static_cast<int64_t>(wsize), working_dtype(),
                                         static_cast<size_t>(seg.count)));
  }
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  DSRT_RETURN_IF_ERROR(stage_->publish_working_copies());
  DSRT_RETURN_IF_ERROR(order_host_after_engine());
  return param_nvme_close();
}

}  // namespace dsrt
