// dsrt-mpi-ranks: 1 2 4
// The ZeRO stage strategies (zero/zero_stage.h) and the collectives they run at the boundary, on
// the MPI world and (with 4 ranks) on MiCS-like shard groups of 2 with replica groups: the agreed
// gradient norm against a float64 sum over the right ranks computed from every rank's seed, a
// fault on one rank reaching every rank, stage 0 keeping its own norm, Lamb's sums, the stage 1-2
// all-gather (whole and in chunks through the staging buffer) against the expected bytes, and the
// strategy chosen for each stage with its refusals of missing parts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "util/half.h"
#include "zero/boundary_agreement.h"
#include "zero/flat_all_gather.h"
#include "zero/grad_reducer.h"
#include "zero/zero_stage.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

// A rank's local sum of squares: random, the same for ranks with the same seed.
double local_norm_sq(int seed) {
  std::mt19937 rng(1234u + static_cast<unsigned>(seed));
  std::uniform_real_distribution<double> dist(0.5, 100.0);
  return dist(rng);
}

// The groups of the MiCS layout: shard groups of k consecutive ranks, replica groups across them.
struct Groups {
  std::shared_ptr<Comm> partition, replicas;
  int k = 1;
};

Groups make_groups() {
  Groups g;
  const int world = g_world->size(), rank = g_world->rank();
  g.k = world == 4 ? 2 : world;
  if (g.k == world) {
    g.partition = g_world;
    return g;
  }
  EXPECT_TRUE(g_world->split(rank / g.k, rank, &g.partition).ok());
  EXPECT_TRUE(g_world->split(rank % g.k, rank, &g.replicas).ok());
  return g;
}

// Stages 1-3: the norm is summed over the partitioning group only (its replicas hold the same
// partitions, so a world sum would count them again), and every rank agrees on it.
TEST(BoundaryAgreement, PartitionedNormSumsOverThePartitioningGroup) {
  Groups g = make_groups();
  ASSERT_TRUE(g.partition);
  const int rank = g_world->rank();
  const int shard = rank % g.k;  // the index in the shard group: replicas hold the same partition
  double norm_sq = local_norm_sq(shard);
  bool nonfinite = false;
  ASSERT_TRUE(agree_partitioned_norm(*g_world, *g.partition, g.replicas.get(), &norm_sq, &nonfinite).ok());
  double expected = 0.0;
  for (int i = 0; i < g.k; ++i) expected += local_norm_sq(i);
  EXPECT_FALSE(nonfinite);
  EXPECT_LE(std::fabs(norm_sq - expected), 1e-12 * expected) << norm_sq << " vs " << expected;
}

// A non-finite value on one rank (a flag, or an infinite local norm) makes every rank skip, in
// every shard group.
TEST(BoundaryAgreement, OneRanksOverflowReachesEveryRank) {
  Groups g = make_groups();
  ASSERT_TRUE(g.partition);
  const int world = g_world->size(), rank = g_world->rank();
  for (int how = 0; how < 2; ++how) {
    double norm_sq = local_norm_sq(rank % g.k);
    bool nonfinite = false;
    if (rank == world - 1) {
      if (how == 0) nonfinite = true;
      else norm_sq = std::numeric_limits<double>::infinity();
    }
    ASSERT_TRUE(agree_partitioned_norm(*g_world, *g.partition, g.replicas.get(), &norm_sq, &nonfinite).ok());
    if (world > 1) {
      EXPECT_TRUE(nonfinite) << "case " << how;
    }

    double local = local_norm_sq(rank);
    bool flag = rank == world - 1 && how == 0;
    if (rank == world - 1 && how == 1) local = std::nan("");
    const double mine = local;
    ASSERT_TRUE(agree_replicated_overflow(*g_world, &local, &flag).ok());
    if (world > 1) {
      EXPECT_TRUE(flag) << "case " << how;
    }
    // Stage 0 keeps its own norm (every rank holds the same reduced gradients).
    if (std::isfinite(mine)) {
      EXPECT_EQ(local, mine);
    }
  }
}

// Lamb: per-tensor sums over the partitioning group.
TEST(BoundaryAgreement, LambSumsOverThePartitioningGroup) {
  Groups g = make_groups();
  ASSERT_TRUE(g.partition);
  const size_t n = 7;
  std::vector<double> sums(n);
  for (size_t i = 0; i < n; ++i) sums[i] = local_norm_sq(static_cast<int>(100 * (g_world->rank() % g.k) + i));
  ASSERT_TRUE(agree_partitioned_sums(*g.partition, sums.data(), n).ok());
  for (size_t i = 0; i < n; ++i) {
    double expected = 0.0;
    for (int r = 0; r < g.k; ++r) expected += local_norm_sq(static_cast<int>(100 * r + i));
    EXPECT_LE(std::fabs(sums[i] - expected), 1e-12 * expected) << i;
  }
}

// The stage 1-2 all-gather: every rank's partition of a bf16 flat buffer reaches every rank,
// whole (bucket 0 or larger than a partition) and in chunks that do not divide the partition.
TEST(FlatAllGather, EveryPartitionReachesEveryRank) {
  const int world = g_world->size(), rank = g_world->rank();
  std::shared_ptr<Device> device(device_create_cpu());
  Partitioning part;
  ASSERT_TRUE(part.build({3000, 17, 5000}, 1, world).ok());
  const FlatLayout &flat = part.flat_layout();
  const int64_t total = flat.total(), p = flat.partition_size();
  auto value = [](int64_t i) {
    uint16_t h;
    float f = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    cpu_convert(&f, DSRT_F32, &h, DSRT_BF16, 1);
    return h;
  };
  for (int64_t bucket : {int64_t{0}, int64_t{1000}, int64_t{777}, p + 5}) {
    DeviceBuffer working, staging;
    ASSERT_TRUE(device->allocate(static_cast<size_t>(total) * 2, &working).ok());
    auto *w = working.as<uint16_t>();
    for (int64_t i = 0; i < total; ++i) w[i] = 0xFFFF;  // NaN: must be overwritten
    for (int64_t i = rank * p; i < (rank + 1) * p; ++i) w[i] = value(i);
    Status s = all_gather_flat_partitions(flat, *g_world, *device, working.data(), DSRT_BF16, bucket, &staging);
    ASSERT_TRUE(s.ok()) << s.message();
    int64_t wrong = 0;
    for (int64_t i = 0; i < total; ++i) wrong += w[i] == value(i) ? 0 : 1;
    EXPECT_EQ(wrong, 0) << "bucket " << bucket;
    // Chunks travel through the staging buffer only when a partition needs several all-gathers.
    const bool chunked = world > 1 && bucket > 0 && bucket < p;
    EXPECT_EQ(staging.bytes(), chunked ? static_cast<size_t>(bucket * world) * 2 : 0u) << "bucket " << bucket;
  }
}

// make_zero_stage: the strategy per stage, and a missing part named.
TEST(ZeroStage, StrategyPerStageAndMissingParts) {
  std::shared_ptr<Device> device(device_create_cpu());
  GradReducer reducer;  // not initialized: these calls never reach it
  const int world = g_world->size(), rank = g_world->rank();
  for (int stage = 0; stage <= 3; ++stage) {
    Partitioning part;
    ASSERT_TRUE(part.build({100, 300}, stage, world).ok());
    DeviceBuffer working;
    ASSERT_TRUE(device->allocate(static_cast<size_t>(part.resident_working_elems()) * 4, &working).ok());
    ZeroStageParts parts;
    parts.partitioning = &part;
    parts.world = g_world.get();
    parts.partition = g_world.get();
    parts.device = device.get();
    parts.working = &working;
    std::unique_ptr<ZeroStage> made;
    Status missing = make_zero_stage(parts, &made);
    EXPECT_EQ(missing.code(), DSRT_ERR_INTERNAL) << stage;  // no reducer
    EXPECT_NE(missing.message().find("reducer"), std::string::npos) << missing.message();
    parts.reducer = &reducer;
    if (stage == 3) {
      Status no_coordinator = make_zero_stage(parts, &made);
      EXPECT_EQ(no_coordinator.code(), DSRT_ERR_INTERNAL);
      EXPECT_NE(no_coordinator.message().find("coordinator"), std::string::npos) << no_coordinator.message();
      continue;  // the coordinator's own tests (mpi_zero_equivalence, test_engine_stage3) run it
    }
    if (stage > 0) {
      parts.working = nullptr;
      EXPECT_EQ(make_zero_stage(parts, &made).code(), DSRT_ERR_INTERNAL) << stage;
      parts.working = &working;
    }
    ASSERT_TRUE(make_zero_stage(parts, &made).ok()) << stage;
    ASSERT_TRUE(made);
    // Stage 0 keeps its own norm; stages 1-2 sum it over the partitions.
    double norm_sq = local_norm_sq(rank);
    bool nonfinite = false;
    ASSERT_TRUE(made->agree_norm(&norm_sq, &nonfinite).ok());
    double sum = 0.0;
    for (int r = 0; r < world; ++r) sum += local_norm_sq(r);
    const double expected = stage == 0 ? local_norm_sq(rank) : sum;
    EXPECT_LE(std::fabs(norm_sq - expected), 1e-12 * expected) << "stage " << stage;
    EXPECT_FALSE(nonfinite);
    std::vector<double> sums{local_norm_sq(rank), 1.0};
    ASSERT_TRUE(made->agree_tensor_sums(sums.data(), sums.size()).ok());
    EXPECT_LE(std::fabs(sums[0] - expected), 1e-12 * expected) << "stage " << stage;
    EXPECT_EQ(sums[1], stage == 0 ? 1.0 : static_cast<double>(world));
    EXPECT_TRUE(made->publish_working_copies().ok());
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_zero_stage", &dsrt::g_world); }
