// offload_param.device "nvme": the background swap-in (reads started ahead of the gathers that use
// them), max_in_cpu (which shards stay in host memory), failed swap-ins and swap-outs (reported,
// retried, nothing lost) and the 16-bit model save streamed from the swap files. The reference is
// always the in-memory stage-3 engine on the same data: weights must be bitwise equal.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "aio/aio_testing.h"
#include "ckpt/ckpt.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

// Tensors 0 and 4 are persistent (threshold 10); 1, 2, 3 and 5 have shards.
const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

TrainConfig param_nvme_config(const std::string &path, int64_t max_in_cpu, int64_t buffers = 2) {
  TrainConfig c = base_config(3);
  c.bf16_enabled = true;
  c.zero.offload_param.device = OffloadDevice::Nvme;
  c.zero.offload_param.nvme_path = path;
  c.zero.offload_param.buffer_count = buffers;
  c.zero.offload_param.buffer_size = 4096;
  c.zero.offload_param.max_in_cpu = max_in_cpu;
  return c;
}

std::unique_ptr<Engine> reference_engine() {
  TrainConfig c = base_config(3);
  c.bf16_enabled = true;
  std::unique_ptr<Engine> e;
  Status s = make_engine(c, local_comm(), kShapes, &e);
  EXPECT_TRUE(s.ok()) << s.message();
  return e;
}

uint64_t shard_bytes(const Engine &e, size_t t) {
  return static_cast<uint64_t>(e.partitioning().shard_layout().shard_size(t)) * dtype_size(e.working_dtype());
}

dsrt_memory_stats memory_of(const Engine &e) {
  dsrt_memory_stats m;
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  EXPECT_TRUE(e.memory(&m).ok());
  return m;
}

TEST(OffloadParamSwap, ReadsRunAheadOfTheGathersThatUseThem) {
  for (int64_t buffers : {1, 2, 5}) {
    SCOPED_TRACE(Format("buffer_count %lld", static_cast<long long>(buffers)));
    TempFolder folder;
    std::unique_ptr<Engine> reference = reference_engine(), offloaded;
    TrainConfig c = param_nvme_config(folder.path, 0, buffers);
    c.zero.stage3_max_reuse_distance = 0;  // every release frees: each micro-step reads every shard twice
    Status s = make_engine(c, local_comm(), kShapes, &offloaded);
    ASSERT_TRUE(s.ok()) << s.message();
    const ParamCoordinator &coordinator = *offloaded->param_coordinator();
    train(*reference, 1);
    train(*offloaded, 1);
    // The first micro-step recorded the order; the step's write-back started the first reads.
    EXPECT_GT(coordinator.reads_in_flight(), 0u);
    EXPECT_LE(coordinator.reads_in_flight(), static_cast<size_t>(buffers));
    const SwapInStats first = coordinator.swap_in_stats();
    EXPECT_EQ(first.read_hits, 0);
    train(*reference, 3, 5);
    train(*offloaded, 3, 5);
    const SwapInStats st = coordinator.swap_in_stats();
    EXPECT_GT(st.reads_ahead, first.reads_ahead);
    EXPECT_GT(st.read_hits, 0);
    // Every gather of the three following micro-steps counts as a hit or an on-demand read: 7 per
    // micro-step (1, 2, 3, 5 forward; 3, 2, 1 backward -- 5's backward acquire follows its release
    // directly, so it is kept even at reuse distance 0).
    const int64_t hits = st.read_hits - first.read_hits, on_demand = st.reads_on_demand - first.reads_on_demand;
    EXPECT_EQ(hits + on_demand, 21);
    EXPECT_GT(st.bytes_read, 0u);
    EXPECT_GT(st.read_wait_seconds, 0.0);
    EXPECT_GE(st.peak_reads_in_flight, 1u);
    EXPECT_LE(st.peak_reads_in_flight, static_cast<size_t>(buffers));
    if (buffers >= 2) {
      EXPECT_GT(hits, on_demand);
    }
    if (buffers == 1) {
      EXPECT_GT(st.buffers_reclaimed, 0);  // gathers needed the buffer a read ahead held
    }
    if (buffers >= 4) {
      EXPECT_EQ(on_demand, 0);  // room for every shard read ahead
    }
    std::printf("buffer_count %lld: %lld reads ahead, %lld hits, %lld on demand, %lld reclaimed, peak %zu in flight\n",
                static_cast<long long>(buffers), static_cast<long long>(st.reads_ahead), static_cast<long long>(hits),
                static_cast<long long>(on_demand), static_cast<long long>(st.buffers_reclaimed), st.peak_reads_in_flight);
    expect_bitwise_equal(read_all(*reference), read_all(*offloaded));
    expect_same_working_copies(*reference, *offloaded);
  }
}

// A micro-step that leaves the recorded order while reads ahead hold every buffer: its gathers
// finish those reads first, the reads nobody used are dropped at the step, and the results match.
TEST(OffloadParamSwap, LeavingTheOrderWithReadsInFlight) {
  TempFolder folder;
  std::unique_ptr<Engine> reference = reference_engine(), e;
  ASSERT_TRUE(make_engine(param_nvme_config(folder.path, 0, 2), local_comm(), kShapes, &e).ok());
  for (Engine *engine : {reference.get(), e.get()}) {
    train(*engine, 2);
    // Backward-only order, starting with the tensors whose reads were not started ahead.
    for (size_t t : {size_t{5}, size_t{3}, size_t{2}, size_t{1}, size_t{0}}) {
      Status s = engine->acquire(t, nullptr, nullptr);
      ASSERT_TRUE(s.ok()) << s.message();
      const std::vector<float> g = gaussian(900 + static_cast<uint32_t>(t), static_cast<size_t>(engine->tensor_numel(t)), 0.1f);
      ASSERT_TRUE(testing_util::update_grad(*engine, t, [&g](void *buffer, dsrt_dtype dtype) {
                    for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
                  }).ok());
      ASSERT_TRUE(engine->grad_ready(t).ok());
      ASSERT_TRUE(engine->release(t).ok());
    }
    Status s = engine->step(nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    train(*engine, 2, 20);
  }
  const SwapInStats st = e->param_coordinator()->swap_in_stats();
  EXPECT_GT(st.buffers_reclaimed, 0);
  EXPECT_GT(st.read_hits, 0);
  expect_bitwise_equal(read_all(*reference), read_all(*e));
  expect_same_working_copies(*reference, *e);
}

TEST(OffloadParamSwap, MaxInCpuKeepsTheFirstShardsInHostMemory) {
  std::unique_ptr<Engine> probe = reference_engine();
  const Engine &r = *probe;
  const int64_t s1 = r.partitioning().shard_layout().shard_size(1), s2 = r.partitioning().shard_layout().shard_size(2);
  const uint64_t all = shard_bytes(r, 1) + shard_bytes(r, 2) + shard_bytes(r, 3) + shard_bytes(r, 5);
  struct Case {
    int64_t max_in_cpu;
    uint64_t on_nvme;
  };
  // Middle: tensors 1 and 2 fit; 3 does not, and 5 (129 elements, it would fit in what is left)
  // follows it to NVMe: shards are kept in registration order while the total fits.
  const std::vector<Case> cases = {{0, all},
                                   {1000000000, 0},
                                   {s1 + s2 + 200, shard_bytes(r, 3) + shard_bytes(r, 5)}};
  for (const Case &k : cases) {
    SCOPED_TRACE(Format("max_in_cpu %lld", static_cast<long long>(k.max_in_cpu)));
    TempFolder folder;
    std::unique_ptr<Engine> reference = reference_engine(), e;
    Status s = make_engine(param_nvme_config(folder.path, k.max_in_cpu), local_comm(), kShapes, &e);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(e->param_nvme_shard_bytes(), k.on_nvme);
    EXPECT_GE(e->param_nvme_resident_bytes(), all - k.on_nvme);
    EXPECT_LT(e->param_nvme_resident_bytes(), all - k.on_nvme + 64 * 4);  // 64-byte aligned slots
    EXPECT_EQ(e->param_nvme_swapper()->nvme_bytes(), k.on_nvme);  // what the swap files hold
    const dsrt_memory_stats m = memory_of(*e);
    EXPECT_EQ(m.working_params[DSRT_LOC_NVME], k.on_nvme);
    EXPECT_EQ(m.working_params[DSRT_LOC_HOST], e->param_nvme_resident_bytes());
    train(*reference, 3);
    train(*e, 3);
    EXPECT_EQ(e->param_nvme_swapper()->nvme_bytes(), k.on_nvme);
    if (k.on_nvme == 0) {
      EXPECT_EQ(e->param_coordinator()->swap_in_stats().bytes_read, 0u);
    }
    if (k.on_nvme > 0) {
      EXPECT_GT(e->param_coordinator()->swap_in_stats().bytes_read, 0u);
    }
    expect_bitwise_equal(read_all(*reference), read_all(*e));
    expect_same_working_copies(*reference, *e);
    // write_fp32 between steps reaches a kept shard and a swapped one.
    for (size_t t : {size_t{1}, size_t{3}}) {
      const std::vector<float> v = gaussian(55 + static_cast<uint32_t>(t), static_cast<size_t>(e->tensor_numel(t)), 0.2f);
      ASSERT_TRUE(reference->write_fp32(t, v.data(), v.size()).ok());
      ASSERT_TRUE(e->write_fp32(t, v.data(), v.size()).ok());
    }
    expect_same_working_copies(*reference, *e);
    train(*reference, 2, 40);
    train(*e, 2, 40);
    expect_bitwise_equal(read_all(*reference), read_all(*e));
    expect_same_working_copies(*reference, *e);
  }
}

// One micro-step in which an acquire may fail: it must be DSRT_ERR_IO naming the swap file and the
// tensor, and acquiring again must work. Returns the number of failed acquires.
int micro_step_with_retries(Engine &e, uint32_t seed) {
  int failures = 0;
  auto acquire = [&](size_t t) {
    Status s = e.acquire(t, nullptr, nullptr);
    if (s.ok()) return;
    ++failures;
    std::printf("failed acquire: %s\n", s.message().c_str());
    EXPECT_EQ(s.code(), DSRT_ERR_IO) << s.message();
    EXPECT_NE(s.message().find(".swp"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(Format("swapping in 'layer%zu'", t)), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.message();
    s = e.acquire(t, nullptr, nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  };
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    acquire(t);
    EXPECT_TRUE(e.release(t).ok());
  }
  for (size_t t = e.num_tensors(); t-- > 0;) {
    acquire(t);
    const std::vector<float> g = gaussian(seed * 7919u + static_cast<uint32_t>(t), static_cast<size_t>(e.tensor_numel(t)), 0.1f);
    EXPECT_TRUE(testing_util::update_grad(e, t, [&g](void *buffer, dsrt_dtype dtype) {
                  for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
                }).ok());
    EXPECT_TRUE(e.grad_ready(t).ok());
    EXPECT_TRUE(e.release(t).ok());
  }
  return failures;
}

TEST(OffloadParamSwap, FailedSwapInIsReportedAtTheAcquireAndRetried) {
  std::unique_ptr<Engine> reference = reference_engine();
  train(*reference, 3);
  const std::vector<std::vector<float>> expected = read_all(*reference);
  // armed_before_step: the fault is armed before the first step, whose write-back issues 4
  // swap-outs and then starts reads ahead: requests 5 and 6 fail in the background. Otherwise it
  // is armed after the step: requests 1 and 2 are swap-ins started by the next micro-step.
  for (bool armed_before_step : {false, true}) {
    for (uint64_t nth : {1, 2}) {
      SCOPED_TRACE(Format("armed before step %d, request %llu", armed_before_step, static_cast<unsigned long long>(nth)));
      TempFolder folder;
      std::unique_ptr<Engine> e;
      ASSERT_TRUE(make_engine(param_nvme_config(folder.path, 0), local_comm(), kShapes, &e).ok());
      host_micro_step(*e, 1);
      if (armed_before_step) aio_testing_fail_request(e->param_nvme_swapper()->aio(), nth + 4, EIO);
      Status s = e->step(nullptr);
      ASSERT_TRUE(s.ok()) << s.message();
      if (!armed_before_step) aio_testing_fail_request(e->param_nvme_swapper()->aio(), nth, EIO);
      EXPECT_EQ(micro_step_with_retries(*e, 2), 1);
      s = e->step(nullptr);
      ASSERT_TRUE(s.ok()) << s.message();
      // The failed acquire is not part of the recorded order: the next micro-step still follows
      // it and every gather finds its shard read ahead.
      const SwapInStats before = e->param_coordinator()->swap_in_stats();
      train(*e, 1, 3);
      const SwapInStats after = e->param_coordinator()->swap_in_stats();
      EXPECT_EQ(after.reads_on_demand, before.reads_on_demand);
      EXPECT_GT(after.read_hits, before.read_hits);
      expect_bitwise_equal(expected, read_all(*e));
      expect_same_working_copies(*reference, *e);
    }
  }
}

TEST(OffloadParamSwap, FailedSwapOutKeepsTheShardsAndTheNextStepWritesThem) {
  std::unique_ptr<Engine> reference = reference_engine();
  train(*reference, 4);
  const std::vector<std::vector<float>> expected = read_all(*reference);
  for (uint64_t nth : {1, 3}) {
    SCOPED_TRACE(Format("request %llu", static_cast<unsigned long long>(nth)));
    TempFolder folder;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(make_engine(param_nvme_config(folder.path, 0), local_comm(), kShapes, &e).ok());
    train(*e, 1);
    host_micro_step(*e, 2);
    aio_testing_fail_request(e->param_nvme_swapper()->aio(), nth, ENOSPC);
    Status s = e->step(nullptr);
    ASSERT_EQ(s.code(), DSRT_ERR_IO) << s.message();
    if (nth == 1) std::printf("failed write-back: %s\n", s.message().c_str());
    EXPECT_NE(s.message().find(".swp"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("stay in host memory"), std::string::npos) << s.message();
    // The step is applied; the shards are resident until a write-back succeeds.
    EXPECT_EQ(e->counters().applied_steps, 2);
    EXPECT_EQ(e->counters().global_step, 2);
    EXPECT_NE(e->working_copy(), nullptr);
    std::unique_ptr<Engine> two = reference_engine();
    train(*two, 2);
    expect_bitwise_equal(read_all(*two), read_all(*e));
    expect_same_working_copies(*two, *e);
    train(*e, 2, 3);
    EXPECT_EQ(e->working_copy(), nullptr);  // written back by the next step
    expect_bitwise_equal(expected, read_all(*e));
    expect_same_working_copies(*reference, *e);
  }
}

std::string file_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(OffloadParamSwap, SixteenBitModelStreamsTheShardsFromNvme) {
  TempFolder folder, out;
  std::unique_ptr<Engine> reference = reference_engine(), e;
  const int64_t s1 = reference->partitioning().shard_layout().shard_size(1);
  ASSERT_TRUE(make_engine(param_nvme_config(folder.path, s1), local_comm(), kShapes, &e).ok());  // 1 kept, 2 3 5 on NVMe
  ASSERT_GT(e->param_nvme_resident_bytes(), 0u);
  train(*reference, 2);
  train(*e, 2);
  const std::string a = out.path + "/reference.safetensors", b = out.path + "/nvme.safetensors";
  Status s = save_16bit_model(*reference, a, true);
  ASSERT_TRUE(s.ok()) << s.message();
  s = save_16bit_model(*e, b, true);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::string ra = file_bytes(a), rb = file_bytes(b);
  EXPECT_GT(ra.size(), 2u * (7 + 1000 + 33 * 65 + 3000 + 5 + 129));
  EXPECT_TRUE(ra == rb) << "the 16-bit model files differ";
  // The engine trains on unchanged afterwards.
  train(*reference, 1, 9);
  train(*e, 1, 9);
  expect_bitwise_equal(read_all(*reference), read_all(*e));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

}  // namespace
}  // namespace dsrt
