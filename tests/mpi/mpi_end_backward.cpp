// dsrt-mpi-ranks: 1 2
// dsrt_engine_end_backward (Engine::end_backward): the micro-step's reduction run when the host's
// backward ends gives the same masters, bit for bit, as leaving it to step(): ZeRO stages 0-3,
// gradient accumulation 1 and 4, overlap_comm on and off, CPU offload of the optimizer and of the
// parameters, and two backward passes per step call; the second pass's window holds both passes'
// gradients (the same bits as two micro-steps of a window that is not divided by their count). A
// second end_backward is a no-op, the reduce phase's timer takes the time once, and the call is
// refused before build.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../cpp/engine_test_util.h"
#include "../cpp/offload_test_util.h"
#include "mpi_test_main.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {1000}, {33, 65}, {3000}, {5}, {129}};

using offload_test::gaussian;
using offload_test::numel_of;

enum class Offload { None, Optimizer, OptimizerAndParams };

struct Variant {
  int stage;
  int gas;
  bool overlap;
  Offload offload = Offload::None;
  bool bf16 = false;
};

TrainConfig make_config(const Variant &v) {
  TrainConfig config;
  config.optimizer.present = true;
  config.optimizer.type = OptimizerType::AdamW;
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.steps_per_print = 0;
  config.bf16_enabled = v.bf16;
  config.gradient_accumulation_steps = v.gas;
  config.gradient_clipping = 1.0;
  config.zero.stage = v.stage;
  config.zero.reduce_bucket_size = 1500;
  config.zero.allgather_bucket_size = 1000;
  config.zero.overlap_comm = v.overlap;
  config.zero.stage3_param_persistence_threshold = 10;
  config.zero.stage3_prefetch_bucket_size = 2500;
  config.zero.stage3_max_live_parameters = 6000;
  if (v.offload != Offload::None) config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  if (v.offload == Offload::OptimizerAndParams) config.zero.offload_param.device = OffloadDevice::Cpu;
  return config;
}

std::unique_ptr<Engine> make_engine(const TrainConfig &config) {
  std::unique_ptr<Engine> engine;
  Status s = offload_test::make_engine(config, g_world, kShapes, &engine);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) engine.reset();
  return engine;
}

// calls micro-steps: passes backward passes each (offload_test::host_micro_step), then
// end_backward (when asked, after every pass) and step. Returns every tensor's fp32 master.
std::vector<std::vector<float>> train(Engine &e, int calls, int passes, bool end_backward) {
  for (int micro = 0; micro < calls; ++micro) {
    for (int pass = 0; pass < passes; ++pass) {
      offload_test::host_micro_step(e, static_cast<uint32_t>(1 + micro * passes + pass));
      if (end_backward) {
        Status s = e.end_backward();
        EXPECT_TRUE(s.ok()) << s.message();
      }
    }
    dsrt_step_result r;
    std::memset(&r, 0, sizeof r);
    Status s = e.step(&r);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(r.overflow, 0);
  }
  return offload_test::read_all(e);
}

// a and b bit for bit, and both trained: the masters moved from their initial values.
void expect_same_trained(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b,
                         const std::vector<std::vector<float>> &init) {
  offload_test::expect_bitwise_equal(a, b);
  ASSERT_EQ(a.size(), init.size());
  for (size_t t = 0; t < a.size(); ++t)
    EXPECT_NE(std::memcmp(a[t].data(), init[t].data(), a[t].size() * sizeof(float)), 0) << "tensor " << t;
}

std::vector<std::vector<float>> initial_values() {
  std::vector<std::vector<float>> init;
  for (size_t t = 0; t < kShapes.size(); ++t)
    init.push_back(gaussian(100 + static_cast<uint32_t>(t), static_cast<size_t>(numel_of(kShapes[t])), 0.5f));
  return init;
}

std::string name_of(const Variant &v) {
  static const char *offloads[] = {"none", "optimizer cpu", "optimizer+param cpu"};
  return Format("stage %d gas %d overlap_comm %d offload %s bf16 %d", v.stage, v.gas, v.overlap,
                offloads[static_cast<int>(v.offload)], v.bf16);
}

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (int stage : {0, 1, 2, 3})
    for (int gas : {1, 4})
      for (bool overlap : {false, true}) out.push_back({stage, gas, overlap});
  for (int stage : {1, 2, 3})
    for (int gas : {1, 4}) out.push_back({stage, gas, true, Offload::Optimizer});
  for (int gas : {1, 4})
    for (bool overlap : {false, true}) out.push_back({3, gas, overlap, Offload::OptimizerAndParams});
  out.push_back({2, 2, true, Offload::None, true});
  out.push_back({3, 2, true, Offload::OptimizerAndParams, true});
  return out;
}

// Two engines of v's config trained over two windows of `passes` backward passes per step call,
// one leaving the reduction to step (a second pass's grad() ends the first), one calling
// end_backward after every pass: the same masters, bit for bit.
struct Compared {
  std::unique_ptr<Engine> plain, ended;
  std::vector<std::vector<float>> got;  // ended's masters
};

Compared compare_with_and_without(const Variant &v, int passes, const std::vector<std::vector<float>> &init) {
  Compared c;
  const TrainConfig config = make_config(v);
  c.plain = make_engine(config);
  c.ended = make_engine(config);
  if (!c.plain || !c.ended) {
    ADD_FAILURE() << "engines not built";
    return c;
  }
  const int calls = 2 * v.gas;
  const auto want = train(*c.plain, calls, passes, false);
  c.got = train(*c.ended, calls, passes, true);
  expect_same_trained(want, c.got, init);
  EXPECT_EQ(c.ended->counters().global_step, 2);
  return c;
}

TEST(MpiEndBackward, SameMastersBitForBit) {
  const std::vector<std::vector<float>> init = initial_values();
  for (const Variant &v : variants()) {
    SCOPED_TRACE(name_of(v));
    const Compared c = compare_with_and_without(v, 1, init);
    ASSERT_TRUE(c.plain && c.ended);
    // The micro-steps were counted once each: the same boundaries, the same step count.
    EXPECT_EQ(c.ended->counters().applied_steps, c.plain->counters().applied_steps);
    EXPECT_EQ(c.ended->counters().micro_step, 0);
  }
}

TEST(MpiEndBackward, SecondBackwardBeginsAMicroStepOfTheWindow) {
  const std::vector<std::vector<float>> init = initial_values();
  for (const Variant &v : variants()) {
    SCOPED_TRACE(name_of(v));
    const Compared c = compare_with_and_without(v, 2, init);
    ASSERT_TRUE(c.plain && c.ended);
    if (v.gas != 1) continue;
    // One step call over two passes holds both passes' gradients: the same bits as a window of two
    // micro-steps (one pass each) that is not divided by its length.
    TrainConfig two = make_config(v);
    two.gradient_accumulation_steps = 2;
    std::unique_ptr<Engine> windows = make_engine(two);
    ASSERT_TRUE(windows);
    ASSERT_TRUE(windows->set_scale_wrt_gas(false).ok());
    expect_same_trained(train(*windows, 2 * 2 * v.gas, 1, true), c.got, init);
  }
}

TEST(MpiEndBackward, RepeatedCallIsANoOpAndTheReduceTimerCountsOnce) {
  TrainConfig config = make_config({3, 2, true, Offload::Optimizer});
  config.wall_clock_breakdown = true;
  std::unique_ptr<Engine> e = make_engine(config);
  ASSERT_TRUE(e);
  offload_test::host_micro_step(*e, 5);
  const double reduce0 = e->step_timers().get(StepPhase::Reduce);
  const double total0 = e->step_timers().get(StepPhase::Total);
  ASSERT_TRUE(e->end_backward().ok());
  const double reduce1 = e->step_timers().get(StepPhase::Reduce);
  EXPECT_GT(reduce1, reduce0) << "the micro-step's reduction is the reduce phase's";
  EXPECT_EQ(e->step_timers().get(StepPhase::Total), total0) << "not a step's time";
  const CommTraffic traffic = g_world->traffic();
  ASSERT_TRUE(e->end_backward().ok());
  EXPECT_EQ(e->step_timers().get(StepPhase::Reduce), reduce1) << "a second call does nothing";
  EXPECT_EQ(g_world->traffic().total(), traffic.total()) << "a second call issues no collective";
  dsrt_step_result r;
  std::memset(&r, 0, sizeof r);
  ASSERT_TRUE(e->step(&r).ok());
  EXPECT_EQ(r.boundary, 0);
  EXPECT_EQ(g_world->traffic().reduce_scatter, traffic.reduce_scatter) << "step reduces no bucket again";
  EXPECT_EQ(e->counters().micro_step, 1) << "the micro-step is counted once";
  EXPECT_EQ(e->step_timers().get(StepPhase::Reduce), reduce1) << "step does not reduce the micro-step again";
  // Without end_backward the step reduces, as before.
  offload_test::host_micro_step(*e, 6);
  ASSERT_TRUE(e->step(&r).ok());
  EXPECT_EQ(r.boundary, 1);
  EXPECT_GT(e->step_timers().get(StepPhase::Reduce), reduce1);
  EXPECT_GT(e->step_timers().get(StepPhase::Total), total0);  // the boundary's step time
  EXPECT_EQ(e->counters().global_step, 1);
}

TEST(MpiEndBackward, RefusedBeforeBuild) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::create(make_config({2, 1, true}), g_world, &e).ok());
  Status s = e->end_backward();
  EXPECT_EQ(s.code(), DSRT_ERR_STATE);
  EXPECT_NE(s.message().find("end_backward"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("build"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_end_backward", &dsrt::g_world); }
