// test_lr_scheduler.cpp -- the lr schedules against DeepSpeed's formulas.
//
// Checked against deepspeed/runtime/lr_schedules.py on DeepSpeed master (2025: WarmupLR sets the
// optimizer lr to warmup_min_lr in its constructor, WarmupCosineLR clamps the cosine progress to 1,
// OneCycle honours stair counts) and deepspeed/runtime/engine.py _take_model_step (the schedule
// steps once after each optimizer step that did not overflow). The references below are float64
// re-derivations of those formulas written in a different form (integer positions inside the
// cycle, division instead of multiplication by an inverse, ...), so values agree to rounding.
//
// Stepping rule under test: the k-th applied optimizer step (k >= 1) uses the constructor's value
// for k == 1 and the formula at last_batch_iteration = k - 2 for k >= 2.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "engine/lr_scheduler.h"

namespace dsrt {
namespace {

constexpr double kPi = 3.14159265358979323846;

void expect_close(double actual, double expected, const std::string &what) {
  const double tolerance = 1e-12 * std::max(1.0, std::fabs(expected));
  EXPECT_NEAR(actual, expected, tolerance) << what;
}

std::unique_ptr<LrScheduler> make(const SchedulerConfig &c, double base_lr = 0.01,
                                  double base_momentum = 0.9) {
  std::unique_ptr<LrScheduler> s;
  Status st = make_lr_scheduler(c, base_lr, base_momentum, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

// ---- references: value used by the k-th applied optimizer step (k >= 1) -----------------------

double ref_warmup_fraction(int64_t it, int64_t warmup, const std::string &type) {
  const int64_t w = warmup < 2 ? 2 : warmup;
  if (type == "linear") return double(it) / double(w);
  return std::log(double(it + 1)) / std::log(double(w));
}

double ref_warmup_lr(const SchedulerConfig &c, bool decay, int64_t k) {
  if (k == 1) return c.warmup_min_lr;
  const int64_t it = k - 2;
  const int64_t w = c.warmup_num_steps < 2 ? 2 : c.warmup_num_steps;
  double g = 1.0;
  if (it < w) {
    g = ref_warmup_fraction(it, c.warmup_num_steps, c.warmup_type);
  } else if (decay) {
    const int64_t span = c.total_num_steps - w > 1 ? c.total_num_steps - w : 1;
    g = double(c.total_num_steps - it) / double(span);
    if (g < 0) g = 0;
  }
  return c.warmup_min_lr + g * (c.warmup_max_lr - c.warmup_min_lr);
}

double ref_cosine_lr(const SchedulerConfig &c, double base_lr, int64_t k) {
  if (k == 1) return 0.0;
  const int64_t it = k - 2;
  const int64_t w = c.warmup_num_steps < 2 ? 2 : c.warmup_num_steps;
  double ratio;
  if (it < w) {
    ratio = c.warmup_min_ratio +
            ref_warmup_fraction(it, c.warmup_num_steps, c.warmup_type) * (1 - c.warmup_min_ratio);
  } else {
    const int64_t span = c.total_num_steps - w > 1 ? c.total_num_steps - w : 1;
    double p = double(it - w + 1) / double(span);
    if (p > 1) p = 1;
    ratio = c.cos_min_ratio + (1 - c.cos_min_ratio) * 0.5 * (1 + std::cos(kPi * p));
    if (ratio < 0) ratio = 0;
  }
  return base_lr * ratio;
}

// OneCycle: returns the fraction s of the way from the cycle's floor to its peak.
double ref_one_cycle_fraction(const SchedulerConfig &c, int64_t it) {
  const int64_t s1 = c.cycle_first_step_size;
  const int64_t s2 = c.cycle_second_step_size < 0 ? s1 : c.cycle_second_step_size;
  const int64_t n1 = c.cycle_first_stair_count;
  const int64_t n2 = c.cycle_second_stair_count < 0 ? n1 : c.cycle_second_stair_count;
  const int64_t t = (it + 1) % (s1 + s2);
  if (t <= s1) return n1 > 0 ? double((t * n1) / s1) / double(n1) : double(t) / double(s1);
  const int64_t down = s1 + s2 - t;
  return n2 > 0 ? double((down * n2) / s2) / double(n2) : double(down) / double(s2);
}

struct LrMom {
  double lr;
  double mom;
};

LrMom ref_one_cycle(const SchedulerConfig &c, int64_t k) {
  if (k == 1) return {c.cycle_min_lr, c.cycle_min_mom};
  const int64_t it = k - 2;
  const int64_t s1 = c.cycle_first_step_size;
  const int64_t total = s1 + (c.cycle_second_step_size < 0 ? s1 : c.cycle_second_step_size);
  if (it < total) {
    const double s = ref_one_cycle_fraction(c, it);
    return {c.cycle_min_lr + s * (c.cycle_max_lr - c.cycle_min_lr),
            c.cycle_max_mom - s * (c.cycle_max_mom - c.cycle_min_mom)};
  }
  LrMom out{c.cycle_min_lr, c.cycle_max_mom};
  if (c.decay_step_size == 0) return out;
  const double d = double(it - total + 1) / double(c.decay_step_size);
  if (c.decay_lr_rate != 0) out.lr = c.cycle_min_lr / (1 + c.decay_lr_rate * d);
  if (c.decay_mom_rate != 0) out.mom = c.cycle_max_mom * (1 + c.decay_mom_rate * d);
  return out;
}

double ref_range_test(const SchedulerConfig &c, int64_t k) {
  if (k == 1) return c.lr_range_test_min_lr;
  const int64_t b = k - 1;  // it + 1
  const double interval = c.lr_range_test_staircase
                              ? double(b / c.lr_range_test_step_size)
                              : double(b) / double(c.lr_range_test_step_size);
  return c.lr_range_test_min_lr * (1 + c.lr_range_test_step_rate * interval);
}

// Drive a schedule the way the engine does: overflowed attempts do not step it. Every attempt's lr
// must equal the reference for the applied-step number it would become.
void drive(LrScheduler &s, int64_t applied_steps, double overflow_rate,
           const std::function<double(int64_t)> &ref_lr,
           const std::function<double(int64_t)> &ref_mom = nullptr) {
  std::mt19937 rng(7);
  std::bernoulli_distribution overflow(overflow_rate);
  int64_t k = 1;
  while (k <= applied_steps) {
    expect_close(s.lr(), ref_lr(k), std::string(s.name()) + " lr at applied step " +
                                        std::to_string(k));
    if (ref_mom) expect_close(s.momentum(), ref_mom(k), "momentum at step " + std::to_string(k));
    if (overflow(rng)) continue;  // skipped step: the engine does not step the schedule
    EXPECT_EQ(s.last_batch_iteration(), k - 2);
    s.step();
    ++k;
  }
}

// Value the k-th applied step uses, by stepping a fresh schedule k - 1 times.
double lr_at_applied_step(const SchedulerConfig &c, int64_t k, double base_lr = 0.01) {
  auto s = make(c, base_lr);
  for (int64_t i = 1; i < k; ++i) s->step();
  return s->lr();
}

// ---- WarmupLR / WarmupDecayLR ------------------------------------------------------------------

SchedulerConfig warmup_config(SchedulerType type, const std::string &warmup_type) {
  SchedulerConfig c;
  c.type = type;
  c.warmup_min_lr = 1e-5;
  c.warmup_max_lr = 3e-3;
  c.warmup_num_steps = 37;
  c.warmup_type = warmup_type;
  c.total_num_steps = 200;
  return c;
}

TEST(WarmupLR, LinearBoundaries) {
  SchedulerConfig c;
  c.type = SchedulerType::WarmupLR;
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 1e-3;
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  auto s = make(c);
  EXPECT_STREQ(s->name(), "WarmupLR");
  EXPECT_EQ(s->last_batch_iteration(), -1);
  EXPECT_EQ(s->lr(), 0.0);                        // step 1: constructor value = warmup_min_lr
  expect_close(lr_at_applied_step(c, 2), 0.0, "it 0");
  expect_close(lr_at_applied_step(c, 3), 1e-4, "it 1");
  expect_close(lr_at_applied_step(c, 11), 9e-4, "it 9 (last warmup)");
  expect_close(lr_at_applied_step(c, 12), 1e-3, "it 10 (warmup end)");
  expect_close(lr_at_applied_step(c, 500), 1e-3, "long after");
  EXPECT_FALSE(s->has_momentum());
}

TEST(WarmupLR, LogBoundaries) {
  SchedulerConfig c = warmup_config(SchedulerType::WarmupLR, "log");
  expect_close(lr_at_applied_step(c, 1), 1e-5, "constructor");
  expect_close(lr_at_applied_step(c, 2), 1e-5, "it 0: log(1) = 0");
  expect_close(lr_at_applied_step(c, 37), 1e-5 + (3e-3 - 1e-5) * std::log(36.0) / std::log(37.0),
               "it 35");
  expect_close(lr_at_applied_step(c, 38), 3e-3, "it 36 = W - 1: log(W) / log(W)");
  expect_close(lr_at_applied_step(c, 39), 3e-3, "it 37 = W");
}

TEST(WarmupLR, SequencesMatchReference) {
  for (const char *type : {"log", "linear"}) {
    for (int64_t w : {0, 1, 2, 5, 37, 1000}) {  // 0 and 1 warm up over 2 steps, as in DeepSpeed
      SchedulerConfig c = warmup_config(SchedulerType::WarmupLR, type);
      c.warmup_num_steps = w;
      auto s = make(c);
      drive(*s, 1200, 0.1, [&](int64_t k) { return ref_warmup_lr(c, false, k); });
    }
  }
}

TEST(WarmupLR, UnknownWarmupTypeFallsBackToLog) {
  SchedulerConfig c = warmup_config(SchedulerType::WarmupLR, "cosine");
  SchedulerConfig as_log = warmup_config(SchedulerType::WarmupLR, "log");
  for (int64_t k : {1, 2, 5, 20, 40})
    expect_close(lr_at_applied_step(c, k), lr_at_applied_step(as_log, k), "k " + std::to_string(k));
}

TEST(WarmupDecayLR, Boundaries) {
  SchedulerConfig c;
  c.type = SchedulerType::WarmupDecayLR;
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 1.0;
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.total_num_steps = 20;
  EXPECT_STREQ(make(c)->name(), "WarmupDecayLR");
  expect_close(lr_at_applied_step(c, 1), 0.0, "constructor");
  expect_close(lr_at_applied_step(c, 11), 0.9, "it 9");
  expect_close(lr_at_applied_step(c, 12), 1.0, "it 10 = warmup end");
  expect_close(lr_at_applied_step(c, 17), 0.5, "it 15");
  expect_close(lr_at_applied_step(c, 21), 0.1, "it 19");
  expect_close(lr_at_applied_step(c, 22), 0.0, "it 20 = total");
  expect_close(lr_at_applied_step(c, 30), 0.0, "after total: clamped at 0");
}

TEST(WarmupDecayLR, SequencesMatchReference) {
  for (const char *type : {"log", "linear"}) {
    for (int64_t total : {38, 80, 400}) {
      SchedulerConfig c = warmup_config(SchedulerType::WarmupDecayLR, type);
      c.total_num_steps = total;
      auto s = make(c);
      drive(*s, total + 60, 0.25, [&](int64_t k) { return ref_warmup_lr(c, true, k); });
    }
  }
}

// ---- WarmupCosineLR ----------------------------------------------------------------------------

TEST(WarmupCosineLR, BoundariesAreRatiosOfBaseLr) {
  SchedulerConfig c;
  c.type = SchedulerType::WarmupCosineLR;
  c.warmup_num_steps = 10;
  c.total_num_steps = 20;
  c.warmup_min_ratio = 0.1;
  c.cos_min_ratio = 0.01;
  c.warmup_type = "linear";
  const double base = 2.0;
  EXPECT_STREQ(make(c, base)->name(), "WarmupCosineLR");
  EXPECT_EQ(lr_at_applied_step(c, 1, base), 0.0);  // DeepSpeed's constructor sets lr 0
  expect_close(lr_at_applied_step(c, 2, base), 0.2, "it 0: warmup_min_ratio");
  expect_close(lr_at_applied_step(c, 7, base), 2.0 * (0.1 + 0.5 * 0.9), "it 5");
  expect_close(lr_at_applied_step(c, 11, base), 2.0 * (0.1 + 0.9 * 0.9), "it 9");
  expect_close(lr_at_applied_step(c, 12, base),
               2.0 * (0.01 + 0.99 * 0.5 * (1 + std::cos(0.1 * kPi))), "it 10: first cosine step");
  expect_close(lr_at_applied_step(c, 21, base), 2.0 * 0.01, "it 19: progress 1");
  expect_close(lr_at_applied_step(c, 22, base), 2.0 * 0.01, "it 20: clamped");
  expect_close(lr_at_applied_step(c, 300, base), 2.0 * 0.01, "long after: stays at the floor");
}

TEST(WarmupCosineLR, SequencesMatchReference) {
  for (const char *type : {"log", "linear"}) {
    for (double wmr : {0.0, 0.3}) {
      for (double cmr : {0.0001, 0.2}) {
        SchedulerConfig c = warmup_config(SchedulerType::WarmupCosineLR, type);
        c.warmup_min_ratio = wmr;
        c.cos_min_ratio = cmr;
        auto s = make(c, 6e-4);
        drive(*s, c.total_num_steps + 50, 0.15,
              [&](int64_t k) { return ref_cosine_lr(c, 6e-4, k); });
      }
    }
  }
}

// ---- OneCycle ----------------------------------------------------------------------------------

SchedulerConfig one_cycle_config() {
  SchedulerConfig c;
  c.type = SchedulerType::OneCycle;
  c.cycle_min_lr = 0.1;
  c.cycle_max_lr = 0.5;
  c.cycle_first_step_size = 4;
  c.cycle_second_step_size = -1;
  c.cycle_first_stair_count = 0;
  c.cycle_second_stair_count = -1;
  c.decay_step_size = 2;
  c.decay_lr_rate = 0.5;
  c.cycle_momentum = true;
  c.cycle_min_mom = 0.8;
  c.cycle_max_mom = 0.9;
  c.decay_mom_rate = 0.1;
  return c;
}

TEST(OneCycle, BoundariesWithMomentum) {
  SchedulerConfig c = one_cycle_config();
  auto s = make(c);
  EXPECT_STREQ(s->name(), "OneCycle");
  ASSERT_TRUE(s->has_momentum());
  ASSERT_TRUE(s->has_beta2());
  EXPECT_EQ(s->beta2(), 0.99);
  // Constructor: lr = cycle_min_lr, betas = (cycle_min_mom, 0.99).
  EXPECT_EQ(s->lr(), 0.1);
  EXPECT_EQ(s->momentum(), 0.8);
  const struct {
    int64_t it;
    double lr, mom;
  } expect[] = {
      {0, 0.2, 0.875},  // b = 1: a quarter up
      {2, 0.4, 0.825},  // b = 3
      {3, 0.5, 0.8},    // b = 4: the peak (lr max, momentum min)
      {5, 0.3, 0.85},   // b = 6: half way down
      {7, 0.1, 0.9},    // b = 8: cycle end
      {8, 0.1 / 1.25, 0.9 * 1.05},  // decay: d = 1/2
      {11, 0.1 / 2.0, 0.9 * 1.2},   // d = 4/2
  };
  int64_t it = -1;
  for (const auto &e : expect) {
    while (it < e.it) {
      s->step();
      ++it;
    }
    expect_close(s->lr(), e.lr, "lr it " + std::to_string(e.it));
    expect_close(s->momentum(), e.mom, "mom it " + std::to_string(e.it));
  }
}

TEST(OneCycle, StairCounts) {
  SchedulerConfig c = one_cycle_config();
  c.cycle_first_step_size = 6;
  c.cycle_second_step_size = 4;
  c.cycle_first_stair_count = 3;
  c.cycle_second_stair_count = 2;
  c.cycle_min_lr = 0.0;
  c.cycle_max_lr = 1.0;
  auto s = make(c);
  // fraction of the way up for b = it + 1 = 1..10 (see the stair arithmetic in the reference)
  const double expect[] = {0, 1.0 / 3, 1.0 / 3, 2.0 / 3, 2.0 / 3, 1, 0.5, 0.5, 0, 0};
  for (int b = 1; b <= 10; ++b) {
    s->step();
    expect_close(s->lr(), expect[b - 1], "b " + std::to_string(b));
  }
}

// The asymmetric cycle whose float scale lands a hair under the peak must still reach it.
TEST(OneCycle, StairsReachThePeakOnAsymmetricCycles) {
  SchedulerConfig c = one_cycle_config();
  c.cycle_min_lr = 0.0;
  c.cycle_max_lr = 1.0;
  for (int64_t s1 : {3, 7, 10, 33}) {
    for (int64_t s2 : {5, 11, 17}) {
      c.cycle_first_step_size = s1;
      c.cycle_second_step_size = s2;
      c.cycle_first_stair_count = 1;
      c.cycle_second_stair_count = 1;
      expect_close(lr_at_applied_step(c, s1 + 1), 1.0,
                   "peak s1=" + std::to_string(s1) + " s2=" + std::to_string(s2));
    }
  }
}

TEST(OneCycle, SequencesMatchReference) {
  SchedulerConfig c = one_cycle_config();
  for (int64_t s1 : {4, 9, 50}) {
    for (int64_t s2 : {-1, 3, 21}) {
      for (int64_t n1 : {0, 1, 4}) {
        for (int64_t n2 : {-1, 0, 3}) {
          for (int64_t decay : {0, 5}) {
            c.cycle_first_step_size = s1;
            c.cycle_second_step_size = s2;
            c.cycle_first_stair_count = n1;
            c.cycle_second_stair_count = n2;
            c.decay_step_size = decay;
            auto s = make(c);
            const int64_t total = s1 + (s2 < 0 ? s1 : s2);
            drive(*s, total + 40, 0.2, [&](int64_t k) { return ref_one_cycle(c, k).lr; },
                  [&](int64_t k) { return ref_one_cycle(c, k).mom; });
          }
        }
      }
    }
  }
}

TEST(OneCycle, WithoutMomentumCyclingLeavesMomentumAlone) {
  SchedulerConfig c = one_cycle_config();
  c.cycle_momentum = false;
  auto s = make(c, 0.01, 0.95);
  EXPECT_FALSE(s->has_momentum());
  EXPECT_FALSE(s->has_beta2());
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(s->momentum(), 0.95);
    s->step();
  }
}

TEST(OneCycle, NoDecayWhenRateIsZero) {
  SchedulerConfig c = one_cycle_config();
  c.decay_lr_rate = 0.0;
  c.decay_mom_rate = 0.0;
  expect_close(lr_at_applied_step(c, 40), 0.1, "lr stays at cycle_min_lr");
  auto s = make(c);
  for (int i = 0; i < 40; ++i) s->step();
  expect_close(s->momentum(), 0.9, "momentum stays at cycle_max_mom");
}

// ---- LRRangeTest -------------------------------------------------------------------------------

TEST(LRRangeTest, ContinuousAndStaircase) {
  SchedulerConfig c;
  c.type = SchedulerType::LRRangeTest;
  c.lr_range_test_min_lr = 0.01;
  c.lr_range_test_step_size = 5;
  c.lr_range_test_step_rate = 2.0;
  c.lr_range_test_staircase = false;
  EXPECT_STREQ(make(c)->name(), "LRRangeTest");
  expect_close(lr_at_applied_step(c, 1), 0.01, "constructor");
  expect_close(lr_at_applied_step(c, 2), 0.01 * 1.4, "it 0");
  expect_close(lr_at_applied_step(c, 6), 0.03, "it 4");
  c.lr_range_test_staircase = true;
  expect_close(lr_at_applied_step(c, 5), 0.01, "it 3: still the first stair");
  expect_close(lr_at_applied_step(c, 6), 0.03, "it 4: b = 5, second stair");
  expect_close(lr_at_applied_step(c, 11), 0.05, "it 9");
  for (bool staircase : {false, true}) {
    c.lr_range_test_staircase = staircase;
    auto s = make(c);
    drive(*s, 300, 0.3, [&](int64_t k) { return ref_range_test(c, k); });
  }
}

// ---- constant, checkpointing, validation -------------------------------------------------------

TEST(NoScheduler, ConstantAtBaseLr) {
  SchedulerConfig c;
  auto s = make(c, 3e-4, 0.9);
  EXPECT_STREQ(s->name(), "None");
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(s->lr(), 3e-4);
    s->step();
  }
  EXPECT_EQ(s->last_batch_iteration(), 9);
}

TEST(Checkpoint, SetLastBatchIterationResumesExactly) {
  std::vector<SchedulerConfig> configs;
  configs.push_back(warmup_config(SchedulerType::WarmupLR, "log"));
  configs.push_back(warmup_config(SchedulerType::WarmupDecayLR, "linear"));
  configs.push_back(warmup_config(SchedulerType::WarmupCosineLR, "log"));
  configs.push_back(one_cycle_config());
  SchedulerConfig range;
  range.type = SchedulerType::LRRangeTest;
  configs.push_back(range);
  for (const SchedulerConfig &c : configs) {
    auto running = make(c);
    for (int i = 0; i < 57; ++i) running->step();
    auto resumed = make(c);
    resumed->set_last_batch_iteration(running->last_batch_iteration());
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(resumed->lr(), running->lr()) << running->name() << " " << i;
      ASSERT_EQ(resumed->momentum(), running->momentum()) << running->name() << " " << i;
      running->step();
      resumed->step();
    }
    // Back to -1: the constructor's value again.
    resumed->set_last_batch_iteration(-1);
    EXPECT_EQ(resumed->lr(), make(c)->lr()) << running->name();
  }
}

void expect_config_error(const SchedulerConfig &c, const std::string &key) {
  std::unique_ptr<LrScheduler> s;
  Status st = make_lr_scheduler(c, 1e-3, 0.9, &s);
  EXPECT_EQ(st.code(), DSRT_ERR_CONFIG) << key;
  EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  EXPECT_EQ(s, nullptr);
}

TEST(Validation, RequiredParamsNameTheKey) {
  SchedulerConfig c = warmup_config(SchedulerType::WarmupDecayLR, "log");
  c.total_num_steps = -1;  // not given
  expect_config_error(c, "scheduler.params.total_num_steps");
  c.total_num_steps = c.warmup_num_steps;
  expect_config_error(c, "scheduler.params.total_num_steps");
  c.type = SchedulerType::WarmupCosineLR;
  expect_config_error(c, "scheduler.params.total_num_steps");
  c.total_num_steps = 100;
  c.warmup_num_steps = -1;  // 0 is valid: DeepSpeed warms up over max(2, warmup_num_steps) steps
  expect_config_error(c, "scheduler.params.warmup_num_steps");
  c.type = SchedulerType::WarmupLR;
  expect_config_error(c, "scheduler.params.warmup_num_steps");
  c.warmup_num_steps = 0;
  std::unique_ptr<LrScheduler> zero_warmup;
  ASSERT_TRUE(make_lr_scheduler(c, 0.1, 0.9, &zero_warmup).ok());
  for (int64_t warmup : {1, 2}) {  // DeepSpeed 0.19.8 refuses 0; dsrt runs its max(2, n) schedule
    SchedulerConfig same = c;
    same.warmup_num_steps = warmup;
    std::unique_ptr<LrScheduler> reference;
    ASSERT_TRUE(make_lr_scheduler(same, 0.1, 0.9, &reference).ok());
    for (int it = 0; it < 4; ++it) {
      EXPECT_EQ(zero_warmup->lr(), reference->lr()) << "warmup " << warmup << " iteration " << it;
      zero_warmup->step();
      reference->step();
    }
    zero_warmup->set_last_batch_iteration(-1);
  }
  c.warmup_num_steps = 10;
  c.warmup_max_lr = std::nan("");
  expect_config_error(c, "scheduler.params.warmup_max_lr");

  SchedulerConfig oc = one_cycle_config();
  oc.cycle_min_lr = oc.cycle_max_lr = 0.0;
  expect_config_error(oc, "scheduler.params.cycle_max_lr");
  oc = one_cycle_config();
  oc.cycle_first_step_size = 0;
  expect_config_error(oc, "scheduler.params.cycle_first_step_size");
  oc = one_cycle_config();
  oc.cycle_first_stair_count = -2;
  expect_config_error(oc, "scheduler.params.cycle_first_stair_count");
  oc = one_cycle_config();
  oc.decay_step_size = -1;
  expect_config_error(oc, "scheduler.params.decay_step_size");

  SchedulerConfig rt;
  rt.type = SchedulerType::LRRangeTest;
  rt.lr_range_test_step_size = 0;
  expect_config_error(rt, "scheduler.params.lr_range_test_step_size");

  EXPECT_EQ(make_lr_scheduler(SchedulerConfig(), 1e-3, 0.9, nullptr).code(),
            DSRT_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dsrt
