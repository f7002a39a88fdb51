// dsrt-mpi-ranks: 1 2 4
// Stage 3 with offload_optimizer "nvme" across ranks: each rank's gradient partition lives in its own
// swap files (no partition-sized gradient buffer in memory), and the fp32 weights, gradient norms
// and skips are bitwise those of the in-memory engine, with gradient accumulation, fp16 with an
// overflow on one rank only (every rank skips), and clipping; on the CPU route and on the GPU
// engine's staged route (forced on the CPU device: device accumulator -> swap files at the boundary).
// A gradient swap write that fails on one rank fails the boundary step on every rank, agreed.
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <limits>

#include "../cpp/offload_test_util.h"
#include "aio/aio_testing.h"
#include "ckpt/ckpt.h"
#include "mpi_scratch_dir.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

using namespace offload_test;

std::shared_ptr<Comm> g_world;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {1, 1}, {129}};

// One micro-step's rank-dependent gradients; an inf on the last rank only when poison.
Status micro_step(Engine &e, uint32_t seed, bool poison) {
  for (size_t t = e.num_tensors(); t-- > 0;) {
    DSRT_RETURN_IF_ERROR(e.acquire(t, nullptr, nullptr));
    std::vector<float> g = gaussian(seed * 7919u + static_cast<uint32_t>(e.rank()) * 131u + static_cast<uint32_t>(t),
                                    static_cast<size_t>(e.tensor_numel(t)), 0.1f);
    if (poison && t == 3 && e.rank() == g_world->size() - 1) g[17] = std::numeric_limits<float>::infinity();
    DSRT_RETURN_IF_ERROR(testing_util::update_grad(e, t, [&g](void *buffer, dsrt_dtype dtype) {
      for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
    }));
    DSRT_RETURN_IF_ERROR(e.grad_ready(t));
    DSRT_RETURN_IF_ERROR(e.release(t));
  }
  return Status::Ok();
}

// Rank-dependent gradients; an inf on the last rank only at boundary 2 when poison.
void run(Engine &e, int steps, int gas, bool poison, std::vector<dsrt_step_result> *out) {
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < gas; ++m) {
      const Status backward = micro_step(e, static_cast<uint32_t>(1 + s * gas + m), poison && s == 2 && m == gas - 1);
      ASSERT_TRUE(backward.ok()) << backward.message();
      dsrt_step_result r;
      std::memset(&r, 0, sizeof r);
      r.struct_size = sizeof r;
      const Status st = e.step(&r);
      ASSERT_TRUE(st.ok()) << st.message();
      if (r.boundary) out->push_back(r);
    }
  }
}

TEST(MpiNvmeGrads, BitwiseTheInMemoryEngine) {
  struct Case {
    int gas;
    bool fp16;
    bool pipeline;
    int64_t sub_group;
  };
  for (const bool staged : {false, true})
  for (const Case &c : {Case{1, false, false, 400}, Case{2, true, true, 400}, Case{3, false, true, 0}}) {
    SCOPED_TRACE(Format("staged %d gas %d fp16 %d pipeline %d sub_group %lld", staged, c.gas, c.fp16, c.pipeline,
                        static_cast<long long>(c.sub_group)));
    TempFolder folder;  // each rank its own scratch folder
    TrainConfig config = base_config(3);
    config.gradient_accumulation_steps = c.gas;
    config.fp16.enabled = c.fp16;
    if (c.fp16) config.gradient_clipping = 1e-5;  // the host's gradients count as loss-scaled (2^16)
    std::unique_ptr<Engine> reference, offloaded;
    Status s = make_engine(config, g_world, kShapes, &reference);
    ASSERT_TRUE(s.ok()) << s.message();
    // On a GPU the reference steps and sums the norm on the device and the NVMe-offloaded engine on
    // the CPU: equal within fp32 rounding, not bitwise; and a GPU engine always stages.
    const bool on_gpu = reference->device().type() != DSRT_DEVICE_CPU;
    if (on_gpu && !staged) continue;
    set_nvme(&config, folder.path, c.sub_group, c.pipeline ? 4 : 2, c.pipeline);
    s = make_engine(config, g_world, kShapes, &offloaded, true,
                    [staged](Engine &e) { return e.set_host_staging_on_cpu(staged); });
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NE(offloaded->nvme_grad_swap(), nullptr);
    EXPECT_EQ(offloaded->grad_reducer().grad_partition() != nullptr, staged);  // staged: the device accumulator
    EXPECT_EQ(offloaded->host_grad_partition(), nullptr);
    std::vector<dsrt_step_result> want, got;
    run(*reference, 4, c.gas, c.fp16, &want);
    run(*offloaded, 4, c.gas, c.fp16, &got);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (on_gpu && !std::isfinite(want[i].grad_norm))  // the overflow step
        EXPECT_FALSE(std::isfinite(got[i].grad_norm)) << "step " << i;
      else if (on_gpu)
        EXPECT_NEAR(got[i].grad_norm, want[i].grad_norm, 1e-5 * want[i].grad_norm) << "step " << i;
      else
        EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got[i].grad_norm, sizeof(double)), 0) << "step " << i;
      EXPECT_EQ(want[i].overflow, got[i].overflow) << "step " << i;
    }
    if (c.fp16) {
      EXPECT_EQ(got[2].overflow, 1);
    }
    EXPECT_GT(got[0].grad_norm, config.gradient_clipping) << "clipping must act in this test";
    if (!on_gpu) {
      expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    } else {
      const auto a = read_all(*reference), b = read_all(*offloaded);
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t) expect_close(a[t].data(), b[t].data(), a[t].size(), 1e-4, "master");
    }
    dsrt_memory_stats mem;
    std::memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    ASSERT_TRUE(offloaded->memory(&mem).ok());
    const uint64_t part_bytes = static_cast<uint64_t>(offloaded->partitioning().partition_elems()) * 4;
    EXPECT_EQ(mem.gradients[DSRT_LOC_NVME], part_bytes);
    EXPECT_EQ(mem.gradients[DSRT_LOC_HOST], 0u);
    EXPECT_EQ(mem.gradients[DSRT_LOC_DEVICE], staged ? part_bytes : 0u);
    EXPECT_EQ(offloaded->last_nvme_norm_pass().bytes_read, mem.gradients[DSRT_LOC_NVME]);
    offloaded.reset();
    ASSERT_TRUE(g_world->barrier().ok());
  }
}

// A gradient write-back that fails with ENOSPC on the last rank only, during backward (CPU route)
// or at the boundary (staged route): backward and the first micro-step's step() go on on every
// rank, and the boundary step returns DSRT_ERR_IO on every rank -- the failing rank's message names
// its swap file and the errno, the others' name that rank and quote it -- instead of the others
// waiting in a collective the failing rank never joins. No rank applied the step: a checkpoint
// saved then loads, and the engine, the loaded engine and one that never saw the window go on
// bitwise alike.
TEST(MpiNvmeGrads, FailedWriteOnOneRankFailsTheStepOnEveryRank) {
  const int failing = g_world->size() - 1;
  for (const bool staged : {false, true}) {
    SCOPED_TRACE(Format("staged %d", staged));
    TempFolder swap_failing, swap_clean, swap_loaded;
    TrainConfig config = base_config(3);
    config.gradient_accumulation_steps = 2;
    auto make = [&config, staged](const std::string &swap, std::unique_ptr<Engine> *out, bool init) {
      TrainConfig c = config;
      set_nvme(&c, swap, 700, 2, true);
      return make_engine(c, g_world, kShapes, out, init, [staged](Engine &e) { return e.set_host_staging_on_cpu(staged); });
    };
    std::unique_ptr<Engine> failed, clean, loaded;
    Status s = make(swap_failing.path, &failed, true);
    ASSERT_TRUE(s.ok()) << s.message();
    if (failed->device().type() != DSRT_DEVICE_CPU && !staged) continue;  // a GPU engine always stages
    ASSERT_TRUE(make(swap_clean.path, &clean, true).ok());
    std::vector<dsrt_step_result> before;
    run(*failed, 1, 2, false, &before);
    run(*clean, 1, 2, false, &before);

    if (g_world->rank() == failing) aio_testing_fail_request(failed->nvme_swapper()->aio(), 1, ENOSPC);
    for (int m = 0; m < 2; ++m) {
      const Status backward = micro_step(*failed, static_cast<uint32_t>(50 + m), false);
      ASSERT_TRUE(backward.ok()) << backward.message();  // the failure waits for the boundary
      s = failed->step(nullptr);
      if (m == 0) {
        ASSERT_TRUE(s.ok()) << s.message();
      }
    }
    ASSERT_EQ(s.code(), DSRT_ERR_IO) << s.message();
    EXPECT_NE(s.message().find(".grad."), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(".swp"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
    if (g_world->rank() == failing) {
      EXPECT_NE(s.message().find(swap_failing.path), std::string::npos) << s.message();
    } else {
      EXPECT_NE(s.message().find(Format("rank %d failed", failing)), std::string::npos) << s.message();
    }
    EXPECT_EQ(failed->counters().applied_steps, clean->counters().applied_steps);
    EXPECT_EQ(failed->counters().global_step, clean->counters().global_step);

    const std::string dir = mpi_test::shared_dir(*g_world, "nvme_grads_failure");
    s = save_checkpoint(*failed, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(make(swap_loaded.path, &loaded, false).ok());
    s = load_checkpoint(*loaded, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<dsrt_step_result> want, got, got_loaded;
    run(*clean, 2, 2, false, &want);
    run(*failed, 2, 2, false, &got);
    run(*loaded, 2, 2, false, &got_loaded);
    ASSERT_EQ(want.size(), 2u);
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(got_loaded.size(), 2u);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got[i].grad_norm, sizeof(double)), 0) << "step " << i;
      EXPECT_EQ(std::memcmp(&want[i].grad_norm, &got_loaded[i].grad_norm, sizeof(double)), 0) << "step " << i;
      EXPECT_EQ(want[i].global_step, got[i].global_step) << "step " << i;
      EXPECT_EQ(want[i].global_step, got_loaded[i].global_step) << "step " << i;
    }
    const auto weights = read_all(*clean);
    expect_bitwise_equal(weights, read_all(*failed));
    expect_bitwise_equal(weights, read_all(*loaded));
    mpi_test::remove_shared_dir(*g_world, dir);
  }
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_nvme_grads", &dsrt::g_world); }
