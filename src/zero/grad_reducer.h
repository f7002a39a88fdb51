// grad_reducer.h -- gradient buffers, buckets and reduction for every ZeRO stage.
//
// The host writes each tensor's micro-step gradient into a slice of a bucket buffer (working
// dtype). Buckets are fixed at build: consecutive tensors in registration order, filled from the
// last tensor backwards (backward produces gradients in roughly that order), each at most
// reduce_bucket_size elements unless a single tensor is bigger (it then gets a bucket of its own).
// Every rank forms the same buckets and issues them in the same order (bucket k only after
// buckets < k), whatever order its host signals readiness in, so collectives always match.
//
// Stages 0 and 1 (DeepSpeed's behaviour): a complete bucket is added into a full fp32 gradient
// accumulator locally; the collective (all-reduce at stage 0, reduce-scatter into each rank's
// partition at stage 1) runs once per accumulation boundary over the accumulator, in chunks of
// reduce_bucket_size.
// Stages 2 and 3: a complete bucket is reduced at once (reduce-scatter, or all-reduce when
// reduce_scatter is false); with overlap_comm the collective runs while the host goes on and
// completes when its buffer is needed again or at the end of the micro-step. Each rank adds only
// its partition's part into an fp32 gradient partition.
//
// Stage 3 on one rank (no MiCS replicas, no qgZ, comm dtype = working dtype, no prescale): the
// reduction is the identity, so each tensor is accumulated straight from its bucket slice, with
// no rearranged send buffer and no collective, as soon as the bucket is complete (whatever
// overlap_comm says: there is nothing to overlap), so during the host's backward.
//
// Bucket buffers come from a small pool (two suffice when the host calls grad/grad_ready per
// tensor as backward produces them); the pool grows, logged at debug level, when the host holds
// more buffers at once.
//
// MiCS (options.replica_comm): at stage 3 the reduce-scatter runs inside the shard group and its
// result is all-reduced across the replicas of this rank's shard before it is accumulated.
//
// Accumulated values are raw sums: sum over ranks and micro-steps of prescale * gradient, where
// prescale is 1/W with prescale_gradients, else 1/gradient_predivide_factor. post_scale() gives
// the factor that turns them into the rank- and micro-step average of the (loss-scaled) gradient.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "optim/optimizer_backend.h"
#include "optim/sum_squares_fold.h"
#include "zero/partition.h"
#include "zero/quantized_reduce.h"

namespace dsrt {

// The engine fills these from the config (the defaults are the schema's, src/config/schema_table.cpp).
struct ReducerOptions {
  int64_t bucket_elems = 0;  // zero_optimization.reduce_bucket_size; 0: no two gradients share a bucket
  bool overlap_comm = false;
  bool reduce_scatter = true;
  dsrt_dtype working_dtype = DSRT_F32;
  dsrt_dtype comm_dtype = DSRT_F32;  // stages 2-3: the dtype buckets travel in
  bool prescale_gradients = false;
  double predivide_factor = 1.0;
  int64_t accumulation_steps = 1;
  // MiCS (stage 3): the ranks holding the same shard in the other shard groups (null or size 1:
  // off). Each bucket's reduced block (after the reduce-scatter inside the shard group, the comm
  // passed to init) is then summed across these replicas, and the averaging divisor is the whole
  // data-parallel world: comm size * replica count. Borrowed; it must outlive the reducer.
  Comm *replica_comm = nullptr;
  // Called on the last micro-step of an accumulation window for each range of grad_partition()
  // (part_offset, count in elements) as soon as its value for the window is final: per bucket as
  // its collective completes at stages 2-3 (so during backward with overlap_comm), per reduced
  // chunk of the boundary reduction at stages 0-1. ZeRO-Offload copies each range to host memory
  // here, overlapping the copy with the rest of backward. May be empty.
  std::function<Status(int64_t part_offset, int64_t count)> on_final_range;
  // Stage 3 with the gradient partition kept outside the reducer (ZeRO-Infinity's gradient
  // swapping to NVMe, host-memory devices only): no accumulator is allocated and grad_partition()
  // is null. Each reduced range is accumulated -- on the first micro-step of a window written, as
  // into the accumulator -- into the host memory map_range returns for [part_offset, +*mapped)
  // (called until the range is covered); flush_ranges runs once every bucket of a micro-step is
  // done, on_window_start when zero_accumulator() opens a new window. All three or none.
  std::function<Status(int64_t part_offset, int64_t count, float **dst, int64_t *mapped)> map_range;
  std::function<Status()> flush_ranges;
  std::function<void()> on_window_start;
  // ZeRO++ qgZ (zero_quantized_gradients, stage 3 on more than one rank): each bucket's
  // reduce-scatter becomes quantized_reduce.h's hierarchical all-to-all over the nodes of
  // comm_split_by_node. qgz_groups[t]: tensor t's quantization group (qgz_group_for_shape; 0
  // sends its shard unquantized, as DeepSpeed does 1-D tensors). Host memory only.
  bool quantized_gradients = false;
  int qgz_bits = 4;
  std::vector<size_t> qgz_groups;
  // Stages 2-3 with the accumulator in host memory and the host backend (the CPU device): the
  // window's last micro-step takes the gradient's sum of squares as it writes each reduced range
  // into the accumulator (optim/sum_squares_fold.h), so the step reads it from
  // folded_sum_squares() instead of a pass over the partition. Not with map_range.
  bool fold_norm = false;
};

class GradReducer {
 public:
  GradReducer() = default;
  GradReducer(const GradReducer &) = delete;
  GradReducer &operator=(const GradReducer &) = delete;
  // Waits for collectives still in flight so no buffer is freed under them.
  ~GradReducer();
  // backend runs the conversions and accumulation on device's memory (optimizer_backend.h).
  Status init(const Partitioning *partitioning, Comm *comm, Device *device, OptimizerBackend *backend,
              const ReducerOptions &options);

  // The gradient buffer of tensor t for this micro-step (zeroed when first handed out).
  Status grad(size_t t, void **out);
  Status ready(size_t t);
  // End of a micro-step: unready tensors count as zero; every bucket is reduced (2-3) or added
  // into the accumulator (0-1), and every collective has completed.
  Status finish_micro_step();
  // At the boundary, after finish_micro_step: stages 0-1 reduce the accumulator across ranks.
  Status reduce_accumulator();
  // Start a new accumulation window after the optimizer step (or a skipped one).
  void zero_accumulator();
  // Whether on_final_range has been called for every range of this window's gradient partition
  // (so a consumer need not copy the partition again at the boundary).
  bool final_ranges_delivered() const { return final_delivered_ && static_cast<bool>(options_.on_final_range); }

  // This rank's accumulated gradient in partition coordinates (OwnedSegment::part_offset), fp32,
  // partition_elems() long, padding zero. Null when options.map_range keeps it elsewhere.
  float *grad_partition() const;
  bool partition_outside() const { return static_cast<bool>(options_.map_range); }
  // Multiply accumulated values by this to get the averaged (still loss-scaled) gradient.
  double post_scale() const;
  // options.fold_norm: when the window's last micro-step wrote every range of the partition
  // through the fold, true with *sum and *nonfinite exactly as cpu_sum_squares(grad_partition(),
  // DSRT_F32, partition_elems(), scale) gives them on this thread now; else false (the fold does
  // not apply: run that pass).
  bool folded_sum_squares(float scale, double *sum, bool *nonfinite) const;
  // Chunks the last fold summed again from the accumulator (their ranges came out of order).
  size_t folded_chunks_resummed() const { return fold_.chunks_resummed(); }
  // Whether post_scale divides by accumulation_steps (DeepSpeed's scale_wrt_gas; default true).
  void set_divide_by_accumulation(bool divide) { divide_by_accumulation_ = divide; }
  // Stage 0 only: the boundary leaves each rank's accumulated gradient unreduced, and post_scale
  // averages over micro-steps only (the compression stage of 1-bit Adam, which all-reduces the
  // momentum instead, as DeepSpeed turns off its backward all-reduce).
  void set_local_only(bool local) { local_only_ = local && part_ != nullptr && part_->stage() == 0; }
  // Whether the micro-step now being accumulated is the window's last (so its completed ranges
  // are final and on_final_range is called). Without a call, the micro-step count against
  // accumulation_steps decides; the engine sets it when the host drives the boundaries. A
  // micro-step ended early (finish_micro_step while the window goes on) may deliver ranges that a
  // later micro-step of the window delivers again with their final values.
  void set_last_micro_step(int last) { last_override_ = last; }
  // A micro-step or a gradient buffer has been taken since the last zero_accumulator().
  bool window_open() const;

  // Tensor state in the current micro-step: 0 untouched, 1 buffer handed out, 2 ready.
  int tensor_state(size_t t) const { return tensor_state_[t]; }
  size_t num_buckets() const { return buckets_.size(); }

  uint64_t accumulator_bytes() const { return accumulator_.bytes(); }
  uint64_t buffer_bytes() const { return pool_bytes_; }
  // Seconds spent waiting for or running gradient collectives (wall_clock_breakdown).
  double reduce_seconds() const { return reduce_seconds_; }
  // qgZ's traffic on its node communicators (not counted by the world communicator).
  CommTraffic qgz_traffic() const { return qgz_ ? qgz_->traffic() : CommTraffic{}; }
  // qgZ's communicators inside the node and across nodes (null without qgZ or when the world is
  // one node).
  const Comm *qgz_intra() const { return qgz_ ? qgz_->intra() : nullptr; }
  const Comm *qgz_inter() const { return qgz_ ? qgz_->inter() : nullptr; }
  void reset_timers() { reduce_seconds_ = 0; }

 private:
  struct Bucket {
    size_t first = 0, last = 0;          // tensors [first, last)
    int64_t elems = 0;                   // buffer length (flat: the flat range, incl. alignment gaps)
    int64_t flat_begin = 0;              // stages 0-2: first flat element
    std::vector<int64_t> offsets;        // per tensor (index t - first): offset in the buffer
    size_t ready = 0;
    bool issued = false;
    DeviceBuffer buffer;                 // while handed out / in flight
  };
  struct InFlight {
    size_t bucket = 0;
    CommHandle handle;
    DeviceBuffer send;   // staged or rearranged copy (may be empty: the bucket buffer is sent)
    DeviceBuffer recv;   // this rank's reduced block (empty for all-reduce)
    bool quantized = false;  // qgZ: recv holds the reduced block in fp32
    bool in_place = false;   // stage 3 on one rank: no collective, the bucket buffer is read in place
  };

  Status take_buffer(size_t bytes, DeviceBuffer *out);
  void give_buffer(DeviceBuffer &&buffer);
  Status ensure_bucket_buffer(Bucket &bucket);
  Status issue_ready_buckets();
  Status issue(size_t b);
  Status complete_oldest();
  Status complete(InFlight &op);
  // dst (+)= src * scale: the first micro-step after a boundary overwrites instead of adding.
  Status add_into(float *dst, const void *src, dsrt_dtype dtype, size_t n, float scale);
  bool last_micro_step() const {
    return last_override_ >= 0 ? last_override_ != 0 : micro_in_window_ + 1 >= options_.accumulation_steps;
  }
  Status deliver_final(int64_t part_offset, int64_t count);
  // Stage 3: the partition's [part_offset, +n) (+)= src, into the accumulator or map_range's memory.
  Status accumulate_partition(int64_t part_offset, const char *src, dsrt_dtype dtype, int64_t n);
  // Stages 2-3: the accumulator's [part_offset, +n) (+)= src, through the norm's fold when it applies.
  Status add_into_accumulator(int64_t part_offset, const void *src, dsrt_dtype dtype, size_t n);

  const Partitioning *part_ = nullptr;
  Comm *comm_ = nullptr;
  Device *device_ = nullptr;
  OptimizerBackend *backend_ = nullptr;
  ReducerOptions options_;
  int rank_ = 0, world_ = 1;
  int dp_world_ = 1;                   // world_ * MiCS replicas: the averaging divisor

  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;      // per tensor
  std::vector<int> tensor_state_;
  size_t next_issue_ = 0;
  std::deque<InFlight> in_flight_;

  std::vector<DeviceBuffer> pool_;     // free buffers
  uint64_t pool_bytes_ = 0;            // all pool-owned bytes (free and in use)
  size_t pool_buffers_ = 0;
  DeviceBuffer accumulator_;           // fp32
  bool first_micro_step_ = true;       // of the current accumulation window
  int64_t micro_in_window_ = 0;        // micro-steps finished in the current window
  bool final_delivered_ = false;       // on_final_range covered this window's partition
  bool divide_by_accumulation_ = true;
  bool local_only_ = false;            // set_local_only
  int last_override_ = -1;             // set_last_micro_step; -1: count
  double reduce_seconds_ = 0;
  std::unique_ptr<QuantizedReduceScatter> qgz_;  // zero_quantized_gradients
  // options.fold_norm: the fold of the micro-step in progress and of the last one finished.
  SumSquaresFold fold_;
  bool fold_begun_ = false;     // this micro-step wrote a range through fold_
  bool fold_missed_ = false;    // this micro-step wrote a range into the accumulator without it
  bool fold_complete_ = false;  // the last finished micro-step wrote every range through fold_
};

}  // namespace dsrt
