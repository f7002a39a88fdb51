// topology.h -- which ranks share a node: from DSRT_RANKS_PER_NODE when set (tests that pretend
// one machine is several nodes), else from the host names of the ranks. Launchers place
// consecutive ranks on one node, and every node must hold the same number of ranks.
#pragma once

#include <memory>

#include "comm/comm.h"

namespace dsrt {

struct NodeLayout {
  int ranks_per_node = 1;
  int nodes = 1;
  int node = 0;   // this rank's node
  int local = 0;  // this rank's index within its node
};

// Collective over world (blocking). DSRT_ERR_INVALID_ARGUMENT, on every rank alike, when
// DSRT_RANKS_PER_NODE is not a positive integer, differs between ranks or does not divide the
// world size, or when nodes found by host name hold different numbers of ranks.
Status comm_node_layout(Comm &world, NodeLayout *out);

// Ranks per node: DSRT_RANKS_PER_NODE if set (tests on one machine), else ranks sharing a host
// name. intra: the ranks of my node; inter: the ranks with my local index across nodes.
Status comm_split_by_node(Comm &world, std::shared_ptr<Comm> *intra, std::shared_ptr<Comm> *inter);

}  // namespace dsrt
