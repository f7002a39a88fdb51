// offload_optimizer.device "cpu" on one rank: the same code path a GPU engine takes (pinned host
// masters and states, a host copy of the reduced gradient partition, the CPU optimizer writing a
// host staging of the working partition that is copied into the device's working copy), bitwise
// equal to the engine without offload at stages 1-3 with fp32, bf16 and fp16 working copies and
// AdamW, Lamb and SGD. The multi-rank version is tests/mpi/mpi_engine_offload_cpu.cpp.
#include <gtest/gtest.h>

#include "engine_offload_cpu_cases.h"

namespace dsrt {
namespace {

using namespace offload_cpu_test;

TEST(EngineOffloadCpu, MatchesNoOffloadBitwise) {
  for (const OffloadCpuCase &c : offload_cpu_cases()) {
    SCOPED_TRACE(Format("stage %d working %s optimizer %d", c.stage, dtype_name(c.working), static_cast<int>(c.optimizer)));
    std::shared_ptr<Comm> comm;
    ASSERT_TRUE(comm_create_local(&comm).ok());
    run_offload_cpu_case(c, comm);
  }
}

}  // namespace
}  // namespace dsrt
