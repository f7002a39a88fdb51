// comm_split.h -- the part of Comm::split every backend shares: the ranks exchange their colors
// and keys over the parent communicator, check them, and each learns its new group (the parent
// ranks of its color, ordered by key, then by parent rank) and its rank in it.
#pragma once

#include <vector>

#include "comm/comm.h"

namespace dsrt {

struct SplitPlan {
  int color = 0;
  std::vector<int> members;  // parent ranks of the new communicator, in its rank order
  int rank = 0;              // this rank's index in members
  int size() const { return static_cast<int>(members.size()); }
};

// Collective over parent (blocking). Every rank fails with the same DSRT_ERR_INVALID_ARGUMENT when
// any rank passed a negative color.
Status comm_split_plan(Comm &parent, int color, int key, SplitPlan *plan);

}  // namespace dsrt
