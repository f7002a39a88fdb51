// dsrt-mpi-ranks: 1 2 4
// The byte and all-to-all collectives and split() on the MPI, host-staged and tcp (Gloo)
// communicators: every primitive on random data against a naive reference computed from every
// rank's seed, on the world and on communicators split by colors and keys; the traffic counters
// against their definitions in comm.h; a bad color failing on every rank; comm_split_by_node with
// DSRT_RANKS_PER_NODE and by host name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/staged/staged_comm.h"
#include "comm/topology.h"
#include "device/device.h"
#include "util/half.h"
#ifdef DSRT_HAVE_GLOO
#include "gloo_test_comm.h"
#endif
#include "mpi_test_main.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

#ifdef DSRT_HAVE_GLOO
std::shared_ptr<Comm> make_tcp() { return make_gloo_over(*g_world); }
#endif

// The communicators under test: the MPI world, the host-staged communicator over it (on the CPU
// device, whose copies are memcpy) and (with Gloo) a tcp world over the same ranks.
std::vector<std::shared_ptr<Comm>> worlds() {
  std::vector<std::shared_ptr<Comm>> all{g_world};
  std::shared_ptr<Comm> staged;
  Status status = staged_comm_create(g_world, std::shared_ptr<Device>(device_create_cpu()), &staged);
  EXPECT_TRUE(status.ok()) << status.message();
  all.push_back(staged);
#ifdef DSRT_HAVE_GLOO
  all.push_back(make_tcp());
#endif
  return all;
}

// Bytes of rank `who` (a world rank) for test `salt`.
std::vector<uint8_t> random_bytes(int who, size_t bytes, unsigned salt) {
  std::mt19937 rng(2654435761u * static_cast<unsigned>(who + 1) + 97u * salt);
  std::vector<uint8_t> out(bytes);
  for (auto &b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Small integers as floats of dtype: sums over a few ranks are exact in every dtype, so the
// reference is exact.
std::vector<uint8_t> random_values(int who, size_t count, dsrt_dtype dtype, unsigned salt) {
  std::mt19937 rng(40503u * static_cast<unsigned>(who + 1) + 131u * salt);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<uint8_t> out(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) from_float(out.data(), dtype, i, static_cast<float>(dist(rng)));
  return out;
}

const dsrt_dtype kDtypes[] = {DSRT_F32, DSRT_F16, DSRT_BF16};

// memcmp == 0 that accepts the null data() of empty vectors when n is 0.
bool same(const void *a, const void *b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

// Every primitive on comm, whose rank r is world rank members[r], against naive references.
void check_primitives(Comm &comm, const std::vector<int> &members, unsigned salt, const std::string &where) {
  const int n = comm.size(), me = comm.rank();
  ASSERT_EQ(static_cast<int>(members.size()), n);
  const int self = members[me];
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4099}}) {
    ++salt;
    // all_gather_bytes, out of place and in place
    auto mine = random_bytes(self, bytes, salt);
    std::vector<uint8_t> got(bytes * n + 1, 0xee), in_place(bytes * n + 1, 0xee);
    if (bytes > 0) std::memcpy(in_place.data() + bytes * me, mine.data(), bytes);
    CommHandle h1, h2;
    ASSERT_TRUE(comm.all_gather_bytes(mine.data(), got.data(), bytes, &h1).ok());
    ASSERT_TRUE(h1->wait().ok());
    ASSERT_TRUE(comm.all_gather_bytes(in_place.data() + bytes * me, in_place.data(), bytes, &h2).ok());
    ASSERT_TRUE(h2->wait().ok());
    for (int r = 0; r < n; ++r) {
      auto want = random_bytes(members[r], bytes, salt);
      EXPECT_TRUE(same(got.data() + bytes * r, want.data(), bytes)) << where << " all_gather_bytes " << bytes;
      EXPECT_TRUE(same(in_place.data() + bytes * r, want.data(), bytes))
          << where << " all_gather_bytes in place " << bytes;
    }
    EXPECT_EQ(got[bytes * n], 0xee) << where << " all_gather_bytes wrote past the end";
    // all_to_all_bytes: block r of my send goes to rank r
    auto send = random_bytes(self, bytes * n, salt + 1000);
    std::vector<uint8_t> recv(bytes * n + 1, 0xee);
    CommHandle h3;
    ASSERT_TRUE(comm.all_to_all_bytes(send.data(), recv.data(), bytes, &h3).ok());
    ASSERT_TRUE(h3->wait().ok());
    for (int r = 0; r < n; ++r) {
      auto theirs = random_bytes(members[r], bytes * n, salt + 1000);
      EXPECT_TRUE(same(recv.data() + bytes * r, theirs.data() + bytes * me, bytes))
          << where << " all_to_all_bytes " << bytes << " block from rank " << r;
    }
    EXPECT_EQ(recv[bytes * n], 0xee) << where << " all_to_all_bytes wrote past the end";
  }
  for (dsrt_dtype dtype : kDtypes)
    for (size_t count : {size_t{1}, size_t{257}, size_t{20001}}) {
      ++salt;
      const size_t e = dtype_size(dtype);
      std::string what = where + " " + dtype_name(dtype) + " n=" + std::to_string(count);
      // all_to_all
      auto send = random_values(self, count * n, dtype, salt);
      std::vector<uint8_t> recv(count * n * e);
      CommHandle h;
      ASSERT_TRUE(comm.all_to_all(send.data(), recv.data(), count, dtype, &h).ok());
      ASSERT_TRUE(h->wait().ok());
      for (int r = 0; r < n; ++r) {
        auto theirs = random_values(members[r], count * n, dtype, salt);
        EXPECT_TRUE(same(recv.data() + count * e * r, theirs.data() + count * e * me, count * e))
            << what << " all_to_all block from rank " << r;
      }
      // all_reduce (sum), reduce_scatter (sum), all_gather, broadcast on the same data
      std::vector<double> sum(count * n, 0.0);
      for (int r = 0; r < n; ++r) {
        auto theirs = random_values(members[r], count * n, dtype, salt);
        for (size_t i = 0; i < count * n; ++i) sum[i] += to_float(theirs.data(), dtype, i);
      }
      auto reduced = send;
      ASSERT_TRUE(comm.all_reduce_sync(reduced.data(), count * n, dtype, ReduceOp::Sum).ok());
      std::vector<uint8_t> block(count * e);
      ASSERT_TRUE(comm.reduce_scatter_sync(send.data(), block.data(), count, dtype, ReduceOp::Sum).ok());
      size_t bad = 0;
      for (size_t i = 0; i < count * n && bad < 3; ++i)
        if (to_float(reduced.data(), dtype, i) != sum[i]) {
          ADD_FAILURE() << what << " all_reduce element " << i << ": " << to_float(reduced.data(), dtype, i)
                        << " != " << sum[i];
          ++bad;
        }
      for (size_t i = 0; i < count && bad < 3; ++i)
        if (to_float(block.data(), dtype, i) != sum[count * me + i]) {
          ADD_FAILURE() << what << " reduce_scatter element " << i;
          ++bad;
        }
      std::vector<uint8_t> gathered(count * n * e);
      ASSERT_TRUE(comm.all_gather_sync(send.data(), gathered.data(), count, dtype).ok());
      for (int r = 0; r < n; ++r) {
        auto theirs = random_values(members[r], count * n, dtype, salt);
        EXPECT_TRUE(same(gathered.data() + count * e * r, theirs.data(), count * e)) << what << " all_gather";
      }
      const int root = n - 1;
      auto cast = send;
      ASSERT_TRUE(comm.broadcast_sync(cast.data(), count * n, dtype, root).ok());
      auto want = random_values(members[root], count * n, dtype, salt);
      EXPECT_EQ(cast, want) << what << " broadcast";
    }
}

std::vector<int> identity(int n) {
  std::vector<int> members(n);
  for (int r = 0; r < n; ++r) members[r] = r;
  return members;
}

TEST(CommSplit, PrimitivesOnTheWorld) {
  for (auto &comm : worlds()) {
    ASSERT_TRUE(comm);
    check_primitives(*comm, identity(comm->size()), 1, comm->backend());
  }
}

// Colors: rank % 2; keys reverse the order within a color. Then a split in which every rank is
// alone, and one in which all ranks share a color with equal keys (ordered by parent rank).
TEST(CommSplit, ColorsAndKeys) {
  for (auto &world : worlds()) {
    ASSERT_TRUE(world);
    const int n = world->size(), me = world->rank();
    std::shared_ptr<Comm> half;
    Status status = world->split(me % 2, -me, &half);
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r)
      if (r % 2 == me % 2) members.push_back(r);
    ASSERT_EQ(half->size(), static_cast<int>(members.size())) << world->backend();
    ASSERT_EQ(members[half->rank()], me) << world->backend();
    EXPECT_STREQ(half->backend(), world->backend());
    check_primitives(*half, members, 50, std::string(world->backend()) + " split by parity");

    std::shared_ptr<Comm> alone, all;
    ASSERT_TRUE(world->split(me, 0, &alone).ok());
    EXPECT_EQ(alone->size(), 1);
    EXPECT_EQ(alone->rank(), 0);
    check_primitives(*alone, {me}, 90, std::string(world->backend()) + " split alone");
    ASSERT_TRUE(world->split(7, 3, &all).ok());
    EXPECT_EQ(all->size(), n);
    EXPECT_EQ(all->rank(), me);
    // A child of a child, while the parent is still in use.
    std::shared_ptr<Comm> grandchild;
    ASSERT_TRUE(all->split(0, me, &grandchild).ok());
    check_primitives(*grandchild, identity(n), 120, std::string(world->backend()) + " grandchild");
    check_primitives(*world, identity(n), 150, std::string(world->backend()) + " parent after splits");
  }
}

TEST(CommSplit, NegativeColorFailsOnEveryRank) {
  for (auto &world : worlds()) {
    ASSERT_TRUE(world);
    std::shared_ptr<Comm> out;
    Status status = world->split(world->rank() == 0 ? -1 : 0, 0, &out);
    EXPECT_EQ(status.code(), DSRT_ERR_INVALID_ARGUMENT) << status.message();
    EXPECT_NE(status.message().find("rank 0"), std::string::npos) << status.message();
    EXPECT_FALSE(out);
    // The world still works afterwards.
    uint64_t one = 1;
    ASSERT_TRUE(world->all_reduce_u64(&one, 1, ReduceOp::Sum).ok());
    EXPECT_EQ(one, static_cast<uint64_t>(world->size()));
  }
}

TEST(CommSplit, TrafficFollowsTheDefinitions) {
  for (auto &world : worlds()) {
    ASSERT_TRUE(world);
    std::shared_ptr<Comm> comm;  // fresh counters
    ASSERT_TRUE(world->split(0, 0, &comm).ok());
    const uint64_t n = static_cast<uint64_t>(comm->size()), me = static_cast<uint64_t>(comm->rank());
    EXPECT_EQ(comm->traffic().total(), 0u);
    const size_t count = 1000;  // fp32 elements per rank
    std::vector<float> a(count * n, 1.0f), b(count * n), c(count);
    ASSERT_TRUE(comm->all_reduce_sync(a.data(), count * n, DSRT_F32, ReduceOp::Sum).ok());
    ASSERT_TRUE(comm->reduce_scatter_sync(a.data(), c.data(), count, DSRT_F32, ReduceOp::Sum).ok());
    ASSERT_TRUE(comm->all_gather_sync(c.data(), b.data(), count, DSRT_F32).ok());
    CommHandle h;
    ASSERT_TRUE(comm->all_to_all(a.data(), b.data(), count, DSRT_F16, &h).ok());
    ASSERT_TRUE(h->wait().ok());
    ASSERT_TRUE(comm->all_gather_bytes(a.data(), b.data(), 10, &h).ok());
    ASSERT_TRUE(h->wait().ok());
    ASSERT_TRUE(comm->all_to_all_bytes(a.data(), b.data(), 6, &h).ok());
    ASSERT_TRUE(h->wait().ok());
    ASSERT_TRUE(comm->broadcast_sync(a.data(), 100, DSRT_BF16, 0).ok());
    const uint64_t total = count * n * 4;
    CommTraffic t = comm->traffic();
    EXPECT_EQ(t.all_reduce, 2 * (n - 1) * total / n) << comm->backend();
    EXPECT_EQ(t.reduce_scatter, (n - 1) * total / n) << comm->backend();
    EXPECT_EQ(t.all_gather, (n - 1) * (count * 4 + 10)) << comm->backend();
    EXPECT_EQ(t.all_to_all, (n - 1) * (count * 2 + 6)) << comm->backend();
    EXPECT_EQ(t.broadcast, n > 1 && me == 0 ? 200u : 0u) << comm->backend();
    EXPECT_EQ(t.total(), t.all_reduce + t.reduce_scatter + t.all_gather + t.all_to_all + t.broadcast);
    // The child counted its own; the parent's figures did not move with it.
    CommTraffic before = world->traffic();
    ASSERT_TRUE(comm->all_gather_sync(c.data(), b.data(), count, DSRT_F32).ok());
    EXPECT_EQ(world->traffic().all_gather, before.all_gather);
  }
}

class RanksPerNode {
 public:
  explicit RanksPerNode(const char *value) {
    if (value) setenv("DSRT_RANKS_PER_NODE", value, 1);
    else unsetenv("DSRT_RANKS_PER_NODE");
  }
  ~RanksPerNode() { unsetenv("DSRT_RANKS_PER_NODE"); }
};

TEST(CommSplit, SplitByNodeWithOverride) {
  for (auto &world : worlds()) {
    ASSERT_TRUE(world);
    const int n = world->size(), me = world->rank();
    const int per_node = n >= 2 ? 2 : 1;
    RanksPerNode env(std::to_string(per_node).c_str());
    std::shared_ptr<Comm> intra, inter;
    Status status = comm_split_by_node(*world, &intra, &inter);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(intra->size(), per_node);
    EXPECT_EQ(intra->rank(), me % per_node);
    EXPECT_EQ(inter->size(), n / per_node);
    EXPECT_EQ(inter->rank(), me / per_node);
    std::vector<int> intra_members, inter_members;
    for (int r = 0; r < n; ++r) {
      if (r / per_node == me / per_node) intra_members.push_back(r);
      if (r % per_node == me % per_node) inter_members.push_back(r);
    }
    check_primitives(*intra, intra_members, 200, std::string(world->backend()) + " intra");
    check_primitives(*inter, inter_members, 300, std::string(world->backend()) + " inter");
  }
}

TEST(CommSplit, SplitByNodeRefusesUnevenNodes) {
  Comm &world = *g_world;
  const int n = world.size();
  {
    RanksPerNode env(std::to_string(n == 4 ? 3 : n + 1).c_str());
    std::shared_ptr<Comm> intra, inter;
    Status status = comm_split_by_node(world, &intra, &inter);
    EXPECT_EQ(status.code(), DSRT_ERR_INVALID_ARGUMENT) << status.message();
    EXPECT_NE(status.message().find("does not divide the world size"), std::string::npos) << status.message();
  }
  {
    RanksPerNode env("two");
    std::shared_ptr<Comm> intra, inter;
    Status status = comm_split_by_node(world, &intra, &inter);
    EXPECT_EQ(status.code(), DSRT_ERR_INVALID_ARGUMENT) << status.message();
    EXPECT_NE(status.message().find("DSRT_RANKS_PER_NODE='two'"), std::string::npos) << status.message();
  }
}

// Without the override every rank of this test shares one host: one node of all ranks.
TEST(CommSplit, SplitByNodeByHostName) {
  RanksPerNode env(nullptr);
  std::shared_ptr<Comm> intra, inter;
  Status status = comm_split_by_node(*g_world, &intra, &inter);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(intra->size(), g_world->size());
  EXPECT_EQ(intra->rank(), g_world->rank());
  EXPECT_EQ(inter->size(), 1);
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_comm_split", &dsrt::g_world); }
