// Every seed config (DeepSpeed / Accelerate / HF Trainer JSON users already have) drives the
// engine: "auto" values are resolved the way the HF Trainer would, then the engine trains a tiny
// model for a few steps. A seed may only be refused with DSRT_ERR_UNSUPPORTED naming a feature
// this engine does not implement (e.g. NVMe offload), never crash or silently misbehave.
#include <gtest/gtest.h>

#include <cmath>
#include <dirent.h>
#include <random>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine_test_util.h"

namespace dsrt {
namespace {

std::vector<std::string> seed_files() {
  const std::string dir = DSRT_SOURCE_DIR "/../shared/configs/seeds";
  std::vector<std::string> out;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".json") out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The values a Trainer would fill in for a small run.
Status resolve_autos(Config &config) {
  DSRT_RETURN_IF_ERROR(config.set_hidden_size(64));
  for (const std::string &path : config.unresolved()) {
    const std::string last = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    auto ends = [&](const char *name) { return last == name; };
    Status s;
    if (ends("enabled")) {
      s = config.set_bool(path, path.rfind("bf16", 0) == 0);
    } else if (path.find("betas.") != std::string::npos) {
      s = config.set_number(path, ends("0") ? 0.9 : 0.999);
    } else if (ends("betas")) {
      s = config.set_number(path + ".0", 0.9);
      if (s.ok()) s = config.set_number(path + ".1", 0.999);
    } else {
      double value = 1.0;
      if (ends("lr") || ends("warmup_max_lr")) value = 1e-3;
      if (ends("warmup_min_lr") || ends("weight_decay")) value = 0.0;
      if (ends("eps")) value = 1e-8;
      if (ends("warmup_num_steps")) value = 2;
      if (ends("total_num_steps")) value = 100;
      if (ends("train_batch_size")) continue;  // derived by the batch rule
      s = config.set_number(path, value);
      // Not a number: a switch (off unless it is bf16) or no offload.
      if (!s.ok() && s.message().find("set_bool") != std::string::npos) s = config.set_bool(path, false);
      if (!s.ok() && s.message().find("set_string") != std::string::npos) s = config.set_string(path, "none");
    }
    DSRT_RETURN_IF_ERROR(s.with_context("resolving " + path));
  }
  return config.set_world_size(1);
}

TEST(EngineSeeds, EverySeedConfigTrainsOrIsRefusedAsUnsupported) {
  const std::vector<std::string> files = seed_files();
  ASSERT_GE(files.size(), 10u) << "the seed configs are expected at ../shared/configs/seeds";
  int trained = 0;
  for (const std::string &file : files) {
    SCOPED_TRACE(file);
    std::unique_ptr<Config> config;
    Status s = Config::load(file, &config);
    ASSERT_TRUE(s.ok()) << s.message();
    s = resolve_autos(*config);
    ASSERT_TRUE(s.ok()) << s.message();
    TrainConfig train;
    s = config->resolve(1, &train);
    if (s.ok()) {
      std::shared_ptr<Comm> comm;
      ASSERT_TRUE(comm_create_local(&comm).ok());
      // Seed configs name NVMe folders of their authors' machines; swap under the test's temp folder.
      for (OffloadConfig *offload : {&train.zero.offload_optimizer, &train.zero.offload_param})
        if (offload->device == OffloadDevice::Nvme) offload->nvme_path = ::testing::TempDir();
      std::unique_ptr<Engine> engine;
      s = Engine::create(train, comm, &engine);
      if (s.ok()) {
        const int64_t shapes[3][2] = {{16, 8}, {8, 1}, {3, 5}};
        std::mt19937 rng(1);
        for (int t = 0; t < 3; ++t) {
          const std::vector<float> init = testing_util::random_values(rng, static_cast<size_t>(shapes[t][0] * shapes[t][1]), 0.1f);
          ASSERT_TRUE(engine->add_param("p" + std::to_string(t), shapes[t], 2, init.data(), nullptr).ok());
        }
        ASSERT_TRUE(engine->build().ok());
        for (int micro = 0; micro < 3 * train.gradient_accumulation_steps; ++micro) {
          for (size_t t = engine->num_tensors(); t-- > 0;) {
            void *data = nullptr;
            dsrt_dtype dtype;
            ASSERT_TRUE(engine->acquire(t, &data, &dtype).ok());
            const float value = static_cast<float>(0.01 * engine->loss_scale());
            ASSERT_TRUE(testing_util::update_grad(*engine, t, [&](void *grad, dsrt_dtype grad_dtype) {
                          for (int64_t i = 0; i < engine->tensor_numel(t); ++i)
                            from_float(grad, grad_dtype, static_cast<size_t>(i), value);
                        }).ok());
            ASSERT_TRUE(engine->grad_ready(t).ok());
            ASSERT_TRUE(engine->release(t).ok());
          }
          dsrt_step_result r;
          r.struct_size = sizeof r;
          s = engine->step(&r);
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_EQ(r.overflow, 0);
        }
        std::vector<float> value(16 * 8);
        ASSERT_TRUE(engine->read_fp32(0, value.data(), value.size()).ok());
        for (float v : value) ASSERT_TRUE(std::isfinite(v));
        EXPECT_EQ(engine->counters().global_step, 3);
        ++trained;
        continue;
      }
    }
    // Only a feature this build does not implement may stop a seed, and the message says which.
    EXPECT_EQ(s.code(), DSRT_ERR_UNSUPPORTED) << s.message();
    EXPECT_FALSE(s.message().empty());
    std::printf("[ seed     ] %s: refused: %s\n", file.c_str(), s.message().c_str());
  }
  EXPECT_GE(trained, static_cast<int>(files.size()) - 4) << "most seeds must train";
  std::printf("[ seeds    ] %d of %zu seed configs trained\n", trained, files.size());
}

}  // namespace
}  // namespace dsrt
