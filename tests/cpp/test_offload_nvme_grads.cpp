// Stage 3 with offload_optimizer "nvme" swaps the gradient partition too (ZeRO-Infinity): no
// partition-sized gradient buffer in memory (dsrt_engine_memory counts the gradients on NVMe), the
// gradient swap files are written during backward (read back to accumulate over micro-steps) and
// read by the boundary's norm pass and the optimizer pass, and the weights, gradient norms and
// skips are bitwise those of the in-memory engine: accumulation over 1-3 micro-steps, fp16 with an
// overflow skip, clipping on and off, several sub-group cuts and buffer counts. A failed gradient
// write fails the boundary step with DSRT_ERR_IO naming the file, and the window is dropped;
// `dsrt estimate-memory` agrees with dsrt_engine_memory.
// The GPU engine's staged route (forced on the CPU device) swaps them too, bitwise the same.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "aio/aio_testing.h"
#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "offload_test_util.h"
#include "optim/cpu_optimizer.h"
#include "optim/sum_squares_stream.h"

namespace dsrt {
namespace {

using namespace offload_test;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {1, 1}, {129}};

// One micro-step as host_micro_step, but an inf in tensor 2's gradient when `poison` (fp16 overflow).
Status micro_step(Engine &e, uint32_t seed, bool poison) {
  for (size_t t = e.num_tensors(); t-- > 0;) {
    DSRT_RETURN_IF_ERROR(e.acquire(t, nullptr, nullptr));
    std::vector<float> g = gaussian(seed * 7919u + static_cast<uint32_t>(e.rank()) * 131u + static_cast<uint32_t>(t),
                                    static_cast<size_t>(e.tensor_numel(t)), 0.1f);
    if (poison && t == 2) g[5] = std::numeric_limits<float>::infinity();
    DSRT_RETURN_IF_ERROR(testing_util::update_grad(e, t, [&g](void *buffer, dsrt_dtype dtype) {
      for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
    }));
    DSRT_RETURN_IF_ERROR(e.grad_ready(t));
    DSRT_RETURN_IF_ERROR(e.release(t));
  }
  return Status::Ok();
}

// `steps` boundaries of gas micro-steps each; boundary 2's last micro-step overflows when poison.
std::vector<dsrt_step_result> run(Engine &e, int steps, int gas, bool poison) {
  std::vector<dsrt_step_result> results;
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < gas; ++m) {
      Status st = micro_step(e, static_cast<uint32_t>(1 + s * gas + m), poison && s == 2 && m == gas - 1);
      EXPECT_TRUE(st.ok()) << st.message();
      dsrt_step_result r;
      std::memset(&r, 0, sizeof r);
      r.struct_size = sizeof r;
      st = e.step(&r);
      EXPECT_TRUE(st.ok()) << st.message();
      if (r.boundary) results.push_back(r);
    }
  }
  return results;
}

size_t grad_files_in(const std::string &folder) {
  size_t n = 0;
  if (DIR *dir = opendir(folder.c_str())) {
    while (dirent *entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.find(".grad.") != std::string::npos && name.size() > 4 && name.compare(name.size() - 4, 4, ".swp") == 0) ++n;
    }
    closedir(dir);
  }
  return n;
}

dsrt_memory_stats memory_of(Engine &e) {
  dsrt_memory_stats mem;
  std::memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  EXPECT_TRUE(e.memory(&mem).ok());
  return mem;
}

struct Case {
  int64_t sub_group;
  int64_t buffers;
  bool pipeline;
  int gas;
  bool fp16;
  double clipping;
};

// staged: the GPU engine's route, forced on the CPU device (set_host_staging_on_cpu): the reducer
// sums the window in its (device) accumulator and the boundary copies it sub-group by sub-group
// into the swap files; no host gradient partition.
void check_bitwise(bool staged) {
  const Case cases[] = {{700, 2, false, 1, false, 1.0}, {700, 4, true, 2, false, 1.0}, {0, 1, false, 3, false, 0.0},
                        {1 << 20, 2, true, 2, false, 1.0}, {300, 3, true, 2, true, 1.0}, {700, 2, false, 1, true, 0.0},
                        {2500, 2, true, 3, true, 0.5}};
  for (const Case &c : cases) {
    SCOPED_TRACE(Format("sub_group %lld buffers %lld pipeline %d gas %d fp16 %d clipping %g",
                        static_cast<long long>(c.sub_group), static_cast<long long>(c.buffers), c.pipeline, c.gas, c.fp16,
                        c.clipping));
    TempFolder folder;
    TrainConfig config = base_config(3);
    config.gradient_accumulation_steps = c.gas;
    // fp16: the host's gradients count as loss-scaled, so their norm is 2^-16 of fp32's.
    const double clipping = c.fp16 ? c.clipping * 1e-5 : c.clipping;
    config.gradient_clipping = clipping;
    config.fp16.enabled = c.fp16;
    std::unique_ptr<Engine> reference, offloaded;
    Status s = make_engine(config, local_comm(), kShapes, &reference);
    ASSERT_TRUE(s.ok()) << s.message();
    set_nvme(&config, folder.path, c.sub_group, c.buffers, c.pipeline);
    s = make_engine(config, local_comm(), kShapes, &offloaded, true,
                    [staged](Engine &e) { return e.set_host_staging_on_cpu(staged); });
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NE(offloaded->nvme_grad_swap(), nullptr);
    const uint64_t part_bytes = static_cast<uint64_t>(offloaded->partitioning().partition_elems()) * 4;
    // No gradient partition in host memory; on the CPU route not even the reducer's accumulator,
    // on the staged route only the (device) accumulator.
    EXPECT_EQ(offloaded->host_grad_partition(), nullptr);
    EXPECT_EQ(offloaded->grad_reducer().grad_partition() != nullptr, staged);
    EXPECT_EQ(offloaded->grad_reducer().accumulator_bytes(), staged ? part_bytes : 0u);
    const size_t groups = offloaded->nvme_grad_swap()->sub_groups();
    EXPECT_EQ(grad_files_in(offloaded->nvme_swapper()->store().folder()), groups);

    const std::vector<dsrt_step_result> want = run(*reference, 5, c.gas, c.fp16);
    offloaded->nvme_grad_swap()->reset_stats();
    const std::vector<dsrt_step_result> got = run(*offloaded, 5, c.gas, c.fp16);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got[i].grad_norm, sizeof(double)), 0)
          << "step " << i << ": norm " << want[i].grad_norm << " vs " << got[i].grad_norm;
      EXPECT_EQ(want[i].overflow, got[i].overflow) << "step " << i;
      EXPECT_EQ(want[i].loss_scale, got[i].loss_scale) << "step " << i;
    }
    if (c.fp16) {
      EXPECT_EQ(got[2].overflow, 1);  // the poisoned boundary is skipped
      EXPECT_EQ(offloaded->counters().skipped_steps, reference->counters().skipped_steps);
    }
    if (c.clipping > 0) {
      EXPECT_GT(got[0].grad_norm, clipping) << "clipping must act in this test";
    }
    expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    expect_same_working_copies(*reference, *offloaded);

    // The swap files were written during backward (and read back to accumulate with gas > 1),
    // or once per boundary on the staged route, and read by the norm pass and the optimizer pass.
    const GradSwapStats &io = offloaded->nvme_grad_swap()->stats();
    if (staged) {
      EXPECT_EQ(io.bytes_written, 5u * part_bytes);
      EXPECT_EQ(io.bytes_read, 0u);
    } else {
      EXPECT_GE(io.bytes_written, 5u * c.gas * part_bytes);
      if (c.gas > 1) {
        EXPECT_GE(io.bytes_read, 5u * (c.gas - 1) * part_bytes);
      }
    }
    const SubGroupPipelineStats &norm = offloaded->last_nvme_norm_pass();
    EXPECT_EQ(norm.bytes_read, part_bytes);
    EXPECT_EQ(norm.bytes_written, 0u);
    EXPECT_EQ(norm.sub_groups, groups);
    const SubGroupPipelineStats &opt = offloaded->last_nvme_step();
    EXPECT_EQ(opt.bytes_read, 4 * part_bytes);     // master, two states, gradient
    EXPECT_EQ(opt.bytes_written, 3 * part_bytes);  // the gradient is not written back
    EXPECT_LE(opt.peak_buffers, static_cast<size_t>(c.buffers));

    const dsrt_memory_stats mem = memory_of(*offloaded);
    EXPECT_EQ(mem.gradients[DSRT_LOC_NVME], part_bytes);
    EXPECT_EQ(mem.gradients[DSRT_LOC_HOST], 0u);
    EXPECT_EQ(mem.gradients[DSRT_LOC_DEVICE], staged ? part_bytes : 0u);
    const dsrt_memory_stats ref_mem = memory_of(*reference);
    EXPECT_EQ(ref_mem.gradients[DSRT_LOC_DEVICE], part_bytes);  // what the offloaded engine saves

    offloaded.reset();
    EXPECT_EQ(entries_in(folder.path), 0u) << "the swap folder is removed on destroy";
  }
}

TEST(OffloadNvmeGrads, BitwiseTheInMemoryEngineWithTheGradientsOnNvme) { check_bitwise(false); }

TEST(OffloadNvmeGrads, StagedRouteBitwiseTheInMemoryEngine) { check_bitwise(true); }

// Stage 1-2 and GPU-less stage 3 without NVMe keep the gradient partition in memory.
TEST(OffloadNvmeGrads, OnlyStage3SwapsGradients) {
  for (int stage : {1, 2}) {
    TempFolder folder;
    TrainConfig config = base_config(stage);
    set_nvme(&config, folder.path, 700, 2, false);
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &e).ok());
    EXPECT_EQ(e->nvme_grad_swap(), nullptr);
    EXPECT_NE(e->grad_reducer().grad_partition(), nullptr);
    EXPECT_EQ(memory_of(*e).gradients[DSRT_LOC_NVME], 0u);
  }
}

// Gradients are not checkpointed: a save between windows and a load into a fresh engine resume
// bitwise (accumulation 2, fp16 with a skip after the resume), and the loaded engine's gradient
// files start the next window from zero.
TEST(OffloadNvmeGrads, CheckpointResumesBitwise) {
  TempFolder swap_a, swap_b;
  const std::string dir = std::string(DSRT_BINARY_DIR) + "/ckpt_scratch/nvme_grads_" + std::to_string(::getpid());
  ASSERT_TRUE(remove_tree(dir).ok());
  ASSERT_TRUE(make_directories(dir).ok());
  TrainConfig config = base_config(3);
  config.gradient_accumulation_steps = 2;
  config.fp16.enabled = true;
  config.gradient_clipping = 1e-5;
  set_nvme(&config, swap_a.path, 700, 2, true);
  std::unique_ptr<Engine> a, b;
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &a).ok());
  run(*a, 2, 2, false);
  Status s = save_checkpoint(*a, dir, "");
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<dsrt_step_result> want = run(*a, 4, 2, true);  // boundary 2 of these overflows

  set_nvme(&config, swap_b.path, 700, 2, true);
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &b, false).ok());
  s = load_checkpoint(*b, dir, "");
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<dsrt_step_result> got = run(*b, 4, 2, true);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got[i].grad_norm, sizeof(double)), 0) << "step " << i;
    EXPECT_EQ(want[i].overflow, got[i].overflow) << "step " << i;
  }
  EXPECT_EQ(got[2].overflow, 1);
  expect_bitwise_equal(read_all(*a), read_all(*b));
  EXPECT_TRUE(remove_tree(dir).ok());
}

// A gradient write-back that fails (a full disk) during backward: backward and the window's first
// step() go on, and the boundary step returns DSRT_ERR_IO naming the gradient swap file and the
// errno; the window's gradients are dropped, nothing is applied, and the engine goes on bitwise as
// one that never saw the window.
TEST(OffloadNvmeGrads, FailedGradientWriteNamesTheFile) {
  for (int nth : {1, 3}) {
    SCOPED_TRACE(Format("request %d fails", nth));
    TempFolder folder, clean_folder;
    TrainConfig config = base_config(3);
    config.gradient_accumulation_steps = 2;
    set_nvme(&config, folder.path, 700, 2, true);
    std::unique_ptr<Engine> e, clean;
    ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &e).ok());
    set_nvme(&config, clean_folder.path, 700, 2, true);
    ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &clean).ok());
    run(*e, 1, 2, false);
    run(*clean, 1, 2, false);
    aio_testing_fail_request(e->nvme_swapper()->aio(), static_cast<uint64_t>(nth), ENOSPC);
    Status failure;
    for (uint32_t seed : {50u, 51u}) {
      const Status backward = micro_step(*e, seed, false);
      ASSERT_TRUE(backward.ok()) << backward.message();
      failure = e->step(nullptr);
      if (seed == 50u) {
        ASSERT_TRUE(failure.ok()) << failure.message();
      }
    }
    ASSERT_EQ(failure.code(), DSRT_ERR_IO) << failure.message();
    EXPECT_NE(failure.message().find(".grad."), std::string::npos) << failure.message();
    EXPECT_NE(failure.message().find(".swp"), std::string::npos) << failure.message();
    EXPECT_NE(failure.message().find(folder.path), std::string::npos) << failure.message();
    EXPECT_NE(failure.message().find("No space left on device"), std::string::npos) << failure.message();
    EXPECT_EQ(e->counters().applied_steps, clean->counters().applied_steps);
    EXPECT_EQ(e->counters().global_step, clean->counters().global_step);
    // The window was dropped: the next ones are those of an engine that never saw it.
    const std::vector<dsrt_step_result> want = run(*clean, 2, 2, false), got = run(*e, 2, 2, false);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got[i].grad_norm, sizeof(double)), 0) << "step " << i;
      EXPECT_EQ(want[i].global_step, got[i].global_step) << "step " << i;
    }
    expect_bitwise_equal(read_all(*clean), read_all(*e));
  }
}

// A failed read in the boundary's norm pass fails the step, naming the file; nothing is applied.
TEST(OffloadNvmeGrads, FailedNormPassReadFailsTheStep) {
  TempFolder folder;
  TrainConfig config = base_config(3);
  set_nvme(&config, folder.path, 700, 2, false);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &e).ok());
  ASSERT_TRUE(micro_step(*e, 1, false).ok());
  ASSERT_TRUE(e->nvme_grad_swap()->flush().ok());
  // The micro-step's write-backs finished in step()'s finish_micro_step; the next request is the
  // norm pass's first read.
  aio_testing_fail_request(e->nvme_swapper()->aio(), 1, EIO);
  Status s = e->step(nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), DSRT_ERR_IO) << s.message();
  EXPECT_NE(s.message().find(".swp"), std::string::npos) << s.message();
  EXPECT_EQ(e->counters().applied_steps, 0);
}

// The stream gives cpu_sum_squares' bits for any cut of the array into pieces.
TEST(OffloadNvmeGrads, SumSquaresStreamIsBitwiseTheWholeArrayCall) {
  for (size_t n : {size_t(1), size_t(100), size_t(40000), size_t(300001)}) {
    std::vector<float> x = gaussian(static_cast<uint32_t>(n), n, 3.0f);
    bool bad_whole = true;
    const double whole = cpu_sum_squares(x.data(), DSRT_F32, n, 0.37f, &bad_whole);
    for (size_t piece : {size_t(1), size_t(63), size_t(4096), size_t(33333), n}) {
      SumSquaresStream stream(n);
      for (size_t at = 0; at < n; at += piece) stream.add(x.data() + at, std::min(piece, n - at));
      bool bad = true;
      const double got = stream.finish(0.37f, &bad);
      EXPECT_EQ(std::memcmp(&whole, &got, sizeof got), 0) << "n " << n << " piece " << piece << ": " << whole << " vs " << got;
      EXPECT_EQ(bad, bad_whole);
    }
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    SumSquaresStream stream(n);
    stream.add(x.data(), n);
    bool bad = false;
    (void)stream.finish(1.0f, &bad);
    EXPECT_TRUE(bad);
  }
}

// `dsrt estimate-memory` counts 16 bytes per parameter on NVMe for stage 3 with the optimizer on
// NVMe (4 master, 8 Adam states, 4 gradient), as dsrt_engine_memory reports them (padding aside).
TEST(OffloadNvmeGrads, EstimatorCountsTheGradientsOnNvme) {
  int64_t params = 0, largest = 0;
  for (const auto &shape : kShapes) {
    params += numel_of(shape);
    largest = std::max(largest, numel_of(shape));
  }
  const std::string binary = std::string(DSRT_BINARY_DIR) + "/bin/dsrt";
  struct stat info;
  ASSERT_EQ(stat(binary.c_str(), &info), 0) << "missing " << binary << " (build the dsrt_cli target)";
  const std::string command = binary + Format(" estimate-memory --json --params %lld --stage 3 --largest-layer-params %lld "
                                              "--offload-optimizer nvme --offload-param none 2>&1",
                                              static_cast<long long>(params), static_cast<long long>(largest));
  std::string output;
  FILE *pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << output;
  const size_t at = output.find("\"nvme_bytes\": ");
  ASSERT_NE(at, std::string::npos) << output;
  const double estimated = std::strtod(output.c_str() + at + 14, nullptr);
  EXPECT_EQ(estimated, 16.0 * double(params)) << output;

  TempFolder folder;
  TrainConfig config = base_config(3);
  set_nvme(&config, folder.path, 1000, 2, false);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(make_engine(config, local_comm(), kShapes, &e).ok());
  const dsrt_memory_stats mem = memory_of(*e);
  const double measured = double(mem.master_params[DSRT_LOC_NVME] + mem.optimizer_states[DSRT_LOC_NVME] +
                                 mem.gradients[DSRT_LOC_NVME]);
  const double padding = double(e->partitioning().partition_elems() - params) * 16.0;
  EXPECT_GE(measured, estimated);
  EXPECT_LE(measured, estimated + padding);
  EXPECT_EQ(double(mem.gradients[DSRT_LOC_NVME]), double(e->partitioning().partition_elems()) * 4.0);
}

}  // namespace
}  // namespace dsrt
