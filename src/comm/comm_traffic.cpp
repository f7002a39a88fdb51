// defines: Comm's traffic counters -- the bytes a ring or pairwise algorithm puts on the wire from
// this rank for each collective (the definitions are at the top of comm.h).
#include "comm/comm.h"

namespace dsrt {

CommTraffic Comm::traffic() const {
  CommTraffic t;
  t.all_reduce = traffic_[static_cast<int>(CommKind::AllReduce)].load(std::memory_order_relaxed);
  t.reduce_scatter = traffic_[static_cast<int>(CommKind::ReduceScatter)].load(std::memory_order_relaxed);
  t.all_gather = traffic_[static_cast<int>(CommKind::AllGather)].load(std::memory_order_relaxed);
  t.all_to_all = traffic_[static_cast<int>(CommKind::AllToAll)].load(std::memory_order_relaxed);
  t.broadcast = traffic_[static_cast<int>(CommKind::Broadcast)].load(std::memory_order_relaxed);
  return t;
}

void Comm::count_traffic(CommKind kind, uint64_t bytes) {
  if (bytes > 0) traffic_[static_cast<int>(kind)].fetch_add(bytes, std::memory_order_relaxed);
}

void Comm::count_all_reduce(size_t total_bytes) {
  const uint64_t n = static_cast<uint64_t>(size());
  count_traffic(CommKind::AllReduce, 2 * (n - 1) * static_cast<uint64_t>(total_bytes) / n);
}

void Comm::count_reduce_scatter(size_t total_bytes, size_t own_bytes) {
  if (size() > 1) count_traffic(CommKind::ReduceScatter, total_bytes - own_bytes);
}

void Comm::count_all_gather(size_t own_bytes) {
  count_traffic(CommKind::AllGather, static_cast<uint64_t>(size() - 1) * own_bytes);
}

void Comm::count_all_to_all(size_t block_bytes) {
  count_traffic(CommKind::AllToAll, static_cast<uint64_t>(size() - 1) * block_bytes);
}

void Comm::count_broadcast(size_t bytes, int root) {
  if (size() > 1 && root == rank()) count_traffic(CommKind::Broadcast, bytes);
}

}  // namespace dsrt
