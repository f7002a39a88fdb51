// test_cuda_kernels.cpp -- every CUDA kernel against the CPU kernels (src/optim/cpu_optimizer.h)
// on fresh random data (the seed is printed), with outputs poisoned (all-ones bytes: NaN in every
// dtype) before each run, and the CUDA device itself (memory, pool reuse, out-of-memory message,
// pinned memory, streams and events). Tolerances per output dtype: fp32 1e-6, fp16 1e-3, bf16
// 1e-2 relative (the kernels do the same float operations in the same order, so most results are
// bit-identical). Without a GPU (or in a build without CUDA) the GPU tests skip; the argument
// checks of the launchers run in any CUDA build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_norm_order.h"
#include "dsrt.h"
#include "optim/cpu_optimizer.h"
#include "optim/step_constants.h"
#include "util/half.h"
#ifdef DSRT_HAVE_CUDA
#include "cuda/chunk_list.h"
#include "cuda/fused_optimizers.h"
#include "cuda_test_device.h"
#include "device/cuda_device.h"
#endif

namespace dsrt {
namespace {

#define DSRT_REQUIRE_GPU()                                                                \
  do {                                                                                    \
    if (!dsrt_has_feature("cuda")) GTEST_SKIP() << "no CUDA device: kernel test needs a GPU"; \
  } while (0)

#ifdef DSRT_HAVE_CUDA

constexpr dsrt_dtype kDtypes[] = {DSRT_F32, DSRT_F16, DSRT_BF16};

double tolerance(dsrt_dtype dtype) { return dtype == DSRT_F32 ? 1e-6 : (dtype == DSRT_F16 ? 1e-3 : 1e-2); }

uint32_t fresh_seed() {
  std::random_device rd;
  return rd();
}

using cuda_test::check;
using cuda_test::gpu;

// A device array holding a copy of host bytes, optionally shifted off 16-byte alignment by
// `shift` bytes so that the element-wise path runs.
struct DevArray {
  DeviceBuffer buf;
  size_t shift = 0;
  void *ptr() const { return buf.empty() ? nullptr : buf.as<unsigned char>() + shift; }
};

DevArray upload(const void *host, size_t bytes, size_t shift) {
  DevArray a;
  a.shift = shift;
  check(gpu().allocate(bytes + 16, &a.buf, false));
  check(gpu().memset(a.buf.data(), 0xff, bytes + 16, nullptr));
  if (host != nullptr) check(gpu().copy(a.ptr(), host, bytes, nullptr));
  return a;
}
DevArray poisoned(size_t bytes, size_t shift) { return upload(nullptr, bytes, shift); }

std::vector<unsigned char> download(const void *dev, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  check(gpu().copy(host.data(), dev, bytes, nullptr));
  check(gpu().synchronize(nullptr));
  return host;
}

std::vector<unsigned char> random_array(std::mt19937 &rng, dsrt_dtype dtype, size_t n, float lo, float hi) {
  std::vector<unsigned char> out(n * dtype_size(dtype));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < n; ++i) from_float(out.data(), dtype, i, dist(rng));
  return out;
}

// Largest |got - want| / max(|want|, 1e-2 * rms(want)) over the array; a NaN where want is a
// number counts as infinite.
double max_rel_error(const void *got, const void *want, dsrt_dtype dtype, size_t n, size_t *worst) {
  double rms = 0.0;
  for (size_t i = 0; i < n; ++i) rms += std::pow(static_cast<double>(to_float(want, dtype, i)), 2);
  rms = std::sqrt(rms / (n ? n : 1));
  const double floor = rms > 0 ? 1e-2 * rms : 1e-30;
  double worst_err = 0.0;
  *worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = to_float(got, dtype, i), w = to_float(want, dtype, i);
    double err = std::isnan(g) != std::isnan(w) ? INFINITY : (std::isnan(w) ? 0.0 : std::fabs(g - w) / std::max(std::fabs(w), floor));
    if (err > worst_err) {
      worst_err = err;
      *worst = i;
    }
  }
  return worst_err;
}

void expect_close(const std::string &what, const void *dev, const std::vector<unsigned char> &want, dsrt_dtype dtype,
                  size_t n) {
  const std::vector<unsigned char> got = download(dev, n * dtype_size(dtype));
  size_t worst = 0;
  const double err = max_rel_error(got.data(), want.data(), dtype, n, &worst);
  EXPECT_LE(err, tolerance(dtype)) << what << " (" << dtype_name(dtype) << ", n " << n << "): element " << worst
                                   << " is " << to_float(got.data(), dtype, worst) << ", the CPU gives "
                                   << to_float(want.data(), dtype, worst);
}

// Sizes that cover a lone element, a partial vector, exact vectors, chunk boundaries and several
// chunks. Slice 2: every array one element off 16-byte alignment (the optimizers' vector accesses
// from element 7, the norm's element-wise path); slice 7: only the master off (the arrays
// disagree: the optimizers' element-wise path).
const std::vector<size_t> kSizes = {1, 7, 4099, 8, 65536, 2 * 65536 + 5, 300001, 70003};
constexpr size_t kMisalignedSlice = 2;
constexpr size_t kDisagreeingSlice = 7;

// One slice on both sides.
struct SliceData {
  size_t n;
  std::vector<unsigned char> master, grad, s0, s1, working;  // host: the CPU's copies
  DevArray d_master, d_grad, d_s0, d_s1, d_working;
};

struct Variant {
  const char *name;
  OptimizerHyper hyper;
  int states;
};

std::vector<Variant> step_variants() {
  std::vector<Variant> v;
  OptimizerHyper h;
  h.type = OptimizerType::AdamW;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  h.step = 3;
  v.push_back({"AdamW", h, 2});
  h.type = OptimizerType::Adam;
  h.adam_w_mode = false;
  h.step = 1;
  v.push_back({"Adam L2", h, 2});
  h.adam_w_mode = true;
  h.bias_correction = false;
  h.step = 7;
  v.push_back({"Adam without bias correction", h, 2});
  h = OptimizerHyper{};
  h.type = OptimizerType::SGD;
  h.lr = 1e-2f;
  h.momentum = 0.9f;
  h.dampening = 0.1f;
  h.weight_decay = 1e-4f;
  h.step = 2;
  v.push_back({"SGD momentum", h, 1});
  h.dampening = 0.0f;
  h.nesterov = true;
  h.step = 1;
  v.push_back({"SGD nesterov first step", h, 1});
  h.momentum = 0.0f;
  h.nesterov = false;
  v.push_back({"SGD plain", h, 0});
  h = OptimizerHyper{};
  h.type = OptimizerType::Adagrad;
  h.lr = 1e-2f;
  h.eps = 1e-8f;
  h.weight_decay = 1e-3f;
  h.step = 4;
  v.push_back({"Adagrad", h, 1});
  h = OptimizerHyper{};
  h.type = OptimizerType::Lion;
  h.lr = 1e-4f;
  h.beta1 = 0.9f;
  h.beta2 = 0.99f;
  h.weight_decay = 0.1f;
  h.step = 5;
  v.push_back({"Lion", h, 1});
  return v;
}

std::vector<SliceData> make_slices(std::mt19937 &rng, const std::vector<size_t> &sizes, dsrt_dtype grad_dtype,
                                   int working, int states, bool positive_s0) {
  std::vector<SliceData> slices(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    SliceData &s = slices[k];
    s.n = sizes[k];
    const size_t shift4 = k == kMisalignedSlice ? 4 : 0, shift2 = k == kMisalignedSlice ? 2 : 0;
    s.master = random_array(rng, DSRT_F32, s.n, -1.0f, 1.0f);
    s.grad = random_array(rng, grad_dtype, s.n, -2.0f, 2.0f);
    s.d_master = upload(s.master.data(), s.master.size(), k == kDisagreeingSlice ? 4 : shift4);
    s.d_grad = upload(s.grad.data(), s.grad.size(), grad_dtype == DSRT_F32 ? shift4 : shift2);
    if (states >= 1) {
      s.s0 = positive_s0 ? random_array(rng, DSRT_F32, s.n, 0.01f, 1.0f) : random_array(rng, DSRT_F32, s.n, -0.1f, 0.1f);
      s.d_s0 = upload(s.s0.data(), s.s0.size(), shift4);
    }
    if (states >= 2) {
      s.s1 = random_array(rng, DSRT_F32, s.n, 1e-4f, 0.05f);
      s.d_s1 = upload(s.s1.data(), s.s1.size(), shift4);
    }
    if (working >= 0) {
      const dsrt_dtype wd = static_cast<dsrt_dtype>(working);
      s.working.assign(s.n * dtype_size(wd), 0xff);
      s.d_working = poisoned(s.working.size(), wd == DSRT_F32 ? shift4 : shift2);
    }
  }
  return slices;
}

void fill_views(std::vector<SliceData> &slices, dsrt_dtype grad_dtype, int working, std::vector<OptimizerSlice> *cpu,
                std::vector<OptimizerSlice> *dev) {
  for (SliceData &s : slices) {
    OptimizerSlice c;
    c.n = s.n;
    c.grad_dtype = grad_dtype;
    c.working_dtype = working >= 0 ? static_cast<dsrt_dtype>(working) : DSRT_F32;
    OptimizerSlice d = c;
    c.master = reinterpret_cast<float *>(s.master.data());
    c.grad = s.grad.data();
    c.state0 = s.s0.empty() ? nullptr : reinterpret_cast<float *>(s.s0.data());
    c.state1 = s.s1.empty() ? nullptr : reinterpret_cast<float *>(s.s1.data());
    c.working = working >= 0 ? s.working.data() : nullptr;
    d.master = static_cast<float *>(s.d_master.ptr());
    d.grad = s.d_grad.ptr();
    d.state0 = static_cast<float *>(s.d_s0.ptr());
    d.state1 = static_cast<float *>(s.d_s1.ptr());
    d.working = s.d_working.ptr();
    cpu->push_back(c);
    dev->push_back(d);
  }
}

void compare_slices(const std::string &what, const std::vector<SliceData> &slices, int working) {
  for (size_t k = 0; k < slices.size(); ++k) {
    const SliceData &s = slices[k];
    const std::string where = what + ", slice " + std::to_string(k);
    expect_close(where + " master", s.d_master.ptr(), s.master, DSRT_F32, s.n);
    if (!s.s0.empty()) expect_close(where + " state0", s.d_s0.ptr(), s.s0, DSRT_F32, s.n);
    if (!s.s1.empty()) expect_close(where + " state1", s.d_s1.ptr(), s.s1, DSRT_F32, s.n);
    if (working >= 0) expect_close(where + " working copy", s.d_working.ptr(), s.working, static_cast<dsrt_dtype>(working), s.n);
  }
}

#endif  // DSRT_HAVE_CUDA

TEST(CudaKernels, OptimizerStepsMatchTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const Variant &v : step_variants()) {
    for (dsrt_dtype gd : kDtypes) {
      for (int working : {-1, int(DSRT_F32), int(DSRT_F16), int(DSRT_BF16)}) {
        const std::string what = std::string(v.name) + ", grad " + dtype_name(gd) + ", working " +
                                 (working < 0 ? "none" : dtype_name(static_cast<dsrt_dtype>(working)));
        std::vector<SliceData> slices =
            make_slices(rng, kSizes, gd, working, v.states, v.hyper.type == OptimizerType::Adagrad);
        std::vector<OptimizerSlice> cpu, dev;
        fill_views(slices, gd, working, &cpu, &dev);
        const float grad_scale = 0.37f;
        check(cpu_optimizer_step_many(v.hyper, cpu.data(), cpu.size(), grad_scale));
        check(cuda_optimizer_step_many(v.hyper, dev.data(), dev.size(), grad_scale, nullptr));
        check(gpu().synchronize(nullptr));
        compare_slices(what, slices, working);
        if (HasFailure()) return;
      }
    }
  }
#endif
}

// bf16 storage of the master and the states (bf16.bf16_master_weights_and_grads /
// bf16_optimizer_states): the CUDA kernels against the CPU's, every optimizer that has states, on
// aligned and misaligned slices. Both round each store to the nearest bf16, so results agree to a
// bf16 ulp where the fp32 arithmetic differs in the last bit.
TEST(CudaKernels, Bf16StorageMatchesTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<size_t> sizes = {1, 7, 4099, 65536 + 3};
  for (OptimizerType type : {OptimizerType::AdamW, OptimizerType::SGD, OptimizerType::Adagrad, OptimizerType::Lion}) {
    for (bool bf16_states : {false, true}) {
      SCOPED_TRACE(std::string(optimizer_type_name(type)) + (bf16_states ? ", bf16 states" : ", fp32 states"));
      OptimizerConfig oc;
      oc.type = type;
      oc.momentum = 0.9;
      oc.weight_decay = 0.01;
      const OptimizerHyper hyper = make_optimizer_hyper(oc, 1e-2, 3);
      const dsrt_dtype sd = bf16_states ? DSRT_BF16 : DSRT_F32;
      for (size_t k = 0; k < sizes.size(); ++k) {
        // Slice 2 off 16-byte alignment (the element-wise path): 2 bytes for bf16 arrays, 4 for fp32.
        const size_t n = sizes[k], shift = k == 2 ? 2 : 0, state_shift = k == 2 ? (bf16_states ? 2 : 4) : 0;
        auto p = random_array(rng, DSRT_BF16, n, -1.0f, 1.0f), g = random_array(rng, DSRT_F32, n, -0.1f, 0.1f);
        auto s0 = random_array(rng, sd, n, 0.0f, 0.01f), s1 = random_array(rng, sd, n, 0.0f, 0.001f);
        DevArray dp = upload(p.data(), p.size(), shift), dg = upload(g.data(), g.size(), 0);
        DevArray d0 = upload(s0.data(), s0.size(), state_shift), d1 = upload(s1.data(), s1.size(), state_shift);
        DevArray dw = poisoned(n * 2, shift);
        std::vector<uint16_t> w(n);
        OptimizerSlice cpu, dev;
        cpu.master_bf16 = reinterpret_cast<uint16_t *>(p.data());
        dev.master_bf16 = static_cast<uint16_t *>(dp.ptr());
        cpu.grad = g.data();
        dev.grad = dg.ptr();
        if (bf16_states) {
          cpu.state0_bf16 = reinterpret_cast<uint16_t *>(s0.data());
          cpu.state1_bf16 = reinterpret_cast<uint16_t *>(s1.data());
          dev.state0_bf16 = static_cast<uint16_t *>(d0.ptr());
          dev.state1_bf16 = static_cast<uint16_t *>(d1.ptr());
        } else {
          cpu.state0 = reinterpret_cast<float *>(s0.data());
          cpu.state1 = reinterpret_cast<float *>(s1.data());
          dev.state0 = static_cast<float *>(d0.ptr());
          dev.state1 = static_cast<float *>(d1.ptr());
        }
        cpu.working = w.data();
        dev.working = dw.ptr();
        cpu.working_dtype = dev.working_dtype = DSRT_BF16;
        cpu.n = dev.n = n;
        check(cpu_optimizer_step_many(hyper, &cpu, 1, 0.5f));
        check(cuda_optimizer_step_many(hyper, &dev, 1, 0.5f, nullptr));
        check(gpu().synchronize(nullptr));
        expect_close("master", dp.ptr(), p, DSRT_BF16, n);
        expect_close("working", dw.ptr(), p, DSRT_BF16, n);
        expect_close("state0", d0.ptr(), s0, sd, n);
        if (type == OptimizerType::AdamW) expect_close("state1", d1.ptr(), s1, sd, n);
        if (HasFailure()) return;
      }
    }
  }
#endif
}

TEST(CudaKernels, ChunkListsSplitAcrossLaunches) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  // Limits lowered to 5 tensors and 7 chunks per launch: 40 small tensors, an empty one and one of
  // 30 chunks split over many launches, and a tensor continues from one launch into the next.
  check(cuda_set_launch_limits(5, 7));
  struct Restore {
    ~Restore() { (void)cuda_set_launch_limits(cuda_kernels::kMaxTensors, cuda_kernels::kMaxBlocks); }
  } restore;
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<size_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(1 + rng() % 3000);
  sizes.push_back(0);
  sizes.push_back(29 * 65536 + 11);
  sizes.push_back(65536 * 3);
  OptimizerHyper h;
  h.type = OptimizerType::AdamW;
  h.weight_decay = 0.05f;
  h.step = 10;
  std::vector<SliceData> slices = make_slices(rng, sizes, DSRT_BF16, DSRT_BF16, 2, false);
  std::vector<OptimizerSlice> cpu, dev;
  fill_views(slices, DSRT_BF16, DSRT_BF16, &cpu, &dev);
  check(cpu_optimizer_step_many(h, cpu.data(), cpu.size(), 1.0f / 1024));
  check(cuda_optimizer_step_many(h, dev.data(), dev.size(), 1.0f / 1024, nullptr));
  check(gpu().synchronize(nullptr));
  compare_slices("AdamW over many tensors", slices, DSRT_BF16);
  // The norms' per-chunk partials and their reduction under the same split.
  std::vector<CudaTensorRef> refs;
  for (const SliceData &s : slices) refs.push_back({s.d_grad.ptr(), DSRT_BF16, s.n});
  const size_t ws_bytes = cuda_reduction_workspace_bytes(sizes.data(), sizes.size());
  DevArray ws = poisoned(ws_bytes, 0);
  DevArray out = poisoned(refs.size() * 8, 0);
  DevArray flag = poisoned(sizeof(int), 0);
  check(cuda_sum_squares_many(refs.data(), refs.size(), 2.0f, static_cast<double *>(out.ptr()),
                              static_cast<int *>(flag.ptr()), ws.ptr(), ws_bytes, nullptr));
  const std::vector<unsigned char> got = download(out.ptr(), refs.size() * 8);
  for (size_t k = 0; k < refs.size(); ++k) {
    bool nonfinite = false;
    const double want = cpu_sum_squares(slices[k].grad.data(), DSRT_BF16, slices[k].n, 2.0f, &nonfinite);
    double g;
    std::memcpy(&g, got.data() + k * 8, 8);
    EXPECT_NEAR(g, want, 1e-5 * want) << "sum of squares, tensor " << k << " of " << slices[k].n;
  }
#endif
}

// Every launch setting of the step kernel (blocks per chunk, unroll, cache hints) gives the same
// bits as the default on the same random inputs, for every optimizer and the 16-bit paths, and
// the default's results match the CPU (OptimizerStepsMatchTheCpu): the setting changes which
// block and thread take an element, never its arithmetic.
TEST(CudaKernels, StepLaunchSettingsGiveTheSameBits) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  struct Restore {
    ~Restore() { (void)cuda_set_step_launch(cuda_step_launch_default()); }
  } restore;
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Sizes: a lone element, a partial vector, parts of a chunk, a short last chunk cut into empty
  // and partial parts, several chunks; slice 2 one element off alignment, slice 7 (kDisagreeingSlice)
  // with arrays that disagree (element-wise path).
  const std::vector<size_t> sizes = {1, 7, 4099, 2048 + 8, 65536 + 2048 + 3, 3 * 65536 + 40000, 5000, 65536 + 4467};
  const std::pair<dsrt_dtype, int> dtypes[] = {{DSRT_F32, -1}, {DSRT_BF16, int(DSRT_BF16)}, {DSRT_F16, int(DSRT_F32)}};
  for (const Variant &v : step_variants()) {
    // Adam takes every setting; the other optimizers only the blocks per chunk.
    const bool adam = v.hyper.type == OptimizerType::Adam || v.hyper.type == OptimizerType::AdamW;
    std::vector<CudaStepLaunch> launches;
    for (int bpc = 1; bpc <= 32; bpc *= 2)
      for (int unroll : {1, 2})
        for (bool hints : {false, true})
          if (adam || (unroll == 1 && !hints)) launches.push_back(CudaStepLaunch{bpc, unroll, hints});
    for (const std::pair<dsrt_dtype, int> &dt : dtypes) {
      const dsrt_dtype gd = dt.first;
      const int working = dt.second;
      const std::string what = std::string(v.name) + ", grad " + dtype_name(gd);
      // Results under one setting: every output array's bytes, from the same inputs each time.
      auto run = [&](const CudaStepLaunch &l) {
        check(cuda_set_step_launch(l));
        std::mt19937 rng(seed);
        std::vector<SliceData> slices = make_slices(rng, sizes, gd, working, v.states, v.hyper.type == OptimizerType::Adagrad);
        std::vector<OptimizerSlice> cpu, dev;
        fill_views(slices, gd, working, &cpu, &dev);
        check(cuda_optimizer_step_many(v.hyper, dev.data(), dev.size(), 0.37f, nullptr));
        std::vector<std::vector<unsigned char>> out;
        for (const SliceData &s : slices) {
          out.push_back(download(s.d_master.ptr(), s.n * 4));
          if (!s.s0.empty()) out.push_back(download(s.d_s0.ptr(), s.n * 4));
          if (!s.s1.empty()) out.push_back(download(s.d_s1.ptr(), s.n * 4));
          if (working >= 0) out.push_back(download(s.d_working.ptr(), s.n * dtype_size(static_cast<dsrt_dtype>(working))));
        }
        return out;
      };
      const auto want = run(cuda_step_launch_default());
      for (const CudaStepLaunch &l : launches) {
        const auto got = run(l);
        ASSERT_EQ(got.size(), want.size());
        for (size_t a = 0; a < got.size(); ++a) {
          EXPECT_TRUE(got[a] == want[a]) << what << ": output array " << a << " differs with " << l.blocks_per_chunk
                                         << " blocks per chunk, unroll " << l.unroll << (l.streaming_hints ? ", evict-first" : "");
        }
        if (HasFailure()) return;
      }
    }
  }
#endif
}

TEST(CudaKernels, LambPhasesMatchTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  OptimizerHyper h;
  h.type = OptimizerType::Lamb;
  h.lr = 2e-3f;
  h.weight_decay = 0.01f;
  h.step = 3;
  for (dsrt_dtype gd : kDtypes) {
    for (int working : {-1, int(DSRT_BF16), int(DSRT_F16)}) {
      const std::string what = std::string("Lamb, grad ") + dtype_name(gd);
      std::vector<SliceData> slices = make_slices(rng, kSizes, gd, working, 2, false);
      std::vector<OptimizerSlice> cpu, dev;
      fill_views(slices, gd, working, &cpu, &dev);
      const size_t count = slices.size();
      std::vector<std::vector<float>> cpu_updates(count);
      std::vector<DevArray> dev_updates(count);
      std::vector<float *> cpu_u(count), dev_u(count);
      for (size_t k = 0; k < count; ++k) {
        cpu_updates[k].assign(slices[k].n, NAN);
        cpu_u[k] = cpu_updates[k].data();
        dev_updates[k] = poisoned(slices[k].n * 4, k == kMisalignedSlice ? 4 : 0);
        dev_u[k] = static_cast<float *>(dev_updates[k].ptr());
      }
      // The sums are added to: start both sides from the same non-zero values.
      std::vector<double> cpu_sums(2 * count);
      for (double &x : cpu_sums) x = 0.25 + (rng() % 100) / 100.0;
      DevArray d_sums = upload(cpu_sums.data(), cpu_sums.size() * 8, 0);
      double *d_psq = static_cast<double *>(d_sums.ptr()), *d_usq = d_psq + count;
      std::vector<double> cpu_psq(cpu_sums.begin(), cpu_sums.begin() + count), cpu_usq(cpu_sums.begin() + count, cpu_sums.end());
      const float gs = 0.5f;
      check(cpu_lamb_phase1_many(h, cpu.data(), count, gs, cpu_u.data(), cpu_psq.data(), cpu_usq.data()));
      const size_t ws_bytes = cuda_reduction_workspace_bytes(kSizes.data(), kSizes.size());
      DevArray ws = poisoned(ws_bytes, 0);
      check(cuda_lamb_phase1_many(h, dev.data(), count, gs, dev_u.data(), d_psq, d_usq, ws.ptr(), ws_bytes, nullptr));
      check(gpu().synchronize(nullptr));
      for (size_t k = 0; k < count; ++k) {
        std::vector<unsigned char> want(slices[k].n * 4);
        std::memcpy(want.data(), cpu_updates[k].data(), want.size());
        expect_close(what + " update, slice " + std::to_string(k), dev_u[k], want, DSRT_F32, slices[k].n);
        expect_close(what + " m", slices[k].d_s0.ptr(), slices[k].s0, DSRT_F32, slices[k].n);
        expect_close(what + " v", slices[k].d_s1.ptr(), slices[k].s1, DSRT_F32, slices[k].n);
      }
      const std::vector<unsigned char> sums = download(d_sums.ptr(), cpu_sums.size() * 8);
      const double *got = reinterpret_cast<const double *>(sums.data());
      for (size_t k = 0; k < count; ++k) {  // fp32 within a chunk, double across
        EXPECT_NEAR(got[k], cpu_psq[k], 1e-5 * cpu_psq[k]) << what << " |p|^2, slice " << k;
        EXPECT_NEAR(got[count + k], cpu_usq[k], 1e-5 * cpu_usq[k]) << what << " |u|^2, slice " << k;
      }
      // Phase 2 from the same norms on both sides.
      std::vector<double> norms(2 * count);
      for (size_t k = 0; k < count; ++k) {
        norms[k] = std::sqrt(cpu_psq[k]);
        norms[count + k] = k == 0 ? 0.0 : std::sqrt(cpu_usq[k]);  // slice 0: a zero norm, trust ratio 1
      }
      DevArray d_norms = upload(norms.data(), norms.size() * 8, 0);
      const double *d_pn = static_cast<const double *>(d_norms.ptr());
      check(cpu_lamb_phase2_many(h, cpu.data(), count, cpu_u.data(), norms.data(), norms.data() + count));
      check(cuda_lamb_phase2_many(h, dev.data(), count, dev_u.data(), d_pn, d_pn + count, nullptr));
      check(gpu().synchronize(nullptr));
      compare_slices(what + " phase 2", slices, working);
      if (HasFailure()) return;
    }
  }
#endif
}

TEST(CudaKernels, SumOfSquaresAndOverflowMatchTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<std::vector<unsigned char>> host;
  std::vector<DevArray> dev;
  std::vector<CudaTensorRef> refs;
  std::vector<size_t> sizes;
  for (size_t k = 0; k < kSizes.size() * 3; ++k) {
    const dsrt_dtype dtype = kDtypes[k % 3];
    const size_t n = kSizes[k / 3];
    host.push_back(random_array(rng, dtype, n, -3.0f, 3.0f));
    dev.push_back(upload(host.back().data(), host.back().size(), k / 3 == kMisalignedSlice ? dtype_size(dtype) : 0));
    sizes.push_back(n);
  }
  for (size_t k = 0; k < dev.size(); ++k) refs.push_back({dev[k].ptr(), kDtypes[k % 3], sizes[k]});
  const size_t ws_bytes = cuda_reduction_workspace_bytes(sizes.data(), sizes.size());
  DevArray ws = poisoned(ws_bytes, 0);
  DevArray out = poisoned(refs.size() * 8, 0);
  DevArray flag = poisoned(sizeof(int), 0);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // an inf in one fp16 tensor and a NaN in one bf16 tensor
      const uint16_t inf16 = 0x7c00, nan_bf16 = 0x7fc1;
      check(gpu().copy(static_cast<uint16_t *>(dev[4 * 3 + 1].ptr()) + 17, &inf16, 2, nullptr));
      check(gpu().copy(static_cast<uint16_t *>(dev[6 * 3 + 2].ptr()) + 299999, &nan_bf16, 2, nullptr));
    }
    const float scale = 0.125f;
    check(cuda_sum_squares_many(refs.data(), refs.size(), scale, static_cast<double *>(out.ptr()),
                                static_cast<int *>(flag.ptr()), ws.ptr(), ws_bytes, nullptr));
    const std::vector<unsigned char> got = download(out.ptr(), refs.size() * 8);
    const std::vector<unsigned char> got_flag = download(flag.ptr(), sizeof(int));
    int flag_value;
    std::memcpy(&flag_value, got_flag.data(), sizeof flag_value);
    EXPECT_EQ(flag_value, round) << "non-finite flag, round " << round;
    if (round == 0) {
      for (size_t k = 0; k < refs.size(); ++k) {
        bool nonfinite = false;
        const double want = cpu_sum_squares(host[k].data(), refs[k].dtype, sizes[k], scale, &nonfinite);
        double g;
        std::memcpy(&g, got.data() + k * 8, 8);
        EXPECT_NEAR(g, want, 1e-13 * want) << "tensor " << k << " (" << dtype_name(refs[k].dtype) << ", n " << sizes[k] << ")";
        // The exact order of cuda/norms.cu, modelled on the host: the same bits.
        const bool vector_path = k / 3 != kMisalignedSlice;
        const double model = cuda_norm_order::sum_squares(host[k].data(), refs[k].dtype, sizes[k], scale, vector_path);
        EXPECT_EQ(g, model) << "tensor " << k << " (" << dtype_name(refs[k].dtype) << ", n " << sizes[k] << ")";
      }
    }
  }
#endif
}

// The clipping norm of an array cut into partitions (each summed on the GPU, the sums added in
// double as the ranks' all-reduce does) agrees with the whole array's to double rounding, and the
// fp32 clip coefficient is the same bits: MiCS steps bitwise as plain ZeRO-3 on a GPU.
TEST(CudaKernels, SumOfSquaresIsPartitionInvariant) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t n = 5 * 65536 + 12289;
  std::vector<unsigned char> host = random_array(rng, DSRT_F32, n, -3.0f, 3.0f);
  const float *values = reinterpret_cast<const float *>(host.data());
  const float unscale = 1.0f / 512.0f;
  auto norm_of = [&](const std::vector<size_t> &cuts) {
    double total = 0.0;
    size_t begin = 0;
    for (size_t k = 0; k <= cuts.size(); ++k) {
      const size_t end = k < cuts.size() ? cuts[k] : n;
      DevArray piece = upload(values + begin, (end - begin) * 4, 0);  // a rank's own partition
      CudaTensorRef ref{piece.ptr(), DSRT_F32, end - begin};
      const size_t count = end - begin;
      const size_t ws_bytes = cuda_reduction_workspace_bytes(&count, 1);
      DevArray ws = poisoned(ws_bytes, 0), out = poisoned(8, 0), flag = poisoned(sizeof(int), 0);
      check(cuda_sum_squares_many(&ref, 1, unscale, static_cast<double *>(out.ptr()), static_cast<int *>(flag.ptr()),
                                  ws.ptr(), ws_bytes, nullptr));
      double g;
      std::memcpy(&g, download(out.ptr(), 8).data(), 8);
      total += g;
      begin = end;
    }
    return total;
  };
  const double whole = norm_of({});
  const double clip = 0.5 * std::sqrt(whole);
  auto clip_scale = [&](double norm_sq) {
    const double coefficient = clip / (std::sqrt(norm_sq) + 1e-6);
    return static_cast<float>(coefficient < 1.0 ? unscale * coefficient : unscale);
  };
  std::uniform_int_distribution<size_t> at(1, n - 1);
  std::vector<std::vector<size_t>> cuts = {{n / 2}, {n / 4, n / 2, 3 * n / 4}, {n / 3, 2 * n / 3}};
  for (int r = 0; r < 4; ++r) {
    std::vector<size_t> c = {at(rng), at(rng)};
    std::sort(c.begin(), c.end());
    if (c[0] == c[1]) c.pop_back();
    cuts.push_back(c);
  }
  for (const std::vector<size_t> &c : cuts) {
    const double got = norm_of(c);
    EXPECT_NEAR(got, whole, 4e-15 * whole) << c.size() + 1 << " pieces";
    EXPECT_EQ(clip_scale(got), clip_scale(whole)) << c.size() + 1 << " pieces";
  }
#endif
}

TEST(CudaKernels, ConversionsAreBitIdenticalToTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t n = 100003;
  for (dsrt_dtype from : kDtypes) {
    // 16-bit sources: every kind of bit pattern (NaN, inf, subnormals); fp32: a wide exponent
    // range, including values that are subnormal or overflow in fp16.
    std::vector<unsigned char> src(n * dtype_size(from));
    if (from == DSRT_F32) {
      std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
      std::uniform_int_distribution<int> expo(-30, 20);
      for (size_t i = 0; i < n; ++i) reinterpret_cast<float *>(src.data())[i] = std::ldexp(mant(rng), expo(rng));
    } else {
      for (size_t i = 0; i < n; ++i) reinterpret_cast<uint16_t *>(src.data())[i] = static_cast<uint16_t>(rng());
    }
    for (dsrt_dtype to : kDtypes) {
      for (bool shifted : {false, true}) {  // shifted by one element: the element-wise path
        const size_t shift = shifted ? 1 : 0;
        DevArray d_src = upload(src.data(), src.size(), shift * dtype_size(from));
        DevArray d_dst = poisoned(n * dtype_size(to), shift * dtype_size(to));
        std::vector<unsigned char> want(n * dtype_size(to));
        cpu_convert(src.data(), from, want.data(), to, n);
        check(cuda_convert(d_src.ptr(), from, d_dst.ptr(), to, n, nullptr));
        const std::vector<unsigned char> got = download(d_dst.ptr(), want.size());
        size_t mismatches = 0, first = 0;
        const size_t w = dtype_size(to);
        for (size_t i = 0; i < n; ++i) {
          if (std::memcmp(got.data() + i * w, want.data() + i * w, w) != 0 && mismatches++ == 0) first = i;
        }
        EXPECT_EQ(mismatches, 0u) << dtype_name(from) << " -> " << dtype_name(to) << " shift " << shift
                                  << ": first at " << first;
      }
    }
  }
#endif
}

TEST(CudaKernels, AccumulateMatchesTheCpu) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (dsrt_dtype from : kDtypes) {
    for (size_t n : {size_t(5), size_t(65536 + 3), size_t(1000003)}) {
      std::vector<unsigned char> src = random_array(rng, from, n, -1.0f, 1.0f);
      std::vector<unsigned char> acc = random_array(rng, DSRT_F32, n, -1.0f, 1.0f);
      DevArray d_src = upload(src.data(), src.size(), 0);
      DevArray d_acc = upload(acc.data(), acc.size(), n == 5 ? 4 : 0);
      cpu_accumulate(reinterpret_cast<float *>(acc.data()), src.data(), from, n, 0.25f);
      check(cuda_accumulate(static_cast<float *>(d_acc.ptr()), d_src.ptr(), from, n, 0.25f, nullptr));
      expect_close(std::string("accumulate from ") + dtype_name(from), d_acc.ptr(), acc, DSRT_F32, n);
    }
  }
#endif
}

TEST(CudaDevice, MemoryStreamsEventsAndPool) {
  DSRT_REQUIRE_GPU();
#ifdef DSRT_HAVE_CUDA
  Device &d = gpu();
  EXPECT_EQ(d.type(), DSRT_DEVICE_CUDA);
  DeviceBuffer a;
  check(d.allocate(3 << 20, &a, true));
  const std::vector<unsigned char> zeros = download(a.data(), 3 << 20);
  for (unsigned char c : zeros) ASSERT_EQ(c, 0);
  DeviceBuffer pinned;
  check(d.allocate_pinned(1 << 20, &pinned));
  std::memset(pinned.data(), 0x5a, 1 << 20);
  DeviceStream s = nullptr;
  DeviceEvent e = nullptr;
  check(d.create_stream(&s));
  check(d.create_event(&e));
  check(d.memset(a.data(), 0x11, 3 << 20, s));
  check(d.copy(a.data(), pinned.data(), 1 << 20, s));
  check(d.record_event(e, s));
  check(d.stream_wait_event(nullptr, e));
  DeviceBuffer back;
  check(d.allocate_pinned(3 << 20, &back));
  check(d.copy(back.data(), a.data(), 3 << 20, nullptr));
  check(d.synchronize(nullptr));
  EXPECT_EQ(back.as<unsigned char>()[0], 0x5a);
  EXPECT_EQ(back.as<unsigned char>()[(1 << 20) - 1], 0x5a);
  EXPECT_EQ(back.as<unsigned char>()[1 << 20], 0x11);
  EXPECT_EQ(back.as<unsigned char>()[(3 << 20) - 1], 0x11);
  check(d.memset(back.data(), 0, 16, s));  // host memory through the same call
  EXPECT_EQ(back.as<unsigned char>()[0], 0);
  check(d.synchronize_event(e));

  // A released block comes back for the next request of its size once the streams are past it.
  // (A size no other test uses, so the cached block found is this one.)
  DeviceBuffer big;
  check(d.allocate((size_t(37) << 20) + 12345, &big, false));
  check(d.memset(big.data(), 0, 4096, s));  // pending work on a stream when it is released
  CachingPoolStats before;
  check(cuda_device_pool_stats(d, &before));
  void *first = big.data();
  big.reset();
  check(d.synchronize(s));
  check(d.synchronize(nullptr));
  DeviceBuffer again;
  check(d.allocate((size_t(37) << 20) + 20000, &again, false));
  EXPECT_EQ(again.data(), first);
  CachingPoolStats after;
  check(cuda_device_pool_stats(d, &after));
  EXPECT_EQ(after.raw_allocations, before.raw_allocations);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);

  // Out of memory names the request and what dsrt holds.
  DeviceBuffer huge;
  const Status oom = d.allocate(size_t(1) << 50, &huge, false);
  EXPECT_EQ(oom.code(), DSRT_ERR_OUT_OF_MEMORY) << oom.message();
  EXPECT_NE(oom.message().find("1125899906842624 bytes"), std::string::npos) << oom.message();
  EXPECT_NE(oom.message().find("dsrt holds"), std::string::npos) << oom.message();
  EXPECT_TRUE(huge.empty());
  DeviceBuffer still_fine;
  check(d.allocate(4096, &still_fine, true));  // the failure left no sticky error

  check(d.destroy_event(e));
  check(d.destroy_stream(s));
  EXPECT_EQ(d.destroy_stream(reinterpret_cast<DeviceStream>(0x1234)).code(), DSRT_ERR_INVALID_ARGUMENT);
  std::unique_ptr<Device> none;
  EXPECT_EQ(device_create_cuda(999, &none).code(), DSRT_ERR_DEVICE);
#endif
}

// The launchers check their arguments before touching the GPU, so this runs in any CUDA build.
TEST(CudaKernels, LaunchersRejectBadArguments) {
#ifndef DSRT_HAVE_CUDA
  GTEST_SKIP() << "no CUDA device: kernel test needs a GPU (this build has no CUDA)";
#else
  OptimizerHyper h;
  float x = 0.0f;
  OptimizerSlice s;
  s.n = 4;
  s.master = &x;  // never dereferenced: every case fails its checks first
  s.grad = &x;
  EXPECT_EQ(cuda_optimizer_step_many(h, &s, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);  // no states
  s.state0 = s.state1 = &x;
  EXPECT_EQ(cuda_optimizer_step_many(h, &s, 1, NAN, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_optimizer_step_many(h, nullptr, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  OptimizerSlice bad = s;
  bad.master = nullptr;
  EXPECT_EQ(cuda_optimizer_step_many(h, &bad, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  bad = s;
  bad.grad_dtype = static_cast<dsrt_dtype>(42);
  EXPECT_EQ(cuda_optimizer_step_many(h, &bad, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  OptimizerHyper step0 = h;
  step0.step = 0;
  EXPECT_EQ(cuda_optimizer_step_many(step0, &s, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  OptimizerHyper lamb = h;
  lamb.type = OptimizerType::Lamb;
  EXPECT_EQ(cuda_optimizer_step_many(lamb, &s, 1, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  OptimizerHyper onebit = h;
  onebit.type = OptimizerType::OneBitAdam;
  EXPECT_EQ(cuda_optimizer_step_many(onebit, &s, 1, 1.0f, nullptr).code(), DSRT_ERR_UNSUPPORTED);
  float *updates[1] = {&x};
  double sums[2] = {0, 0};
  const Status no_ws = cuda_lamb_phase1_many(lamb, &s, 1, 1.0f, updates, sums, sums + 1, nullptr, 0, nullptr);
  EXPECT_EQ(no_ws.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(no_ws.message().find("workspace"), std::string::npos) << no_ws.message();
  EXPECT_EQ(cuda_lamb_phase2_many(lamb, &s, 1, nullptr, sums, sums, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  CudaTensorRef t{nullptr, DSRT_F32, 10};
  int flag = 0;
  EXPECT_EQ(cuda_sum_squares_many(&t, 1, 1.0f, sums, &flag, nullptr, 0, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_convert(&x, DSRT_F32, &x, static_cast<dsrt_dtype>(9), 1, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_accumulate(nullptr, &x, DSRT_F32, 3, 1.0f, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(cuda_optimizer_step_many(h, &s, 0, 1.0f, nullptr).ok());  // nothing to do
  const size_t sizes[] = {1, 65536, 65537};
  EXPECT_EQ(cuda_reduction_workspace_bytes(sizes, 3), (1 + 1 + 2) * 2 * sizeof(double));
  EXPECT_EQ(cuda_set_launch_limits(0, 10).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_set_launch_limits(5, cuda_kernels::kMaxBlocks + 1).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cuda_set_launch_limits(cuda_kernels::kMaxTensors + 1, 5).code(), DSRT_ERR_INVALID_ARGUMENT);
  for (const CudaStepLaunch &l : {CudaStepLaunch{0, 1, false}, CudaStepLaunch{3, 1, false}, CudaStepLaunch{64, 1, false},
                                  CudaStepLaunch{4, 0, false}, CudaStepLaunch{4, 3, true}}) {
    const Status st = cuda_set_step_launch(l);
    EXPECT_EQ(st.code(), DSRT_ERR_INVALID_ARGUMENT) << l.blocks_per_chunk << " blocks per chunk, unroll " << l.unroll;
    EXPECT_NE(st.message().find("give"), std::string::npos) << st.message();
  }
  const CudaStepLaunch now = cuda_step_launch(), def = cuda_step_launch_default();
  EXPECT_EQ(now.blocks_per_chunk, def.blocks_per_chunk);  // the refused settings changed nothing
  EXPECT_EQ(now.unroll, def.unroll);
  EXPECT_EQ(now.streaming_hints, def.streaming_hints);
#endif
}

}  // namespace
}  // namespace dsrt
