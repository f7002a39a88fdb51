// Single-rank engine tests: every optimizer against a float64 recomputation, accumulation,
// clipping, fp16 loss scaling, bf16 non-finite skips, step results, the lr schedule, and every
// ZeRO stage at world size 1 against stage 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "config/config.h"
#include "engine_test_util.h"

namespace dsrt {
namespace {

using testing_util::add_grad;
using testing_util::random_values;
using testing_util::RefPipeline;
using testing_util::relative_error;
using testing_util::round_to;

const std::vector<std::vector<int64_t>> kShapes = {{7}, {33, 65}, {1000}, {3, 1}};

std::unique_ptr<Engine> make_engine(const TrainConfig &config) {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  std::unique_ptr<Engine> engine;
  Status status = Engine::create(config, comm, &engine);
  EXPECT_TRUE(status.ok()) << status.message();
  return engine;
}

int64_t numel_of(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct EngineRun {
  std::unique_ptr<Engine> engine;
  std::vector<std::vector<float>> init;
  std::vector<dsrt_step_result> results;
};

EngineRun make_run(const TrainConfig &config, uint32_t seed, const std::vector<std::vector<int64_t>> &shapes = kShapes) {
  EngineRun run;
  run.engine = make_engine(config);
  std::mt19937 rng(seed);
  for (size_t t = 0; t < shapes.size(); ++t) {
    run.init.push_back(random_values(rng, static_cast<size_t>(numel_of(shapes[t])), 0.5f));
    Status s = run.engine->add_param("t" + std::to_string(t), shapes[t].data(), static_cast<int>(shapes[t].size()),
                                     run.init.back().data(), nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  Status s = run.engine->build();
  EXPECT_TRUE(s.ok()) << s.message();
  return run;
}

// Feeds `micro_steps` random micro-steps to the engine and the float64 reference; returns the
// worst relative error of the masters over all boundaries.
double run_against_reference(const TrainConfig &config, int micro_steps, uint32_t seed,
                             std::vector<dsrt_step_result> *results = nullptr, float grad_scale = 1.0f) {
  EngineRun run = make_run(config, seed);
  RefPipeline ref(config, run.init);
  std::mt19937 rng(seed + 1000);
  const dsrt_dtype wdt = config.working_dtype();
  double worst = 0;
  for (int step = 0; step < micro_steps; ++step) {
    const double loss_scale = run.engine->loss_scale();
    const double lr = run.engine->current_lr();
    std::vector<std::vector<double>> grads;
    // Gradients in reverse order, one tensor at a time, as backward produces them.
    grads.resize(kShapes.size());
    for (size_t k = kShapes.size(); k-- > 0;) {
      const std::vector<float> g = random_values(rng, static_cast<size_t>(numel_of(kShapes[k])), grad_scale);
      std::vector<double> seen(g.size());
      for (size_t i = 0; i < g.size(); ++i) seen[i] = round_to(wdt, g[i] * loss_scale) / loss_scale;
      std::vector<double> raw(g.begin(), g.end());
      EXPECT_TRUE(testing_util::update_grad(*run.engine, k, [&](void *buffer, dsrt_dtype dtype) {
                    EXPECT_EQ(dtype, wdt);
                    add_grad(buffer, dtype, raw, loss_scale);
                  }).ok());
      EXPECT_TRUE(run.engine->grad_ready(k).ok());
      grads[k] = seen;
    }
    dsrt_step_result result;
    result.struct_size = sizeof result;
    Status s = run.engine->step(&result);
    EXPECT_TRUE(s.ok()) << s.message();
    if (results) results->push_back(result);
    ref.micro_step(grads, lr);
    if (result.boundary) {
      EXPECT_NEAR(result.grad_norm, ref.last_norm, 1e-4 * ref.last_norm);
      EXPECT_EQ(result.lr, lr);
      for (size_t t = 0; t < kShapes.size(); ++t) {
        std::vector<float> got(static_cast<size_t>(numel_of(kShapes[t])));
        EXPECT_TRUE(run.engine->read_fp32(t, got.data(), got.size()).ok());
        worst = std::max(worst, relative_error(got, ref.tensors[t].p));
      }
    }
  }
  return worst;
}

TrainConfig base_config(OptimizerType type) {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = type;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.steps_per_print = 0;
  return c;
}

TEST(EngineSingle, EveryOptimizerMatchesFloat64) {
  struct Case {
    const char *name;
    OptimizerType type;
    bool adam_w_mode;
    double momentum;
    bool nesterov;
  };
  const Case cases[] = {
      {"AdamW", OptimizerType::AdamW, true, 0, false},   {"Adam (L2)", OptimizerType::Adam, false, 0, false},
      {"SGD", OptimizerType::SGD, true, 0, false},       {"SGD momentum", OptimizerType::SGD, true, 0.9, false},
      {"SGD nesterov", OptimizerType::SGD, true, 0.9, true}, {"Adagrad", OptimizerType::Adagrad, true, 0, false},
      {"Lion", OptimizerType::Lion, true, 0, false},     {"Lamb", OptimizerType::Lamb, true, 0, false},
  };
  for (const Case &c : cases) {
    TrainConfig config = base_config(c.type);
    config.optimizer.adam_w_mode = c.adam_w_mode;
    config.optimizer.momentum = c.momentum;
    config.optimizer.nesterov = c.nesterov;
    if (c.type == OptimizerType::Lion) config.optimizer.lr = 1e-3;
    const double error = run_against_reference(config, 4, 11);
    EXPECT_LT(error, 1e-5) << c.name;
  }
}

TEST(EngineSingle, AccumulationAveragesMicroSteps) {
  TrainConfig config = base_config(OptimizerType::SGD);
  config.gradient_accumulation_steps = 3;
  std::vector<dsrt_step_result> results;
  EXPECT_LT(run_against_reference(config, 9, 5, &results), 1e-6);
  ASSERT_EQ(results.size(), 9u);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].boundary, (i % 3 == 2) ? 1 : 0) << i;
    EXPECT_EQ(results[i].global_step, static_cast<int64_t>((i + 1) / 3)) << i;
  }
  config.optimizer.type = OptimizerType::AdamW;
  EXPECT_LT(run_against_reference(config, 6, 6), 1e-5);
}

TEST(EngineSingle, ClippingScalesByMaxNormOverNorm) {
  TrainConfig config = base_config(OptimizerType::SGD);
  config.gradient_clipping = 0.5;  // the random gradients' norm is about 50
  std::vector<dsrt_step_result> results;
  EXPECT_LT(run_against_reference(config, 3, 9, &results), 1e-6);
  for (const dsrt_step_result &r : results) EXPECT_GT(r.grad_norm, 10.0);
  // Below the threshold clipping does nothing.
  config.gradient_clipping = 1e6;
  EXPECT_LT(run_against_reference(config, 2, 9), 1e-6);
}

// A config without "gradient_clipping" clips at DeepSpeed 0.19's default, 1.0: the engine built from
// it matches a float64 run that clips at 1.0 (coefficient 1.0 / (norm + 1e-6)), and not one that
// does not clip.
TEST(EngineSingle, ConfigWithoutClippingKeyClipsAtOne) {
  std::unique_ptr<Config> parsed;
  Status s = Config::parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.01, "weight_decay": 0.01}},
                              "steps_per_print": null})",
                           "test", &parsed);
  ASSERT_TRUE(s.ok()) << s.message();
  TrainConfig config;
  s = parsed->resolve(1, &config);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(config.gradient_clipping, 1.0);
  std::vector<dsrt_step_result> results;
  EXPECT_LT(run_against_reference(config, 3, 41, &results), 1e-6);
  for (const dsrt_step_result &r : results) EXPECT_GT(r.grad_norm, 10.0);  // every step clipped
  TrainConfig unclipped = config;
  unclipped.gradient_clipping = 0.0;
  EngineRun run = make_run(config, 41);
  RefPipeline clipped_ref(config, run.init), unclipped_ref(unclipped, run.init);
  std::mt19937 rng(7);
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<double>> grads(kShapes.size());
    for (size_t k = kShapes.size(); k-- > 0;) {
      const std::vector<float> g = random_values(rng, static_cast<size_t>(numel_of(kShapes[k])), 1.0f);
      grads[k].assign(g.begin(), g.end());
      ASSERT_TRUE(testing_util::update_grad(*run.engine, k, [&](void *buffer, dsrt_dtype dtype) {
                    add_grad(buffer, dtype, grads[k], 1.0);
                  }).ok());
      ASSERT_TRUE(run.engine->grad_ready(k).ok());
    }
    const double lr = run.engine->current_lr();
    dsrt_step_result result;
    result.struct_size = sizeof result;
    ASSERT_TRUE(run.engine->step(&result).ok());
    EXPECT_GT(result.grad_norm, 10.0);
    clipped_ref.micro_step(grads, lr);
    unclipped_ref.micro_step(grads, lr);
  }
  std::vector<float> got(static_cast<size_t>(numel_of(kShapes[1])));
  ASSERT_TRUE(run.engine->read_fp32(1, got.data(), got.size()).ok());
  EXPECT_LT(relative_error(got, clipped_ref.tensors[1].p), 1e-6);
  EXPECT_GT(relative_error(got, unclipped_ref.tensors[1].p), 1e-3);
}

TEST(EngineSingle, PredivideAndPrescaleKeepTheAverage) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  config.gradient_predivide_factor = 8.0;
  EXPECT_LT(run_against_reference(config, 3, 21), 1e-5);
  config.prescale_gradients = true;
  config.gradient_accumulation_steps = 2;
  EXPECT_LT(run_against_reference(config, 4, 22), 1e-5);
}

TEST(EngineSingle, Bf16AndFp16MatchFloat64OnWhatTheyReceive) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  config.bf16_enabled = true;
  EXPECT_LT(run_against_reference(config, 3, 31), 1e-5);
  config.bf16_enabled = false;
  config.fp16.enabled = true;
  config.fp16.initial_scale_power = 8;
  EXPECT_LT(run_against_reference(config, 3, 32, nullptr, 0.01f), 1e-5);
}

// Backward order: the last tensor's gradient first.
void write_constant_grads(Engine &engine, float value) {
  for (size_t t = engine.num_tensors(); t-- > 0;) {
    ASSERT_TRUE(testing_util::update_grad(engine, t, [&](void *buffer, dsrt_dtype dtype) {
                  for (int64_t i = 0; i < engine.tensor_numel(t); ++i)
                    from_float(buffer, dtype, static_cast<size_t>(i), value);
                }).ok());
    ASSERT_TRUE(engine.grad_ready(t).ok());
  }
}

std::vector<float> read_all(Engine &engine) {
  std::vector<float> out;
  for (size_t t = 0; t < engine.num_tensors(); ++t) {
    std::vector<float> v(static_cast<size_t>(engine.tensor_numel(t)));
    EXPECT_TRUE(engine.read_fp32(t, v.data(), v.size()).ok());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The values get_group_hyper reports are those the next step uses: under OneCycle's momentum
// cycle also beta1 and the beta2 it pins, which a host cannot set. Before its first step
// DeepSpeed's OneCycle sets the betas to (cycle_min_mom, 0.99); then beta1 falls while lr rises.
TEST(EngineSingle, OneCycleReportsTheScheduledMomentum) {
  TrainConfig config = base_config(OptimizerType::Adam);
  config.scheduler.type = SchedulerType::OneCycle;
  config.scheduler.cycle_min_lr = 0.001;
  config.scheduler.cycle_max_lr = 0.02;
  config.scheduler.cycle_first_step_size = 4;
  EngineRun run = make_run(config, 1);
  Engine &e = *run.engine;
  std::vector<double> lrs, beta1s;
  for (int i = 0; i < 4; ++i) {
    double lr = 0, beta1 = 0, beta2 = 0;
    ASSERT_TRUE(e.get_group_hyper(0, "lr", &lr).ok());
    ASSERT_TRUE(e.get_group_hyper(0, "beta1", &beta1).ok());
    ASSERT_TRUE(e.get_group_hyper(0, "beta2", &beta2).ok());
    EXPECT_EQ(beta2, 0.99);
    lrs.push_back(lr);
    beta1s.push_back(beta1);
    write_constant_grads(e, 0.5f);
    ASSERT_TRUE(e.step(nullptr).ok());
  }
  EXPECT_EQ(lrs[0], config.scheduler.cycle_min_lr);
  EXPECT_EQ(beta1s[0], config.scheduler.cycle_min_mom);
  for (size_t i = 2; i < lrs.size(); ++i) {
    EXPECT_GT(lrs[i], lrs[i - 1]);
    EXPECT_LT(beta1s[i], beta1s[i - 1]);
  }
  EXPECT_GT(beta1s[1], config.scheduler.cycle_min_mom);
  EXPECT_LE(beta1s[1], config.scheduler.cycle_max_mom);
  EXPECT_EQ(e.set_group_hyper(0, "beta1", 0.9).code(), DSRT_ERR_STATE);
}

TEST(EngineSingle, Fp16OverflowSkipsHalvesAndGrows) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  config.fp16.enabled = true;
  config.fp16.initial_scale_power = 10;
  config.fp16.loss_scale_window = 2;
  config.fp16.hysteresis = 1;
  config.fp16.min_loss_scale = 256;
  config.scheduler.type = SchedulerType::WarmupLR;
  config.scheduler.warmup_type = "linear";
  config.scheduler.warmup_min_lr = 0.001;
  config.scheduler.warmup_max_lr = 0.01;
  config.scheduler.warmup_num_steps = 10;
  EngineRun run = make_run(config, 3);
  Engine &e = *run.engine;
  EXPECT_EQ(e.loss_scale(), 1024.0);
  const std::vector<float> before = read_all(e);
  const double lr0 = e.current_lr();

  write_constant_grads(e, INFINITY);
  dsrt_step_result r;
  r.struct_size = sizeof r;
  ASSERT_TRUE(e.step(&r).ok());
  EXPECT_EQ(r.overflow, 1);
  EXPECT_EQ(r.boundary, 1);
  EXPECT_EQ(r.global_step, 1);
  EXPECT_EQ(r.loss_scale, 512.0);
  EXPECT_EQ(e.current_lr(), lr0) << "a skipped step must not advance the schedule";
  EXPECT_EQ(read_all(e), before) << "a skipped step must not change the masters";
  EXPECT_EQ(e.counters().skipped_steps, 1);

  // Clean steps: the scale grows after loss_scale_window of them.
  for (int i = 0; i < 3; ++i) {
    write_constant_grads(e, 0.5f);
    ASSERT_TRUE(e.step(&r).ok());
    EXPECT_EQ(r.overflow, 0);
  }
  EXPECT_EQ(r.loss_scale, 1024.0);
  EXPECT_NE(read_all(e), before);
  EXPECT_GT(e.current_lr(), lr0);

  // Overflows down to the minimum, then one more at the minimum: skipped and reported, no crash.
  for (int i = 0; i < 3; ++i) {
    write_constant_grads(e, NAN);
    ASSERT_TRUE(e.step(&r).ok());
    EXPECT_EQ(r.overflow, 1);
  }
  EXPECT_EQ(r.loss_scale, 256.0);
  EXPECT_TRUE(e.loss_scaler().at_minimum_overflow());
  EXPECT_EQ(e.counters().skipped_steps, 4);
  EXPECT_EQ(e.counters().global_step, 7);
}

TEST(EngineSingle, Bf16NonFiniteStepIsSkippedWithoutScaling) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  config.bf16_enabled = true;
  EngineRun run = make_run(config, 4);
  Engine &e = *run.engine;
  EXPECT_EQ(e.loss_scale(), 1.0);
  const std::vector<float> before = read_all(e);
  write_constant_grads(e, 0.25f);
  // One NaN anywhere is enough.
  void *buffer = nullptr;
  ASSERT_TRUE(e.step(nullptr).ok());
  const std::vector<float> after_clean = read_all(e);
  EXPECT_NE(after_clean, before);
  ASSERT_TRUE(e.grad(2, &buffer, nullptr).ok());
  from_float(buffer, DSRT_BF16, 17, NAN);
  ASSERT_TRUE(e.grad_ready(2).ok());
  dsrt_step_result r;
  r.struct_size = sizeof r;
  ASSERT_TRUE(e.step(&r).ok());
  EXPECT_EQ(r.overflow, 1);
  EXPECT_EQ(r.loss_scale, 1.0);
  EXPECT_EQ(read_all(e), after_clean);
}

TEST(EngineSingle, ReportedLrIsTheOneUsed) {
  TrainConfig config = base_config(OptimizerType::SGD);
  config.optimizer.weight_decay = 0;
  config.scheduler.type = SchedulerType::WarmupLR;
  config.scheduler.warmup_type = "linear";
  config.scheduler.warmup_min_lr = 0.0;
  config.scheduler.warmup_max_lr = 0.1;
  config.scheduler.warmup_num_steps = 4;
  config.gradient_clipping = 0.0;  // plain SGD steps: the movement is the lr
  EngineRun run = make_run(config, 8, {{5}});
  Engine &e = *run.engine;
  double previous_lr = -1;
  bool changed = false;
  for (int i = 0; i < 6; ++i) {
    const std::vector<float> before = read_all(e);
    const double lr = e.current_lr();
    write_constant_grads(e, 1.0f);
    dsrt_step_result r;
    r.struct_size = sizeof r;
    ASSERT_TRUE(e.step(&r).ok());
    EXPECT_EQ(r.lr, lr);
    const std::vector<float> after = read_all(e);
    EXPECT_NEAR(before[0] - after[0], lr, 1e-6) << "SGD moves by lr * grad";
    EXPECT_LE(lr, 0.1 + 1e-12);
    if (previous_lr >= 0 && lr != previous_lr) changed = true;
    previous_lr = lr;
  }
  EXPECT_TRUE(changed) << "the warmup schedule should change the lr";
  EXPECT_NEAR(previous_lr, 0.1, 1e-12) << "after warmup the lr is warmup_max_lr";
}

TEST(EngineSingle, UnreadyGradientsCountAsZero) {
  TrainConfig config = base_config(OptimizerType::SGD);
  config.optimizer.weight_decay = 0;
  config.gradient_clipping = 0.0;  // plain SGD steps: the movement is lr * grad
  EngineRun run = make_run(config, 12, {{4}, {6}});
  Engine &e = *run.engine;
  const std::vector<float> before = read_all(e);
  void *buffer = nullptr;
  ASSERT_TRUE(e.grad(0, &buffer, nullptr).ok());
  for (int i = 0; i < 4; ++i) static_cast<float *>(buffer)[i] = 1.0f;  // written but never signalled
  ASSERT_TRUE(e.grad(1, &buffer, nullptr).ok());
  for (int i = 0; i < 6; ++i) static_cast<float *>(buffer)[i] = 2.0f;
  ASSERT_TRUE(e.grad_ready(1).ok());
  ASSERT_TRUE(e.step(nullptr).ok());
  const std::vector<float> after = read_all(e);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], before[i]);
  for (int i = 4; i < 10; ++i) EXPECT_NEAR(before[i] - after[i], 2.0 * 1e-2, 1e-6);
}

TEST(EngineSingle, EveryStageAtWorldSizeOneMatchesStageZero) {
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
    std::vector<std::vector<float>> finals;
    for (int stage = 0; stage <= 3; ++stage) {
      TrainConfig config = base_config(OptimizerType::AdamW);
      config.bf16_enabled = dtype == DSRT_BF16;
      config.zero.stage = stage;
      config.zero.reduce_bucket_size = 300;  // several buckets, one tensor larger than a bucket
      config.zero.overlap_comm = stage >= 2;
      config.zero.stage3_param_persistence_threshold = 10;
      config.gradient_accumulation_steps = 2;
      EngineRun run = make_run(config, 40);
      Engine &e = *run.engine;
      std::mt19937 rng(77);
      for (int step = 0; step < 6; ++step) {
        for (size_t t = e.num_tensors(); t-- > 0;) {
          void *data = nullptr;
          ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
          ASSERT_NE(data, nullptr);
          const std::vector<float> g = random_values(rng, static_cast<size_t>(e.tensor_numel(t)), 1.0f);
          ASSERT_TRUE(testing_util::update_grad(e, t, [&g](void *buffer, dsrt_dtype wdt) {
                        for (size_t i = 0; i < g.size(); ++i) from_float(buffer, wdt, i, g[i]);
                      }).ok());
          ASSERT_TRUE(e.grad_ready(t).ok());
          ASSERT_TRUE(e.release(t).ok());
        }
        Status s = e.step(nullptr);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      finals.push_back(read_all(e));
      // The working copy the host sees is the cast of the master.
      for (size_t t = 0; t < e.num_tensors(); ++t) {
        std::vector<uint8_t> working;
        dsrt_dtype wdt;
        ASSERT_TRUE(testing_util::read_working_values(e, t, &working, &wdt).ok());
        std::vector<float> master(static_cast<size_t>(e.tensor_numel(t)));
        ASSERT_TRUE(e.read_fp32(t, master.data(), master.size()).ok());
        for (size_t i = 0; i < master.size(); ++i)
          ASSERT_EQ(to_float(working.data(), wdt, i), round_to(wdt, master[i])) << "stage " << stage << " tensor " << t;
      }
    }
    for (int stage = 1; stage <= 3; ++stage) {
      std::vector<double> want(finals[0].begin(), finals[0].end());
      EXPECT_LT(relative_error(finals[stage], want), 1e-6) << "stage " << stage << " dtype " << dtype;
    }
  }
}

TEST(EngineSingle, WriteReadRoundTrip) {
  for (int stage : {0, 3}) {
    TrainConfig config = base_config(OptimizerType::AdamW);
    config.bf16_enabled = true;
    config.zero.stage = stage;
    EngineRun run = make_run(config, 50);
    Engine &e = *run.engine;
    std::mt19937 rng(51);
    for (size_t t = 0; t < e.num_tensors(); ++t) {
      const std::vector<float> value = random_values(rng, static_cast<size_t>(e.tensor_numel(t)), 3.0f);
      ASSERT_TRUE(e.write_fp32(t, value.data(), value.size()).ok());
      std::vector<float> back(value.size());
      ASSERT_TRUE(e.read_fp32(t, back.data(), back.size()).ok());
      EXPECT_EQ(back, value);
      std::vector<uint8_t> working;
      dsrt_dtype wdt;
      ASSERT_TRUE(testing_util::read_working_values(e, t, &working, &wdt).ok());
      ASSERT_EQ(wdt, DSRT_BF16);
      for (size_t i = 0; i < value.size(); ++i)
        ASSERT_EQ(reinterpret_cast<const uint16_t *>(working.data())[i], float_to_bf16(value[i]));
      EXPECT_EQ(e.write_fp32(t, value.data(), value.size() + 1).code(), DSRT_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(e.read_fp32(t, back.data(), back.size() - 1).code(), DSRT_ERR_INVALID_ARGUMENT);
    }
    std::vector<float> bad(7, 1.0f);
    bad[3] = NAN;
    EXPECT_EQ(e.write_fp32(0, bad.data(), bad.size()).code(), DSRT_ERR_INVALID_ARGUMENT);
  }
}

TEST(EngineSingle, OutOfOrderCallsAreStateErrors) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  std::unique_ptr<Engine> e = make_engine(config);
  void *p = nullptr;
  const int64_t shape[] = {4};
  EXPECT_EQ(e->build().code(), DSRT_ERR_STATE);  // nothing registered
  ASSERT_TRUE(e->add_param("w", shape, 1, nullptr, nullptr).ok());
  EXPECT_EQ(e->add_param("w", shape, 1, nullptr, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  Status s = e->step(nullptr);
  EXPECT_EQ(s.code(), DSRT_ERR_STATE);
  EXPECT_NE(s.message().find("build"), std::string::npos) << s.message();
  EXPECT_EQ(e->acquire(0, &p, nullptr).code(), DSRT_ERR_STATE);
  EXPECT_EQ(e->grad(0, &p, nullptr).code(), DSRT_ERR_STATE);
  ASSERT_TRUE(e->build().ok());
  EXPECT_EQ(e->build().code(), DSRT_ERR_STATE);
  s = e->add_param("v", shape, 1, nullptr, nullptr);
  EXPECT_EQ(s.code(), DSRT_ERR_STATE);
  EXPECT_NE(s.message().find("already built"), std::string::npos);
  EXPECT_EQ(e->release(0).code(), DSRT_ERR_STATE);
  ASSERT_TRUE(e->grad(0, &p, nullptr).ok());
  ASSERT_TRUE(e->grad_ready(0).ok());
  EXPECT_EQ(e->grad_ready(0).code(), DSRT_ERR_STATE);
  // A second backward before step() (DeepSpeed allows several per step call): a new micro-step of
  // the same window begins, with a zeroed buffer.
  ASSERT_TRUE(e->grad(0, &p, nullptr).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<const float *>(p)[i], 0.0f);
  ASSERT_TRUE(e->grad_ready(0).ok());
  ASSERT_TRUE(e->step(nullptr).ok());
  ASSERT_TRUE(e->grad(0, &p, nullptr).ok()) << "a new micro-step hands out the buffer again";
  const float *zeros = static_cast<const float *>(p);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(zeros[i], 0.0f) << "the buffer is zeroed each micro-step";
}

TEST(EngineSingle, BadConfigsAreRefused) {
  std::shared_ptr<Comm> comm;
  ASSERT_TRUE(comm_create_local(&comm).ok());
  std::unique_ptr<Engine> e;
  TrainConfig c = base_config(OptimizerType::AdamW);
  c.fp16.enabled = true;
  c.bf16_enabled = true;
  EXPECT_EQ(Engine::create(c, comm, &e).code(), DSRT_ERR_CONFIG);
  c = base_config(OptimizerType::AdamW);
  c.gradient_clipping = -1;
  EXPECT_EQ(Engine::create(c, comm, &e).code(), DSRT_ERR_CONFIG);
  c = base_config(OptimizerType::OneBitAdam);
  c.zero.stage = 2;  // DeepSpeed: "1bit-Adam is not compatible with ZeRO"
  EXPECT_EQ(Engine::create(c, comm, &e).code(), DSRT_ERR_CONFIG);
  c = base_config(OptimizerType::AdamW);
  c.zero.reduce_bucket_size = -1;  // 0 is DeepSpeed's "one bucket per gradient" (test_engine_zero_sizes)
  Status s = Engine::create(c, comm, &e);
  EXPECT_EQ(s.code(), DSRT_ERR_CONFIG);
  EXPECT_NE(s.message().find("reduce_bucket_size"), std::string::npos) << s.message();
  c = base_config(OptimizerType::SGD);
  c.optimizer.nesterov = true;
  EXPECT_EQ(Engine::create(c, comm, &e).code(), DSRT_ERR_CONFIG) << "nesterov without momentum";
}

TEST(EngineSingle, MemoryAtStageZeroIsTwoTwoTwelvePlusAccumulator) {
  TrainConfig config = base_config(OptimizerType::AdamW);
  config.bf16_enabled = true;
  config.zero.reduce_bucket_size = 12000;
  EngineRun run = make_run(config, 60, {{100, 100}, {1000}, {300, 7}, {50, 50}, {70, 70}, {9000}, {4}});
  Engine &e = *run.engine;
  const uint64_t psi = static_cast<uint64_t>(e.partitioning().flat_layout().total());
  dsrt_memory_stats m;
  m.struct_size = sizeof m;
  ASSERT_TRUE(e.memory(&m).ok());
  EXPECT_EQ(m.working_params[DSRT_LOC_DEVICE], 2 * psi);
  EXPECT_EQ(m.master_params[DSRT_LOC_DEVICE], 4 * psi);
  EXPECT_EQ(m.optimizer_states[DSRT_LOC_DEVICE], 8 * psi);
  // Documented extra: the fp32 gradient accumulator (DeepSpeed's 2-byte gradient term in fp32).
  EXPECT_EQ(m.gradients[DSRT_LOC_DEVICE], 4 * psi);
  EXPECT_EQ(m.buffers[DSRT_LOC_DEVICE], 0u) << "no bucket handed out yet";
  write_constant_grads(e, 0.1f);
  ASSERT_TRUE(e.step(nullptr).ok());
  ASSERT_TRUE(e.memory(&m).ok());
  EXPECT_GT(m.buffers[DSRT_LOC_DEVICE], 0u);
  // Gradients signalled per tensor in backward order need at most two bucket buffers.
  EXPECT_LE(m.buffers[DSRT_LOC_DEVICE], 2u * 12000u * 2u);
  EXPECT_LT(m.buffers[DSRT_LOC_DEVICE], 2 * psi);
  EXPECT_EQ(m.working_params[DSRT_LOC_HOST] + m.working_params[DSRT_LOC_NVME], 0u);
}

}  // namespace
}  // namespace dsrt
