// test_cuda_onebit.cpp -- the CUDA kernels of the 1-bit optimizers (cuda/onebit.h) on the current
// device against the CPU code they mirror (optim/onebit_adam.h, zero_one_adam.h, onebit_lamb.h,
// themselves tested against float64 references), on fresh random data: the same packed signs, and
// the same values to rounding (sums of squares are summed in another order). Without a GPU these
// tests skip; the launchers' argument checks run in any CUDA build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsrt.h"
#include "optim/onebit_adam.h"
#include "optim/onebit_lamb.h"
#include "optim/zero_one_adam.h"
#ifdef DSRT_HAVE_CUDA
#include "cuda/onebit.h"
#include "cuda_test_device.h"
#include "device/cuda_device.h"
#endif

namespace dsrt {
namespace {

#ifdef DSRT_HAVE_CUDA
using cuda_test::check;
using cuda_test::gpu;

std::vector<float> random_floats(std::mt19937 &rng, size_t n, float mean, float scale, bool positive = false) {
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> out(n);
  for (float &x : out) x = positive ? std::abs(dist(rng)) + 1e-3f : dist(rng);
  return out;
}

// A device copy of a host array, read back with get().
struct Dev {
  DeviceBuffer buffer;
  size_t bytes = 0;
  template <class T>
  explicit Dev(const std::vector<T> &host) : bytes(host.size() * sizeof(T)) {
    if (!gpu().allocate(std::max<size_t>(bytes, 8), &buffer, false).ok()) std::abort();
    if (bytes > 0 && !gpu().copy(buffer.data(), host.data(), bytes, nullptr).ok()) std::abort();
  }
  template <class T>
  T *as() { return buffer.as<T>(); }
  template <class T>
  std::vector<T> get() {
    std::vector<T> host(bytes / sizeof(T));
    if (!gpu().copy(host.data(), buffer.data(), bytes, nullptr).ok() || !gpu().synchronize(nullptr).ok()) std::abort();
    return host;
  }
};

double max_rel(const std::vector<float> &a, const std::vector<float> &b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  return worst;
}

bool have_gpu() { return dsrt_has_feature("cuda") != 0; }

OptimizerHyper hyper_of(OptimizerType type) {
  OptimizerHyper h;
  h.type = type;
  h.lr = 0.01f, h.beta1 = 0.9f, h.beta2 = 0.999f, h.eps = 1e-8f, h.weight_decay = 0.01f;
  return h;
}

CudaOneBitArgs args_of(const OptimizerHyper &h, float grad_scale) {
  CudaOneBitArgs a;
  a.lr = h.lr, a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay;
  a.grad_scale = grad_scale;
  return a;
}

constexpr size_t kN = 100003;

TEST(CudaOneBit, AdamAndZeroOneKernelsMatchTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<float> p = random_floats(rng, kN, 0, 0.5f), g = random_floats(rng, kN, 0, 1), m = random_floats(rng, kN, 0, 0.1f),
                     v = random_floats(rng, kN, 0, 0.1f, true), u = random_floats(rng, kN, 0, 0.01f);
  Dev dp(p), dg(g), dm(m), dv(v), du(u);
  const float gs = 0.25f;
  for (OptimizerType type : {OptimizerType::OneBitAdam, OptimizerType::ZeroOneAdam}) {
    const OptimizerHyper h = hyper_of(type);
    OptimizerSlice s;
    s.master = p.data(), s.grad = g.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = kN;
    check(onebit_adam_warmup_step(h, s, gs));
    check(cuda_onebit_adam_warmup(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), kN, args_of(h, gs), nullptr));
    check(onebit_adam_momentum(h, s, gs));
    check(cuda_onebit_adam_momentum(dg.as<float>(), dm.as<float>(), kN, args_of(h, gs), nullptr));
    check(onebit_adam_apply(h, s));
    check(cuda_onebit_adam_apply(dp.as<float>(), dm.as<float>(), dv.as<float>(), kN, args_of(h, gs), nullptr));
  }
  const OptimizerHyper h = hyper_of(OptimizerType::ZeroOneAdam);
  OptimizerSlice s;
  s.master = p.data(), s.grad = g.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = kN;
  check(zero_one_adam_local_step(h, s, gs, u.data()));
  check(cuda_zero_one_local_step(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), du.as<float>(), kN,
                                 args_of(h, gs), nullptr));
  check(zero_one_adam_sync_begin(h, s, u.data()));
  check(cuda_zero_one_sync_begin(dp.as<float>(), dv.as<float>(), du.as<float>(), kN, h.eps, nullptr));
  check(zero_one_adam_sync_end(h, s, u.data(), 0.03));
  check(cuda_zero_one_sync_end(dp.as<float>(), dm.as<float>(), dv.as<float>(), du.as<float>(), kN, h.eps, 0.03, nullptr));
  EXPECT_LT(max_rel(dp.get<float>(), p), 1e-6);
  EXPECT_LT(max_rel(dm.get<float>(), m), 1e-6);
  EXPECT_LT(max_rel(dv.get<float>(), v), 1e-6);
  EXPECT_EQ(du.get<float>(), u);  // all zero after the sync
}

TEST(CudaOneBit, CompressionWithErrorFeedbackMatchesTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t n = 8 * 12501;
  std::vector<float> x = random_floats(rng, n, 0, 1), e = random_floats(rng, n, 0, 0.1f), out = random_floats(rng, n, 0, 1);
  Dev dx(x), de(e), dout(out), dsum(std::vector<double>{0.0}), dscale(std::vector<float>{0.0f});
  Dev dpacked(std::vector<uint8_t>(n / 8, 0));
  std::vector<uint8_t> packed(n / 8);
  const float scale = static_cast<float>(onebit_compress(x.data(), e.data(), n, packed.data()));
  check(cuda_onebit_add_error(dx.as<float>(), de.as<float>(), n, dsum.as<double>(), nullptr));
  check(cuda_onebit_pack(dx.as<float>(), de.as<float>(), n, dsum.as<double>(), dpacked.as<uint8_t>(), dscale.as<float>(),
                         nullptr));
  EXPECT_EQ(dx.get<float>(), x) << "x + error";
  EXPECT_EQ(dpacked.get<uint8_t>(), packed) << "the signs";
  EXPECT_NEAR(dscale.get<float>()[0], scale, 1e-6 * scale);
  EXPECT_LT(max_rel(de.get<float>(), e), 1e-6);
  onebit_decompress(packed.data(), scale * 0.5f, n, out.data(), true);
  check(cuda_onebit_unpack(dpacked.as<uint8_t>(), dscale.as<float>(), 0.5f, n, dout.as<float>(), true, nullptr));
  EXPECT_LT(max_rel(dout.get<float>(), out), 1e-6);
  Dev dsq(std::vector<double>{0.0});
  check(cuda_sum_squares_f64(dx.as<float>(), n, dsq.as<double>(), nullptr));
  const double want = onebit_lamb_momentum_scale(x.data(), n);
  EXPECT_NEAR(std::sqrt(dsq.get<double>()[0] / static_cast<double>(n)), want, 1e-9 * want);
}

TEST(CudaOneBit, LambKernelsMatchTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<float> p = random_floats(rng, kN, 0, 0.5f), g = random_floats(rng, kN, 0.05f, 1), m = random_floats(rng, kN, 0, 0.1f),
                     v = random_floats(rng, kN, 0, 0.1f, true), fresh(kN, 0.0f), last(kN, 0.0f);
  Dev dp(p), dg(g), dm(m), dv(v), dfresh(fresh), dlast(last);
  OptimizerHyper h = hyper_of(OptimizerType::OneBitLamb);
  h.max_coeff = 10.0f, h.min_coeff = 0.01f;
  const OneBitLambParams params;
  CudaOneBitLambArgs l;
  l.max_coeff = h.max_coeff, l.min_coeff = h.min_coeff;
  OneBitLambTensorState state;
  state.coeff_freeze = 0.3;
  CudaOneBitLambTensor dstate_host{state.coeff_freeze, state.last_factor, 1.0};
  Dev dstate(std::vector<CudaOneBitLambTensor>{dstate_host}), dstep(std::vector<float>{0.0f});
  const float gs = 0.5f;
  OptimizerSlice s;
  s.master = p.data(), s.grad = g.data(), s.state0 = m.data(), s.state1 = v.data(), s.n = kN;
  const CudaOneBitArgs a = args_of(h, gs);
  // Warm-up with the fresh variance captured.
  check(onebit_lamb_warmup_step(h, params, s, gs, fresh.data(), true, &state, nullptr));
  Dev dsums(std::vector<double>{0, 0, 0});
  check(cuda_onebit_lamb_warmup_sums(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), dfresh.as<float>(), kN,
                                     a, dsums.as<double>(), nullptr));
  check(cuda_onebit_lamb_warmup_coeff(dsums.as<double>(), dstate.as<CudaOneBitLambTensor>(), l, h.lr, dstep.as<float>(),
                                      nullptr));
  check(cuda_onebit_lamb_update(dp.as<float>(), dm.as<float>(), dv.as<float>(), kN, a, dstep.as<float>(), nullptr));
  EXPECT_LT(max_rel(dp.get<float>(), p), 1e-6);
  EXPECT_EQ(dm.get<float>(), m);
  EXPECT_EQ(dv.get<float>(), v);
  EXPECT_EQ(dfresh.get<float>(), fresh);
  EXPECT_NEAR(dstate.get<CudaOneBitLambTensor>()[0].coeff_freeze, state.coeff_freeze, 1e-6 * state.coeff_freeze);
  // A compression step (the all-reduce between the two halves is the identity here).
  state.scaling_coeff = 1.3;
  CudaOneBitLambTensor t = dstate.get<CudaOneBitLambTensor>()[0];
  t.scaling_coeff = 1.3;
  Dev dstate2(std::vector<CudaOneBitLambTensor>{t}), dsums2(std::vector<double>{0, 0, 0});
  check(onebit_lamb_momentum(h, s, gs, static_cast<float>(state.scaling_coeff), last.data()));
  check(onebit_lamb_apply(h, params, s, last.data(), fresh.data(), &state, nullptr));
  check(cuda_onebit_lamb_momentum(dg.as<float>(), dm.as<float>(), dlast.as<float>(), kN, a,
                                  dstate2.as<CudaOneBitLambTensor>(), nullptr));
  check(cuda_onebit_lamb_apply_sums(dp.as<float>(), dm.as<float>(), dlast.as<float>(), dfresh.as<float>(), dv.as<float>(),
                                    kN, a, dstate2.as<CudaOneBitLambTensor>(), dsums2.as<double>(), nullptr));
  check(cuda_onebit_lamb_factor(dsums2.as<double>(), dstate2.as<CudaOneBitLambTensor>(), l, h.lr, true, dstep.as<float>(),
                                nullptr));
  check(cuda_onebit_lamb_update(dp.as<float>(), dm.as<float>(), dv.as<float>(), kN, a, dstep.as<float>(), nullptr));
  EXPECT_LT(max_rel(dp.get<float>(), p), 1e-6);
  EXPECT_LT(max_rel(dm.get<float>(), m), 1e-6);
  EXPECT_LT(max_rel(dfresh.get<float>(), fresh), 1e-6);
  EXPECT_EQ(dlast.get<float>(), last);
  EXPECT_NEAR(dstate2.get<CudaOneBitLambTensor>()[0].last_factor, state.last_factor, 1e-6 * state.last_factor);
  EXPECT_NE(state.last_factor, 1.0) << "the factor never moved: the case tests too little";
}

TEST(CudaOneBit, LaunchersRefuseBadArguments) {
  float x[8] = {};
  double d[3] = {};
  uint8_t packed[1] = {};
  CudaOneBitArgs a;
  EXPECT_EQ(cuda_onebit_adam_warmup(x, nullptr, x, x, 8, a, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  a.grad_scale = NAN;
  EXPECT_EQ(cuda_onebit_adam_momentum(x, x, 8, a, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_onebit_add_error(x, x, 7, d, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_onebit_pack(x, x, 8, d, nullptr, x, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_onebit_unpack(packed, x, 1.0f, 12, x, false, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_zero_one_sync_end(x, x, x, x, 8, 1e-8f, -1.0, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  CudaOneBitLambArgs l;
  l.factor_min = 5.0;
  CudaOneBitLambTensor t{};
  EXPECT_EQ(cuda_onebit_lamb_factor(d, &t, l, 0.1f, true, x, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_onebit_lamb_warmup_coeff(nullptr, &t, CudaOneBitLambArgs{}, 0.1f, x, nullptr).code(),
            DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(cuda_onebit_adam_apply(nullptr, nullptr, nullptr, 0, CudaOneBitArgs{}, nullptr).ok());
}
#else
TEST(CudaOneBit, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace dsrt
