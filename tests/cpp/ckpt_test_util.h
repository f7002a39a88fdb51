// ckpt_test_util.h -- shared helpers for the checkpoint tests: deterministic training runs (the
// same gradients for the same step on any world size), snapshots of every engine state, and
// scratch folders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "util/half.h"

namespace dsrt {
namespace ckpt_test {

inline const std::vector<std::vector<int64_t>> &shapes() {
  static const std::vector<std::vector<int64_t>> s = {{37}, {33, 65}, {3000}, {3, 1}, {257, 9}};
  return s;
}

inline int64_t numel_of(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline TrainConfig config_for(int stage, dsrt_dtype working = DSRT_BF16) {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.scheduler.type = SchedulerType::WarmupLR;
  c.scheduler.warmup_num_steps = 20;
  c.scheduler.warmup_max_lr = 1e-2;
  c.steps_per_print = 0;
  c.zero.stage = stage;
  c.zero.stage3_param_persistence_threshold = 0;
  c.fp16.enabled = working == DSRT_F16;
  c.bf16_enabled = working == DSRT_BF16;
  c.effective_json = "{\"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}";
  return c;
}

inline std::unique_ptr<Engine> make_engine(const TrainConfig &config, std::shared_ptr<Comm> comm = nullptr,
                                           const std::vector<std::vector<int64_t>> &tensor_shapes = shapes(),
                                           uint32_t seed = 7,
                                           const std::function<Status(Engine &)> &before_build = nullptr) {
  if (!comm) {
    EXPECT_TRUE(comm_create_local(&comm).ok());
  }
  TrainConfig c = config;
  c.world_size = comm->size();
  c.train_batch_size = c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * comm->size();
  std::unique_ptr<Engine> engine;
  Status s = Engine::create(c, comm, &engine);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!engine) return nullptr;
  std::mt19937 rng(seed);
  for (size_t t = 0; t < tensor_shapes.size(); ++t) {
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> init(static_cast<size_t>(numel_of(tensor_shapes[t])));
    for (float &x : init) x = dist(rng);
    s = engine->add_param("layer" + std::to_string(t) + ".weight", tensor_shapes[t].data(),
                          static_cast<int>(tensor_shapes[t].size()), init.data(), nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  if (before_build) {
    s = before_build(*engine);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  s = engine->build();
  EXPECT_TRUE(s.ok()) << s.message();
  return engine;
}

// Micro-steps whose rank-averaged gradient depends only on (step, tensor, element): rank r adds
// g + (r - (W-1)/2) * d, so every world size trains the same model up to reduction order, while
// each rank still sends a different gradient.
inline void train(Engine &engine, int micro_steps, float scale = 0.3f) {
  for (int i = 0; i < micro_steps; ++i) {
    const int64_t step = engine.counters().global_step * 1000 + engine.counters().micro_step;
    const double loss_scale = engine.loss_scale();
    const float offset = static_cast<float>(engine.rank()) - 0.5f * static_cast<float>(engine.world_size() - 1);
    for (size_t k = engine.num_tensors(); k-- > 0;) {
      std::mt19937 rng(static_cast<uint32_t>(step * 7919 + k * 104729));
      std::normal_distribution<float> dist(0.0f, scale);
      const Status written = testing_util::update_grad(engine, k, [&](void *buffer, dsrt_dtype dtype) {
        for (int64_t j = 0; j < engine.tensor_numel(k); ++j) {
          const float g = dist(rng), d = dist(rng);
          from_float(buffer, dtype, static_cast<size_t>(j),
                     to_float(buffer, dtype, static_cast<size_t>(j)) + static_cast<float>((g + offset * d) * loss_scale));
        }
      });
      ASSERT_TRUE(written.ok()) << written.message();
      ASSERT_TRUE(engine.grad_ready(k).ok());
    }
    dsrt_step_result result;
    result.struct_size = sizeof result;
    Status s = engine.step(&result);
    ASSERT_TRUE(s.ok()) << s.message();
  }
}

// Every full fp32 master value, gathered (collective).
inline std::vector<std::vector<float>> masters(Engine &engine) {
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < engine.num_tensors(); ++t) {
    out.emplace_back(static_cast<size_t>(engine.tensor_numel(t)));
    Status s = engine.read_fp32(t, out.back().data(), out.back().size());
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return out;
}

// This rank's partition states byte for byte (master and every optimizer state), read through
// the engine wherever they live (testing_util::read_partition_states).
inline std::vector<std::vector<float>> partition_bytes(Engine &engine) {
  std::vector<std::vector<float>> out;
  Status s = testing_util::read_partition_states(engine, &out);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

inline bool bitwise_equal(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

inline std::string scratch_dir(const std::string &name) {
  const std::string dir = std::string(DSRT_BINARY_DIR) + "/ckpt_scratch/" + name + "_" + std::to_string(::getpid());
  EXPECT_TRUE(remove_tree(dir).ok());
  EXPECT_TRUE(make_directories(dir).ok());
  return dir;
}

}  // namespace ckpt_test
}  // namespace dsrt
