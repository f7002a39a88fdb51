// Stage-3 NVMe optimizer offload with the gradient partition swapped to NVMe (ZeRO-Infinity) against
// the same engine keeping the gradient partition in host memory (the route before gradient
// swapping): peak RSS growth of each in its own child process, and the time of one training
// iteration (backward's gradient hand-over and reduction, then the boundary step), in the same run on
// the same disk. Prints the host memory saved against the gradient partition's size and the time ratio.
//   bench_nvme_grads FOLDER [PARAMS_MILLIONS] [STEPS] [SUB_GROUP_MILLIONS]
// FOLDER: a folder on the drive to swap to (the swap files are removed at the end).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/engine.h"
#include "util/half.h"

namespace dsrt {
namespace {

double status_mib(const char *key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, std::strlen(key), key) == 0) return std::stod(line.substr(std::strlen(key) + 1)) / 1024.0;
  return -1;
}

struct Measure {
  double peak_growth_mib = -1;
  double seconds_per_iteration = 0;
  double grad_partition_mib = 0;
};

Status run(bool swap, const std::string &folder, int64_t params, int steps, int64_t sub_group, Measure *out) {
  const double before = status_mib("VmRSS:");
  TrainConfig c;
  c.zero.stage = 3;
  c.bf16_enabled = true;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-4;
  c.zero.reduce_bucket_size = 1 << 22;
  c.zero.allgather_bucket_size = 1 << 22;
  c.zero.stage3_param_persistence_threshold = 10000;
  c.zero.sub_group_size = sub_group;
  c.zero.offload_optimizer.device = OffloadDevice::Nvme;
  c.zero.offload_optimizer.nvme_path = folder;
  c.zero.offload_optimizer.buffer_count = 4;
  c.zero.offload_optimizer.pipeline_read = c.zero.offload_optimizer.pipeline_write = true;
  std::shared_ptr<Comm> comm;
  DSRT_RETURN_IF_ERROR(comm_create_local(&comm));
  std::unique_ptr<Engine> e;
  DSRT_RETURN_IF_ERROR(Engine::create(c, comm, &e));
  DSRT_RETURN_IF_ERROR(e->set_nvme_gradient_swap(swap));
  const int64_t tensor = 1 << 20;
  for (int64_t t = 0; t * tensor < params; ++t)
    DSRT_RETURN_IF_ERROR(e->add_param("w" + std::to_string(t), &tensor, 1, nullptr, nullptr));
  DSRT_RETURN_IF_ERROR(e->build());
  std::vector<double> times;
  for (int s = 0; s < steps + 1; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t t = e->num_tensors(); t-- > 0;) {
      DSRT_RETURN_IF_ERROR(e->acquire(t, nullptr, nullptr));
      void *g = nullptr;
      dsrt_dtype dtype;
      DSRT_RETURN_IF_ERROR(e->grad(t, &g, &dtype));
      for (int64_t i = 0; i < tensor; ++i) from_float(g, dtype, static_cast<size_t>(i), 1e-3f * static_cast<float>((i + s + t) % 17));
      DSRT_RETURN_IF_ERROR(e->grad_ready(t));
      DSRT_RETURN_IF_ERROR(e->release(t));
    }
    DSRT_RETURN_IF_ERROR(e->step(nullptr));
    if (s > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  out->seconds_per_iteration = times[times.size() / 2];
  out->peak_growth_mib = status_mib("VmHWM:") - before;
  out->grad_partition_mib = static_cast<double>(e->partitioning().partition_elems()) * 4 / (1 << 20);
  return Status::Ok();
}

// Runs one configuration in a child process (peak RSS is per process).
Measure in_child(bool swap, const std::string &folder, int64_t params, int steps, int64_t sub_group) {
  int fds[2];
  Measure m;
  if (pipe(fds) != 0) return m;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Measure r;
    const Status s = run(swap, folder, params, steps, sub_group, &r);
    if (!s.ok()) std::fprintf(stderr, "bench_nvme_grads: %s\n", s.message().c_str());
    if (!s.ok()) r.peak_growth_mib = -1;
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  if (read(fds[0], &m, sizeof m) != sizeof m) m.peak_growth_mib = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return m;
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_nvme_grads FOLDER [PARAMS_MILLIONS] [STEPS] [SUB_GROUP_MILLIONS]\n");
    return 2;
  }
  const std::string folder = argv[1];
  const int64_t params = static_cast<int64_t>((argc > 2 ? std::atof(argv[2]) : 16.0) * 1e6);
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const int64_t sub_group = static_cast<int64_t>((argc > 4 ? std::atof(argv[4]) : 4.0) * 1e6);
  std::printf("stage 3, bf16, AdamW, %lld parameters, sub_group_size %lld, 4 buffers, pipeline on; median of %d "
              "iterations\n", static_cast<long long>(params), static_cast<long long>(sub_group), steps);
  for (int round = 0; round < 2; ++round) {
    const dsrt::Measure memory = dsrt::in_child(false, folder, params, steps, sub_group);
    const dsrt::Measure swapped = dsrt::in_child(true, folder, params, steps, sub_group);
    if (memory.peak_growth_mib < 0 || swapped.peak_growth_mib < 0) return 1;
    std::printf("round %d: gradients in host memory: peak RSS +%.1f MiB, %.3f s/iteration; on NVMe: peak RSS +%.1f MiB, "
                "%.3f s/iteration\n", round + 1, memory.peak_growth_mib, memory.seconds_per_iteration,
                swapped.peak_growth_mib, swapped.seconds_per_iteration);
    std::printf("round %d: host memory saved %.1f MiB = %.2f x the fp32 gradient partition (%.1f MiB); "
                "time NVMe/host-memory gradients %.2f\n", round + 1, memory.peak_growth_mib - swapped.peak_growth_mib,
                (memory.peak_growth_mib - swapped.peak_growth_mib) / swapped.grad_partition_mib,
                swapped.grad_partition_mib, swapped.seconds_per_iteration / memory.seconds_per_iteration);
  }
  return 0;
}
