// defines: comm_node_layout (DSRT_RANKS_PER_NODE, or the ranks' host names all-gathered) and
// comm_split_by_node (two splits of the world by that layout).
#include "comm/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace dsrt {
namespace {

constexpr size_t kHostBytes = 256;

// 0 when unset; -1 when set but not a positive integer.
long ranks_per_node_from_env(std::string *text) {
  const char *value = std::getenv("DSRT_RANKS_PER_NODE");
  if (value == nullptr || *value == '\0') return 0;
  *text = value;
  char *end = nullptr;
  errno = 0;
  long n = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || n <= 0 || n > (1L << 24)) return -1;
  return n;
}

Status layout_from_hosts(Comm &world, NodeLayout *out) {
  const int n = world.size(), me = world.rank();
  char mine[kHostBytes] = {};
  if (gethostname(mine, kHostBytes - 1) != 0)
    return Error(DSRT_ERR_IO, "comm_split_by_node: gethostname failed (%s); set DSRT_RANKS_PER_NODE instead",
                 std::strerror(errno));
  std::vector<char> all(kHostBytes * static_cast<size_t>(n));
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(world.all_gather_bytes(mine, all.data(), kHostBytes, &handle));
  DSRT_RETURN_IF_ERROR(handle->wait().with_context("comm_split_by_node: exchanging host names"));
  std::vector<std::string> hosts;  // in order of first appearance
  std::map<std::string, int> count;
  std::vector<int> node_of(n), local_of(n);
  for (int r = 0; r < n; ++r) {
    std::string host(all.data() + static_cast<size_t>(r) * kHostBytes,
                     strnlen(all.data() + static_cast<size_t>(r) * kHostBytes, kHostBytes));
    auto it = std::find(hosts.begin(), hosts.end(), host);
    node_of[r] = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) hosts.push_back(host);
    local_of[r] = count[host]++;
  }
  const int per_node = count[hosts.front()];
  for (const auto &h : hosts)
    if (count[h] != per_node)
      return Error(DSRT_ERR_INVALID_ARGUMENT,
                   "comm_split_by_node: host %s runs %d ranks but host %s runs %d; node groups need the same number "
                   "of ranks on every node (launch evenly, or set DSRT_RANKS_PER_NODE)",
                   hosts.front().c_str(), per_node, h.c_str(), count[h]);
  out->ranks_per_node = per_node;
  out->nodes = static_cast<int>(hosts.size());
  out->node = node_of[me];
  out->local = local_of[me];
  return Status::Ok();
}

}  // namespace

Status comm_node_layout(Comm &world, NodeLayout *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "comm_node_layout: out is NULL");
  std::string text;
  const long env = ranks_per_node_from_env(&text);
  // Every rank learns the smallest and largest value any rank read (-1 bad, 0 unset), so that all
  // fail alike or all go on.
  uint64_t bounds[2] = {static_cast<uint64_t>(env + 1), static_cast<uint64_t>((1L << 30) - (env + 1))};
  DSRT_RETURN_IF_ERROR(world.all_reduce_u64(bounds, 2, ReduceOp::Max));
  const long largest = static_cast<long>(bounds[0]) - 1, smallest = (1L << 30) - static_cast<long>(bounds[1]) - 1;
  if (smallest < 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "DSRT_RANKS_PER_NODE%s%s%s is not a positive integer (on at least one rank); unset it to group ranks "
                 "by host name", text.empty() ? "" : "='", text.c_str(), text.empty() ? "" : "'");
  if (smallest != largest)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "DSRT_RANKS_PER_NODE differs between ranks (from %ld to %ld, 0 = unset): export the same value to "
                 "every rank (mpirun -x DSRT_RANKS_PER_NODE)", smallest, largest);
  if (env == 0) return layout_from_hosts(world, out);
  const int per_node = static_cast<int>(env);
  if (world.size() % per_node != 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "DSRT_RANKS_PER_NODE=%d does not divide the world size %d: every node must hold the same number of "
                 "ranks; choose a divisor of %d", per_node, world.size(), world.size());
  out->ranks_per_node = per_node;
  out->nodes = world.size() / per_node;
  out->node = world.rank() / per_node;
  out->local = world.rank() % per_node;
  return Status::Ok();
}

Status comm_split_by_node(Comm &world, std::shared_ptr<Comm> *intra, std::shared_ptr<Comm> *inter) {
  if (intra == nullptr || inter == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "comm_split_by_node: intra or inter is NULL");
  NodeLayout layout;
  DSRT_RETURN_IF_ERROR(comm_node_layout(world, &layout));
  DSRT_RETURN_IF_ERROR(world.split(layout.node, layout.local, intra).with_context("splitting the ranks of each node"));
  return world.split(layout.local, layout.node, inter).with_context("splitting the ranks across nodes");
}

}  // namespace dsrt
