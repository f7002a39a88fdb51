// dsrt-mpi-ranks: 2 4
// ZeRO++ communication across ranks: the qwZ quantized all-gather (every block read back within
// one quantization step of the sent value, and equal to a local quantize + dequantize) and the
// qgZ quantized reduce-scatter, on one node and in the hierarchical two-stage scheme (ranks per
// node forced by DSRT_RANKS_PER_NODE), against the float64 sum of every rank's data, which each
// rank regenerates from seeds. The error bound is the format's: one step of every group an
// element passed through. Every case runs on the CPU device and again on a CUDA device (buffers
// in GPU memory, the CUDA kernels, the communicator staged through pinned memory) where every
// rank sees a GPU; without one the CUDA cases skip, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "comm/staged/staged_comm.h"
#include "comm/topology.h"
#include "device/device_select.h"
#include "engine/engine.h"
#include "mpi_test_main.h"
#include "quant/quantize.h"
#include "util/half.h"
#include "zero/quantized_gather.h"
#include "zero/quantized_reduce.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

// Rank r's values (dtype bytes), magnitudes varying from group to group.
std::vector<uint8_t> rank_values(int r, size_t n, dsrt_dtype dtype, uint32_t salt) {
  std::mt19937 rng(1000u * salt + static_cast<uint32_t>(r));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> out(n * dtype_size(dtype));
  float magnitude = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 300 == 0) magnitude = std::pow(10.0f, std::uniform_real_distribution<float>(-3.0f, 1.0f)(rng));
    from_float(out.data(), dtype, i, normal(rng) * magnitude);
  }
  return out;
}

// The device a case runs on, and the world's communicator for its buffers.
struct TestDevice {
  std::shared_ptr<Device> device;
  std::shared_ptr<Comm> comm;
  std::string skip;  // non-empty: not available on every rank, and why
};

TestDevice test_device(const std::string &kind) {
  TestDevice d;
  if (kind == "cpu") {
    d.device = device_create_cpu();
    d.comm = g_world;
    return d;
  }
  DeviceChoice choice;
  Status made = device_select_spec("cuda", "the test", device_local_rank(g_world->rank()), &d.device, &choice);
  uint64_t everywhere = made.ok() ? 1 : 0;
  EXPECT_TRUE(g_world->all_reduce_u64(&everywhere, 1, ReduceOp::Min).ok());
  if (everywhere == 0) {
    d.skip = "no CUDA GPU on every rank (" + (made.ok() ? std::string("another rank has none") : made.message()) +
             "): the CUDA case runs where one is";
    return d;
  }
  made = staged_comm_create(g_world, d.device, &d.comm);
  EXPECT_TRUE(made.ok()) << made.message();
  return d;
}

DeviceBuffer upload(Device &device, const void *host, size_t bytes) {
  DeviceBuffer buffer;
  EXPECT_TRUE(device.allocate(bytes, &buffer, false).ok());
  EXPECT_TRUE(device.copy(buffer.data(), host, bytes, nullptr).ok());
  EXPECT_TRUE(device.synchronize(nullptr).ok());
  return buffer;
}

void download(Device &device, const void *src, void *host, size_t bytes) {
  EXPECT_TRUE(device.copy(host, src, bytes, nullptr).ok());
  EXPECT_TRUE(device.synchronize(nullptr).ok());
}

class ZeroppOn : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    td_ = test_device(GetParam());
    if (!td_.skip.empty()) GTEST_SKIP() << td_.skip;
    ASSERT_TRUE(td_.device && td_.comm);
  }
  TestDevice td_;
};

TEST_P(ZeroppOn, QuantizedAllGatherReadsBackWithinOneStep) {
  const int w = g_world->size(), me = g_world->rank();
  Device &device = *td_.device;
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16, DSRT_F16}) {
    for (size_t s : {size_t(8192), size_t(1003), size_t(40000)}) {
      SCOPED_TRACE("dtype " + std::to_string(dtype) + " shard " + std::to_string(s));
      const std::vector<uint8_t> mine = rank_values(me, s, dtype, 1);
      std::vector<uint8_t> gathered(s * static_cast<size_t>(w) * dtype_size(dtype));
      DeviceBuffer mine_on = upload(device, mine.data(), mine.size()), gathered_on;
      ASSERT_TRUE(device.allocate(gathered.size(), &gathered_on, false).ok());
      QuantizedAllGather q;
      CommHandle handle;
      ASSERT_TRUE(q.start(td_.comm.get(), &device, nullptr, mine_on.data(), s, dtype, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      ASSERT_TRUE(q.finish(gathered_on.data()).ok());
      download(device, gathered_on.data(), gathered.data(), gathered.size());
      EXPECT_EQ(q.bytes_sent(), QuantizedAllGather::payload_bytes(s));
      // int8 + fp32 scales: at most a quarter of fp32 plus the scales.
      EXPECT_LE(QuantizedAllGather::payload_bytes(s), s + 4 * quant_groups(s, qwz_group_size(s)) + 3);
      const QuantFormat format{8, qwz_group_size(s)};
      for (int r = 0; r < w; ++r) {
        const std::vector<uint8_t> x = rank_values(r, s, dtype, 1);
        // Exactly what a local round trip gives.
        std::vector<uint8_t> qv(s);
        std::vector<float> scales(quant_groups(s, format.group));
        std::vector<uint8_t> local(x.size());
        ASSERT_TRUE(quantize_blocks(x.data(), dtype, s, format, qv.data(), scales.data()).ok());
        ASSERT_TRUE(dequantize_blocks(qv.data(), scales.data(), s, format, local.data(), dtype).ok());
        EXPECT_EQ(0, std::memcmp(local.data(), gathered.data() + static_cast<size_t>(r) * x.size(), x.size()))
            << "block of rank " << r;
        // Within one step of the float64 value (plus the dtype's rounding of the result). Counted,
        // not asserted: a rank leaving early would leave the others waiting in a collective.
        size_t outside = 0;
        for (size_t i = 0; i < s; ++i) {
          const double v = to_float(x.data(), dtype, i);
          const double got = to_float(gathered.data(), dtype, static_cast<size_t>(r) * s + i);
          const double step = scales[i / format.group];
          const double rounding = dtype == DSRT_F32 ? 0.0 : std::fabs(got) * (dtype == DSRT_BF16 ? 0x1p-8 : 0x1p-11);
          if (!(std::fabs(got - v) <= step * (1 + 1e-4) + rounding)) ++outside;
        }
        EXPECT_EQ(outside, 0u) << "block of rank " << r;
      }
    }
  }
}

// The qgZ reduce-scatter of W blocks of segments against the float64 sum.
void check_reduce_scatter(const TestDevice &td, const char *ranks_per_node, int expect_nodes) {
  if (ranks_per_node) setenv("DSRT_RANKS_PER_NODE", ranks_per_node, 1);
  std::shared_ptr<Comm> intra, inter;
  Status st = comm_split_by_node(*td.comm, &intra, &inter);
  if (ranks_per_node) unsetenv("DSRT_RANKS_PER_NODE");
  ASSERT_TRUE(st.ok()) << st.message();
  const int w = g_world->size(), me = g_world->rank();
  for (int bits : {4, 8}) {
    QuantizedReduceScatter qrs;
    ASSERT_TRUE(qrs.init(td.comm.get(), intra, inter, bits, td.device.get(), nullptr).ok());
    EXPECT_EQ(qrs.nodes(), expect_nodes);
    // Segments like a bucket's shards: a large matrix shard, a small raw (1-D) one, an odd one.
    const std::vector<QgzSegment> segments = {{3000, 512}, {37, 0}, {1501, 64}, {8, 2}};
    size_t block = 0;
    for (const QgzSegment &seg : segments) block += seg.elems;
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " dtype " + std::to_string(dtype) + " nodes " +
                   std::to_string(expect_nodes));
      const std::vector<uint8_t> send = rank_values(me, block * static_cast<size_t>(w), dtype, 2 + bits);
      std::vector<float> out(block, -7.0f);
      DeviceBuffer send_on = upload(*td.device, send.data(), send.size());
      DeviceBuffer out_on = upload(*td.device, out.data(), out.size() * sizeof(float));
      ASSERT_TRUE(qrs.reduce_scatter(send_on.data(), dtype, segments, out_on.as<float>()).ok());
      download(*td.device, out_on.data(), out.data(), out.size() * sizeof(float));
      // Reference: every rank's block for me, summed in float64; the bound from each sender's group
      // maxima (step 1) and from the maxima of the partial sums, bounded by their sum (step 2).
      const double levels = std::ldexp(1.0, bits - 1);
      std::vector<double> exact(block, 0.0), bound(block, 0.0), magnitude(block, 0.0);
      for (int r = 0; r < w; ++r) {
        const std::vector<uint8_t> theirs = rank_values(r, block * static_cast<size_t>(w), dtype, 2 + bits);
        size_t at = 0;
        for (const QgzSegment &seg : segments) {
          const size_t group = seg.group ? seg.group : seg.elems;
          for (size_t g0 = 0; g0 < seg.elems; g0 += group) {
            const size_t g1 = std::min(seg.elems, g0 + group);
            double absmax = 0;
            for (size_t i = g0; i < g1; ++i)
              absmax = std::max(absmax, std::fabs(double(to_float(theirs.data(), dtype, static_cast<size_t>(me) * block + at + i))));
            for (size_t i = g0; i < g1; ++i) {
              const double x = to_float(theirs.data(), dtype, static_cast<size_t>(me) * block + at + i);
              exact[at + i] += x;
              magnitude[at + i] += std::fabs(x);  // fp32 sums round relative to this
              if (seg.group) bound[at + i] += 2 * absmax / levels;  // a step in each stage
            }
          }
          at += seg.elems;
        }
      }
      // No ASSERT inside: a rank leaving early would leave the others waiting in a collective.
      double err_sum = 0, bound_sum = 0;
      size_t outside = 0, first_outside = block;
      for (size_t i = 0; i < block; ++i) {
        const double err = std::fabs(out[i] - exact[i]);
        if (!(err <= bound[i] * (1 + 1e-3) + 1e-6 * magnitude[i])) {
          if (outside++ == 0) first_outside = i;
        }
        err_sum += err;
        bound_sum += bound[i];
      }
      EXPECT_EQ(outside, 0u) << "first at element " << first_outside << ": got " << out[first_outside % block]
                             << ", exact " << exact[first_outside % block] << ", bound " << bound[first_outside % block];
      // Round to nearest: the typical error is well inside the worst case.
      EXPECT_LT(err_sum, 0.5 * bound_sum);
      // The raw segment is exact up to fp32 addition.
      for (size_t i = 3000; i < 3037; ++i) EXPECT_NEAR(out[i], exact[i], 1e-6 * magnitude[i]);
      EXPECT_LT(qrs.payload_bytes(segments), block * sizeof(float) * (bits == 4 ? 0.16 : 0.28) + 37 * 4 + 4 * 4);
    }
  }
}

TEST_P(ZeroppOn, QuantizedReduceScatterOneNode) { check_reduce_scatter(td_, nullptr, 1); }

TEST_P(ZeroppOn, QuantizedReduceScatterHierarchical) {
  // 4 ranks: 2 nodes of 2 (both stages); 2 ranks: 2 nodes of 1 (the cross-node stage only).
  const int w = g_world->size();
  if (w == 4) check_reduce_scatter(td_, "2", 2);
  if (w == 2) check_reduce_scatter(td_, "1", 2);
}

// DSRT_DEVICE for the engines of one case.
struct DeviceEnv {
  explicit DeviceEnv(const std::string &kind) { setenv("DSRT_DEVICE", kind.c_str(), 1); }
  ~DeviceEnv() { unsetenv("DSRT_DEVICE"); }
};

// An engine with qwZ on trainable and frozen tensors: acquire reads the quantized gather (within
// one step of the value, not equal to it), while the fp32 master and the frozen values read back
// exactly (quantization happens on the wire only).
TEST_P(ZeroppOn, EngineQwzQuantizesGathersNotMasters) {
  DeviceEnv env(GetParam());
  // Plain stage 3, and (at 4+ ranks) MiCS shard groups of half the world: the quantized gathers
  // run inside the shard group, for trainable and frozen tensors alike.
  std::vector<int> shard_sizes = {-1};
  if (g_world->size() >= 4 && g_world->size() % 2 == 0) shard_sizes.push_back(g_world->size() / 2);
  for (int mics : shard_sizes) {
    SCOPED_TRACE("mics_shard_size " + std::to_string(mics));
    TrainConfig c;
    c.optimizer.present = true;
    c.optimizer.type = OptimizerType::AdamW;
    c.optimizer.lr = 1e-3;
    c.steps_per_print = 0;
    c.zero.stage = 3;
    c.zero.stage3_param_persistence_threshold = 0;
    c.zero.zero_quantized_weights = true;
    c.zero.zero_quantized_nontrainable_weights = true;
    c.zero.mics_shard_size = mics;
    c.world_size = g_world->size();
    c.train_batch_size = g_world->size();
    std::shared_ptr<Comm> comm;
    ASSERT_TRUE(g_world->split(0, g_world->rank(), &comm).ok());
    std::unique_ptr<Engine> engine;
    Status s = Engine::create(c, comm, &engine);
    ASSERT_TRUE(s.ok()) << s.message();
    const int64_t shape[2] = {64, 100}, frozen_shape[2] = {50, 30};
    std::vector<float> init(6400), frozen(1500);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float &x : init) x = normal(rng);
    for (float &x : frozen) x = normal(rng);
    ASSERT_TRUE(engine->add_param("w", shape, 2, init.data(), nullptr).ok());
    ASSERT_TRUE(engine->add_frozen_param("base", frozen_shape, 2, frozen.data(), nullptr).ok());
    s = engine->build();
    ASSERT_TRUE(s.ok()) << s.message();
    auto check = [](const float *got, const std::vector<float> &want, const char *what) {
      float absmax = 0;
      for (float x : want) absmax = std::max(absmax, std::fabs(x));
      size_t differ = 0, outside = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i]) ++differ;
        if (!(std::fabs(got[i] - want[i]) <= absmax / 127.0f)) ++outside;
      }
      EXPECT_EQ(outside, 0u) << what;
      EXPECT_GT(differ, want.size() / 2) << what << ": the gather was not quantized";
    };
    EXPECT_EQ(engine->device().type(), GetParam() == "cuda" ? DSRT_DEVICE_CUDA : DSRT_DEVICE_CPU);
    void *data = nullptr;
    std::vector<float> got(init.size()), frozen_got(frozen.size());
    ASSERT_TRUE(engine->acquire(0, &data, nullptr).ok());
    download(*td_.device, data, got.data(), got.size() * sizeof(float));
    check(got.data(), init, "trainable");
    ASSERT_TRUE(engine->release(0).ok());
    ASSERT_TRUE(engine->frozen_acquire(0, &data, nullptr).ok());
    download(*td_.device, data, frozen_got.data(), frozen_got.size() * sizeof(float));
    check(frozen_got.data(), frozen, "frozen");
    ASSERT_TRUE(engine->frozen_release(0).ok());
    std::vector<float> back(6400), frozen_back(1500);
    ASSERT_TRUE(engine->read_fp32(0, back.data(), back.size()).ok());
    EXPECT_EQ(back, init);
    ASSERT_TRUE(engine->frozen_read_fp32(0, frozen_back.data(), frozen_back.size()).ok());
    EXPECT_EQ(frozen_back, frozen);
  }
}

// One SGD step of an engine with qgZ (int4; a quantized matrix and a raw 1-D tensor) and of the
// same engine with the exact reduce, on fresh random gradients (magnitudes varying by rank): the
// gradient each applied, (init - master) / lr, against the float64 mean of every rank's gradient.
// The exact engine matches it to fp32 rounding; the qgZ one within the int4 bound (at most a step
// of every group passed through, 2 * 1.5 / 8 of the largest magnitude), with a visible error on
// the matrix and none beyond fp32 rounding on the raw tensor.
TEST_P(ZeroppOn, EngineQgzStepWithinItsBound) {
  DeviceEnv env(GetParam());
  const int w = g_world->size();
  const std::vector<std::vector<int64_t>> shapes = {{48, 100}, {37}};
  const double lr = 1e-3;
  auto grad_of = [](int rank, size_t t, size_t n) {
    std::mt19937 rng(977u * static_cast<uint32_t>(rank) + static_cast<uint32_t>(t));
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    std::vector<float> g(n);
    for (float &x : g) x = u(rng) * (1.0f + 0.25f * static_cast<float>(rank));
    return g;
  };
  // Variant 2: qgZ inside MiCS shard groups of half the world, then the replica all-reduce of the
  // reduced (fp32) shard: the same bound.
  const int mics = w % 2 == 0 ? w / 2 : -1;
  std::vector<std::vector<float>> init(shapes.size()), applied[3];
  for (int variant = 0; variant < (mics > 0 ? 3 : 2); ++variant) {
    const int quantized = variant >= 1 ? 1 : 0;
    TrainConfig c;
    c.optimizer.present = true;
    c.optimizer.type = OptimizerType::SGD;
    c.optimizer.lr = lr;
    c.steps_per_print = 0;
    c.gradient_clipping = 0.0;  // (init - master) / lr is then the reduced gradient itself
    c.zero.stage = 3;
    c.zero.stage3_param_persistence_threshold = 0;
    c.zero.zero_quantized_gradients = quantized == 1;
    if (variant == 2) c.zero.mics_shard_size = mics;
    c.world_size = w;
    c.train_batch_size = w;
    std::shared_ptr<Comm> comm;
    ASSERT_TRUE(g_world->split(0, g_world->rank(), &comm).ok());
    std::unique_ptr<Engine> engine;
    Status s = Engine::create(c, comm, &engine);
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t t = 0; t < shapes.size(); ++t) {
      size_t n = 1;
      for (int64_t d : shapes[t]) n *= static_cast<size_t>(d);
      init[t].resize(n);
      std::mt19937 rng(11 + static_cast<uint32_t>(t));
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (float &x : init[t]) x = normal(rng);
      const std::string name = "t" + std::to_string(t);
      ASSERT_TRUE(engine->add_param(name.c_str(), shapes[t].data(), static_cast<int>(shapes[t].size()),
                                    init[t].data(), nullptr)
                      .ok());
    }
    s = engine->build();
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t t = 0; t < engine->num_tensors(); ++t) {
      void *data = nullptr;
      ASSERT_TRUE(engine->acquire(t, &data, nullptr).ok());
      const std::vector<float> g = grad_of(g_world->rank(), t, init[t].size());
      s = testing_util::update_grad(*engine, t, [&](void *buffer, dsrt_dtype dtype) {
        for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
      });
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(engine->grad_ready(t).ok());
      ASSERT_TRUE(engine->release(t).ok());
    }
    dsrt_step_result result = DSRT_STEP_RESULT_INIT;
    s = engine->step(&result);
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t t = 0; t < engine->num_tensors(); ++t) {
      std::vector<float> master(init[t].size());
      ASSERT_TRUE(engine->read_fp32(t, master.data(), master.size()).ok());
      applied[variant].emplace_back(master.size());
      for (size_t i = 0; i < master.size(); ++i)
        applied[variant].back()[i] = static_cast<float>((double(init[t][i]) - master[i]) / lr);
    }
  }
  // Largest per-rank magnitude 1.5 * (1 + 0.25 (W-1)): the int4 bound of the mean, two stages.
  const double largest = 1.5 * (1.0 + 0.25 * (w - 1));
  const double bound = 2.0 * 2.0 * largest / 8.0;
  const double rounding = 1e-4;  // the master's fp32 rounding, divided by lr
  for (size_t t = 0; t < shapes.size(); ++t) {
    std::vector<double> mean(init[t].size(), 0.0);
    for (int r = 0; r < w; ++r) {
      const std::vector<float> g = grad_of(r, t, init[t].size());
      for (size_t i = 0; i < g.size(); ++i) mean[i] += double(g[i]) / w;
    }
    double exact_err = 0, quant_err = 0, mics_err = 0;
    for (size_t i = 0; i < mean.size(); ++i) {
      exact_err = std::max(exact_err, std::fabs(applied[0][t][i] - mean[i]));
      quant_err = std::max(quant_err, std::fabs(applied[1][t][i] - mean[i]));
      if (mics > 0) mics_err = std::max(mics_err, std::fabs(applied[2][t][i] - mean[i]));
    }
    SCOPED_TRACE("tensor " + std::to_string(t));
    EXPECT_LE(exact_err, rounding) << "the exact reduce";
    if (shapes[t].size() == 1) {
      EXPECT_LE(quant_err, rounding) << "a 1-D gradient travels unquantized";
      EXPECT_LE(mics_err, rounding) << "a 1-D gradient travels unquantized (MiCS)";
    } else {
      EXPECT_LE(quant_err, bound + rounding);
      EXPECT_LE(mics_err, bound + rounding) << "qgZ with MiCS";
      if (mics > 1) {
        EXPECT_GT(mics_err, 1e-3) << "the gradient was not quantized inside the MiCS shard group";
      }
      if (w > 1) {
        EXPECT_GT(quant_err, 1e-3) << "the gradient was not quantized";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ZeroppOn, ::testing::Values(std::string("cpu"), std::string("cuda")),
                         [](const ::testing::TestParamInfo<std::string> &info) { return info.param; });

TEST(Zeropp, QgzGroupFollowsDeepSpeedPerShape) {
  const int64_t matrix[] = {384, 128}, wide[] = {50, 4096}, vec[] = {1000}, tiny[] = {3, 3}, cube[] = {8, 4, 5};
  EXPECT_EQ(qgz_group_for_shape(matrix, 2, 4), 128u);  // 384 groups: one row each
  EXPECT_EQ(qgz_group_for_shape(wide, 2, 4), 50u);     // 4096 groups of 50
  EXPECT_EQ(qgz_group_for_shape(vec, 1, 4), 0u);       // 1-D: unquantized
  EXPECT_EQ(qgz_group_for_shape(tiny, 2, 4), 4u);      // 4 groups (the world size) of 3, rounded up to even
  EXPECT_EQ(qgz_group_for_shape(cube, 3, 2), 20u);     // 8 groups of 20
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_zeropp", &dsrt::g_world); }
