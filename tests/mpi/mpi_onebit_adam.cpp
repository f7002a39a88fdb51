// dsrt-mpi-ranks: 1 2 4
// 1-bit Adam against a float64 recomputation of DeepSpeed's algorithm (OnebitAdam.step and
// NcclBackend.compressed_allreduce), every rank simulating every rank from seeds: the compressed
// all-reduce alone (output and both error buffers over several calls), then the engine on a small
// case (8 elements, freeze_step 2: one initialization step, one warm-up step, three compressed
// steps); checkpoints restore every state bitwise and restart the errors at zero; ZeRO stages
// above 0 are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "ckpt/ckpt.h"
#include "mpi_scratch_dir.h"
#include "mpi_test_main.h"
#include "onebit_engine_util.h"
#include "onebit_reference.h"
#include "optim/onebit_adam.h"
#include "zero/compressed_allreduce.h"
#ifdef DSRT_HAVE_CUDA
#include "comm/staged/staged_comm.h"
#include "device/cuda_device.h"
#include "device/device_features.h"
#include "device/device_select.h"
#endif

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

TEST(OneBitAdam, CompressedAllReduceMatchesFloat64) {
  const int world = g_world->size(), rank = g_world->rank();
  for (size_t n : {size_t{37}, size_t{1000}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    CompressedAllReduce reduce;
    ASSERT_TRUE(reduce.init(g_world.get(), n).ok());
    RefCompressed ref(world, n);
    EXPECT_EQ(reduce.padded_size(), ref.padded);
    for (int call = 0; call < 4; ++call) {
      std::vector<std::vector<double>> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(gaussian(1000u * call + 10u * r + static_cast<uint32_t>(n), n, 1.0));
      std::vector<float> mine(inputs[rank].begin(), inputs[rank].end());
      const CommTraffic before = g_world->traffic();
      ASSERT_TRUE(reduce.run(mine.data()).ok());
      const CommTraffic after = g_world->traffic();
      // On the wire: the sign chunks (all-to-all, then all-gather) and two scales, nothing else.
      const uint64_t peers = static_cast<uint64_t>(world - 1), chunk_bytes = ref.chunk / 8;
      EXPECT_EQ(after.all_to_all - before.all_to_all, peers * chunk_bytes);
      EXPECT_EQ(after.all_gather - before.all_gather, peers * (chunk_bytes + 2 * sizeof(float)));
      EXPECT_EQ(after.total() - before.total(), peers * (2 * chunk_bytes + 2 * sizeof(float)));
      if (world == 1) {  // DeepSpeed skips the call on one rank
        EXPECT_EQ(rel(mine.data(), inputs[0]), 0.0);
        continue;
      }
      const std::vector<double> want = ref.run(inputs);
      EXPECT_LT(rel(mine.data(), want), 1e-5) << "call " << call;
      EXPECT_LT(rel(reduce.worker_error(), ref.worker_error[rank], 1e-3), 1e-5) << "call " << call;
      EXPECT_LT(rel(reduce.server_error(), ref.server_error[rank], 1e-3), 1e-5) << "call " << call;
      // The result is the same on every rank, bit for bit.
      std::vector<double> sums = {0, 0};
      for (float x : mine) sums[0] += x;
      sums[1] = -sums[0];
      ASSERT_TRUE(g_world->all_reduce_f64(sums.data(), 2, ReduceOp::Max).ok());
      EXPECT_EQ(sums[0], -sums[1]);
    }
  }
}

#ifdef DSRT_HAVE_CUDA
// The device mode on the current GPU (one per rank, shared when there are fewer): the CUDA kernels
// and the signs and scales exchanged as device buffers through the host-staged communicator, the
// same float64 reference and the same bytes on the wire as the host mode.
TEST(OneBitAdam, CompressedAllReduceOnTheCurrentDevice) {
  if (!dsrt_has_feature("cuda") || device_cuda_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int world = g_world->size(), rank = g_world->rank();
  std::unique_ptr<Device> made;
  ASSERT_TRUE(device_create_cuda(device_local_rank(rank) % device_cuda_count(), &made).ok());
  std::shared_ptr<Device> gpu(std::move(made));
  std::shared_ptr<Comm> staged;
  ASSERT_TRUE(staged_comm_create(g_world, gpu, &staged).ok());
  const size_t n = 1000;
  CompressedAllReduce reduce;
  Status s = reduce.init_device(staged.get(), n, gpu.get(), nullptr);
  ASSERT_TRUE(s.ok()) << s.message();
  RefCompressed ref(world, n);
  DeviceBuffer buffer;
  ASSERT_TRUE(gpu->allocate(n * sizeof(float), &buffer).ok());
  for (int call = 0; call < 3; ++call) {
    std::vector<std::vector<double>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(gaussian(3000u * call + 10u * r + 7u, n, 1.0));
    std::vector<float> mine(inputs[rank].begin(), inputs[rank].end());
    ASSERT_TRUE(gpu->copy(buffer.data(), mine.data(), n * sizeof(float), nullptr).ok());
    const CommTraffic before = g_world->traffic();
    s = reduce.run(buffer.as<float>());
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(gpu->copy(mine.data(), buffer.data(), n * sizeof(float), nullptr).ok());
    ASSERT_TRUE(gpu->synchronize(nullptr).ok());
    const uint64_t peers = static_cast<uint64_t>(world - 1), chunk_bytes = ref.chunk / 8;
    EXPECT_EQ(g_world->traffic().total() - before.total(), peers * (2 * chunk_bytes + 2 * sizeof(float)));
    if (world == 1) {
      EXPECT_EQ(rel(mine.data(), inputs[0]), 0.0);
      continue;
    }
    const std::vector<double> want = ref.run(inputs);
    EXPECT_LT(rel(mine.data(), want), 1e-5) << "call " << call;
    std::vector<float> we, se;
    ASSERT_TRUE(reduce.errors_to_host(&we, &se).ok());
    EXPECT_LT(rel(we.data(), ref.worker_error[rank], 1e-3), 1e-5) << "call " << call;
    EXPECT_LT(rel(se.data(), ref.server_error[rank], 1e-3), 1e-5) << "call " << call;
  }
}
#endif

// The engine case: tensors of 5 and 3 elements, freeze_step 2.
using onebit_test::kSizes;
constexpr int kFreeze = 2;

TrainConfig onebit_config() {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::OneBitAdam;
  c.optimizer.lr = 0.01;
  c.optimizer.beta1 = 0.9;
  c.optimizer.beta2 = 0.999;
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = 0.01;
  c.optimizer.freeze_step = kFreeze;
  c.gradient_clipping = 0.0;  // the float64 recomputation of DeepSpeed's algorithm does not clip
  c.steps_per_print = 0;
  c.zero.stage = 0;
  return c;
}

std::vector<double> init_values() { return gaussian(7, 8, 0.5); }
// Rank r's gradient at boundary `step` (1-based), the 8 elements of both tensors.
std::vector<double> grad_of(int step, int r) { return gaussian(5000u + 100u * step + r, 8, 1.0); }

std::unique_ptr<Engine> make_engine(const TrainConfig &config) {
  return onebit_test::make_engine(g_world, config, init_values());
}

void run_step(Engine &e, int step) { onebit_test::run_step(e, grad_of(step, g_world->rank())); }

// The float64 reference of OnebitAdam over `steps` boundaries on all ranks.
struct RefOneBit {
  std::vector<double> p, m, v;
  RefCompressed reduce;
  explicit RefOneBit(int world) : p(init_values()), m(8, 0.0), v(8, 0.0), reduce(world, 8) {}
  void step(int s, int world) {
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    if (s == 1) return;  // DeepSpeed's first step() only initializes
    const bool compressed = s - 1 >= std::max(kFreeze, 2);
    if (!compressed) {
      std::vector<double> mean(8, 0.0);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < 8; ++i) mean[i] += grad_of(s, r)[i] / world;
      for (size_t i = 0; i < 8; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * mean[i];
        v[i] = b2 * v[i] + (1 - b2) * mean[i] * mean[i];
      }
    } else {
      std::vector<std::vector<double>> local(static_cast<size_t>(world), std::vector<double>(8));
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < 8; ++i) local[r][i] = b1 * m[i] + (1 - b1) * grad_of(s, r)[i];
      m = world > 1 ? reduce.run(local) : local[0];
    }
    for (size_t i = 0; i < 8; ++i) p[i] -= lr * (m[i] / (std::sqrt(v[i]) + eps) + wd * p[i]);
  }
};

TEST(OneBitAdam, EngineMatchesDeepSpeedAlgorithm) {
  const int world = g_world->size(), rank = g_world->rank();
  std::unique_ptr<Engine> e = make_engine(onebit_config());
  ASSERT_TRUE(e);
  RefOneBit ref(world);
  const std::vector<double> init = init_values();
  for (int s = 1; s <= kFreeze + 3; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(e->onebit_compressing(), s - 1 >= std::max(kFreeze, 2));
    run_step(*e, s);
    ref.step(s, world);
    std::vector<std::vector<float>> states;
    ASSERT_TRUE(testing_util::read_partition_states(*e, &states).ok());
    ASSERT_EQ(states.size(), 3u);
    std::vector<float> p, m, v;
    for (size_t t = 0; t < kSizes.size(); ++t) {
      const int64_t off = e->partitioning().flat_layout().tensor_offset(t);
      for (int64_t i = 0; i < kSizes[t]; ++i) {
        p.push_back(states[0][off + i]);
        m.push_back(states[1][off + i]);
        v.push_back(states[2][off + i]);
      }
    }
    if (s == 1) {
      EXPECT_EQ(rel(p.data(), init), 0.0) << "the initialization step moved the parameters";
      continue;
    }
    // fp32 arithmetic against float64 (1 - 0.999f alone differs from 0.001 by 1.3e-5 relative).
    EXPECT_LT(rel(p.data(), ref.p), 2e-5);
    EXPECT_LT(rel(m.data(), ref.m), 5e-5);
    EXPECT_LT(rel(v.data(), ref.v), 5e-5);
    if (world > 1 && s - 1 >= kFreeze) {
      const CompressedAllReduce *reduce = e->onebit_reduce(0);
      ASSERT_NE(reduce, nullptr);
      // Momenta are ~0.1 here: errors below 1e-4 of that are roundoff. (Host copies: on a GPU
      // the errors live in device memory.)
      std::vector<float> we, se;
      ASSERT_TRUE(reduce->errors_to_host(&we, &se).ok());
      EXPECT_LT(rel(we.data(), ref.reduce.worker_error[rank], 1e-5), 5e-5);
      EXPECT_LT(rel(se.data(), ref.reduce.server_error[rank], 1e-5), 5e-5);
    }
  }
}

TEST(OneBitAdam, CheckpointRestoresStatesAndRestartsErrors) {
  const std::string dir = mpi_test::shared_dir(*g_world, "onebit");
  std::unique_ptr<Engine> a = make_engine(onebit_config());
  ASSERT_TRUE(a);
  for (int s = 1; s <= kFreeze + 2; ++s) run_step(*a, s);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  std::unique_ptr<Engine> b = make_engine(onebit_config());
  ASSERT_TRUE(b);
  Status loaded = load_checkpoint(*b, dir, "t");
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  std::vector<std::vector<float>> sa, sb;
  ASSERT_TRUE(testing_util::read_partition_states(*a, &sa).ok());
  ASSERT_TRUE(testing_util::read_partition_states(*b, &sb).ok());
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k], sb[k]) << "state " << k << " is not restored bitwise";
  EXPECT_EQ(b->counters().applied_steps, a->counters().applied_steps);
  EXPECT_TRUE(b->onebit_compressing());
  if (g_world->size() > 1) {
    const CompressedAllReduce *r = b->onebit_reduce(0);
    ASSERT_NE(r, nullptr);
    std::vector<float> we, se;
    ASSERT_TRUE(r->errors_to_host(&we, &se).ok());
    ASSERT_EQ(we.size(), r->padded_size());
    for (float x : we) ASSERT_EQ(x, 0.0f);
    for (float x : se) ASSERT_EQ(x, 0.0f);
  }
  // Both go on; the resumed run equals the original one with its errors zeroed at the same point
  // (bitwise, on any number of ranks).
  a->onebit_reset_errors();
  for (int s = kFreeze + 3; s <= kFreeze + 4; ++s) {
    run_step(*a, s);
    run_step(*b, s);
  }
  ASSERT_TRUE(testing_util::read_partition_states(*a, &sa).ok());
  ASSERT_TRUE(testing_util::read_partition_states(*b, &sb).ok());
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k], sb[k]) << "state " << k << " after resuming";
  mpi_test::remove_shared_dir(*g_world, dir);
}

// Bytes on the wire per step, warm-up against compression, on a 100k-element model.
TEST(OneBitAdam, CompressionStageCutsTheBytesOnTheWire) {
  const int world = g_world->size();
  if (world == 1) GTEST_SKIP() << "one rank moves no bytes";
  std::vector<uint64_t> bytes;
  ASSERT_NO_FATAL_FAILURE(onebit_test::wire_bytes_per_step(g_world, onebit_config(), nullptr, kFreeze + 2, &bytes));
  const uint64_t warm = bytes[kFreeze], compressed = bytes.back();
  if (g_world->rank() == 0)
    std::printf("bytes this rank put on the wire per step, %d ranks, 100000 elements: warm-up %llu, compressed %llu "
                "(%.1fx fewer)\n",
                world, static_cast<unsigned long long>(warm), static_cast<unsigned long long>(compressed),
                static_cast<double>(warm) / static_cast<double>(compressed));
  // fp32 ring all-reduce 2 (W-1)/W * 4N against (W-1)(N/(4W) + 8) plus the overflow flag.
  EXPECT_LT(compressed * 25, warm);
}

TEST(OneBitAdam, ZeroStagesAreRefused) {
  for (int stage = 1; stage <= 3; ++stage) {
    TrainConfig c = onebit_config();
    c.zero.stage = stage;
    std::unique_ptr<Engine> e;
    Status s = Engine::create(c, g_world, &e);
    EXPECT_EQ(s.code(), DSRT_ERR_CONFIG) << "stage " << stage;
    EXPECT_NE(s.message().find("zero_optimization.stage 0"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_onebit_adam", &dsrt::g_world); }
