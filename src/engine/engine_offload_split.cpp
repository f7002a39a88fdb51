// defines: ZeRO-Offload++ (offload_optimizer.ratio < 1 with offload_optimizer.device "cpu", stage 3):
// this rank's partition is cut into sub-groups (zero_optimization.sub_group_size elements; 0: one
// per parameter piece, as for NVMe) and, as DeepSpeed 0.19 assigns them, sub-group i stays on the
// device when i < floor((1 - ratio) * sub-groups) and goes to the CPU otherwise. The device
// sub-groups come first, so one split offset divides the partition: elements [0, split) keep their
// fp32 masters and optimizer states in device memory (the StateStore's device part) and are stepped by
// the device backend, reading the device gradient partition and writing the device working
// shards; elements [split, partition) are in its buffers (host memory, indexed from split),
// stepped by the CPU optimizer from the host gradient copy into the host staging, which is then
// copied up. Both halves run at once: on a GPU the device kernels are queued first and run while
// the host steps its half; on the CPU device the device half runs on a thread of its own.
#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/engine.h"
#include "util/half.h"

namespace dsrt {

int64_t Engine::compute_offload_split() const {
  const double ratio = config_.zero.offload_optimizer.ratio;
  if (!host_optimizer() || ratio >= 1.0) return 0;
  const int64_t part = part_.partition_elems();
  std::vector<int64_t> begins(1, 0);
  if (config_.zero.sub_group_size == 0) {
    for (const OwnedSegment &seg : part_.owned_segments(part_rank()))
      if (seg.part_offset > begins.back() && seg.part_offset < part) begins.push_back(seg.part_offset);
  } else {
    const int64_t elems = std::max<int64_t>(1, config_.zero.sub_group_size);
    for (int64_t at = elems; at < part; at += elems) begins.push_back(at);
  }
  const size_t groups = part > 0 ? begins.size() : 0;
  // DeepSpeed: sub-group i is on the CPU when i >= int((1 - ratio) * sub_group_count).
  const size_t on_device = std::min(groups, static_cast<size_t>(std::floor((1.0 - ratio) * static_cast<double>(groups))));
  return on_device < groups ? begins[on_device] : part;
}

Status Engine::split_optimizer_update(float grad_scale) {
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  const dsrt_dtype wdt = working_dtype();
  const int64_t wsize = static_cast<int64_t>(dtype_size(wdt));
  const int64_t split = store_.split();
  const size_t num_groups = groups_.size();
  // Per parameter group: the device half's slices and the host half's (a piece that straddles the
  // split is cut in two; the update is elementwise, so the halves step exactly as one slice would).
  std::vector<std::vector<OptimizerSlice>> device_slices(num_groups), host_slices(num_groups);
  for (const OwnedSegment &seg : segments) {
    const size_t g = static_cast<size_t>(tensors_[seg.tensor].group);
    for (int64_t lo = seg.part_offset, end = seg.part_offset + seg.count; lo < end;) {
      const bool on_device = lo < split;
      const int64_t hi = on_device ? std::min(end, split) : end;
      OptimizerSlice s;
      s.master = store_.at(-1, lo);
      s.grad = (on_device ? reducer_.grad_partition() : store_.host_grads().as<float>()) + lo;
      s.grad_dtype = DSRT_F32;
      s.state0 = num_states_ > 0 ? store_.at(0, lo) : nullptr;
      s.state1 = num_states_ > 1 ? store_.at(1, lo) : nullptr;
      s.working = on_device ? static_cast<char *>(working_.data()) + (working_partition_base() + lo) * wsize
                            : store_.host_working().as<char>() + lo * wsize;
      s.working_dtype = wdt;
      s.n = static_cast<size_t>(hi - lo);
      (on_device ? device_slices : host_slices)[g].push_back(s);
      lo = hi;
    }
  }
  auto run = [&](OptimizerBackend &backend, std::vector<std::vector<OptimizerSlice>> &slices, const char *where) {
    for (size_t g = 0; g < num_groups; ++g) {
      if (slices[g].empty()) continue;
      DSRT_RETURN_IF_ERROR(backend.step_many(group_hyper(g), slices[g].data(), slices[g].size(), grad_scale)
                               .with_context(Format("optimizer step of the %s part (offload_optimizer.ratio) over "
                                                    "this rank's %zu tensor pieces of group %zu",
                                                    where, slices[g].size(), g)));
    }
    return Status::Ok();
  };
  Status device_status, host_status;
  if (device_->type() == DSRT_DEVICE_CPU) {
    std::thread device_half([&] { device_status = run(*backend_, device_slices, "device"); });
    host_status = run(*host_backend_, host_slices, "host");
    device_half.join();
  } else {
    // The device kernels are queued on the backend's stream and run while the host steps its half.
    device_status = run(*backend_, device_slices, "device");
    if (device_status.ok()) host_status = run(*host_backend_, host_slices, "host");
  }
  DSRT_RETURN_IF_ERROR(device_status);
  DSRT_RETURN_IF_ERROR(host_status);
  DSRT_RETURN_IF_ERROR(host_backend_->synchronize());
  DSRT_RETURN_IF_ERROR(backend_->synchronize());
  return upload_working_partition();
}

}  // namespace dsrt
