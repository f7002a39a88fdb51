// Resident memory of NVMe optimizer offload: a model whose fp32 masters and Adam states are many
// times the pipeline buffers is trained in a child process with and without offload; the offloaded
// child's peak RSS growth (VmHWM minus VmRSS before the engine) stays well under the states' size,
// and below the in-memory child's by most of it. A model twice as large grows the offloaded peak by
// the gradient partition and working copy it adds (what stays resident), not by its states.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

double status_mib(const char *key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, std::strlen(key), key) == 0) return std::stod(line.substr(std::strlen(key) + 1)) / 1024.0;
  return -1;
}

constexpr int64_t kTensorElems = 1 << 19;
constexpr int kTensors = 8;
constexpr double kStatesMib = 3.0 * 4 * kTensorElems * kTensors / (1 << 20);  // master + m + v: 48 MiB
// Resident per parameter with the optimizer on NVMe: the fp32 gradient partition and the bf16 working copy.
constexpr double kResidentBytesPerParam = 4 + 2;

// Peak RSS growth in MiB of a child that builds and trains a model of `tensors` tensors; negative on failure.
// stage 3 with grad_swap false keeps the gradient partition in memory (Engine::set_nvme_gradient_swap).
double child_peak_growth(bool nvme, const std::string &folder, int tensors = kTensors, int stage = 1,
                         bool grad_swap = true) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double growth = -1;
    const double before = status_mib("VmRSS:");
    {
      TrainConfig config = base_config(stage);
      config.bf16_enabled = true;
      config.zero.reduce_bucket_size = 1 << 18;
      config.zero.allgather_bucket_size = 1 << 18;
      if (nvme) set_nvme(&config, folder, 1 << 17, 4, true);  // 4 buffers of 1.5 MiB
      std::shared_ptr<Comm> comm;
      std::unique_ptr<Engine> engine;
      std::vector<std::vector<int64_t>> shapes(static_cast<size_t>(tensors), std::vector<int64_t>{kTensorElems});
      if (comm_create_local(&comm).ok() &&
          make_engine(config, comm, shapes, &engine, false,
                      [grad_swap](Engine &e) { return e.set_nvme_gradient_swap(grad_swap); }).ok()) {
        train(*engine, 2);
        if (!::testing::Test::HasFailure()) growth = status_mib("VmHWM:") - before;
      }
    }
    if (write(fds[1], &growth, sizeof growth) != sizeof growth) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  double growth = -1;
  if (read(fds[0], &growth, sizeof growth) != sizeof growth) growth = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return growth;
}

#if defined(__SANITIZE_ADDRESS__)
#define DSRT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSRT_TEST_ASAN 1
#endif
#endif

TEST(OffloadMemory, PeakRssStaysWellUnderTheOffloadedStates) {
#ifdef DSRT_TEST_ASAN
  GTEST_SKIP() << "peak RSS is not meaningful under AddressSanitizer (shadow memory, quarantine of freed blocks); "
                  "the release build runs this check";
#endif
  TempFolder folder;
  const double in_memory = child_peak_growth(false, folder.path);
  const double offloaded = child_peak_growth(true, folder.path);
  std::printf("optimizer states %.1f MiB; peak RSS growth: in memory %.1f MiB, NVMe offload %.1f MiB\n", kStatesMib,
              in_memory, offloaded);
  ASSERT_GT(in_memory, 0);
  ASSERT_GT(offloaded, 0);
  // What stays resident with offload: fp32 gradient partition (16 MiB), bf16 working copy (8 MiB),
  // the 4 pipeline buffers (6 MiB) -- none of the 48 MiB of states.
  EXPECT_LT(offloaded, 0.8 * kStatesMib);
  EXPECT_GT(in_memory - offloaded, 0.75 * kStatesMib);

  // Twice the parameters: 48 MiB more states on NVMe, 24 MiB more gradients and working copy in memory.
  const double doubled = child_peak_growth(true, folder.path, 2 * kTensors);
  const double added_resident = kResidentBytesPerParam * kTensorElems * kTensors / (1 << 20);
  std::printf("twice the parameters with NVMe offload: peak RSS growth %.1f MiB (+%.1f; gradients and working "
              "copy add %.1f, states %.1f)\n", doubled, doubled - offloaded, added_resident, kStatesMib);
  ASSERT_GT(doubled, 0);
  EXPECT_LT(doubled - offloaded, added_resident + 0.25 * kStatesMib);
}

// Stage 3 swaps the gradient partition too: the peak RSS with it on NVMe is lower than with it in
// host memory by most of the fp32 partition (16 MiB here), the rest of the engine being equal.
TEST(OffloadMemory, Stage3GradientPartitionLeavesHostMemory) {
#ifdef DSRT_TEST_ASAN
  GTEST_SKIP() << "peak RSS is not meaningful under AddressSanitizer; the release build runs this check";
#endif
  TempFolder folder;
  const double in_memory = child_peak_growth(true, folder.path, kTensors, 3, false);
  const double swapped = child_peak_growth(true, folder.path, kTensors, 3, true);
  const double gradients = 4.0 * kTensorElems * kTensors / (1 << 20);
  std::printf("stage 3, optimizer on NVMe: peak RSS growth with the gradients in host memory %.1f MiB, on NVMe %.1f "
              "MiB (fp32 gradient partition %.1f MiB)\n", in_memory, swapped, gradients);
  ASSERT_GT(in_memory, 0);
  ASSERT_GT(swapped, 0);
  EXPECT_GT(in_memory - swapped, 0.6 * gradients);  // the swap buffers grow by their gradient arrays
}

}  // namespace
}  // namespace dsrt
