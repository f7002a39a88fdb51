// nvme_states.h -- this rank's masters and optimizer states on NVMe (ZeRO-Infinity's
// offload_optimizer.device "nvme"), owned by the StateStore (state_store.h). The partition is cut
// into sub-groups of zero_optimization.sub_group_size elements (0: one per parameter piece, as in
// DeepSpeed); sub-group g spans [group_begin(g), group_end(g)) and holds the SwapStore arrays
// "g<g>.master", "g<g>.s0", "g<g>.s1" in their storage dtypes (fp32, or bf16 in DeepSpeed's
// bf16_master_weights_and_grads / bf16_optimizer_states modes), and at stage 3 its fp32 gradient
// "g<g>.grad" (gradient swapping through GradSwap: grad_swap()). The engine orders the step and
// runs the optimizer pass over the sub-groups (run_pass) with its own kernels and hyperparameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "dsrt.h"
#include "offload/grad_swap.h"
#include "offload/nvme_swapper.h"
#include "offload/subgroup_pipeline.h"
#include "util/status.h"

namespace dsrt {

// A piece of one tensor in this rank's partition, with its initial fp32 values (values null:
// zeros). In partition order; the pieces' offsets are the sub-group cuts when sub_group_size is 0.
struct StatePiece {
  int64_t part_offset = 0;
  int64_t count = 0;
  const float *values = nullptr;
};

struct NvmeStatesOptions {
  int64_t partition_elems = 0;
  int64_t sub_group_size = 0;  // zero_optimization.sub_group_size (0: one sub-group per piece)
  int num_states = 0;
  float state_initial[2] = {0.0f, 0.0f};  // optimizer state i's initial value
  dsrt_dtype master_dtype = DSRT_F32;
  dsrt_dtype state_dtype = DSRT_F32;
  bool swap_gradients = false;  // stage 3: the fp32 gradient partition is swapped too
  NvmeSwapperOptions swapper;   // aio, offload_optimizer, rank, allocator (buffer_bytes: computed)
};

class NvmeStates {
 public:
  // Creates the swap files: masters from the pieces' initial values, states at their initial values,
  // one sub-group at a time through a pool buffer (resident memory stays bounded); zero gradient
  // arrays when gradients are swapped.
  static Status create(const NvmeStatesOptions &options, const std::vector<StatePiece> &pieces,
                       std::unique_ptr<NvmeStates> *out);
  ~NvmeStates();
  NvmeStates(const NvmeStates &) = delete;
  NvmeStates &operator=(const NvmeStates &) = delete;

  NvmeSwapper &swapper() { return *swapper_; }
  const NvmeSwapper &swapper() const { return *swapper_; }
  // Stage 3's gradient swap (null when the gradient partition stays in memory).
  GradSwap *grad_swap() const { return grad_swap_.get(); }

  size_t sub_groups() const { return groups_.size(); }
  int64_t group_begin(size_t g) const { return begin_[g]; }
  int64_t group_end(size_t g) const { return std::min(begin_[g + 1], options_.partition_elems); }

  // [offset, +count) of a state (-1: masters) to (write) or from (read) fp32 host values,
  // converting to and from the storage dtype. Writes rewrite whole arrays (SwapStore commits whole
  // arrays, never in place). The caller checks the range.
  Status range(int state, size_t offset, size_t count, float *data, bool write);

  // The optimizer pass from sub-group first_group on: each sub-group's arrays in a view (masters,
  // the states, then the swapped gradient if any), stepped by step(g, view) with g the sub-group's
  // index, written back. Returns the pipeline's status; stats->committed counts from first_group.
  Status run_pass(size_t first_group, const std::function<Status(size_t, const SubGroupView &)> &step,
                  SubGroupPipelineStats *stats);

  // Gradient swapping. The staged (GPU) route: the window's reduced gradients, summed in the device
  // accumulator acc (partition_elems fp32), moved sub-group by sub-group into the swap files.
  Status grads_from_device(Device &device, const float *acc);
  // The norm pass: a read-only pass over the gradient arrays (bitwise what cpu_sum_squares over the
  // partition in memory gives).
  Status grad_sum_squares(float scale, double *sum, bool *nonfinite, SubGroupPipelineStats *stats);

 private:
  explicit NvmeStates(const NvmeStatesOptions &options) : options_(options) {}
  std::string array(size_t group, int state) const;
  std::string grad_array(size_t group) const;
  Status write_initial(const std::vector<StatePiece> &pieces);

  NvmeStatesOptions options_;
  std::vector<SubGroup> groups_;
  std::vector<int64_t> begin_;  // one more entry than groups_ (the partition's end)
  std::unique_ptr<NvmeSwapper> swapper_;
  std::unique_ptr<GradSwap> grad_swap_;  // after swapper_: destroyed first (it borrows its store)
};

}  // namespace dsrt
