// defines: comm_split_plan (colors and keys all-gathered over the parent, checked, grouped).
#include "comm/comm_split.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace dsrt {

Status comm_split_plan(Comm &parent, int color, int key, SplitPlan *plan) {
  if (plan == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "split: plan is NULL");
  const int n = parent.size(), me = parent.rank();
  int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(parent.all_gather_bytes(mine, all.data(), sizeof mine, &handle));
  DSRT_RETURN_IF_ERROR(handle->wait().with_context("split: exchanging the colors and keys"));
  for (int r = 0; r < n; ++r)
    if (all[2 * r] < 0)
      return Error(DSRT_ERR_INVALID_ARGUMENT,
                   "split: rank %d of the parent communicator passed color %lld; colors must be >= 0 on every rank "
                   "(each rank gets a communicator of the ranks sharing its color)",
                   r, static_cast<long long>(all[2 * r]));
  std::vector<std::tuple<int64_t, int>> group;  // (key, parent rank) of my color
  for (int r = 0; r < n; ++r)
    if (all[2 * r] == color) group.emplace_back(all[2 * r + 1], r);
  std::sort(group.begin(), group.end());
  plan->color = color;
  plan->members.clear();
  for (const auto &g : group) {
    if (std::get<1>(g) == me) plan->rank = static_cast<int>(plan->members.size());
    plan->members.push_back(std::get<1>(g));
  }
  return Status::Ok();
}

}  // namespace dsrt
