// dsrt-mpi-ranks: 1 2 4
// 0/1 Adam against a float64 recomputation of DeepSpeed's algorithm (ZeroOneAdam.step with
// NcclBackend.compressed_allreduce), every rank simulating every rank from seeds. A small case
// (8 elements in two tensors) with short schedules -- var_freeze_step 6, var_update_scaler 2,
// local_step_scaler 2, local_step_clipper 4 -- covers in 16 steps the initialization step,
// variance steps on all-reduced gradients, steps on 1-bit compressed gradients as the variance
// interval doubles, the freeze (errors restarted), local steps and syncs of the accumulated update
// as the local interval doubles to its clipper. Parameters, both moments, u and both error
// buffers are checked on every rank after every step. A checkpoint restores rank 0's states and
// restarts the interval policy, u and the errors (DeepSpeed's load_state_dict); the bytes on the
// wire per kind of step; ZeRO stages above 0 are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "ckpt/ckpt.h"
#include "mpi_scratch_dir.h"
#include "mpi_test_main.h"
#include "onebit_engine_util.h"
#include "onebit_reference.h"
#include "zero/compressed_allreduce.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

using onebit_test::kSizes;
constexpr size_t kN = 8;
constexpr int kVarFreeze = 6, kVarScaler = 2, kLocalScaler = 2, kLocalClipper = 4;
constexpr double kLr = 0.01, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8, kWd = 0.01;

TrainConfig zero_one_config() {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::ZeroOneAdam;
  c.optimizer.lr = kLr;
  c.optimizer.beta1 = kB1;
  c.optimizer.beta2 = kB2;
  c.optimizer.eps = kEps;
  c.optimizer.weight_decay = kWd;
  c.optimizer.var_freeze_step = kVarFreeze;
  c.optimizer.var_update_scaler = kVarScaler;
  c.optimizer.local_step_scaler = kLocalScaler;
  c.optimizer.local_step_clipper = kLocalClipper;
  c.gradient_clipping = 0.0;  // the float64 recomputation of DeepSpeed's algorithm does not clip
  c.steps_per_print = 0;
  c.zero.stage = 0;
  return c;
}

std::vector<double> init_values() { return gaussian(17, kN, 0.5); }
std::vector<double> grad_of(int step, int r) { return gaussian(7000u + 100u * step + r, kN, 1.0); }

std::unique_ptr<Engine> make_engine(const TrainConfig &config) {
  return onebit_test::make_engine(g_world, config, init_values());
}

void run_step(Engine &e, int step) { onebit_test::run_step(e, grad_of(step, g_world->rank())); }

// p, m, v of this rank in tensor order.
void read_pmv(Engine &e, std::vector<float> *p, std::vector<float> *m, std::vector<float> *v) {
  std::vector<std::vector<float>> states;
  ASSERT_TRUE(testing_util::read_partition_states(e, &states).ok());
  ASSERT_EQ(states.size(), 3u);
  p->clear();
  m->clear();
  v->clear();
  for (size_t t = 0; t < kSizes.size(); ++t) {
    const int64_t off = e.partitioning().flat_layout().tensor_offset(t);
    for (int64_t i = 0; i < kSizes[t]; ++i) {
      p->push_back(states[0][off + i]);
      m->push_back(states[1][off + i]);
      v->push_back(states[2][off + i]);
    }
  }
}

// The float64 reference of ZeroOneAdam on all W ranks: p, m and u are per rank (they part ways in
// the local steps), v is shared.
struct RefZeroOne {
  int world;
  std::vector<std::vector<double>> p, m, u;
  std::vector<double> v;
  double lrs = 0;
  int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
  bool errors_zeroed = false;
  RefCompressed reduce;
  explicit RefZeroOne(int w)
      : world(w), p(w, init_values()), m(w, std::vector<double>(kN, 0.0)), u(w, std::vector<double>(kN, 0.0)),
        v(kN, 0.0), reduce(w, kN) {}
  static bool frozen(int s) { return s - 1 >= std::max(kVarFreeze + 1, 2); }
  bool gradients_local(int s) const { return s > 1 && (frozen(s) || s % var_interval != 0); }
  void restart() {  // what a checkpoint load drops
    for (auto &x : u) std::fill(x.begin(), x.end(), 0.0);
    for (auto &x : reduce.worker_error) std::fill(x.begin(), x.end(), 0.0);
    for (auto &x : reduce.server_error) std::fill(x.begin(), x.end(), 0.0);
    lrs = 0;
    var_interval = local_interval = 1;
    var_counter = local_counter = 0;
    errors_zeroed = false;
  }
  std::vector<double> allreduce(const std::vector<std::vector<double>> &x) { return world > 1 ? reduce.run(x) : x[0]; }
  void adam_update(int r) {
    for (size_t i = 0; i < kN; ++i) p[r][i] -= kLr * (m[r][i] / (std::sqrt(v[i]) + kEps) + kWd * p[r][i]);
  }
  void step(int s) {
    if (s == 1) return;  // the initialization step
    if (frozen(s)) {
      if (!errors_zeroed) {
        for (auto &x : reduce.worker_error) std::fill(x.begin(), x.end(), 0.0);
        for (auto &x : reduce.server_error) std::fill(x.begin(), x.end(), 0.0);
        errors_zeroed = true;
      }
      lrs += kLr;
      for (int r = 0; r < world; ++r) {
        const std::vector<double> g = grad_of(s, r);
        for (size_t i = 0; i < kN; ++i) {
          m[r][i] = kB1 * m[r][i] + (1 - kB1) * g[i];
          const double d = kLr * (m[r][i] / (std::sqrt(v[i]) + kEps) + kWd * p[r][i]);
          p[r][i] -= d;
          u[r][i] -= d;
        }
      }
      if (s % local_interval == 0) {
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < kN; ++i) {
            p[r][i] -= u[r][i];
            u[r][i] *= std::sqrt(v[i]) + kEps;
          }
        const std::vector<double> red = allreduce(u);
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < kN; ++i) {
            m[r][i] = -red[i] / lrs;
            p[r][i] += red[i] / (std::sqrt(v[i]) + kEps);
            u[r][i] = 0;
          }
        lrs = 0;
      }
      if (++local_counter == kLocalScaler) {
        local_counter = 0;
        local_interval = std::min<int64_t>(kLocalClipper, 2 * local_interval);
      }
      return;
    }
    std::vector<std::vector<double>> grads;
    for (int r = 0; r < world; ++r) grads.push_back(grad_of(s, r));
    const bool var_step = s % var_interval == 0;
    if (var_step) {
      std::vector<double> mean(kN, 0.0);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < kN; ++i) mean[i] += grads[r][i] / world;
      for (size_t i = 0; i < kN; ++i) v[i] = kB2 * v[i] + (1 - kB2) * mean[i] * mean[i];
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < kN; ++i) m[r][i] = kB1 * m[r][i] + (1 - kB1) * mean[i];
    } else {
      const std::vector<double> red = allreduce(grads);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < kN; ++i) m[r][i] = kB1 * m[r][i] + (1 - kB1) * red[i];
    }
    for (int r = 0; r < world; ++r) adam_update(r);
    if (var_step && ++var_counter == kVarScaler) {
      var_counter = 0;
      var_interval *= 2;
    }
  }
};

void expect_matches(Engine &e, const RefZeroOne &ref, int rank) {
  std::vector<float> p, m, v;
  read_pmv(e, &p, &m, &v);
  // fp32 arithmetic against float64 (1 - 0.999f alone differs from 0.001 by 1.3e-5 relative).
  EXPECT_LT(rel(p.data(), ref.p[rank]), 2e-5);
  EXPECT_LT(rel(m.data(), ref.m[rank]), 1e-4);
  EXPECT_LT(rel(v.data(), ref.v), 5e-5);
  std::vector<float> u;  // a host copy: on a GPU u lives in device memory
  ASSERT_TRUE(e.zero_one_accumulator_to_host(0, &u).ok());
  ASSERT_EQ(u.size(), kN);
  EXPECT_LT(rel(u.data(), ref.u[rank], 1e-6), 1e-4);
  EXPECT_EQ(e.zero_one_policy().var_interval, ref.var_interval);
  EXPECT_EQ(e.zero_one_policy().local_interval, ref.local_interval);
  if (g_world->size() > 1) {
    const CompressedAllReduce *reduce = e.onebit_reduce(0);
    ASSERT_NE(reduce, nullptr);
    std::vector<float> we, se;
    ASSERT_TRUE(reduce->errors_to_host(&we, &se).ok());
    EXPECT_LT(rel(we.data(), ref.reduce.worker_error[rank], 1e-5), 1e-4);
    EXPECT_LT(rel(se.data(), ref.reduce.server_error[rank], 1e-5), 1e-4);
  }
}

constexpr int kSteps = 16;

TEST(ZeroOneAdam, EngineMatchesDeepSpeedAlgorithm) {
  const int world = g_world->size(), rank = g_world->rank();
  std::unique_ptr<Engine> e = make_engine(zero_one_config());
  ASSERT_TRUE(e);
  RefZeroOne ref(world);
  int variance_steps = 0, compressed_grad_steps = 0, local_steps = 0, syncs = 0;
  for (int s = 1; s <= kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(e->onebit_compressing(), ref.gradients_local(s));
    EXPECT_EQ(e->zero_one_frozen(), RefZeroOne::frozen(s));
    if (s > 1 && !RefZeroOne::frozen(s)) ++(s % ref.var_interval == 0 ? variance_steps : compressed_grad_steps);
    if (RefZeroOne::frozen(s)) ++(s % ref.local_interval == 0 ? syncs : local_steps);
    run_step(*e, s);
    ref.step(s);
    if (s == 1) {
      std::vector<float> p, m, v;
      read_pmv(*e, &p, &m, &v);
      EXPECT_EQ(rel(p.data(), init_values()), 0.0) << "the initialization step moved the parameters";
      continue;
    }
    expect_matches(*e, ref, rank);
  }
  // The schedules above: every kind of step ran, the local interval reached its clipper.
  EXPECT_EQ(variance_steps, 4);
  EXPECT_EQ(compressed_grad_steps, 2);
  EXPECT_EQ(syncs, 5);
  EXPECT_EQ(local_steps, 4);
  EXPECT_EQ(e->zero_one_policy().local_interval, kLocalClipper);
}

TEST(ZeroOneAdam, CheckpointRestoresRankZeroAndRestartsThePolicy) {
  const int world = g_world->size(), rank = g_world->rank();
  const std::string dir = mpi_test::shared_dir(*g_world, "zero_one");
  constexpr int kSaveAt = 11;  // a local step: u is not zero, the ranks' parameters differ
  std::unique_ptr<Engine> a = make_engine(zero_one_config());
  ASSERT_TRUE(a);
  RefZeroOne ref(world);
  for (int s = 1; s <= kSaveAt; ++s) {
    run_step(*a, s);
    ref.step(s);
  }
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  // Stage 0 saves rank 0's replica: every rank resumes from rank 0's p, m, v.
  std::vector<float> p0, m0, v0;
  read_pmv(*a, &p0, &m0, &v0);
  ASSERT_TRUE(g_world->broadcast_bytes(p0.data(), p0.size() * sizeof(float), 0).ok());
  ASSERT_TRUE(g_world->broadcast_bytes(m0.data(), m0.size() * sizeof(float), 0).ok());
  std::unique_ptr<Engine> b = make_engine(zero_one_config());
  ASSERT_TRUE(b);
  Status loaded = load_checkpoint(*b, dir, "t");
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  std::vector<float> p, m, v;
  read_pmv(*b, &p, &m, &v);
  EXPECT_EQ(p, p0);
  EXPECT_EQ(m, m0);
  EXPECT_EQ(v, v0);
  EXPECT_EQ(b->counters().applied_steps, kSaveAt);
  EXPECT_TRUE(b->zero_one_frozen());
  EXPECT_EQ(b->zero_one_policy().local_interval, 1);
  std::vector<float> u0;
  ASSERT_TRUE(b->zero_one_accumulator_to_host(0, &u0).ok());
  for (float x : u0) ASSERT_EQ(x, 0.0f);
  if (world > 1) {
    const CompressedAllReduce *r = b->onebit_reduce(0);
    std::vector<float> we, se;
    ASSERT_TRUE(r->errors_to_host(&we, &se).ok());
    ASSERT_EQ(we.size(), r->padded_size());
    for (float x : we) ASSERT_EQ(x, 0.0f);
    for (float x : se) ASSERT_EQ(x, 0.0f);
  }
  // The reference resumes the same way: rank 0's states everywhere, the policy restarted.
  for (int r = 0; r < world; ++r) {
    ref.p[r] = ref.p[0];
    ref.m[r] = ref.m[0];
  }
  ref.restart();
  for (int s = kSaveAt + 1; s <= kSaveAt + 4; ++s) {
    SCOPED_TRACE("resumed step " + std::to_string(s));
    run_step(*b, s);
    ref.step(s);
    expect_matches(*b, ref, rank);
  }
  mpi_test::remove_shared_dir(*g_world, dir);
}

// Bytes on the wire per kind of step on a 100k-element model.
TEST(ZeroOneAdam, BytesOnTheWirePerKindOfStep) {
  const int world = g_world->size();
  if (world == 1) GTEST_SKIP() << "one rank moves no bytes";
  TrainConfig config = zero_one_config();
  config.optimizer.var_freeze_step = 4;  // steps 2, 3, 4: variance (interval 1, 1, 2); 5: compressed gradients
  config.optimizer.local_step_scaler = 1;  // then a sync at 6 (interval 1), local 7, sync 8 (interval 2)
  std::vector<uint64_t> bytes;
  ASSERT_NO_FATAL_FAILURE(onebit_test::wire_bytes_per_step(g_world, config, nullptr, 8, &bytes));
  const uint64_t variance = bytes[4], compressed = bytes[5], sync = bytes[6], local = bytes[7];
  if (g_world->rank() == 0)
    std::printf("bytes this rank put on the wire per step, %d ranks, 100000 elements: variance step %llu, "
                "compressed-gradient step %llu (%.1fx fewer), sync %llu, local step %llu\n",
                world, static_cast<unsigned long long>(variance), static_cast<unsigned long long>(compressed),
                static_cast<double>(variance) / static_cast<double>(compressed), static_cast<unsigned long long>(sync),
                static_cast<unsigned long long>(local));
  EXPECT_LT(compressed * 25, variance);
  EXPECT_LT(sync * 25, variance);
  EXPECT_EQ(sync, compressed);  // the same 1-bit all-reduce, of u instead of the gradient
  EXPECT_LT(local * 1000, variance);  // only the overflow agreement
  EXPECT_EQ(bytes[8], sync);
}

TEST(ZeroOneAdam, ZeroStagesAreRefused) {
  for (int stage = 1; stage <= 3; ++stage) {
    TrainConfig c = zero_one_config();
    c.zero.stage = stage;
    std::unique_ptr<Engine> e;
    Status s = Engine::create(c, g_world, &e);
    EXPECT_EQ(s.code(), DSRT_ERR_CONFIG) << "stage " << stage;
    EXPECT_NE(s.message().find("ZeroOneAdam needs zero_optimization.stage 0"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_zero_one_adam", &dsrt::g_world); }
