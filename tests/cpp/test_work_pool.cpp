// The CPU kernels' work pool (src/optim/work_pool.h): every item runs exactly once whatever the
// thread count, nested calls run on the calling thread, concurrent callers each get all of their
// items done, a forked child runs alone, and the norm it computes is the same bits run to run.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "optim/cpu_dispatch.h"
#include "optim/cpu_optimizer.h"
#include "optim/work_pool.h"

namespace dsrt {
namespace {

using optim_kernels::in_work_pool;
using optim_kernels::work_pool_run;

TEST(WorkPool, EveryItemOnceAtEveryThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(1000)}) {
      std::vector<std::atomic<int>> hits(count);
      for (auto &h : hits) h = 0;
      work_pool_run(count, threads, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(hits[i].load(), 1) << "threads " << threads << " item " << i;
    }
  }
}

TEST(WorkPool, HelpersRunItemsAndNestedCallsStayOnTheirThread) {
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> nested_outside{0}, inner{0};
  // Items that wait a little, so a helper has time to take some.
  work_pool_run(64, 4, [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    const std::thread::id me = std::this_thread::get_id();
    const bool helper = in_work_pool();
    work_pool_run(3, 4, [&](size_t) {
      inner.fetch_add(1);
      if (helper && std::this_thread::get_id() != me) nested_outside.fetch_add(1);
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  EXPECT_EQ(inner.load(), 64 * 3);
  EXPECT_EQ(nested_outside.load(), 0);
  EXPECT_GE(ids.size(), 2u) << "no helper ever took an item";
  EXPECT_FALSE(in_work_pool());
}

TEST(WorkPool, ConcurrentCallersEachFinishTheirItems) {
  std::vector<std::thread> callers;
  std::vector<std::atomic<long>> sums(4);
  for (auto &s : sums) s = 0;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int round = 0; round < 50; ++round)
        work_pool_run(100, 3, [&](size_t i) { sums[c].fetch_add(static_cast<long>(i)); });
    });
  for (std::thread &t : callers) t.join();
  for (auto &s : sums) EXPECT_EQ(s.load(), 50L * (99 * 100 / 2));
}

// A forked child has none of the parent's helpers: its calls run every item on the caller.
TEST(WorkPool, ForkedChildRunsItsItems) {
  work_pool_run(64, 4, [](size_t) {});  // the parent's helpers exist
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> done{0};
    work_pool_run(64, 4, [&](size_t) { done.fetch_add(1); });
    _exit(done.load() == 64 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The chunked kernels add per-chunk partial sums in chunk order: which thread ran a chunk never
// shows in the bits (the norm, many times at 2 and 4 threads, on a range cut into many chunks).
TEST(WorkPool, NormIsBitwiseTheSameRunToRun) {
  const size_t n = (size_t(1) << 21) + 12345;
  std::vector<float> data(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float &x : data) x = dist(rng);
  double want = 0;
  for (float x : data) want += static_cast<double>(x) * x;
  const int saved = omp_get_max_threads();
  for (int threads : {2, 4}) {
    omp_set_num_threads(threads);
    ASSERT_GT(optim_kernels::plan_chunks(n).count, 4u);
    bool nonfinite = true;
    const double first = cpu_sum_squares(data.data(), DSRT_F32, n, 1.0f, &nonfinite);
    EXPECT_FALSE(nonfinite);
    EXPECT_NEAR(first, want, 1e-9 * want);
    for (int run = 0; run < 20; ++run) {
      const double again = cpu_sum_squares(data.data(), DSRT_F32, n, 1.0f, nullptr);
      EXPECT_EQ(std::memcmp(&first, &again, sizeof(double)), 0) << "threads " << threads << " run " << run;
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace dsrt
