// zero_stage.h -- one ZeRO stage's part of the training step, behind one interface.
//
// The engine's step is the same sequence at every stage (DESIGN.md, "one optimizer step"):
//   end_micro_step, reduce_micro_step          each backward's gradients reduced (GradReducer)
//   reduce_boundary                            the window's reduction at the accumulation boundary
//   agree_norm                                 the ranks agree on the gradient norm and overflow
//   (the engine: unscale, clip, the optimizer on this rank's partition;
//    agree_tensor_sums for Lamb's whole-tensor norms)
//   publish_working_copies                     every rank's working copies from the new masters
//   next_window                                the accumulators zeroed for the next window
// What differs by stage is which group each collective runs over and how working copies reach
// the ranks; make_zero_stage picks the strategy once, at build:
//   stage 0 (ReplicatedStage): every rank holds every gradient and master; the ranks agree on
//     the skip only (an all-reduce max of the overflow flag over the world); nothing to publish.
//   stages 1-2 (FlatPartitionStage): this rank's flat partition; norm and Lamb sums are summed
//     over the partitioning group; working copies are all-gathered (flat_all_gather.h).
//   stage 3 (ShardedStage): per-tensor shards; the same agreement; the parameter coordinator
//     re-gathers what stays gathered (ParamCoordinator::refresh).
// The agreement collectives themselves are in boundary_agreement.h.
//
// Every pointer in ZeroStageParts is borrowed from the engine and must outlive the stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "device/device.h"
#include "zero/grad_reducer.h"
#include "zero/param_coordinator.h"
#include "zero/partition.h"

namespace dsrt {

struct ZeroStageParts {
  const Partitioning *partitioning = nullptr;
  Comm *world = nullptr;       // every rank
  Comm *partition = nullptr;   // the ranks the state is partitioned over (the world, or MiCS's shard group)
  Comm *replicas = nullptr;    // MiCS: the same shard index in every shard group (null: off)
  Device *device = nullptr;
  GradReducer *reducer = nullptr;
  ParamCoordinator *coordinator = nullptr;  // stage 3 only
  // Stages 1-2: the flat working copy every rank holds whole (working_dtype elements).
  DeviceBuffer *working = nullptr;
  dsrt_dtype working_dtype = DSRT_F32;
  int64_t allgather_bucket_elems = 0;  // zero_optimization.allgather_bucket_size; 0: one all-gather
};

class ZeroStage {
 public:
  explicit ZeroStage(const ZeroStageParts &parts) : parts_(parts) {}
  virtual ~ZeroStage() = default;
  ZeroStage(const ZeroStage &) = delete;
  ZeroStage &operator=(const ZeroStage &) = delete;

  // The end of a micro-step, before its gradients are reduced (stage 3: the ranks compare their
  // acquire sequences, ParamCoordinator::end_micro_step).
  virtual Status end_micro_step() { return Status::Ok(); }
  // Unready gradients count as zero; every bucket reduced (2-3) or accumulated (0-1).
  Status reduce_micro_step();
  // At the boundary: the window's reduction (stages 0-1 reduce the accumulator). local_only keeps
  // stage 0's gradients unreduced (1-bit Adam's compression stage, 0/1 Adam's local steps).
  Status reduce_boundary(bool local_only);
  // In: this rank's sum of squares of its partition's gradients and whether it saw a non-finite
  // value. Out: the values every rank agrees on (a rank-local fault never splits the ranks into
  // stepping and skipping).
  virtual Status agree_norm(double *norm_sq, bool *nonfinite) = 0;
  // Lamb: sums[0, n) of per-tensor values from this rank's pieces in, whole-tensor sums out.
  virtual Status agree_tensor_sums(double *sums, size_t n) = 0;
  // After the masters (and this rank's working partition) changed: every rank's working copies
  // hold the new values. Collective.
  virtual Status publish_working_copies() = 0;
  // A new accumulation window after the step (applied or skipped).
  void next_window();
  // Device memory the stage holds for itself (the all-gather's staging).
  virtual uint64_t buffer_bytes() const { return 0; }

 protected:
  ZeroStageParts parts_;
};

// The strategy for partitioning->stage() (0..3).
Status make_zero_stage(const ZeroStageParts &parts, std::unique_ptr<ZeroStage> *out);

}  // namespace dsrt
