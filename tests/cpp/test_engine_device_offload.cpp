// offload_optimizer.device "cpu" on one rank: the same code path a GPU engine takes (pinned host
// masters and states, a host copy of the reduced gradient partition, the CPU optimizer writing a
// host staging of the working partition that is copied into the device's working copy; forced
// with set_host_staging_on_cpu) and the CPU device's own path (the optimizer reads the
// accumulator and writes the working copy in place), each bitwise equal to the engine without
// offload at stages 1-3 with fp32, bf16 and fp16 working copies and AdamW, Lamb and SGD. The multi-rank version is tests/mpi/mpi_engine_offload_cpu.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "engine_offload_cpu_cases.h"

namespace dsrt {
namespace {

using namespace offload_cpu_test;

TEST(EngineOffloadCpu, MatchesNoOffloadBitwise) {
  for (const OffloadCpuCase &c : offload_cpu_cases()) {
    for (bool staged : {true, false}) {
      SCOPED_TRACE(Format("stage %d working %s optimizer %d staged %d", c.stage, dtype_name(c.working),
                          static_cast<int>(c.optimizer), staged));
      std::shared_ptr<Comm> comm;
      ASSERT_TRUE(comm_create_local(&comm).ok());
      run_offload_cpu_case(c, comm, staged);
    }
  }
}

// Staging is a choice made before build.
TEST(EngineOffloadCpu, HostStagingIsSetBeforeBuild) {
  TrainConfig config = base_config(2);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  std::shared_ptr<Comm> comm;
  ASSERT_TRUE(comm_create_local(&comm).ok());
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(make_engine(config, comm, offload_cpu_shapes(), &engine).ok());
  if (optimizers_differ(*engine))  // a GPU engine stages the gradient partition through host memory
    EXPECT_NE(engine->host_grad_partition(), nullptr);
  else
    EXPECT_EQ(engine->host_grad_partition(), nullptr) << "the CPU device reads the accumulator in place";
  const Status s = engine->set_host_staging_on_cpu(true);
  EXPECT_EQ(s.code(), DSRT_ERR_STATE);
  EXPECT_NE(s.message().find("before dsrt_engine_build"), std::string::npos) << s.message();
}

// Staged as on a GPU: the reduced gradients reach host memory bucket by bucket during the window's last micro-step
// (stages 2-3), not in one copy at the boundary; stage 1 reduces at the boundary, so its copy
// happens inside step. Earlier micro-steps of the window copy nothing.
TEST(EngineOffloadCpu, GradientsReachHostAsBucketsComplete) {
  for (int stage : {1, 2, 3}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(Format("stage %d overlap_comm %d", stage, overlap));
      TrainConfig config = base_config(stage);
      config.gradient_accumulation_steps = 2;
      config.zero.overlap_comm = overlap;
      config.zero.offload_optimizer.device = OffloadDevice::Cpu;
      std::shared_ptr<Comm> comm;
      ASSERT_TRUE(comm_create_local(&comm).ok());
      std::unique_ptr<Engine> engine;
      Status s = make_engine(config, comm, offload_cpu_shapes(), &engine, true,
                             [](Engine &e) { return e.set_host_staging_on_cpu(true); });
      ASSERT_TRUE(s.ok()) << s.message();
      const size_t n = static_cast<size_t>(engine->partitioning().partition_elems());
      const float *host = engine->host_grad_partition();
      ASSERT_NE(host, nullptr);
      // The reducer's partition lives on the engine's device: read it through the device.
      std::vector<float> reduced(n);
      auto reduced_partition = [&]() -> const float * {
        const Status copied = testing_util::copy_through_device(*engine, reduced.data(),
                                                                engine->grad_reducer().grad_partition(), n * sizeof(float));
        EXPECT_TRUE(copied.ok()) << copied.message();
        return reduced.data();
      };
      auto nonzero = [&] {
        size_t count = 0;
        for (size_t i = 0; i < n; ++i) count += host[i] != 0.0f;
        return count;
      };

      host_micro_step(*engine, 1);
      EXPECT_EQ(nonzero(), 0u) << "the first micro-step of the window copied gradients to the host";
      ASSERT_TRUE(engine->step(nullptr).ok());
      EXPECT_EQ(nonzero(), 0u);

      host_micro_step(*engine, 2);
      const size_t before_step = nonzero();
      if (stage == 1) {
        EXPECT_EQ(before_step, 0u);
      } else if (!overlap) {
        // Every bucket completed as its last tensor was signalled: the host copy is whole.
        EXPECT_GT(before_step, n / 2);
        EXPECT_EQ(std::memcmp(host, reduced_partition(), n * sizeof(float)), 0);
      } else {
        // Overlapped: buckets still in flight complete inside step; the earlier ones are there.
        EXPECT_GT(before_step, 0u);
      }
      ASSERT_TRUE(engine->step(nullptr).ok());
      EXPECT_GT(nonzero(), n / 2);
      EXPECT_EQ(std::memcmp(host, reduced_partition(), n * sizeof(float)), 0);
      EXPECT_EQ(engine->counters().applied_steps, 1);
    }
  }
}

}  // namespace
}  // namespace dsrt
