// Checkpoint save/load on one rank: bitwise-exact continuation at every stage and working dtype
// (weights, optimizer states, counters, scheduler, loss scale), client state, tags and latest,
// mismatched models, loading across stages.
#include <gtest/gtest.h>

#include <cstdio>

#include "ckpt/manifest.h"
#include "ckpt_test_util.h"

namespace dsrt {
namespace {

using namespace ckpt_test;

struct Snapshot {
  std::vector<std::vector<float>> part;
  EngineCounters counters;
  double loss_scale = 0, lr = 0;
  LossScalerState scaler;
  int64_t sched = 0;
};

Snapshot snapshot(Engine &e) {
  return {partition_bytes(e), e.counters(), e.loss_scale(), e.current_lr(), e.loss_scaler().state(), e.scheduler_iteration()};
}

void expect_same(const Snapshot &a, const Snapshot &b) {
  EXPECT_TRUE(bitwise_equal(a.part, b.part));
  EXPECT_EQ(a.counters.global_step, b.counters.global_step);
  EXPECT_EQ(a.counters.applied_steps, b.counters.applied_steps);
  EXPECT_EQ(a.counters.skipped_steps, b.counters.skipped_steps);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.scaler.cur_iter, b.scaler.cur_iter);
  EXPECT_EQ(a.scaler.last_overflow_iter, b.scaler.last_overflow_iter);
  EXPECT_EQ(a.scaler.cur_hysteresis, b.scaler.cur_hysteresis);
  EXPECT_EQ(a.sched, b.sched);
}

TEST(Checkpoint, ContinuationIsBitwiseExactAtEveryStageAndDtype) {
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16, DSRT_F16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " stage " + std::to_string(stage));
      const std::string dir = scratch_dir("cont");
      TrainConfig config = config_for(stage, dtype);
      config.gradient_accumulation_steps = 2;
      // fp16: large gradients overflow the initial 2^16 scale, so skipped steps and a lowered
      // scale are part of what must survive.
      const float scale = dtype == DSRT_F16 ? 2.0f : 0.3f;
      auto a = make_engine(config);
      train(*a, 6, scale);
      ASSERT_TRUE(save_checkpoint(*a, dir, "").ok());
      train(*a, 8, scale);
      const Snapshot want = snapshot(*a);
      const auto want_masters = masters(*a);

      auto b = make_engine(config, nullptr, shapes(), 99);  // different init: the load must replace it
      Status s = load_checkpoint(*b, dir, "");
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(b->counters().global_step, 3);
      train(*b, 8, scale);
      expect_same(want, snapshot(*b));
      EXPECT_TRUE(bitwise_equal(want_masters, masters(*b)));
      // The working copy the host reads continues bitwise too.
      for (size_t t = 0; t < a->num_tensors(); ++t) {
        std::vector<uint8_t> wa, wb;
        dsrt_dtype da, db;
        ASSERT_TRUE(testing_util::read_working_values(*a, t, &wa, &da).ok());
        ASSERT_TRUE(testing_util::read_working_values(*b, t, &wb, &db).ok());
        EXPECT_EQ(da, db);
        EXPECT_EQ(wa, wb) << a->tensor_name(t);
      }
      if (dtype == DSRT_F16) {
        EXPECT_GT(want.counters.skipped_steps, 0);
      }
      EXPECT_TRUE(remove_tree(dir).ok());
    }
  }
}

TEST(Checkpoint, DefaultTagLatestAndClientState) {
  const std::string dir = scratch_dir("tags");
  auto a = make_engine(config_for(2));
  const char blob[] = "epoch=3;\0binary\xff";
  a->set_client_state(blob, sizeof blob);
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "").ok());
  std::string latest;
  ASSERT_TRUE(read_whole_file(dir + "/latest", 100, &latest).ok());
  EXPECT_EQ(latest, "global_step2\n");
  train(*a, 1);
  a->set_client_state(nullptr, 0);
  ASSERT_TRUE(save_checkpoint(*a, dir, "mine").ok());
  ASSERT_TRUE(read_whole_file(dir + "/latest", 100, &latest).ok());
  EXPECT_EQ(latest, "mine\n");

  auto b = make_engine(config_for(2));
  ASSERT_TRUE(load_checkpoint(*b, dir, "global_step2").ok());
  ASSERT_EQ(b->client_state().size(), sizeof blob);
  EXPECT_EQ(0, std::memcmp(b->client_state().data(), blob, sizeof blob));
  EXPECT_EQ(b->counters().global_step, 2);
  ASSERT_TRUE(load_checkpoint(*b, dir, "").ok());
  EXPECT_TRUE(b->client_state().empty());
  EXPECT_EQ(b->counters().global_step, 3);
  // Only temporary-free, complete tags remain.
  std::vector<std::string> names;
  ASSERT_TRUE(list_directory(dir, &names).ok());
  for (const std::string &n : names) EXPECT_NE(n[0], '.') << n;
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Checkpoint, RefusesMidAccumulationAndBadArguments) {
  const std::string dir = scratch_dir("refuse");
  TrainConfig config = config_for(1);
  config.gradient_accumulation_steps = 2;
  auto a = make_engine(config);
  train(*a, 1);
  Status s = save_checkpoint(*a, dir, "");
  EXPECT_EQ(s.code(), DSRT_ERR_STATE) << s.message();
  train(*a, 1);
  EXPECT_EQ(save_checkpoint(*a, dir, "../escape").code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(save_checkpoint(*a, dir, "latest").code(), DSRT_ERR_INVALID_ARGUMENT);
  s = load_checkpoint(*a, dir, "");
  EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT);
  EXPECT_NE(s.message().find("latest"), std::string::npos) << s.message();
  s = load_checkpoint(*a, dir, "nope");
  EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT);
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Checkpoint, AnotherModelIsRefusedAndNothingChanges) {
  const std::string dir = scratch_dir("model");
  auto a = make_engine(config_for(1));
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  std::vector<std::vector<int64_t>> other = shapes();
  other[2] = {2999};
  auto b = make_engine(config_for(1), nullptr, other);
  const Snapshot before = snapshot(*b);
  Status s = load_checkpoint(*b, dir, "t");
  EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT);
  EXPECT_NE(s.message().find("another model"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  expect_same(before, snapshot(*b));
  // Another optimizer with a different number of states.
  TrainConfig sgd = config_for(1);
  sgd.optimizer.type = OptimizerType::SGD;
  auto c = make_engine(sgd);
  s = load_checkpoint(*c, dir, "t");
  EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT) << s.message();
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Checkpoint, LoadsAcrossStagesAtOneRank) {
  const std::string dir = scratch_dir("stages");
  auto a = make_engine(config_for(3));
  train(*a, 3);
  ASSERT_TRUE(save_checkpoint(*a, dir, "s3").ok());
  const auto want = masters(*a);
  train(*a, 2);
  const auto want_after = masters(*a);
  for (int stage = 0; stage <= 2; ++stage) {
    auto b = make_engine(config_for(stage));
    Status s = load_checkpoint(*b, dir, "s3");
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(bitwise_equal(want, masters(*b)));
    train(*b, 2);
    // One rank: the same arithmetic in the same order at every stage.
    EXPECT_TRUE(bitwise_equal(want_after, masters(*b))) << "stage " << stage;
  }
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Checkpoint, InterruptedFallbackSwapLeavesTheOldFolderLoadable) {
  // On filesystems without RENAME_EXCHANGE an overwrite first moves the tag to .old-<tag>-<id>; a
  // crash before the second rename leaves only that folder, which a load must find.
  const std::string dir = scratch_dir("fallback");
  auto a = make_engine(config_for(2));
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  const auto want = partition_bytes(*a);
  ASSERT_EQ(std::rename((dir + "/t").c_str(), (dir + "/.old-t-0123456789abcdef").c_str()), 0);
  auto b = make_engine(config_for(2), nullptr, shapes(), 77);
  Status s = load_checkpoint(*b, dir, "");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(bitwise_equal(want, partition_bytes(*b)));
  // The next save of the tag completes and the displaced folder is cleared.
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  ASSERT_TRUE(save_checkpoint(*a, dir, "u").ok());
  EXPECT_FALSE(path_exists(dir + "/.old-t-0123456789abcdef"));
  EXPECT_TRUE(remove_tree(dir).ok());
}

}  // namespace
}  // namespace dsrt
