// defines: Engine::mics_build -- MiCS's groups (DeepSpeed <= 0.18's layout): shard groups of
// mics_shard_size consecutive ranks that partition the stage-3 state, and replica groups of the
// ranks with the same index in every shard group, across which gradients are summed.
#include "engine/engine.h"
#include "util/log.h"

namespace dsrt {

Status Engine::mics_build() {
  part_comm_ = comm_;
  replica_comm_.reset();
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
  const int k = static_cast<int>(k64);
  if (k == world) return Status::Ok();  // one shard group: plain stage 3
  std::shared_ptr<Comm> shard, replica;
  DSRT_RETURN_IF_ERROR(comm_->split(rank() / k, rank(), &shard).with_context("MiCS: creating the shard groups"));
  DSRT_RETURN_IF_ERROR(comm_->split(rank() % k, rank(), &replica).with_context("MiCS: creating the replica groups"));
  part_comm_ = std::move(shard);
  replica_comm_ = std::move(replica);
  if (rank() == 0)
    logf(DSRT_LOG_INFO, "MiCS: %d shard group(s) of %d rank(s); gradients all-reduced across %d replica(s)",
         world / k, k, world / k);
  return Status::Ok();
}

}  // namespace dsrt
