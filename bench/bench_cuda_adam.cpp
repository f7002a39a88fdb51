// bench_cuda_adam.cpp -- params/s of dsrt's fused CUDA AdamW against the HBM floor measured in
// the same run and (when the caller passes them) torch.optim.AdamW(fused=True)'s rates from
// bench/torch_cuda_adamw.py on the same sizes.
//
// The floor: bytes the update must move per parameter (read p, g, m, v; write p, m, v; plus the
// 16-bit working copy) divided by the device-to-device cudaMemcpy bandwidth (read + write bytes
// per second) over a buffer much larger than L2. Layouts: one flat tensor, and the same count of
// parameters split into many tensors of mixed sizes (the multi-tensor chunk list at work), views
// at arbitrary element offsets into the same buffers, as an engine's tensor pieces are. Data:
// random values (never zeros), the gradients in each configuration's dtype.
//
// Each launch setting of the step kernel (cuda_set_step_launch: blocks per 65536-element chunk,
// groups of 8 elements loaded per thread before use, evict-first cache hints) is measured in the
// same run, one table row each; the default setting is measured again at the end (the spread of
// two measurements of one setting) and its figures are the RESULT lines.
//
//   bench_cuda_adam [--params N] [--tensors T] [--iters K] [--torch-flat P/S] [--torch-many P/S]
//                   [--variants all|default]
#include <cstdio>

#ifndef DSRT_HAVE_CUDA

int main() {
  std::printf("CUDA not built: bench_cuda_adam needs a build with -DDSRT_CUDA=ON\n");
  return 0;
}

#else

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/fused_optimizers.h"
#include "optim/cpu_optimizer.h"
#include "bench/bench_cuda_check.h"
#include "device/cuda_device.h"
#include "dsrt.h"
#include "util/half.h"

namespace {

using namespace dsrt;


// Best time in seconds of fn() over iters runs (after one warm-up), timed with events.
template <class Fn>
double best_seconds(int iters, Fn &&fn) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  float best_ms = 1e30f;
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(start));
    fn();
    BENCH_CUDA(cudaEventRecord(stop));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best_ms / 1e3;
}

// Sizes of `tensors` tensors summing to total, mixed from tiny to large (weights (k % 1000 + 1)^3
// for a hashed k), in integer arithmetic that bench/torch_cuda_adamw.py repeats exactly.
std::vector<size_t> split_sizes(size_t total, size_t tensors) {
  std::vector<uint64_t> weights(tensors);
  uint64_t sum = 0;
  for (size_t i = 0; i < tensors; ++i) {
    const uint64_t k = (i * 2654435761ull) % 1000 + 1;
    sum += (weights[i] = k * k * k);
  }
  std::vector<size_t> sizes(tensors);
  size_t used = 0;
  for (size_t i = 0; i + 1 < tensors; ++i) {
    sizes[i] = std::max<size_t>(1, static_cast<size_t>(static_cast<unsigned __int128>(total) * weights[i] / sum));
    used += sizes[i];
  }
  sizes.back() = total > used ? total - used : 1;
  return sizes;
}

// Uniform values in [lo, hi) from a 64-bit LCG (fast enough for 100M values on the host).
void fill_uniform(std::vector<float> &out, uint64_t seed, float lo, float hi) {
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float &v : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
  }
}

std::string launch_name(const CudaStepLaunch &l) {
  return std::to_string(l.blocks_per_chunk) + " blk/chunk, unroll " + std::to_string(l.unroll) +
         (l.streaming_hints ? ", evict-first" : ", plain");
}

}  // namespace

int main(int argc, char **argv) {
  size_t params = 200'000'000, tensors = 512;
  int iters = 20;
  double torch_flat = 0, torch_many = 0;
  bool all_variants = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--params") params = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--tensors") tensors = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--torch-flat") torch_flat = std::atof(argv[i + 1]);
    else if (a == "--torch-many") torch_many = std::atof(argv[i + 1]);
    else if (a == "--variants") all_variants = std::string(argv[i + 1]) != "default";
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (!dsrt_has_feature("cuda")) {
    std::printf("no CUDA device: bench_cuda_adam needs a GPU\n");
    return 0;
  }
  std::unique_ptr<Device> gpu;
  BENCH_CHECK(device_create_cuda(0, &gpu));
  std::printf("device: %s; %zu params, best of %d\n", gpu->name(), params, iters);

  // HBM floor: device-to-device copy bandwidth over 2 GiB (reads + writes per second).
  const size_t copy_bytes = size_t(1) << 30;
  DeviceBuffer src, dst;
  BENCH_CHECK(gpu->allocate(copy_bytes, &src, true));
  BENCH_CHECK(gpu->allocate(copy_bytes, &dst, false));
  const double copy_s = best_seconds(iters, [&] {
    BENCH_CUDA(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
  });
  const double bandwidth = 2.0 * copy_bytes / copy_s;
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", bandwidth / 1e9);
  src.reset();
  dst.reset();

  // fp32 master/m/v, gradient and working copy in each configuration's dtype.
  struct Config {
    const char *name;
    dsrt_dtype grad;
    int working;  // -1: none
  };
  const Config configs[] = {{"fp32 grads (as torch fused)", DSRT_F32, -1}, {"bf16 grads + bf16 working copy", DSRT_BF16, DSRT_BF16}};
  DeviceBuffer p, m, v, g, g16, w;
  BENCH_CHECK(gpu->allocate(params * 4, &p, false));
  BENCH_CHECK(gpu->allocate(params * 4, &m, false));
  BENCH_CHECK(gpu->allocate(params * 4, &v, false));
  BENCH_CHECK(gpu->allocate(params * 4, &g, false));
  BENCH_CHECK(gpu->allocate(params * 2, &g16, false));
  BENCH_CHECK(gpu->allocate(params * 2, &w, true));
  {
    std::vector<float> host(params);
    const struct {
      DeviceBuffer *buf;
      float lo, hi;
    } fills[] = {{&p, -1.0f, 1.0f}, {&m, -1e-2f, 1e-2f}, {&v, 1e-6f, 1e-4f}, {&g, -1e-2f, 1e-2f}};
    uint64_t seed = 1;
    for (const auto &f : fills) {
      fill_uniform(host, seed++, f.lo, f.hi);
      BENCH_CUDA(cudaMemcpy(f.buf->data(), host.data(), params * 4, cudaMemcpyHostToDevice));
    }
    BENCH_CHECK(cuda_convert(g.data(), DSRT_F32, g16.data(), DSRT_BF16, params, nullptr));
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  const std::vector<size_t> many = split_sizes(params, tensors);
  OptimizerHyper h;
  h.type = OptimizerType::AdamW;
  h.lr = 1e-6f;
  h.weight_decay = 0.01f;
  h.step = 2;

  // The launch settings measured: every one (all), or the default only; the default again last.
  const CudaStepLaunch chosen = cuda_step_launch_default();
  std::vector<CudaStepLaunch> launches;
  if (all_variants) {
    for (int bpc : {1, 2, 4, 8, 16, 32})
      for (int unroll : {1, 2})
        for (bool hints : {false, true}) launches.push_back(CudaStepLaunch{bpc, unroll, hints});
  }
  launches.push_back(chosen);

  std::printf("%-32s %-12s %-34s %8s %9s %7s %8s\n", "configuration", "layout", "launch", "ms", "Gparam/s", "floor",
              "torch");
  for (const Config &c : configs) {
    const double bytes_per_param = 28.0 - (c.grad == DSRT_F32 ? 0.0 : 2.0) + (c.working >= 0 ? 2.0 : 0.0);
    const double floor_rate = bandwidth / bytes_per_param;
    for (int layout = 0; layout < 2; ++layout) {
      std::vector<size_t> sizes = layout == 0 ? std::vector<size_t>{params} : many;
      std::vector<OptimizerSlice> slices;
      size_t offset = 0;
      for (size_t n : sizes) {
        OptimizerSlice s;
        s.master = p.as<float>() + offset;
        s.state0 = m.as<float>() + offset;
        s.state1 = v.as<float>() + offset;
        s.grad = c.grad == DSRT_F32 ? static_cast<const void *>(g.as<float>() + offset)
                                    : static_cast<const void *>(g16.as<uint16_t>() + offset);
        s.grad_dtype = c.grad;
        if (c.working >= 0) {
          s.working = w.as<uint16_t>() + offset;
          s.working_dtype = static_cast<dsrt_dtype>(c.working);
        }
        s.n = n;
        slices.push_back(s);
        offset += n;
      }
      size_t total = 0;
      for (size_t n : sizes) total += n;
      const std::string layout_name = layout == 0 ? "1 tensor" : std::to_string(sizes.size()) + " tensors";
      const double torch_rate = layout == 0 ? torch_flat : torch_many;
      for (size_t k = 0; k < launches.size(); ++k) {
        const CudaStepLaunch &l = launches[k];
        BENCH_CHECK(cuda_set_step_launch(l));
        const double secs = best_seconds(iters, [&] {
          BENCH_CHECK(cuda_optimizer_step_many(h, slices.data(), slices.size(), 0.5f, nullptr));
        });
        const double rate = total / secs;
        const bool is_default = k + 1 == launches.size();
        const std::string name = (is_default ? "default: " : "") + launch_name(l);
        std::printf("%-32s %-12s %-34s %8.3f %9.2f %7.3f", c.name, layout_name.c_str(), name.c_str(), secs * 1e3,
                    rate / 1e9, rate / floor_rate);
        if (c.grad == DSRT_F32 && torch_rate > 0) std::printf(" %7.3fx", rate / torch_rate);
        std::printf("\n");
        if (is_default) {
          std::printf("RESULT cuda_adamw grad=%s working=%s layout=%s launch=%d/%d/%d params_per_s=%.6e floor_ratio=%.4f",
                      dtype_name(c.grad), c.working < 0 ? "none" : dtype_name(static_cast<dsrt_dtype>(c.working)),
                      layout == 0 ? "flat" : "many", l.blocks_per_chunk, l.unroll, l.streaming_hints ? 1 : 0, rate,
                      rate / floor_rate);
          if (c.grad == DSRT_F32 && torch_rate > 0) std::printf(" torch_ratio=%.4f", rate / torch_rate);
          std::printf("\n");
        }
      }
    }
  }
  std::printf("floor: %.1f B/param fp32 grads, %.1f B/param bf16 grads + bf16 working copy; copy %.0f GB/s\n", 28.0,
              28.0, bandwidth / 1e9);
  BENCH_CHECK(cuda_set_step_launch(chosen));
  CachingPoolStats stats;
  BENCH_CHECK(cuda_device_pool_stats(*gpu, &stats));
  std::printf("pool: %.1f MiB held, %llu raw allocations, fragmentation %.1f%%\n", stats.bytes_held / 1048576.0,
              static_cast<unsigned long long>(stats.raw_allocations), 100.0 * stats.fragmentation());
  return 0;
}

#endif
