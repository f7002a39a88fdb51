// The optimizer backends (src/optim/optimizer_backend.h) the engine steps through: the host backend
// against float64 recomputations on fresh random data (scaled conversions, sums of squares with the
// non-finite flag, accumulation), the factory's choice per device, the shared step constants
// against DeepSpeed's formulas, and -- where a GPU exists -- the CUDA backend against the host one
// on the same data (skipped with "no CUDA device" otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/cuda_device.h"
#include "device/device_features.h"
#include "optim/optimizer_backend.h"
#include "optim/step_constants.h"
#include "util/half.h"

namespace dsrt {
namespace {

std::vector<float> random_floats(uint32_t seed, size_t n, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float &x : out) x = dist(rng);
  return out;
}

uint32_t fresh_seed() {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

TEST(OptimizerBackend, HostConvertSumsAndAccumulateMatchFloat64) {
  const uint32_t seed = fresh_seed();
  std::unique_ptr<OptimizerBackend> b = optimizer_backend_host();
  ASSERT_STREQ(b->name(), "host");
  for (size_t n : {size_t{1}, size_t{17}, size_t{100003}}) {
    const std::vector<float> x = random_floats(seed + static_cast<uint32_t>(n), n, 3.0f);
    // dst = cast(x * scale) for every dtype pair from fp32.
    for (dsrt_dtype dt : {DSRT_F32, DSRT_F16, DSRT_BF16}) {
      std::vector<char> out(n * dtype_size(dt));
      ASSERT_TRUE(b->convert(x.data(), DSRT_F32, out.data(), dt, n, 0.375f).ok());
      for (size_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(x[i]) * 0.375;
        const double got = to_float(out.data(), dt, static_cast<int64_t>(i));
        const double tol = dt == DSRT_F32 ? 1e-7 : (dt == DSRT_F16 ? 1e-3 : 8e-3);
        ASSERT_NEAR(got, want, tol * std::fabs(want) + 1e-6) << "dtype " << dtype_name(dt) << " element " << i;
      }
    }
    double sum = 0;
    bool bad = true;
    ASSERT_TRUE(b->sum_squares(x.data(), DSRT_F32, n, 0.5f, &sum, &bad).ok());
    double want = 0;
    for (float v : x) want += (0.5 * v) * (0.5 * v);
    EXPECT_NEAR(sum, want, 1e-9 * want);
    EXPECT_FALSE(bad);
    std::vector<float> acc = random_floats(seed + 7, n, 1.0f);
    const std::vector<float> before = acc;
    ASSERT_TRUE(b->accumulate(acc.data(), x.data(), DSRT_F32, n, 2.0f).ok());
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(acc[i], before[i] + 2.0 * x[i], 1e-6 * (std::fabs(before[i]) + std::fabs(2.0 * x[i])) + 1e-7);
  }
  std::vector<float> inf_at_end(1000, 1.0f);
  inf_at_end.back() = std::numeric_limits<float>::infinity();
  double sum = 0;
  bool bad = false;
  ASSERT_TRUE(b->sum_squares(inf_at_end.data(), DSRT_F32, inf_at_end.size(), 1.0f, &sum, &bad).ok());
  EXPECT_TRUE(bad);
  EXPECT_EQ(b->convert(nullptr, DSRT_F32, inf_at_end.data(), DSRT_F32, 3).code(), DSRT_ERR_INVALID_ARGUMENT);
}

TEST(OptimizerBackend, FactoryPicksTheDevicesBackend) {
  std::unique_ptr<Device> cpu = device_create_cpu();
  std::unique_ptr<OptimizerBackend> b;
  ASSERT_TRUE(optimizer_backend_create(*cpu, nullptr, &b).ok());
  EXPECT_STREQ(b->name(), "host");
  if (!device_has_cuda()) return;
  std::unique_ptr<Device> gpu;
  ASSERT_TRUE(device_create_cuda(0, &gpu).ok());
  ASSERT_TRUE(optimizer_backend_create(*gpu, nullptr, &b).ok());
  EXPECT_STREQ(b->name(), "cuda");
}

// DeepSpeed's formulas, recomputed here in double: Adam's step size lr / (1 - beta1^t) and
// 1/sqrt(1 - beta2^t); AdamW keeps p * (1 - lr * wd); Lamb's step lr * sqrt(1 - beta2^t) / (1 - beta1^t).
TEST(OptimizerBackend, SharedStepConstantsFollowTheFormulas) {
  OptimizerHyper h;
  h.type = OptimizerType::AdamW;
  h.lr = 3e-3f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.weight_decay = 0.1f;
  h.step = 7;
  StepConstants c;
  ASSERT_TRUE(fold_step_constants("test", h, 0.25f, &c).ok());
  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2;
  EXPECT_EQ(c.states, 2);
  EXPECT_EQ(c.grad_scale, 0.25f);
  EXPECT_EQ(c.step_size, static_cast<float>(lr / (1 - std::pow(b1, 7))));
  EXPECT_EQ(c.inv_sqrt_bc2, static_cast<float>(1 / std::sqrt(1 - std::pow(b2, 7))));
  EXPECT_EQ(c.keep_factor, static_cast<float>(1 - lr * 0.1f));
  EXPECT_EQ(c.l2_decay, 0.0f);
  h.type = OptimizerType::Adam;
  h.adam_w_mode = false;
  ASSERT_TRUE(fold_step_constants("test", h, 1.0f, &c).ok());
  EXPECT_EQ(c.l2_decay, 0.1f);
  EXPECT_EQ(c.keep_factor, 1.0f);
  h.type = OptimizerType::Lamb;
  EXPECT_EQ(fold_step_constants("test", h, 1.0f, &c).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NEAR(lamb_step_size(h), lr * std::sqrt(1 - std::pow(b2, 7)) / (1 - std::pow(b1, 7)), 1e-12);
  h.max_coeff = 10;
  h.min_coeff = 0.01f;
  EXPECT_EQ(lamb_trust_ratio(h, 3.0, 0.0), 1.0);
  EXPECT_EQ(lamb_trust_ratio(h, 3.0, 2.0), 1.5);
  EXPECT_EQ(lamb_trust_ratio(h, 300.0, 2.0), 10.0);
  h.type = OptimizerType::SGD;
  h.momentum = 0.9f;
  h.nesterov = true;
  h.dampening = 0.1f;
  const Status s = fold_step_constants("test", h, 1.0f, &c);
  EXPECT_EQ(s.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("dampening"), std::string::npos) << s.message();
  EXPECT_EQ(fold_step_constants("test", h, std::numeric_limits<float>::infinity(), &c).code(),
            DSRT_ERR_INVALID_ARGUMENT);
}

// The CUDA backend against the host backend: one AdamW step over three slices with bf16 gradients
// and bf16 working copies, and the gradient norm.
TEST(OptimizerBackend, CudaMatchesHost) {
  if (!device_has_cuda()) GTEST_SKIP() << "no CUDA device: the CUDA backend test needs a GPU";
  const uint32_t seed = fresh_seed();
  std::unique_ptr<Device> gpu;
  ASSERT_TRUE(device_create_cuda(0, &gpu).ok());
  std::unique_ptr<OptimizerBackend> cuda, host = optimizer_backend_host();
  ASSERT_TRUE(optimizer_backend_create(*gpu, nullptr, &cuda).ok());
  const size_t sizes[3] = {1, 4099, 70000};
  const size_t total = sizes[0] + sizes[1] + sizes[2];
  std::vector<float> master = random_floats(seed, total, 0.5f), m = random_floats(seed + 1, total, 0.01f);
  std::vector<float> v(total);
  for (size_t i = 0; i < total; ++i) v[i] = std::fabs(random_floats(seed + 2 + static_cast<uint32_t>(i % 5), 1, 1e-3f)[0]);
  const std::vector<float> g32 = random_floats(seed + 3, total, 0.2f);
  std::vector<uint16_t> grad(total);
  for (size_t i = 0; i < total; ++i) from_float(grad.data(), DSRT_BF16, static_cast<int64_t>(i), g32[i]);
  DeviceBuffer d_master, d_m, d_v, d_grad, d_work;
  ASSERT_TRUE(gpu->allocate(total * 4, &d_master).ok());
  ASSERT_TRUE(gpu->allocate(total * 4, &d_m).ok());
  ASSERT_TRUE(gpu->allocate(total * 4, &d_v).ok());
  ASSERT_TRUE(gpu->allocate(total * 2, &d_grad).ok());
  ASSERT_TRUE(gpu->allocate(total * 2, &d_work).ok());
  ASSERT_TRUE(gpu->copy(d_master.data(), master.data(), total * 4, nullptr).ok());
  ASSERT_TRUE(gpu->copy(d_m.data(), m.data(), total * 4, nullptr).ok());
  ASSERT_TRUE(gpu->copy(d_v.data(), v.data(), total * 4, nullptr).ok());
  ASSERT_TRUE(gpu->copy(d_grad.data(), grad.data(), total * 2, nullptr).ok());
  std::vector<uint16_t> work(total);
  OptimizerHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.01f;
  h.step = 3;
  std::vector<OptimizerSlice> hs(3), ds(3);
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    hs[i] = OptimizerSlice{master.data() + at, grad.data() + at, DSRT_BF16, m.data() + at, v.data() + at,
                           work.data() + at, DSRT_BF16, sizes[i]};
    ds[i] = OptimizerSlice{d_master.as<float>() + at, d_grad.as<uint16_t>() + at, DSRT_BF16, d_m.as<float>() + at,
                           d_v.as<float>() + at, d_work.as<uint16_t>() + at, DSRT_BF16, sizes[i]};
    at += sizes[i];
  }
  double hn = 0, dn = 0;
  bool hb = true, db = true;
  ASSERT_TRUE(host->sum_squares(grad.data(), DSRT_BF16, total, 0.5f, &hn, &hb).ok());
  ASSERT_TRUE(cuda->sum_squares(d_grad.data(), DSRT_BF16, total, 0.5f, &dn, &db).ok());
  EXPECT_NEAR(dn, hn, 1e-6 * hn);
  EXPECT_FALSE(db);
  ASSERT_TRUE(host->step_many(h, hs.data(), 3, 0.5f).ok());
  ASSERT_TRUE(cuda->step_many(h, ds.data(), 3, 0.5f).ok());
  ASSERT_TRUE(cuda->synchronize().ok());
  std::vector<float> got(total);
  ASSERT_TRUE(gpu->copy(got.data(), d_master.data(), total * 4, nullptr).ok());
  ASSERT_TRUE(gpu->synchronize(nullptr).ok());
  for (size_t i = 0; i < total; ++i)
    ASSERT_NEAR(got[i], master[i], 1e-6 * std::fabs(master[i]) + 1e-7) << "element " << i;
}

}  // namespace
}  // namespace dsrt
