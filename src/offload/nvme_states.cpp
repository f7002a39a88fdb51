// defines: NvmeStates -- the masters and optimizer states (and at stage 3 the gradients) of this
// rank's partition in NVMe sub-groups: their creation, range copies, the optimizer pass over them
// and the gradient swap's boundary passes.
#include "offload/nvme_states.h"

#include <algorithm>
#include <cstring>

#include "optim/cpu_optimizer.h"
#include "optim/sum_squares_stream.h"
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

NvmeStates::~NvmeStates() = default;

std::string NvmeStates::array(size_t group, int state) const {
  return Format("g%zu.%s", group, state < 0 ? "master" : (state == 0 ? "s0" : "s1"));
}

std::string NvmeStates::grad_array(size_t group) const { return Format("g%zu.grad", group); }

Status NvmeStates::create(const NvmeStatesOptions &options, const std::vector<StatePiece> &pieces,
                          std::unique_ptr<NvmeStates> *out) {
  std::unique_ptr<NvmeStates> states(new NvmeStates(options));
  const int64_t part = options.partition_elems;
  std::vector<int64_t> &begin = states->begin_;
  begin.assign(1, 0);
  if (options.sub_group_size == 0) {
    // DeepSpeed's meaning of 0: every parameter's piece of the partition is a sub-group of its own
    // (alignment padding after a piece stays with it).
    for (const StatePiece &piece : pieces)
      if (piece.part_offset > begin.back() && piece.part_offset < part) begin.push_back(piece.part_offset);
  } else {
    const int64_t elems = std::max<int64_t>(1, std::min<int64_t>(options.sub_group_size, std::max<int64_t>(part, 1)));
    for (int64_t at = elems; at < part; at += elems) begin.push_back(at);
  }
  if (part > 0) begin.push_back(part);  // an empty partition has no sub-group
  const size_t groups = begin.size() - 1;
  states->groups_.assign(groups, SubGroup());
  uint64_t buffer_bytes = 4096;
  for (size_t g = 0; g < groups; ++g) {
    // Each array in its storage dtype (bf16 with bf16_master_weights_and_grads / bf16_optimizer_states).
    const uint64_t elems = static_cast<uint64_t>(states->group_end(g) - begin[g]);
    for (int s = -1; s < options.num_states; ++s)
      states->groups_[g].arrays.push_back(
          SubGroupArray{states->array(g, s), elems * dtype_size(s < 0 ? options.master_dtype : options.state_dtype)});
    // Stage 3 swaps the fp32 gradient too: read for the step, not written back.
    if (options.swap_gradients)
      states->groups_[g].arrays.push_back(SubGroupArray{states->grad_array(g), elems * sizeof(float), false});
    buffer_bytes = std::max(buffer_bytes, SubGroupPipeline::buffer_bytes(states->groups_[g]));
  }
  NvmeSwapperOptions swapper = options.swapper;
  swapper.buffer_bytes = buffer_bytes;
  DSRT_RETURN_IF_ERROR(NvmeSwapper::create(swapper, &states->swapper_).with_context("build: NVMe optimizer offload"));
  DSRT_RETURN_IF_ERROR(states->write_initial(pieces));
  if (options.swap_gradients) {
    states->grad_swap_ = std::make_unique<GradSwap>(states->swapper_->store(), states->swapper_->pool(), begin,
                                                    [self = states.get()](size_t g) { return self->grad_array(g); });
    DSRT_RETURN_IF_ERROR(states->grad_swap_->initialize().with_context(
        "build: the gradient swap files (offload_optimizer nvme)"));
  }
  int64_t largest = 0;
  for (size_t g = 0; g < groups; ++g) largest = std::max(largest, begin[g + 1] - begin[g]);
  NvmeSwapper &sw = *states->swapper_;
  logf(DSRT_LOG_INFO, "NVMe optimizer offload: %zu sub-group(s) of up to %lld elements, %zu buffers of %zu bytes in '%s'",
       groups, static_cast<long long>(largest), sw.pool().buffer_count(), sw.pool().buffer_size(),
       sw.store().folder().c_str());
  *out = std::move(states);
  return Status::Ok();
}

Status NvmeStates::write_initial(const std::vector<StatePiece> &pieces) {
  PinnedLease lease;
  DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
  float *buffer = lease.as<float>();
  const dsrt_dtype master_dtype = options_.master_dtype, state_dtype = options_.state_dtype;
  auto piece = pieces.begin();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t begin = begin_[g];
    const int64_t end = group_end(g);
    const size_t n = static_cast<size_t>(end - begin);
    std::fill(buffer, buffer + n, 0.0f);
    while (piece != pieces.end() && piece->part_offset + piece->count <= begin) ++piece;
    for (auto it = piece; it != pieces.end() && it->part_offset < end; ++it) {
      if (it->values == nullptr) continue;
      const int64_t lo = std::max(begin, it->part_offset), hi = std::min(end, it->part_offset + it->count);
      std::memcpy(buffer + (lo - begin), it->values + (lo - it->part_offset), static_cast<size_t>(hi - lo) * sizeof(float));
    }
    if (master_dtype != DSRT_F32) narrow_to_bf16_in_place(buffer, n);
    DSRT_RETURN_IF_ERROR(swapper_->store().write(array(g, -1), buffer, n * dtype_size(master_dtype)));
    for (int s = 0; s < options_.num_states; ++s) {
      std::fill(buffer, buffer + n, options_.state_initial[s]);
      if (state_dtype != DSRT_F32) narrow_to_bf16_in_place(buffer, n);
      DSRT_RETURN_IF_ERROR(swapper_->store().write(array(g, s), buffer, n * dtype_size(state_dtype)));
    }
  }
  lease.release();  // buffer_count may be 1
  return Status::Ok();
}

Status NvmeStates::range(int state, size_t offset, size_t count, float *data, bool write) {
  SwapStore &store = swapper_->store();
  const size_t end = offset + count;
  PinnedLease lease;
  for (size_t at = offset; at < end;) {
    // The sub-group holding element at: the last one that begins at or before it.
    const auto next = std::upper_bound(begin_.begin(), begin_.end() - 1, static_cast<int64_t>(at));
    const size_t g = static_cast<size_t>(next - begin_.begin()) - 1;
    const size_t group_begin = static_cast<size_t>(begin_[g]);
    const size_t hi = std::min(end, static_cast<size_t>(begin_[g + 1]));
    const std::string name = array(g, state);
    float *dst = data + (at - offset);
    const size_t n = hi - at;
    const dsrt_dtype dtype = state < 0 ? options_.master_dtype : options_.state_dtype;
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
      if (!lease.valid()) DSRT_RETURN_IF_ERROR(swapper_->pool().acquire(&lease));
      const uint64_t bytes = store.stored_bytes(name);
      DSRT_RETURN_IF_ERROR(store.read(name, lease.data(), bytes));
      cpu_convert(dst, DSRT_F32, lease.as<char>() + (at - group_begin) * esize, dtype, n);
      DSRT_RETURN_IF_ERROR(store.write(name, lease.data(), bytes));
    }
    at = hi;
  }
  return Status::Ok();
}

Status NvmeStates::run_pass(size_t first_group, const std::function<Status(size_t, const SubGroupView &)> &step,
                            SubGroupPipelineStats *stats) {
  first_group = std::min(first_group, groups_.size());
  const std::vector<SubGroup> todo(groups_.begin() + static_cast<std::ptrdiff_t>(first_group), groups_.end());
  auto each = [&](const SubGroupView &view) { return step(first_group + view.index, view); };
  return swapper_->pipeline().run(todo, each, stats);
}

Status NvmeStates::grads_from_device(Device &device, const float *acc) {
  // Each sub-group's range goes device -> its pool buffer (checked copy on the engine's stream,
  // waited for before the buffer is written back) -> its swap file. No partition-sized host buffer.
  grad_swap_->begin_window();
  const int64_t part = options_.partition_elems;
  for (int64_t offset = 0; offset < part;) {
    float *dst = nullptr;
    int64_t mapped = 0;
    DSRT_RETURN_IF_ERROR(grad_swap_->map(offset, part - offset, &dst, &mapped));
    DSRT_RETURN_IF_ERROR(device.copy(dst, acc + offset, static_cast<size_t>(mapped) * sizeof(float), nullptr)
                             .with_context("step: copying reduced gradients to the swap buffers (offload_optimizer nvme)"));
    DSRT_RETURN_IF_ERROR(device.synchronize(nullptr));
    offset += mapped;
  }
  return grad_swap_->flush().with_context("writing the gradient partition to the swap files (offload_optimizer nvme)");
}

Status NvmeStates::grad_sum_squares(float scale, double *sum, bool *nonfinite, SubGroupPipelineStats *stats) {
  DSRT_RETURN_IF_ERROR(grad_swap_->finish_window());
  const size_t groups = grad_swap_->sub_groups();
  std::vector<SubGroup> todo(groups);
  for (size_t g = 0; g < groups; ++g)
    todo[g].arrays.push_back(SubGroupArray{grad_array(g), grad_swap_->array_bytes(g), false});
  SumSquaresStream stream(static_cast<size_t>(options_.partition_elems));
  auto add = [&stream](const SubGroupView &view) -> Status {
    stream.add(view.f32(0), static_cast<size_t>(view.count_f32(0)));
    return Status::Ok();
  };
  SubGroupPipelineStats pass;
  const Status status = swapper_->pipeline().run(todo, add, &pass);
  *stats = pass;
  DSRT_RETURN_IF_ERROR(status.with_context("reading the swapped gradients for their norm"));
  if (stream.added() != static_cast<size_t>(options_.partition_elems))
    return Error(DSRT_ERR_INTERNAL, "gradient norm pass: %zu of %lld elements read", stream.added(),
                 static_cast<long long>(options_.partition_elems));
  *sum = stream.finish(scale, nonfinite);
  return Status::Ok();
}

}  // namespace dsrt
