// dsrt-mpi-ranks: 2 3 4
// ZeRO stages 0-3 across ranks against a single-rank stage-0 engine that every rank runs locally
// on the rank-averaged gradients (each rank regenerates every rank's gradients from seeds); the
// memory each rank holds against the ZeRO formulas; ranks that register different tensors or
// acquire in different orders get DSRT_ERR_COMM instead of a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using testing_util::relative_error;

std::shared_ptr<Comm> g_world;

// Odd sizes: a tensor under the persistence threshold, one larger than a bucket, tensors that
// straddle partitions at every world size.
const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {1, 1}, {129}};

int64_t numel_of(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> gaussian(uint32_t seed, size_t n, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float &x : out) x = dist(rng);
  return out;
}

std::unique_ptr<Engine> make_engine(const TrainConfig &config, std::shared_ptr<Comm> comm) {
  std::unique_ptr<Engine> engine;
  Status s = Engine::create(config, std::move(comm), &engine);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!engine) return engine;
  for (size_t t = 0; t < kShapes.size(); ++t) {
    const std::vector<float> init = gaussian(100 + static_cast<uint32_t>(t), static_cast<size_t>(numel_of(kShapes[t])), 0.5f);
    s = engine->add_param("layer" + std::to_string(t), kShapes[t].data(), static_cast<int>(kShapes[t].size()),
                          init.data(), nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  s = engine->build();
  EXPECT_TRUE(s.ok()) << s.message();
  return engine;
}

// One micro-step of a host: forward acquires in order, backward acquires in reverse and writes
// each gradient as it is produced. With shuffle_seed != 0 the gradients are instead signalled
// after backward in an order that differs from rank to rank.
void host_micro_step(Engine &e, const std::vector<std::vector<float>> &grads, unsigned shuffle_seed = 0) {
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    void *data = nullptr;
    ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
    ASSERT_NE(data, nullptr);
    ASSERT_TRUE(e.release(t).ok());
  }
  if (shuffle_seed != 0) {
    std::vector<size_t> order;
    for (size_t t = e.num_tensors(); t-- > 0;) {
      void *data = nullptr;
      ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
      ASSERT_TRUE(e.release(t).ok());
      order.push_back(t);
    }
    std::mt19937 rng(shuffle_seed);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t t : order) {
      ASSERT_TRUE(testing_util::update_grad(e, t, [&](void *buffer, dsrt_dtype dtype) {
                    for (size_t i = 0; i < grads[t].size(); ++i) from_float(buffer, dtype, i, grads[t][i]);
                  }).ok());
      ASSERT_TRUE(e.grad_ready(t).ok());
    }
    return;
  }
  for (size_t t = e.num_tensors(); t-- > 0;) {
    void *data = nullptr;
    ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
    ASSERT_TRUE(testing_util::update_grad(e, t, [&](void *buffer, dsrt_dtype dtype) {
                  for (size_t i = 0; i < grads[t].size(); ++i) from_float(buffer, dtype, i, grads[t][i]);
                }).ok());
    ASSERT_TRUE(e.grad_ready(t).ok());
    ASSERT_TRUE(e.release(t).ok());
  }
}

struct Variant {
  int stage;
  bool bf16;
  int gas;
  bool overlap;
  bool reduce_scatter;
  bool prescale;
  bool shuffled = false;  // ranks signal gradients in different orders
  bool comm_fp32 = false;  // communication_data_type fp32 (buckets staged from the working dtype)
};

void run_variant(const Variant &v) {
  SCOPED_TRACE(Format("stage %d %s gas %d overlap %d reduce_scatter %d prescale %d shuffled %d comm_fp32 %d", v.stage,
                      v.bf16 ? "bf16" : "fp32", v.gas, v.overlap, v.reduce_scatter, v.prescale, v.shuffled, v.comm_fp32));
  const int world = g_world->size();
  TrainConfig config;
  config.optimizer.present = true;
  config.optimizer.type = OptimizerType::AdamW;
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.steps_per_print = 0;
  config.bf16_enabled = v.bf16;
  config.gradient_accumulation_steps = v.gas;
  config.gradient_clipping = 2.0;
  config.prescale_gradients = v.prescale;
  config.zero.stage = v.stage;
  config.has_communication_data_type = v.comm_fp32;
  config.communication_data_type = DSRT_F32;
  config.zero.reduce_bucket_size = 1500;
  config.zero.allgather_bucket_size = 1000;
  config.zero.overlap_comm = v.overlap;
  config.zero.reduce_scatter = v.reduce_scatter;
  config.zero.stage3_param_persistence_threshold = 10;
  config.zero.stage3_prefetch_bucket_size = 2500;
  config.zero.stage3_max_live_parameters = 6000;
  config.zero.stage3_max_reuse_distance = 1500;

  std::unique_ptr<Engine> engine = make_engine(config, g_world);
  TrainConfig ref_config = config;
  ref_config.zero.stage = 0;
  std::shared_ptr<Comm> local;
  ASSERT_TRUE(comm_create_local(&local).ok());
  std::unique_ptr<Engine> reference = make_engine(ref_config, local);
  ASSERT_TRUE(engine && reference);

  const dsrt_dtype wdt = config.working_dtype();
  const int boundaries = 3;
  for (int micro = 0; micro < boundaries * v.gas; ++micro) {
    std::vector<std::vector<float>> mine, averaged;
    for (size_t t = 0; t < kShapes.size(); ++t) {
      const size_t n = static_cast<size_t>(numel_of(kShapes[t]));
      std::vector<double> sum(n, 0.0);
      for (int r = 0; r < world; ++r) {
        std::vector<float> g = gaussian(7919u * static_cast<uint32_t>(micro + 1) + 31u * static_cast<uint32_t>(r) +
                                            static_cast<uint32_t>(t),
                                        n, 0.3f);
        for (size_t i = 0; i < n; ++i) {
          g[i] = static_cast<float>(testing_util::round_to(wdt, g[i]));
          sum[i] += g[i];
        }
        if (r == g_world->rank()) mine.push_back(g);
      }
      std::vector<float> avg(n);
      for (size_t i = 0; i < n; ++i) avg[i] = static_cast<float>(sum[i] / world);
      averaged.push_back(avg);
    }
    host_micro_step(*engine, mine, v.shuffled ? 1000u + 17u * static_cast<unsigned>(g_world->rank() + micro) : 0u);
    host_micro_step(*reference, averaged);
    dsrt_step_result got, want;
    got.struct_size = want.struct_size = sizeof got;
    Status s = engine->step(&got);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(reference->step(&want).ok());
    EXPECT_EQ(got.boundary, want.boundary);
    EXPECT_EQ(got.overflow, 0);
    EXPECT_EQ(got.global_step, want.global_step);
    if (got.boundary) {
      const double tolerance = v.bf16 ? 2e-2 : 1e-5;
      EXPECT_NEAR(got.grad_norm, want.grad_norm, tolerance * want.grad_norm);
    }
  }
  if (v.stage == 3 && !v.shuffled) {
    EXPECT_GT(engine->param_coordinator()->prefetch_hits(), 0) << "later micro-steps prefetch along the trace";
  }
  const double tolerance = v.bf16 ? 1e-2 : 1e-5;
  for (size_t t = 0; t < kShapes.size(); ++t) {
    const size_t n = static_cast<size_t>(numel_of(kShapes[t]));
    std::vector<float> got(n), want(n);
    ASSERT_TRUE(engine->read_fp32(t, got.data(), n).ok());
    ASSERT_TRUE(reference->read_fp32(t, want.data(), n).ok());
    std::vector<double> want64(want.begin(), want.end());
    EXPECT_LT(relative_error(got, want64), tolerance) << "tensor " << t;
    // Every rank's working copy is the cast of the gathered master.
    std::vector<uint8_t> working;
    dsrt_dtype dtype;
    ASSERT_TRUE(testing_util::read_working_values(*engine, t, &working, &dtype).ok());
    ASSERT_EQ(dtype, wdt);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(to_float(working.data(), wdt, i), testing_util::round_to(wdt, got[i]))
          << "tensor " << t << " element " << i;
  }
}

TEST(ZeroEquivalence, EveryStageMatchesSingleRankStageZero) {
  for (int stage = 0; stage <= 3; ++stage)
    for (bool bf16 : {false, true})
      for (int gas : {1, 3}) run_variant({stage, bf16, gas, stage >= 2, true, false});
}

TEST(ZeroEquivalence, AllReduceInsteadOfReduceScatterAndPrescale) {
  run_variant({1, false, 2, false, false, false});
  run_variant({2, false, 1, true, false, true});
  run_variant({3, false, 2, false, false, true});
  run_variant({2, false, 2, false, true, true});
  run_variant({2, true, 1, true, true, false, false, true});
  run_variant({3, true, 2, false, true, true, false, true});
}

TEST(ZeroEquivalence, RanksSignallingGradientsInDifferentOrdersAgree) {
  for (int stage = 0; stage <= 3; ++stage) run_variant({stage, false, 2, true, true, false, true});
}

TEST(ZeroMemory, RankBytesFollowTheZeroFormulas) {
  const int world = g_world->size();
  // Psi large next to the buckets and the alignment padding.
  const std::vector<std::vector<int64_t>> shapes = {{512, 512}, {300000}, {1000, 129}, {64}};
  int64_t psi = 0;
  for (const auto &s : shapes) psi += numel_of(s);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(Format("stage %d", stage));
    TrainConfig config;
    config.optimizer.present = true;
    config.optimizer.type = OptimizerType::Adam;  // K = 12: fp32 master 4 + m 4 + v 4
    config.bf16_enabled = true;
    config.steps_per_print = 0;
    config.zero.stage = stage;
    config.zero.reduce_bucket_size = 20000;
    config.zero.stage3_param_persistence_threshold = 100;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::create(config, g_world, &e).ok());
    for (size_t t = 0; t < shapes.size(); ++t)
      ASSERT_TRUE(e->add_param("p" + std::to_string(t), shapes[t].data(), static_cast<int>(shapes[t].size()), nullptr,
                               nullptr)
                      .ok());
    ASSERT_TRUE(e->build().ok());
    dsrt_memory_stats m;
    m.struct_size = sizeof m;
    ASSERT_TRUE(e->memory(&m).ok());
    const double P = static_cast<double>(psi), W = static_cast<double>(world);
    // DESIGN.md: (2+2+K)Psi at 0, 2Psi+2Psi+K*Psi/W at 1, 2Psi+(2+K)Psi/W at 2, (2+2+K)Psi/W at 3.
    // dsrt keeps gradients in fp32 (4 bytes where the formula has 2): a full accumulator at stages
    // 0-1 (reduced once per boundary, as DeepSpeed's stage 1), a partition at stages 2-3.
    const double working = stage < 3 ? 2 * P : 2 * P / W;
    const double master = stage == 0 ? 4 * P : 4 * P / W;
    const double states = stage == 0 ? 8 * P : 8 * P / W;
    const double gradients = stage <= 1 ? 4 * P : 4 * P / W;
    auto close = [](double got, double want) { return std::fabs(got - want) <= 0.01 * want; };
    const int d = DSRT_LOC_DEVICE;
    // Stage 3 keeps the persistent 64-element tensor gathered: tiny next to Psi.
    EXPECT_TRUE(close(static_cast<double>(m.working_params[d]), working)) << m.working_params[d] << " vs " << working;
    EXPECT_TRUE(close(static_cast<double>(m.master_params[d]), master)) << m.master_params[d] << " vs " << master;
    EXPECT_TRUE(close(static_cast<double>(m.optimizer_states[d]), states)) << m.optimizer_states[d] << " vs " << states;
    EXPECT_TRUE(close(static_cast<double>(m.gradients[d]), gradients)) << m.gradients[d] << " vs " << gradients;
    // Buckets are bounded by the bucket size, not the model (two bf16 buckets plus staging).
    std::vector<std::vector<float>> zeros;
    for (size_t t = 0; t < shapes.size(); ++t) zeros.emplace_back(static_cast<size_t>(numel_of(shapes[t])), 0.0f);
    for (size_t t = shapes.size(); t-- > 0;) {
      void *buffer = nullptr;
      ASSERT_TRUE(e->grad(t, &buffer, nullptr).ok());
      ASSERT_TRUE(e->grad_ready(t).ok());
    }
    ASSERT_TRUE(e->step(nullptr).ok());
    ASSERT_TRUE(e->memory(&m).ok());
    const double largest = 300000;  // a tensor larger than a bucket gets a buffer of its own
    EXPECT_LE(static_cast<double>(m.buffers[d]), (largest + 2 * 20000) * 2 * 3) << m.buffers[d];
  }
}

// write_fp32 / read_fp32 are collective round trips at every stage, and a master partition written
// directly (as a checkpoint load does) reaches every rank's working copy after
// refresh_working_copies.
TEST(ZeroAccess, WriteReadAndRefreshAtEveryStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(Format("stage %d", stage));
    TrainConfig config;
    config.optimizer.present = true;
    config.bf16_enabled = true;
    config.steps_per_print = 0;
    config.zero.stage = stage;
    config.zero.allgather_bucket_size = 700;
    config.zero.stage3_param_persistence_threshold = 10;
    std::unique_ptr<Engine> e = make_engine(config, g_world);
    ASSERT_TRUE(e);
    for (size_t t = 0; t < e->num_tensors(); ++t) {
      const size_t n = static_cast<size_t>(e->tensor_numel(t));
      const std::vector<float> value = gaussian(500 + static_cast<uint32_t>(t), n, 2.0f);
      ASSERT_TRUE(e->write_fp32(t, value.data(), n).ok());
      std::vector<float> back(n);
      ASSERT_TRUE(e->read_fp32(t, back.data(), n).ok());
      EXPECT_EQ(back, value) << "tensor " << t;
    }
    // Overwrite this rank's master pieces with a known function of (tensor, element).
    auto expected = [](size_t t, int64_t i) { return 0.25f * static_cast<float>(t) - 0.001f * static_cast<float>(i); };
    for (const OwnedSegment &seg : e->partitioning().owned_segments(e->rank())) {
      std::vector<float> piece(static_cast<size_t>(seg.count));
      for (int64_t i = 0; i < seg.count; ++i) piece[static_cast<size_t>(i)] = expected(seg.tensor, seg.tensor_begin + i);
      ASSERT_TRUE(e->write_partition_state(-1, static_cast<size_t>(seg.part_offset), piece.size(), piece.data()).ok());
    }
    ASSERT_TRUE(e->refresh_working_copies().ok());
    for (size_t t = 0; t < e->num_tensors(); ++t) {
      std::vector<uint8_t> working;
      dsrt_dtype dtype;
      ASSERT_TRUE(testing_util::read_working_values(*e, t, &working, &dtype).ok());
      ASSERT_EQ(dtype, DSRT_BF16);
      for (int64_t i = 0; i < e->tensor_numel(t); ++i)
        ASSERT_EQ(to_float(working.data(), DSRT_BF16, static_cast<size_t>(i)),
                  testing_util::round_to(DSRT_BF16, expected(t, i)))
            << "tensor " << t << " element " << i;
    }
  }
}

// An inf on one rank lands, after reduction, only in the partition of the rank that owns it; every
// rank must still skip the step, and the fp16 loss scale must stay the same on all of them.
TEST(ZeroAgreement, OneRanksOverflowSkipsTheStepEverywhere) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(Format("stage %d", stage));
    TrainConfig config;
    config.optimizer.present = true;
    config.fp16.enabled = true;
    config.fp16.initial_scale_power = 12;
    config.fp16.hysteresis = 1;
    config.steps_per_print = 0;
    config.zero.stage = stage;
    config.zero.reduce_bucket_size = 1500;
    config.zero.stage3_param_persistence_threshold = 10;
    std::unique_ptr<Engine> e = make_engine(config, g_world);
    ASSERT_TRUE(e);
    std::vector<std::vector<float>> before(e->num_tensors());
    for (size_t t = 0; t < e->num_tensors(); ++t) {
      before[t].resize(static_cast<size_t>(e->tensor_numel(t)));
      ASSERT_TRUE(e->read_fp32(t, before[t].data(), before[t].size()).ok());
    }
    std::vector<std::vector<float>> grads;
    for (size_t t = 0; t < e->num_tensors(); ++t) grads.emplace_back(static_cast<size_t>(e->tensor_numel(t)), 1.0f);
    // The last element of the tensor larger than a bucket: owned by the last rank at stages 1-3.
    if (g_world->rank() == 0) grads[3].back() = INFINITY;
    host_micro_step(*e, grads);
    dsrt_step_result r;
    r.struct_size = sizeof r;
    Status s = e->step(&r);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(r.overflow, 1);
    EXPECT_EQ(r.loss_scale, 2048.0);
    for (size_t t = 0; t < e->num_tensors(); ++t) {
      std::vector<float> now(before[t].size());
      ASSERT_TRUE(e->read_fp32(t, now.data(), now.size()).ok());
      EXPECT_EQ(now, before[t]) << "tensor " << t;
    }
    grads[3].back() = 1.0f;
    host_micro_step(*e, grads);
    ASSERT_TRUE(e->step(&r).ok());
    EXPECT_EQ(r.overflow, 0);
    std::vector<float> now(before[3].size());
    ASSERT_TRUE(e->read_fp32(3, now.data(), now.size()).ok());
    EXPECT_NE(now, before[3]);
  }
}

TEST(ZeroAgreement, DifferentTensorsFailWithCommError) {
  if (g_world->size() < 2) GTEST_SKIP();
  TrainConfig config;
  config.steps_per_print = 0;
  config.zero.stage = 2;
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::create(config, g_world, &e).ok());
    const int64_t shape[] = {5};
    const int64_t other[] = {6};
    ASSERT_TRUE(e->add_param("a", shape, 1, nullptr, nullptr).ok());
    ASSERT_TRUE(e->add_param("b", g_world->rank() == 1 ? other : shape, 1, nullptr, nullptr).ok());
    Status s = e->build();
    EXPECT_EQ(s.code(), DSRT_ERR_COMM);
    EXPECT_NE(s.message().find("tensor #1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'b'"), std::string::npos) << s.message();
  }
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::create(config, g_world, &e).ok());
    const int64_t shape[] = {5};
    ASSERT_TRUE(e->add_param("a", shape, 1, nullptr, nullptr).ok());
    if (g_world->rank() == 0) {
      ASSERT_TRUE(e->add_param("extra", shape, 1, nullptr, nullptr).ok());
    }
    Status s = e->build();
    EXPECT_EQ(s.code(), DSRT_ERR_COMM);
    EXPECT_NE(s.message().find("different numbers of tensors"), std::string::npos) << s.message();
  }
}

TEST(ZeroAgreement, DifferentAcquireOrdersFailWithCommError) {
  if (g_world->size() < 2) GTEST_SKIP();
  TrainConfig config;
  config.steps_per_print = 0;
  config.zero.stage = 3;
  config.zero.stage3_param_persistence_threshold = 0;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::create(config, g_world, &e).ok());
  const int64_t shape[] = {40};
  ASSERT_TRUE(e->add_param("first", shape, 1, nullptr, nullptr).ok());
  ASSERT_TRUE(e->add_param("second", shape, 1, nullptr, nullptr).ok());
  ASSERT_TRUE(e->build().ok());
  const size_t order[2] = {g_world->rank() == 0 ? 0u : 1u, g_world->rank() == 0 ? 1u : 0u};
  for (size_t t : order) {
    void *data = nullptr;
    ASSERT_TRUE(e->acquire(t, &data, nullptr).ok());
    ASSERT_TRUE(e->release(t).ok());
  }
  Status s = e->step(nullptr);
  EXPECT_EQ(s.code(), DSRT_ERR_COMM);
  EXPECT_NE(s.message().find("different orders"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("acquire('"), std::string::npos) << s.message();
  // The ranks are out of step now: later calls fail fast instead of issuing collectives.
  s = e->step(nullptr);
  EXPECT_EQ(s.code(), DSRT_ERR_STATE);
  EXPECT_NE(s.message().find("unusable"), std::string::npos) << s.message();
  void *data = nullptr;
  EXPECT_EQ(e->acquire(0, &data, nullptr).code(), DSRT_ERR_STATE);
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_zero_equivalence", &dsrt::g_world); }
