// defines: Engine::mics_build -- MiCS's groups (DeepSpeed <= 0.18's layout): shard groups of
// mics_shard_size consecutive ranks that partition the stage-3 state, and replica groups of the
// ranks with the same index in every shard group, across which gradients are summed.
#include "comm/hierarchical_gather.h"
#include "comm/topology.h"
#include "engine/engine.h"
#include "util/log.h"

namespace dsrt {

Status Engine::mics_build() {
  part_comm_ = comm_;
  replica_comm_.reset();
  gather_comm_.reset();
  const int64_t k64 = config_.zero.mics_shard_size;
  const int world = comm_->size();
  if (k64 <= 0 || config_.zero.stage != 3) return Status::Ok();
  // The config checked these against the world it was resolved for; the engine's world decides.
  if (k64 > world || world % k64 != 0)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size %lld does not divide the world size %d: MiCS shard groups of "
                 "consecutive ranks must tile the world; use a divisor of %d",
                 static_cast<long long>(k64), world, world);
  if (config_.checkpoint.use_node_local_storage && k64 < world)
    return Error(DSRT_ERR_UNSUPPORTED,
                 "zero_optimization.mics_shard_size %lld with checkpoint.use_node_local_storage: only the first shard "
                 "group writes checkpoint shards, so the other nodes would find none; use shared storage "
                 "(use_node_local_storage false) with MiCS",
                 static_cast<long long>(k64));
  if (config_.zero.zero_hpz_partition_size > 1)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size and zero_hpz_partition_size are both set: MiCS and hpZ are two "
                 "different ways to keep parameter gathers inside a group; choose one (set the other to -1 / 1)");
  const int k = static_cast<int>(k64);
  if (k < world) {
    std::shared_ptr<Comm> shard, replica;
    DSRT_RETURN_IF_ERROR(comm_->split(rank() / k, rank(), &shard).with_context("MiCS: creating the shard groups"));
    DSRT_RETURN_IF_ERROR(comm_->split(rank() % k, rank(), &replica).with_context("MiCS: creating the replica groups"));
    part_comm_ = std::move(shard);
    replica_comm_ = std::move(replica);
  }
  if (config_.zero.mics_hierarchical_params_gather && k > 1) {
    // Two steps only where a shard group spans nodes (as DeepSpeed); inside a node there is one.
    NodeLayout layout;
    DSRT_RETURN_IF_ERROR(comm_node_layout(*comm_, &layout).with_context("MiCS hierarchical gather: the node layout"));
    if (k > layout.ranks_per_node && k % layout.ranks_per_node != 0)
      return Error(DSRT_ERR_CONFIG,
                   "zero_optimization.mics_hierarchical_params_gather: shard groups of %d ranks do not cover whole "
                   "nodes of %d ranks; use a multiple of the ranks per node as mics_shard_size, or set "
                   "mics_hierarchical_params_gather to false", k, layout.ranks_per_node);
    if (k > layout.ranks_per_node) {
      DSRT_RETURN_IF_ERROR(comm_hierarchical_gather(part_comm_, &gather_comm_).with_context("MiCS hierarchical gather"));
      if (rank() == 0)
        logf(DSRT_LOG_INFO, "MiCS: parameter gathers in two steps, inside nodes of %d ranks then across %d nodes",
             layout.ranks_per_node, k / layout.ranks_per_node);
    }
  }
  if (k == world) return Status::Ok();  // one shard group: plain stage 3
  if (rank() == 0)
    logf(DSRT_LOG_INFO, "MiCS: %d shard group(s) of %d rank(s); gradients all-reduced across %d replica(s)",
         world / k, k, world / k);
  return Status::Ok();
}

}  // namespace dsrt
