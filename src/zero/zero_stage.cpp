// defines: the ZeRO stage strategies -- ReplicatedStage (0), FlatPartitionStage (1-2),
// ShardedStage (3) -- and make_zero_stage, which picks one at build.
#include "zero/zero_stage.h"

#include "zero/boundary_agreement.h"
#include "zero/flat_all_gather.h"

namespace dsrt {

Status ZeroStage::reduce_micro_step() { return parts_.reducer->finish_micro_step(); }

Status ZeroStage::reduce_boundary(bool local_only) {
  parts_.reducer->set_local_only(local_only);
  return parts_.reducer->reduce_accumulator();
}

void ZeroStage::next_window() { parts_.reducer->zero_accumulator(); }

namespace {

// Stage 0: every rank holds every gradient, master and working copy.
class ReplicatedStage final : public ZeroStage {
 public:
  using ZeroStage::ZeroStage;
  Status agree_norm(double *norm_sq, bool *nonfinite) override {
    return agree_replicated_overflow(*parts_.world, norm_sq, nonfinite);
  }
  Status agree_tensor_sums(double *, size_t) override { return Status::Ok(); }  // whole tensors already
  Status publish_working_copies() override { return Status::Ok(); }          // updated in place on every rank
};

// The agreement of the partitioned stages (1-3): over the partitioning group, then the MiCS replicas.
class PartitionedStage : public ZeroStage {
 public:
  using ZeroStage::ZeroStage;
  Status agree_norm(double *norm_sq, bool *nonfinite) override {
    return agree_partitioned_norm(*parts_.world, *parts_.partition, parts_.replicas, norm_sq, nonfinite);
  }
  Status agree_tensor_sums(double *sums, size_t n) override {
    return agree_partitioned_sums(*parts_.partition, sums, n);
  }
};

// Stages 1-2: each rank updated its partition of the flat working copy; an all-gather spreads them.
class FlatPartitionStage final : public PartitionedStage {
 public:
  using PartitionedStage::PartitionedStage;
  Status publish_working_copies() override {
    return all_gather_flat_partitions(parts_.partitioning->flat_layout(), *parts_.partition, *parts_.device,
                                      parts_.working->data(), parts_.working_dtype, parts_.allgather_bucket_elems,
                                      &staging_);
  }
  uint64_t buffer_bytes() const override { return staging_.bytes(); }

 private:
  DeviceBuffer staging_;  // chunks of the all-gather (allgather_bucket_size smaller than a partition)
};

// Stage 3: each rank updated its shards; the coordinator re-gathers the tensors that stay gathered.
class ShardedStage final : public PartitionedStage {
 public:
  using PartitionedStage::PartitionedStage;
  Status end_micro_step() override { return parts_.coordinator->end_micro_step(); }
  Status publish_working_copies() override {
    return parts_.coordinator->refresh().with_context("re-gathering parameters");
  }
};

}  // namespace

Status make_zero_stage(const ZeroStageParts &parts, std::unique_ptr<ZeroStage> *out) {
  const int stage = parts.partitioning->stage();
  if (parts.world == nullptr || parts.partition == nullptr || parts.device == nullptr || parts.reducer == nullptr)
    return Error(DSRT_ERR_INTERNAL, "ZeRO stage %d: the communicators, device and gradient reducer are required", stage);
  switch (stage) {
    case 0:
      *out = std::make_unique<ReplicatedStage>(parts);
      return Status::Ok();
    case 1:
    case 2:
      if (parts.working == nullptr)
        return Error(DSRT_ERR_INTERNAL, "ZeRO stage %d: the flat working copy is required", stage);
      *out = std::make_unique<FlatPartitionStage>(parts);
      return Status::Ok();
    case 3:
      if (parts.coordinator == nullptr)
        return Error(DSRT_ERR_INTERNAL, "ZeRO stage 3: the parameter coordinator is required");
      *out = std::make_unique<ShardedStage>(parts);
      return Status::Ok();
    default:
      return Error(DSRT_ERR_INVALID_ARGUMENT, "ZeRO stage %d: use 0, 1, 2 or 3", stage);
  }
}

}  // namespace dsrt
