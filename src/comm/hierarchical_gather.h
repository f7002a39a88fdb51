// hierarchical_gather.h -- a group communicator whose all-gathers run in two steps: inside each
// node, then across nodes (MiCS's mics_hierarchical_params_gather). Every other collective is the
// group's own. The result is the same bytes in the same order as the group's one-step all-gather.
#pragma once

#include <memory>

#include "comm/comm.h"

namespace dsrt {

// Collective over group. The group's ranks must be node-major (consecutive ranks on a node, the
// same number on every node, as comm_node_layout finds them over the group). *out is group
// itself when the group lies inside one node or holds one rank per node (one step is all there
// is); DSRT_ERR_INVALID_ARGUMENT, on every rank alike, when the layout is not node-major-even.
// The two-step all-gather (all_gather, all_gather_bytes) completes before it returns (its handle
// is already complete); the intra- and inter-node communicators count its traffic, not *out.
Status comm_hierarchical_gather(std::shared_ptr<Comm> group, std::shared_ptr<Comm> *out);

}  // namespace dsrt
