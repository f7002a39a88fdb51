// The gradient norm's sum of squares folded into the last micro-step's writes (SumSquaresFold, and
// the stage 2-3 reducer's fold_norm) against cpu_sum_squares over the written array, bit for bit,
// and against a float64 sum computed here: on every instruction set this CPU runs, with one and
// two kernel threads (one chunk, several), ranges cut anywhere (not at vector or chunk bounds),
// with zero gaps between them (padding), arriving in order and out of order (a chunk summed again),
// fp32 and bf16 sources, overwriting and accumulating, inf and nan. The writes themselves equal
// what the host backend's convert and accumulate write.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "optim/cpu_optimizer.h"
#include "optim/optimizer_backend.h"
#include "optim/sum_squares_fold.h"
#include "util/half.h"
#include "zero/grad_reducer.h"
#include "zero/partition.h"
#include "isa_test_util.h"

namespace dsrt {
namespace {

// Restores the ISA and the OpenMP thread count a test changed.
class Restore {
 public:
  Restore() : threads_(omp_get_max_threads()) {}
  ~Restore() { omp_set_num_threads(threads_); }

 private:
  isa_test::IsaGuard isa_;
  int threads_;
};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v) x = normal(rng);
  return v;
}

double float64_sum_squares(const std::vector<float> &v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}

// Ranges [begin, end) covering [0, n) except a zero gap after every third one, cut at sizes that
// are not multiples of any vector width.
std::vector<std::pair<size_t, size_t>> cut(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> len(1, std::max<size_t>(2, n / 7));
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t b = 0, k = 0; b < n; ++k) {
    const size_t e = std::min(n, b + len(rng));
    ranges.emplace_back(b, e);
    b = e + (k % 3 == 2 ? 13 : 0);
  }
  return ranges;
}

struct Case {
  size_t n;
  bool reversed;
  dsrt_dtype src_dtype;
};

void check_fold(const Case &c, uint32_t seed) {
  SCOPED_TRACE("n " + std::to_string(c.n) + (c.reversed ? " reversed" : "") + " src " +
               (c.src_dtype == DSRT_BF16 ? "bf16" : "fp32") + " isa " + cpu_optimizer_isa() + " threads " +
               std::to_string(omp_get_max_threads()));
  const std::vector<float> grad = random_floats(c.n, seed + 1, 3.0f);
  std::vector<uint16_t> grad_bf16(c.n);
  for (size_t i = 0; i < c.n; ++i) grad_bf16[i] = float_to_bf16(grad[i]);
  const void *src = c.src_dtype == DSRT_BF16 ? static_cast<const void *>(grad_bf16.data()) : grad.data();
  const size_t esize = dtype_size(c.src_dtype);
  std::vector<std::pair<size_t, size_t>> ranges = cut(c.n, seed + 2);
  // An earlier micro-step's sums; the gaps between ranges are padding, zero.
  std::vector<float> first(c.n, 0.0f);
  const std::vector<float> earlier = random_floats(c.n, seed);
  for (const auto &r : ranges) std::copy(earlier.begin() + r.first, earlier.begin() + r.second, first.begin() + r.first);
  if (c.reversed) std::reverse(ranges.begin(), ranges.end());
  std::unique_ptr<OptimizerBackend> host = optimizer_backend_host();

  for (bool overwrite : {true, false}) {
    // What the reducer wrote without the fold, then the fold's own writes of the same ranges.
    std::vector<float> want(c.n, 0.0f), got(c.n, 0.0f);
    if (!overwrite) want = got = first;
    for (const auto &r : ranges) {
      const char *from = static_cast<const char *>(src) + r.first * esize;
      const Status s = overwrite ? host->convert(from, c.src_dtype, want.data() + r.first, DSRT_F32, r.second - r.first, 1.0f)
                                 : host->accumulate(want.data() + r.first, from, c.src_dtype, r.second - r.first, 1.0f);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    SumSquaresFold fold;
    fold.begin(c.n);
    for (const auto &r : ranges)
      fold.add(got.data(), r.first, static_cast<const char *>(src) + r.first * esize, c.src_dtype, r.second - r.first,
               overwrite);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), c.n * sizeof(float))) << "overwrite " << overwrite;
    ASSERT_TRUE(fold.matches(c.n));
    for (float scale : {1.0f, 0.37f}) {
      bool bad_want = true, bad_got = true;
      const double expect = cpu_sum_squares(want.data(), DSRT_F32, c.n, scale, &bad_want);
      const double value = fold.finish(got.data(), scale, &bad_got);
      EXPECT_EQ(0, std::memcmp(&expect, &value, sizeof value)) << expect << " vs " << value << " overwrite " << overwrite;
      EXPECT_FALSE(bad_got);
      EXPECT_EQ(bad_want, bad_got);
      const double exact = float64_sum_squares(want) * scale * scale;
      EXPECT_LT(std::fabs(value - exact), 1e-12 * exact);
    }
    if (!c.reversed) {
      EXPECT_EQ(fold.chunks_resummed(), 0u);
    }
  }
}

TEST(SumSquaresFold, EqualsTheNormPassBitForBit) {
  Restore restore;
  uint32_t seed = 40;
  for (const std::string &isa : isa_test::available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (size_t n : {size_t{1}, size_t{45}, size_t{1000}, size_t{70001}, size_t{300007}})
        for (bool reversed : {false, true})
          for (dsrt_dtype d : {DSRT_F32, DSRT_BF16}) check_fold({n, reversed, d}, seed++);
    }
  }
}

TEST(SumSquaresFold, OutOfOrderChunksAreSummedAgain) {
  Restore restore;
  omp_set_num_threads(2);
  const size_t n = 600000;  // several chunks with two threads
  const std::vector<float> grad = random_floats(n, 7);
  std::vector<float> a(n);
  SumSquaresFold fold;
  fold.begin(n);
  // Upper half first, then the lower half: the chunk the cut falls in arrives out of order.
  const size_t cut_at = n / 2 + 333;
  fold.add(a.data(), cut_at, grad.data() + cut_at, DSRT_F32, n - cut_at, true);
  fold.add(a.data(), 0, grad.data(), DSRT_F32, cut_at, true);
  EXPECT_EQ(fold.chunks_resummed(), 1u);
  bool bad = true;
  const double expect = cpu_sum_squares(a.data(), DSRT_F32, n, 1.0f, nullptr);
  const double value = fold.finish(a.data(), 1.0f, &bad);
  EXPECT_EQ(0, std::memcmp(&expect, &value, sizeof value));
  EXPECT_FALSE(bad);
  // A different thread count cuts the array otherwise: the fold no longer stands for the pass.
  omp_set_num_threads(1);
  EXPECT_FALSE(fold.matches(n));
}

TEST(SumSquaresFold, InfAndNanAreNonFinite) {
  Restore restore;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (float poison : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      const size_t n = 100003;
      std::vector<float> grad = random_floats(n, 9);
      grad[n - 5] = poison;
      std::vector<float> a(n);
      SumSquaresFold fold;
      fold.begin(n);
      fold.add(a.data(), 0, grad.data(), DSRT_F32, n / 3, true);
      fold.add(a.data(), n / 3, grad.data() + n / 3, DSRT_F32, n - n / 3, true);
      bool bad = false;
      const double value = fold.finish(a.data(), 1.0f, &bad);
      EXPECT_TRUE(bad);
      EXPECT_FALSE(std::isfinite(value));
    }
  }
}

// The reducer: several buckets per micro-step (completed from the last tensor backwards), tensor
// sizes off every alignment, gradient accumulation, stages 2 and 3.
struct ReducerRun {
  bool folded = false;
  double folded_sum = 0.0, pass_sum = 0.0;
  bool folded_bad = true, pass_bad = false;
  size_t resummed = 0;
};

ReducerRun run_reducer(int stage, int micro_steps, bool fold_norm, int early_last = -1) {
  const std::vector<int64_t> numels = {37, 5, 70000, 16, 12345, 3, 99999};
  Partitioning part;
  EXPECT_TRUE(part.build(numels, stage, 1).ok());
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  std::shared_ptr<Device> device(device_create_cpu());
  std::unique_ptr<OptimizerBackend> backend = optimizer_backend_host();
  ReducerOptions options;
  options.bucket_elems = 40000;
  options.accumulation_steps = micro_steps;
  options.fold_norm = fold_norm;
  GradReducer reducer;
  Status s = reducer.init(&part, comm.get(), device.get(), backend.get(), options);
  EXPECT_TRUE(s.ok()) << s.message();
  uint32_t seed = 100;
  for (int m = 0; m < micro_steps; ++m) {
    // early_last: the host ends the window's "last" micro-step early, and the window goes on.
    if (early_last >= 0) reducer.set_last_micro_step(m == early_last ? 1 : 0);
    for (size_t k = part.num_tensors(); k-- > 0;) {
      void *buffer = nullptr;
      s = reducer.grad(k, &buffer);
      EXPECT_TRUE(s.ok()) << s.message();
      const std::vector<float> g = random_floats(static_cast<size_t>(numels[k]), seed++);
      std::memcpy(buffer, g.data(), g.size() * sizeof(float));
      s = reducer.ready(k);
      EXPECT_TRUE(s.ok()) << s.message();
    }
    s = reducer.finish_micro_step();
    EXPECT_TRUE(s.ok()) << s.message();
  }
  ReducerRun run;
  const float scale = 0.25f;
  run.folded = reducer.folded_sum_squares(scale, &run.folded_sum, &run.folded_bad);
  run.pass_sum = cpu_sum_squares(reducer.grad_partition(), DSRT_F32, static_cast<size_t>(part.partition_elems()), scale,
                                 &run.pass_bad);
  run.resummed = reducer.folded_chunks_resummed();
  reducer.zero_accumulator();
  double unused = 0;
  bool unused_bad = false;
  EXPECT_FALSE(reducer.folded_sum_squares(scale, &unused, &unused_bad)) << "a new window has no folded norm";
  return run;
}

TEST(SumSquaresFold, ReducerFoldsTheLastMicroStep) {
  Restore restore;
  for (const std::string &isa : isa_test::available_isas()) {
    ASSERT_TRUE(cpu_optimizer_set_isa(isa.c_str()).ok());
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (int stage : {2, 3})
        for (int micro_steps : {1, 3}) {
          SCOPED_TRACE("stage " + std::to_string(stage) + " micro-steps " + std::to_string(micro_steps) + " isa " + isa +
                       " threads " + std::to_string(threads));
          const ReducerRun run = run_reducer(stage, micro_steps, true);
          ASSERT_TRUE(run.folded);
          EXPECT_EQ(0, std::memcmp(&run.folded_sum, &run.pass_sum, sizeof run.pass_sum))
              << run.folded_sum << " vs " << run.pass_sum;
          EXPECT_FALSE(run.folded_bad);
          EXPECT_GT(run.pass_sum, 0.0);
        }
    }
  }
}

TEST(SumSquaresFold, ReducerWithoutAFullFoldRunsThePass) {
  Restore restore;
  omp_set_num_threads(2);
  EXPECT_FALSE(run_reducer(2, 1, false).folded) << "fold_norm off";
  EXPECT_FALSE(run_reducer(3, 1, false).folded) << "fold_norm off";
  // The micro-step marked last was not: the window's later micro-steps wrote without the fold.
  EXPECT_FALSE(run_reducer(2, 3, true, 0).folded);
  EXPECT_FALSE(run_reducer(3, 3, true, 1).folded);
  // Marked last on the last one: folded.
  const ReducerRun last = run_reducer(2, 3, true, 2);
  ASSERT_TRUE(last.folded);
  EXPECT_EQ(0, std::memcmp(&last.folded_sum, &last.pass_sum, sizeof last.pass_sum));
}

}  // namespace
}  // namespace dsrt
