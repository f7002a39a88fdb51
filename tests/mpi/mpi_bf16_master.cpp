// dsrt-mpi-ranks: 1 2
// DeepSpeed's lower-memory bf16 mode across ranks: bf16 masters (and bf16 optimizer states)
// against the float64 AdamW recomputation of tests/cpp/bf16_master_cases.h at stages 1-3, with
// the optimizer on the device and offloaded to the CPU; each rank checks its own partition.
#include <gtest/gtest.h>

#include "../cpp/bf16_master_cases.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace bf16_master_test;

std::shared_ptr<Comm> g_world;

TEST(MpiBf16Master, MatchesFloat64Reference) {
  for (const Bf16MasterCase &c : bf16_master_cases()) {
    SCOPED_TRACE(Format("stage %d, bf16 states %d, offload %d", c.stage, c.bf16_states, static_cast<int>(c.offload)));
    run_bf16_master_case(c, g_world);
    ASSERT_TRUE(g_world->barrier().ok());
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_bf16_master", &dsrt::g_world); }
