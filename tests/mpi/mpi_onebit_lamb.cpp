// dsrt-mpi-ranks: 1 2 4
// 1-bit LAMB against a float64 recomputation of DeepSpeed's algorithm (OnebitLamb.step over
// NcclBackend.compressed_allreduce), every rank simulating every rank from seeds: the engine on a
// small case (two tensors of 5 and 3 elements, freeze_step 3: one initialization step, two warm-up
// steps, four compressed steps), every state, per-tensor scalar and error buffer checked after each
// step; a checkpoint saved in the compression stage resumes bitwise (errors included) and one
// loaded at another world size restarts only the errors; bytes on the wire; ZeRO stages refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

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
constexpr int kFreeze = 3;
constexpr double kLr = 0.01, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8, kWd = 0.01;
constexpr double kCoeffBeta = 0.9, kFactorMax = 4.0, kFactorMin = 0.5, kThreshold = 0.1;

TrainConfig lamb_config() {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::OneBitLamb;
  c.optimizer.lr = kLr;
  c.optimizer.beta1 = kB1;
  c.optimizer.beta2 = kB2;
  c.optimizer.eps = kEps;
  c.optimizer.weight_decay = kWd;
  c.optimizer.freeze_step = kFreeze;
  c.optimizer.max_coeff = 10.0;
  c.optimizer.min_coeff = 0.01;
  c.steps_per_print = 0;
  c.zero.stage = 0;
  c.gradient_clipping = 0.0;  // the float64 recomputation of DeepSpeed's algorithm does not clip
  return c;
}

std::vector<double> init_values() { return gaussian(17, 8, 0.5); }
// Rank r's gradient at boundary `step` (1-based); the ranks' gradients share a mean so the
// momentum keeps a direction.
std::vector<double> grad_of(int step, int r) {
  std::vector<double> g = gaussian(7000u + 100u * step + r, 8, 0.5), mean = gaussian(300u + step, 8, 1.0);
  for (size_t i = 0; i < 8; ++i) g[i] = static_cast<float>(g[i] + mean[i]);
  return g;
}

// The devices the engine cases run on: the CPU, and the current GPU when there is one.
std::vector<const char *> devices() {
  std::vector<const char *> out = {"cpu"};
  if (dsrt_has_feature("cuda")) out.push_back("cuda");
  return out;
}

std::unique_ptr<Engine> make_engine(const TrainConfig &config, const char *device = "cpu") {
  return onebit_test::make_engine(g_world, config, init_values(), device);
}

void run_step(Engine &e, int step) { onebit_test::run_step(e, grad_of(step, g_world->rank())); }

double norm(const std::vector<double> &x, size_t lo, size_t hi) {
  double sq = 0;
  for (size_t i = lo; i < hi; ++i) sq += x[i] * x[i];
  return std::sqrt(sq);
}

// The float64 reference of OnebitLamb over all ranks at once.
struct RefLamb {
  std::vector<double> p, m, v, fresh;
  double coeff_freeze[2] = {0, 0}, last_factor[2] = {1, 1}, scaling[2] = {1, 1};
  bool scaled = false;
  RefCompressed reduce;
  explicit RefLamb(int world) : p(init_values()), m(8, 0.0), v(8, 0.0), fresh(8, 0.0), reduce(world, 8) {}
  static size_t lo(size_t t) { return t == 0 ? 0 : 5; }
  static size_t hi(size_t t) { return t == 0 ? 5 : 8; }

  void step(int s, int world) {
    if (s == 1) return;  // DeepSpeed's first step() only initializes
    const bool compressed = s - 1 >= std::max(kFreeze, 2);
    if (!compressed) {
      std::vector<double> g(8, 0.0);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < 8; ++i) g[i] += grad_of(s, r)[i] / world;
      for (size_t t = 0; t < 2; ++t) {
        std::vector<double> u(8, 0.0);
        for (size_t i = lo(t); i < hi(t); ++i) {
          m[i] = kB1 * m[i] + (1 - kB1) * g[i];
          v[i] = kB2 * v[i] + (1 - kB2) * g[i] * g[i];
          if (s == kFreeze) fresh[i] = v[i];
          u[i] = m[i] / (std::sqrt(v[i]) + kEps) + kWd * p[i];
        }
        const double pn = norm(p, lo(t), hi(t)), un = norm(u, lo(t), hi(t));
        double c = 1.0;
        if (pn != 0 && un != 0) c = std::min(10.0, std::max(0.01, pn / un));
        if (c != 1.0) coeff_freeze[t] = kCoeffBeta * coeff_freeze[t] + (1 - kCoeffBeta) * c;
        for (size_t i = lo(t); i < hi(t); ++i) p[i] -= kLr * c * u[i];
      }
      return;
    }
    if (!scaled) {
      const double s0 = norm(m, 0, 5) / std::sqrt(5.0), s1 = norm(m, 5, 8) / std::sqrt(3.0);
      const double united = (s0 + s1) / 2;
      scaling[0] = united / s0;
      scaling[1] = united / s1;
      scaled = true;
    }
    const std::vector<double> last = m;
    std::vector<std::vector<double>> local(static_cast<size_t>(world), std::vector<double>(8));
    for (int r = 0; r < world; ++r)
      for (size_t t = 0; t < 2; ++t)
        for (size_t i = lo(t); i < hi(t); ++i) local[r][i] = (kB1 * m[i] + (1 - kB1) * grad_of(s, r)[i]) * scaling[t];
    m = world > 1 ? reduce.run(local) : local[0];
    for (size_t t = 0; t < 2; ++t) {
      std::vector<double> q(8, 0.0), u(8, 0.0);
      double max_ratio = 0;
      for (size_t i = lo(t); i < hi(t); ++i) {
        m[i] /= scaling[t];
        const double rec = (m[i] - last[i] * kB1) / (1 - kB1);
        fresh[i] = kB2 * fresh[i] + (1 - kB2) * rec * rec;
        const double d = std::sqrt(v[i]) + kEps;
        q[i] = m[i] / d;
        u[i] = q[i] + kWd * p[i];
        max_ratio = std::max(max_ratio, d / (std::sqrt(fresh[i]) + kEps));
      }
      const double a = std::min(1.0, norm(q, lo(t), hi(t)) / norm(u, lo(t), hi(t)));
      double f = max_ratio * a + (1 - a);
      f = std::min(kFactorMax, std::max(kFactorMin, f));
      f = std::min(last_factor[t] * (1 + kThreshold), std::max(last_factor[t] * (1 - kThreshold), f));
      last_factor[t] = f;
      const double c = coeff_freeze[t] * f;
      for (size_t i = lo(t); i < hi(t); ++i) p[i] -= kLr * c * u[i];
    }
  }
};

// p, m, v of both tensors in order, from the engine's partition.
void read_pmv(Engine &e, std::vector<float> *p, std::vector<float> *m, std::vector<float> *v) {
  std::vector<std::vector<float>> states;
  ASSERT_TRUE(testing_util::read_partition_states(e, &states).ok());
  ASSERT_EQ(states.size(), 3u);
  p->clear(), m->clear(), v->clear();
  for (size_t t = 0; t < kSizes.size(); ++t) {
    const int64_t off = e.partitioning().flat_layout().tensor_offset(t);
    for (int64_t i = 0; i < kSizes[t]; ++i) {
      p->push_back(states[0][off + i]);
      m->push_back(states[1][off + i]);
      v->push_back(states[2][off + i]);
    }
  }
}

TEST(OneBitLamb, EngineMatchesDeepSpeedAlgorithm) {
  for (const char *device : devices()) {
  SCOPED_TRACE(std::string("device ") + device);
  const bool gpu = std::string(device) != "cpu";
  const int world = g_world->size(), rank = g_world->rank();
  std::unique_ptr<Engine> e = make_engine(lamb_config(), device);
  ASSERT_TRUE(e);
  RefLamb ref(world);
  const std::vector<double> init = init_values();
  for (int s = 1; s <= kFreeze + 4; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(e->onebit_compressing(), s - 1 >= std::max(kFreeze, 2));
    run_step(*e, s);
    ref.step(s, world);
    std::vector<float> p, m, v;
    read_pmv(*e, &p, &m, &v);
    if (s == 1) {
      EXPECT_EQ(rel(p.data(), init), 0.0) << "the initialization step moved the parameters";
      continue;
    }
    EXPECT_LT(rel(p.data(), ref.p), 2e-5);
    EXPECT_LT(rel(m.data(), ref.m), 5e-5);
    EXPECT_LT(rel(v.data(), ref.v), 5e-5);
    const Engine::OneBitLambEngineState &st = e->onebit_lamb_state();
    ASSERT_EQ(st.tensors.size(), 2u);
    if (!gpu) {  // on a GPU the fresh variance stays in device memory
      EXPECT_LT(rel(st.fresh.data(), ref.fresh, 1e-6), 5e-5);
    }
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_NEAR(st.tensors[t].coeff_freeze, ref.coeff_freeze[t], 1e-5 * std::abs(ref.coeff_freeze[t])) << "tensor " << t;
      EXPECT_NEAR(st.tensors[t].last_factor, ref.last_factor[t], 1e-5 * ref.last_factor[t]) << "tensor " << t;
      EXPECT_NEAR(st.tensors[t].scaling_coeff, ref.scaling[t], 1e-5 * ref.scaling[t]) << "tensor " << t;
    }
    if (s >= kFreeze) {
      EXPECT_GT(ref.coeff_freeze[0], 0.0);
    }
    if (s > kFreeze + 1) {
      EXPECT_NE(ref.last_factor[0], 1.0) << "the factor never moved: the case tests too little";
    }
    if (world > 1 && s - 1 >= kFreeze) {
      const CompressedAllReduce *reduce = e->onebit_reduce(0);
      ASSERT_NE(reduce, nullptr);
      std::vector<float> we, se;
      ASSERT_TRUE(reduce->errors_to_host(&we, &se).ok());
      EXPECT_LT(rel(we.data(), ref.reduce.worker_error[rank], 1e-4), 5e-5);
      EXPECT_LT(rel(se.data(), ref.reduce.server_error[rank], 1e-4), 5e-5);
    }
  }
  }
}

void expect_same(Engine &a, Engine &b, const char *when) {
  std::vector<std::vector<float>> sa, sb;
  ASSERT_TRUE(testing_util::read_partition_states(a, &sa).ok());
  ASSERT_TRUE(testing_util::read_partition_states(b, &sb).ok());
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k], sb[k]) << "state " << k << " " << when;
  const Engine::OneBitLambEngineState &x = a.onebit_lamb_state(), &y = b.onebit_lamb_state();
  EXPECT_EQ(x.fresh, y.fresh) << when;
  EXPECT_EQ(x.scaled, y.scaled) << when;
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t t = 0; t < x.tensors.size(); ++t) {
    EXPECT_EQ(x.tensors[t].coeff_freeze, y.tensors[t].coeff_freeze) << when;
    EXPECT_EQ(x.tensors[t].last_factor, y.tensors[t].last_factor) << when;
    EXPECT_EQ(x.tensors[t].scaling_coeff, y.tensors[t].scaling_coeff) << when;
  }
  if (g_world->size() > 1) {
    const CompressedAllReduce *ra = a.onebit_reduce(0), *rb = b.onebit_reduce(0);
    ASSERT_TRUE(ra && rb);
    std::vector<float> wa, sa_, wb, sb_;
    ASSERT_TRUE(ra->errors_to_host(&wa, &sa_).ok());
    ASSERT_TRUE(rb->errors_to_host(&wb, &sb_).ok());
    EXPECT_EQ(wa, wb) << "worker errors " << when;
    EXPECT_EQ(sa_, sb_) << "server errors " << when;
  }
  // On a GPU the fresh variance stays in device memory: compare the checkpoint files' bytes.
  std::vector<uint8_t> xa, xb;
  ASSERT_TRUE(a.onebit_lamb_serialize(&xa).ok());
  ASSERT_TRUE(b.onebit_lamb_serialize(&xb).ok());
  EXPECT_EQ(xa, xb) << "the OneBitLamb state " << when;
}

// Saved in the warm-up stage and in the compression stage: the resumed run is the original one, bitwise.
TEST(OneBitLamb, CheckpointResumesBitwise) {
  for (const char *device : devices())
  for (int saved_at : {kFreeze - 1, kFreeze + 2}) {
    SCOPED_TRACE(std::string("device ") + device + ", saved after step " + std::to_string(saved_at));
    const std::string dir = mpi_test::shared_dir(*g_world, "onebit_lamb");
    std::unique_ptr<Engine> a = make_engine(lamb_config(), device);
    ASSERT_TRUE(a);
    for (int s = 1; s <= saved_at; ++s) run_step(*a, s);
    Status saved = save_checkpoint(*a, dir, "t");
    ASSERT_TRUE(saved.ok()) << saved.message();
    std::unique_ptr<Engine> b = make_engine(lamb_config(), device);
    ASSERT_TRUE(b);
    Status loaded = load_checkpoint(*b, dir, "t");
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    EXPECT_EQ(b->counters().applied_steps, a->counters().applied_steps);
    expect_same(*a, *b, "after the load");
    for (int s = saved_at + 1; s <= kFreeze + 4; ++s) {
      run_step(*a, s);
      run_step(*b, s);
    }
    expect_same(*a, *b, "after resuming");
    mpi_test::remove_shared_dir(*g_world, dir);
  }
}

// A checkpoint written by rank 0 alone (one rank) loads on every rank of a larger world: states and
// per-tensor scalars come back, the errors restart at zero (DeepSpeed drops them on every load).
TEST(OneBitLamb, CheckpointFromAnotherWorldSizeRestartsTheErrors) {
  if (g_world->size() == 1) GTEST_SKIP() << "needs more than one rank";
  const std::string dir = mpi_test::shared_dir(*g_world, "onebit_lamb");
  std::unique_ptr<Engine> a = make_engine(lamb_config());
  ASSERT_TRUE(a);
  for (int s = 1; s <= kFreeze + 2; ++s) run_step(*a, s);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  ASSERT_TRUE(g_world->barrier().ok());
  // Pretend the checkpoint came from one rank: drop every rank's file but rank 0's.
  if (g_world->rank() == 0) {
    for (int r = 1; r < g_world->size(); ++r)
      ASSERT_EQ(::unlink((dir + "/t/onebit_lamb_rank" + std::to_string(r) + ".bin").c_str()), 0);
  }
  ASSERT_TRUE(g_world->barrier().ok());
  std::unique_ptr<Engine> b = make_engine(lamb_config());
  ASSERT_TRUE(b);
  Status loaded = load_checkpoint(*b, dir, "t");
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const CompressedAllReduce *r = b->onebit_reduce(0);
  ASSERT_NE(r, nullptr);
  if (g_world->rank() > 0) {  // rank 0 read its own file (same world, same rank): its errors came back
    for (size_t i = 0; i < r->padded_size(); ++i) ASSERT_EQ(r->worker_error()[i], 0.0f);
    for (size_t i = 0; i < r->chunk_size(); ++i) ASSERT_EQ(r->server_error()[i], 0.0f);
  }
  EXPECT_EQ(b->onebit_lamb_state().fresh, a->onebit_lamb_state().fresh);
  EXPECT_TRUE(b->onebit_lamb_state().scaled);
  mpi_test::remove_shared_dir(*g_world, dir);
}

// DeepSpeed fuses every group's momentum into one compressed vector: with the second tensor in a
// second parameter group of the same hyper-parameters, the run is the one-group run, bitwise.
TEST(OneBitLamb, TwoParameterGroupsShareOneFusedVector) {
  std::unique_ptr<Engine> one = make_engine(lamb_config());
  ASSERT_TRUE(one);
  std::unique_ptr<Engine> two;
  ASSERT_TRUE(Engine::create(lamb_config(), g_world, &two, "cpu").ok());
  const std::vector<double> init = init_values();
  int64_t at = 0;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    std::vector<float> values(init.begin() + at, init.begin() + at + kSizes[t]);
    ASSERT_TRUE(two->add_param("w" + std::to_string(t), &kSizes[t], 1, values.data(), nullptr).ok());
    at += kSizes[t];
  }
  int32_t group = -1;
  ASSERT_TRUE(two->add_group(&group).ok());
  ASSERT_TRUE(two->set_tensor_group(1, group).ok());
  Status built = two->build();
  ASSERT_TRUE(built.ok()) << built.message();
  ASSERT_EQ(two->num_groups(), 2u);
  for (int s = 1; s <= kFreeze + 4; ++s) {
    run_step(*one, s);
    run_step(*two, s);
  }
  std::vector<std::vector<float>> a, b;
  ASSERT_TRUE(testing_util::read_partition_states(*one, &a).ok());
  ASSERT_TRUE(testing_util::read_partition_states(*two, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << "state " << k;
}

// Bytes on the wire per step, warm-up against compression, on a 100k-element model.
TEST(OneBitLamb, CompressionStageCutsTheBytesOnTheWire) {
  const int world = g_world->size();
  if (world == 1) GTEST_SKIP() << "one rank moves no bytes";
  std::vector<uint64_t> bytes;
  ASSERT_NO_FATAL_FAILURE(onebit_test::wire_bytes_per_step(g_world, lamb_config(), "cpu", kFreeze + 2, &bytes));
  const uint64_t warm = bytes[kFreeze], compressed = bytes.back();
  if (g_world->rank() == 0) {
    std::printf("OneBitLamb: bytes this rank put on the wire per step, %d ranks, 100000 elements: warm-up %llu, "
                "compressed %llu (%.1fx fewer)\n",
                world, static_cast<unsigned long long>(warm), static_cast<unsigned long long>(compressed),
                static_cast<double>(warm) / static_cast<double>(compressed));
  }
  // One fused vector: (W-1)(N/(4W) + 8) bytes plus the overflow flag, against the fp32 all-reduce.
  const uint64_t padded = compressed_allreduce_padded_size(100000, world);
  EXPECT_LE(compressed, static_cast<uint64_t>(world - 1) * (padded / (4 * world) + 8) + 64);
  EXPECT_LT(compressed * 25, warm);
}

TEST(OneBitLamb, ZeroStagesAreRefused) {
  for (int stage = 1; stage <= 3; ++stage) {
    TrainConfig c = lamb_config();
    c.zero.stage = stage;
    std::unique_ptr<Engine> e;
    Status s = Engine::create(c, g_world, &e, "cpu");
    EXPECT_EQ(s.code(), DSRT_ERR_CONFIG) << "stage " << stage;
    EXPECT_NE(s.message().find("zero_optimization.stage 0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("OneBitLamb"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_onebit_lamb", &dsrt::g_world); }
