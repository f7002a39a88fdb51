// dsrt-mpi-ranks: 2 3
// offload_optimizer.device "cpu" across ranks: each rank's host masters, states and gradient copy
// give bitwise the weights, working copies and states of the engine without offload, at stages
// 1-3 with fp32, bf16 and fp16 working copies, staged through host buffers as on a GPU and in
// place as on the CPU device (see tests/cpp/engine_offload_cpu_cases.h).
#include <gtest/gtest.h>

#include "../cpp/engine_offload_cpu_cases.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace offload_cpu_test;

std::shared_ptr<Comm> g_world;

TEST(MpiEngineOffloadCpu, MatchesNoOffloadBitwise) {
  for (const OffloadCpuCase &c : offload_cpu_cases()) {
    for (bool staged : {true, false}) {
      SCOPED_TRACE(Format("stage %d working %s optimizer %d staged %d", c.stage, dtype_name(c.working),
                          static_cast<int>(c.optimizer), staged));
      run_offload_cpu_case(c, g_world, staged);
      ASSERT_TRUE(g_world->barrier().ok());
    }
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_engine_offload_cpu", &dsrt::g_world); }
