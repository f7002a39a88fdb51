// bench_cuda_adam.cpp -- params/s of dsrt's fused CUDA AdamW against the HBM floor measured in
// the same run and (when the caller passes them) torch.optim.AdamW(fused=True)'s rates from
// bench/torch_cuda_adamw.py on the same sizes.
//
// The floor: bytes the update must move per parameter (read p, g, m, v; write p, m, v; plus the
// 16-bit working copy) divided by the device-to-device cudaMemcpy bandwidth (read + write bytes
// per second) over a buffer much larger than L2. Layouts: one flat tensor, and the same count of
// parameters split into many tensors of mixed sizes (the multi-tensor chunk list at work).
//
//   bench_cuda_adam [--params N] [--tensors T] [--iters K] [--torch-flat P/S] [--torch-many P/S]
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

}  // namespace

int main(int argc, char **argv) {
  size_t params = 200'000'000, tensors = 512;
  int iters = 20;
  double torch_flat = 0, torch_many = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--params") params = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--tensors") tensors = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--torch-flat") torch_flat = std::atof(argv[i + 1]);
    else if (a == "--torch-many") torch_many = std::atof(argv[i + 1]);
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
  DeviceBuffer p, m, v, g, w;
  BENCH_CHECK(gpu->allocate(params * 4, &p, true));
  BENCH_CHECK(gpu->allocate(params * 4, &m, true));
  BENCH_CHECK(gpu->allocate(params * 4, &v, true));
  BENCH_CHECK(gpu->allocate(params * 4, &g, true));
  BENCH_CHECK(gpu->allocate(params * 2, &w, true));
  const std::vector<size_t> many = split_sizes(params, tensors);
  OptimizerHyper h;
  h.type = OptimizerType::AdamW;
  h.lr = 1e-6f;
  h.weight_decay = 0.01f;
  h.step = 2;

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
        s.grad = g.as<unsigned char>() + offset * (c.grad == DSRT_F32 ? 4 : 2);
        s.grad_dtype = c.grad;
        if (c.working >= 0) {
          s.working = w.as<uint16_t>() + offset;
          s.working_dtype = static_cast<dsrt_dtype>(c.working);
        }
        s.n = n;
        slices.push_back(s);
        offset += n;
      }
      const double secs = best_seconds(iters, [&] {
        BENCH_CHECK(cuda_optimizer_step_many(h, slices.data(), slices.size(), 0.5f, nullptr));
      });
      size_t total = 0;
      for (size_t n : sizes) total += n;
      const double rate = total / secs;
      std::printf("%-32s %-16s %8.3f ms  %7.2f Gparams/s  %.1f B/param  floor %.2f Gparams/s  ratio to floor %.3f",
                  c.name, layout == 0 ? "1 tensor" : (std::to_string(sizes.size()) + " tensors").c_str(), secs * 1e3,
                  rate / 1e9, bytes_per_param, floor_rate / 1e9, rate / floor_rate);
      const double torch_rate = layout == 0 ? torch_flat : torch_many;
      if (c.grad == DSRT_F32 && torch_rate > 0) std::printf("  vs torch fused %.3fx", rate / torch_rate);
      std::printf("\n");
      std::printf("RESULT cuda_adamw grad=%s working=%s layout=%s params_per_s=%.6e floor_ratio=%.4f\n",
                  dtype_name(c.grad), c.working < 0 ? "none" : dtype_name(static_cast<dsrt_dtype>(c.working)),
                  layout == 0 ? "flat" : "many", rate, rate / floor_rate);
    }
  }
  CachingPoolStats stats;
  BENCH_CHECK(cuda_device_pool_stats(*gpu, &stats));
  std::printf("pool: %.1f MiB held, %llu raw allocations, fragmentation %.1f%%\n", stats.bytes_held / 1048576.0,
              static_cast<unsigned long long>(stats.raw_allocations), 100.0 * stats.fragmentation());
  return 0;
}

#endif
