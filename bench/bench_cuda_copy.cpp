// bench_cuda_copy.cpp -- host<->device copy throughput of dsrt's CUDA device (pinned buffers from
// Device::allocate_pinned, Device::copy on a dsrt stream) against cudaMemcpy's own on the same
// bytes and the same buffers, measured in the same run. This is the path ZeRO-Offload's gradient
// partitions (device -> host) and updated 16-bit partitions (host -> device) take.
//
// Printed per size and direction: GB/s of cudaMemcpy (pinned, synchronous: the peer), of dsrt's
// Device::copy, and their ratio (goal: at least 0.9); also cudaMemcpy from pageable memory, the
// rate an offload without pinned buffers would get.
//
//   bench_cuda_copy [--sizes-mb 1,16,256] [--iters K] [--device N]
#include <cstdio>

#ifndef DSRT_HAVE_CUDA

int main() {
  std::printf("CUDA not built: bench_cuda_copy needs a build with -DDSRT_CUDA=ON\n");
  return 0;
}

#else

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_cuda_check.h"
#include "device/cuda_device.h"

namespace {

using namespace dsrt;


double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best wall time of fn() over iters runs after one warm-up; fn must return only when its copy is
// complete (both measured paths synchronize), so host timing sees the whole transfer.
template <class Fn>
double best_seconds(int iters, Fn &&fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const double start = now_seconds();
    fn();
    best = std::min(best, now_seconds() - start);
  }
  return best;
}

std::vector<size_t> parse_sizes(const std::string &list) {
  std::vector<size_t> sizes;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) sizes.push_back(static_cast<size_t>(std::strtoull(item.c_str(), nullptr, 10)) << 20);
  return sizes;
}

}  // namespace

int main(int argc, char **argv) {
  std::string sizes_mb = "1,16,256";
  int iters = 20;
  int index = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes-mb") sizes_mb = argv[i + 1];
    else if (a == "--iters") iters = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--device") index = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s; usage: bench_cuda_copy [--sizes-mb 1,16,256] [--iters K] [--device N]\n",
                   a.c_str());
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: bench_cuda_copy needs a GPU\n");
    return 0;
  }
  std::unique_ptr<Device> device;
  BENCH_CHECK(device_create_cuda(index, &device));
  DeviceStream stream = nullptr;
  BENCH_CHECK(device->create_stream(&stream));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, index));
  std::printf("GPU %d: %s; best of %d copies per figure\n", index, prop.name, iters);
  std::printf("%10s %6s %14s %14s %8s %16s\n", "size", "dir", "cudaMemcpy", "dsrt copy", "ratio", "pageable memcpy");

  double worst_ratio = 1e30;
  for (size_t bytes : parse_sizes(sizes_mb)) {
    DeviceBuffer pinned, on_device;
    BENCH_CHECK(device->allocate_pinned(bytes, &pinned));
    BENCH_CHECK(device->allocate(bytes, &on_device, false));
    std::vector<unsigned char> pageable(bytes);
    for (size_t i = 0; i < bytes; i += 4096) static_cast<unsigned char *>(pinned.data())[i] = static_cast<unsigned char>(i);
    std::memcpy(pageable.data(), pinned.data(), bytes);

    for (int dir = 0; dir < 2; ++dir) {
      const bool to_device = dir == 0;
      void *dst = to_device ? on_device.data() : pinned.data();
      const void *src = to_device ? pinned.data() : on_device.data();
      const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
      const double peer = best_seconds(iters, [&] { BENCH_CUDA(cudaMemcpy(dst, src, bytes, kind)); });
      const double ours = best_seconds(iters, [&] {
        BENCH_CHECK(device->copy(dst, src, bytes, stream));
        BENCH_CHECK(device->synchronize(stream));
      });
      void *pageable_dst = to_device ? on_device.data() : static_cast<void *>(pageable.data());
      const void *pageable_src = to_device ? static_cast<const void *>(pageable.data()) : on_device.data();
      const double slow = best_seconds(iters, [&] { BENCH_CUDA(cudaMemcpy(pageable_dst, pageable_src, bytes, kind)); });
      const double gb = static_cast<double>(bytes) / 1e9;
      const double ratio = peer / ours;
      worst_ratio = std::min(worst_ratio, ratio);
      std::printf("%8zuMB %6s %10.2f GB/s %10.2f GB/s %8.3f %12.2f GB/s\n", bytes >> 20, to_device ? "H2D" : "D2H",
                  gb / peer, gb / ours, ratio, gb / slow);
    }
  }
  std::printf("RESULT cuda_copy worst_ratio=%.3f (goal >= 0.9)\n", worst_ratio);
  BENCH_CHECK(device->destroy_stream(stream));
  return 0;
}

#endif
