// defines: Engine::hpz_build -- the ZeRO++ hpZ group (DeepSpeed's layout: consecutive blocks of
// zero_hpz_partition_size ranks), checked against the node layout, handed to the coordinator.
#include <algorithm>

#include "comm/topology.h"
#include "engine/engine.h"
#include "util/log.h"

namespace dsrt {

Status Engine::hpz_build() {
  const int64_t requested = config_.zero.zero_hpz_partition_size;
  const int world = comm_->size();
  if (requested <= 1 || world == 1 || !coordinator_) return Status::Ok();
  // As DeepSpeed: a group never larger than the world, and groups must tile it.
  const int k = static_cast<int>(std::min<int64_t>(requested, world));
  if (world % k != 0)
    return Error(DSRT_ERR_CONFIG,
                 "zero_optimization.zero_hpz_partition_size %lld does not divide the world size %d: hpZ groups of "
                 "consecutive ranks must tile the world; set it to the ranks per node (or a divisor of %d)",
                 static_cast<long long>(requested), world, world);
  // The point of hpZ is that the groups stay inside a node: say so when they do not (DeepSpeed
  // does not check; its groups are the same consecutive blocks).
  NodeLayout layout;
  Status nodes = comm_node_layout(*comm_, &layout);
  if (!nodes.ok()) {
    if (nodes.code() != DSRT_ERR_INVALID_ARGUMENT) return nodes.with_context("hpZ: finding the node layout");
    logf(DSRT_LOG_WARN, "hpZ: the node layout is unknown (%s); the groups are blocks of %d consecutive ranks",
         nodes.message().c_str(), k);
  } else if (layout.ranks_per_node % k != 0 && rank() == 0) {
    logf(DSRT_LOG_WARN,
         "hpZ: groups of %d ranks do not fit in nodes of %d ranks, so the secondary partitions' gathers cross nodes; "
         "set zero_optimization.zero_hpz_partition_size to the ranks per node (or a divisor of it)",
         k, layout.ranks_per_node);
  }
  DSRT_RETURN_IF_ERROR(comm_->split(rank() / k, rank(), &hpz_comm_).with_context("hpZ: creating the groups"));
  return coordinator_->set_secondary_group(hpz_comm_.get());
}

}  // namespace dsrt
