// dsrt-mpi-ranks: 2 3
// The TCP communicator against the MPI communicator in the same processes: reduce-scatter (even
// and uneven) and large all-reduces of every dtype and op give the same bits on both, and gathers
// and broadcasts the same bytes; ZeRO stages 0-3 trained over each end with the same weights.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "comm/comm.h"
#include "gloo_test_comm.h"
#include "util/half.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

std::shared_ptr<Comm> make_tcp() { return make_gloo_over(*g_world); }

std::vector<uint8_t> random_data(int rank, size_t count, dsrt_dtype dtype, unsigned salt) {
  std::mt19937 rng(7919u * static_cast<unsigned>(rank + 1) + salt);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype) + 1);
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

TEST(TcpVsMpi, SameBits) {
  auto tcp = make_tcp();
  ASSERT_TRUE(tcp);
  Comm &mpi = *g_world;
  const int n = mpi.size(), me = mpi.rank();
  unsigned salt = 0;
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      const size_t element = dtype_size(dtype);
      for (size_t count : {size_t{1}, size_t{4999}, size_t{70001}}) {
        ++salt;
        auto send = random_data(me, count * n, dtype, salt);
        std::vector<uint8_t> a(count * element + 1), b(count * element + 1);
        ASSERT_TRUE(mpi.reduce_scatter_sync(send.data(), a.data(), count, dtype, op).ok());
        ASSERT_TRUE(tcp->reduce_scatter_sync(send.data(), b.data(), count, dtype, op).ok());
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), count * element)) << "reduce_scatter " << dtype_name(dtype)
                                                                        << " n=" << count;
      }
      // above MPI's small all-reduce (64 KiB as fp32), where both use the exchange
      const size_t count = 50001;
      auto x = random_data(me, count, dtype, ++salt), y = x;
      ASSERT_TRUE(mpi.all_reduce_sync(x.data(), count, dtype, op).ok());
      ASSERT_TRUE(tcp->all_reduce_sync(y.data(), count, dtype, op).ok());
      EXPECT_EQ(x, y) << "all_reduce " << dtype_name(dtype);
      std::vector<size_t> counts(n);
      size_t total = 0;
      for (int r = 0; r < n; ++r) total += counts[r] = 1000 * static_cast<size_t>(r) + 3;
      auto v = random_data(me, total, dtype, ++salt);
      std::vector<uint8_t> c(counts[me] * element + 1), d(counts[me] * element + 1);
      CommHandle h1, h2;
      ASSERT_TRUE(mpi.reduce_scatter_v(v.data(), c.data(), counts.data(), dtype, op, &h1).ok());
      ASSERT_TRUE(h1->wait().ok());
      ASSERT_TRUE(tcp->reduce_scatter_v(v.data(), d.data(), counts.data(), dtype, op, &h2).ok());
      ASSERT_TRUE(h2->wait().ok());
      EXPECT_EQ(c, d) << "reduce_scatter_v " << dtype_name(dtype);
    }
  std::vector<float> mine(3333, static_cast<float>(me) + 0.25f), g1(3333 * n), g2(3333 * n);
  ASSERT_TRUE(mpi.all_gather_sync(mine.data(), g1.data(), mine.size(), DSRT_F32).ok());
  ASSERT_TRUE(tcp->all_gather_sync(mine.data(), g2.data(), mine.size(), DSRT_F32).ok());
  EXPECT_EQ(g1, g2);
  ASSERT_TRUE(tcp->barrier().ok());
}

// One engine per communicator, the same gradients on both: the weights after three steps.
std::vector<std::vector<float>> train(int stage, bool bf16, std::shared_ptr<Comm> comm) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1000}, {33, 65}, {3000}, {129}};
  TrainConfig config;
  config.optimizer.present = true;
  config.optimizer.type = OptimizerType::AdamW;
  config.optimizer.lr = 1e-2;
  config.steps_per_print = 0;
  config.bf16_enabled = bf16;
  config.gradient_clipping = 2.0;
  config.zero.stage = stage;
  config.zero.reduce_bucket_size = 1500;
  config.zero.allgather_bucket_size = 1000;
  config.zero.stage3_param_persistence_threshold = 10;
  std::unique_ptr<Engine> engine;
  Status s = Engine::create(config, comm, &engine);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<std::vector<float>> out;
  if (!engine) return out;
  std::mt19937 rng(5u);
  for (size_t t = 0; t < shapes.size(); ++t) {
    int64_t n = 1;
    for (int64_t d : shapes[t]) n *= d;
    auto init = testing_util::random_values(rng, static_cast<size_t>(n), 0.5f);
    EXPECT_TRUE(engine->add_param("p" + std::to_string(t), shapes[t].data(), static_cast<int>(shapes[t].size()),
                                  init.data(), nullptr).ok());
  }
  EXPECT_TRUE(engine->build().ok());
  std::mt19937 grads(1000u + static_cast<unsigned>(comm->rank()));
  for (int step = 0; step < 3; ++step) {
    for (size_t t = 0; t < engine->num_tensors(); ++t) {
      void *data = nullptr;
      EXPECT_TRUE(engine->acquire(t, &data, nullptr).ok());
      EXPECT_TRUE(engine->release(t).ok());
    }
    for (size_t t = engine->num_tensors(); t-- > 0;) {
      void *data = nullptr;
      EXPECT_TRUE(engine->acquire(t, &data, nullptr).ok());
      size_t n = 1;
      for (int64_t d : shapes[t]) n *= static_cast<size_t>(d);
      auto g = testing_util::random_values(grads, n, 0.3f);
      EXPECT_TRUE(testing_util::update_grad(*engine, t, [&](void *buffer, dsrt_dtype dtype) {
                    for (size_t i = 0; i < n; ++i) from_float(buffer, dtype, i, g[i]);
                  }).ok());
      EXPECT_TRUE(engine->grad_ready(t).ok());
      EXPECT_TRUE(engine->release(t).ok());
    }
    s = engine->step(nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  for (size_t t = 0; t < shapes.size(); ++t) {
    size_t n = 1;
    for (int64_t d : shapes[t]) n *= static_cast<size_t>(d);
    out.emplace_back(n);
    EXPECT_TRUE(engine->read_fp32(t, out.back().data(), n).ok());
  }
  return out;
}

TEST(TcpVsMpi, EnginesAgree) {
  auto tcp = make_tcp();
  ASSERT_TRUE(tcp);
  for (int stage = 0; stage <= 3; ++stage)
    for (bool bf16 : {false, true}) {
      auto a = train(stage, bf16, g_world), b = train(stage, bf16, tcp);
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t) {
        // Bitwise wherever both ends reduce in the exchange order; MPI's own small all-reduce
        // (stage 0 buckets) has an order of its own with 3+ ranks.
        std::vector<double> want(a[t].begin(), a[t].end());
        double err = testing_util::relative_error(b[t], want);
        EXPECT_LT(err, 1e-5) << "stage " << stage << " bf16 " << bf16 << " tensor " << t;
        if (g_world->size() == 2 || stage > 0) {
          EXPECT_EQ(a[t], b[t]) << "bits differ: stage " << stage << " bf16 " << bf16 << " tensor " << t;
        }
      }
    }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_tcp_vs_mpi", &dsrt::g_world); }
