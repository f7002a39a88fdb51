// offload_test_util.h -- helpers shared by the offload engine tests: a small model with odd tensor
// sizes, a host loop that feeds seeded gradients, bitwise comparison of read_fp32 and of the working
// copies, and the swap folder's contents.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "config/train_config.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "util/half.h"

namespace dsrt {
namespace offload_test {

// A scratch folder for swap files, removed (if empty, as the engine leaves it) at scope exit.
struct TempFolder {
  std::string path;
  TempFolder() {
    char templ[] = "/tmp/dsrt-offload-test-XXXXXX";
    if (mkdtemp(templ) != nullptr) path = templ;
  }
  ~TempFolder() {
    if (!path.empty()) rmdir(path.c_str());
  }
};

inline std::vector<float> gaussian(uint32_t seed, size_t n, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float &x : out) x = dist(rng);
  return out;
}

inline int64_t numel_of(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// before_build (optional) runs on the created engine before its parameters are registered.
inline Status make_engine(const TrainConfig &config, std::shared_ptr<Comm> comm,
                          const std::vector<std::vector<int64_t>> &shapes, std::unique_ptr<Engine> *out,
                          bool with_init = true, const std::function<Status(Engine &)> &before_build = nullptr) {
  DSRT_RETURN_IF_ERROR(Engine::create(config, std::move(comm), out));
  if (before_build) DSRT_RETURN_IF_ERROR(before_build(**out));
  for (size_t t = 0; t < shapes.size(); ++t) {
    std::vector<float> init;
    if (with_init) init = gaussian(100 + static_cast<uint32_t>(t), static_cast<size_t>(numel_of(shapes[t])), 0.5f);
    DSRT_RETURN_IF_ERROR((*out)->add_param("layer" + std::to_string(t), shapes[t].data(),
                                           static_cast<int>(shapes[t].size()), with_init ? init.data() : nullptr,
                                           nullptr));
  }
  return (*out)->build();
}

// One micro-step's forward and backward; gradients depend on (seed, rank, tensor) only.
inline void host_micro_step(Engine &e, uint32_t seed) {
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    ASSERT_TRUE(e.acquire(t, nullptr, nullptr).ok());
    ASSERT_TRUE(e.release(t).ok());
  }
  for (size_t t = e.num_tensors(); t-- > 0;) {
    ASSERT_TRUE(e.acquire(t, nullptr, nullptr).ok());
    const std::vector<float> g = gaussian(seed * 7919u + static_cast<uint32_t>(e.rank()) * 131u + static_cast<uint32_t>(t),
                                          static_cast<size_t>(e.tensor_numel(t)), 0.1f);
    const Status written = testing_util::update_grad(e, t, [&g](void *buffer, dsrt_dtype dtype) {
      for (size_t i = 0; i < g.size(); ++i) from_float(buffer, dtype, i, g[i]);
    });
    ASSERT_TRUE(written.ok()) << written.message();
    ASSERT_TRUE(e.grad_ready(t).ok());
    ASSERT_TRUE(e.release(t).ok());
  }
}

inline void train(Engine &e, int steps, uint32_t first_seed = 1) {
  for (int s = 0; s < steps; ++s) {
    host_micro_step(e, first_seed + static_cast<uint32_t>(s));
    dsrt_step_result result;
    std::memset(&result, 0, sizeof result);
    result.struct_size = sizeof result;
    Status st = e.step(&result);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

inline std::vector<std::vector<float>> read_all(Engine &e) {
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    out.emplace_back(static_cast<size_t>(e.tensor_numel(t)));
    Status st = e.read_fp32(t, out.back().data(), out.back().size());
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return out;
}

// Per tensor: the relative L2 error ||a - b|| / ||a|| at most rel (values that moved: never all
// zeros). A relative bound per element would fail on elements that happen to sit near zero.
inline void expect_close(const float *a, const float *b, size_t n, double rel, const char *what) {
  double diff = 0.0, norm = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    norm += static_cast<double>(a[i]) * a[i];
    if (std::fabs(d) > worst) worst = std::fabs(d), worst_at = i;
  }
  ASSERT_GT(norm, 0.0) << what << ": all zeros";
  EXPECT_LE(std::sqrt(diff / norm), rel) << what << ": worst element " << worst_at << ": " << a[worst_at] << " vs "
                                         << b[worst_at];
}

// Bitwise equality (memcmp), reporting the first differing element.
inline void expect_bitwise_equal(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    if (std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) == 0) continue;
    for (size_t i = 0; i < a[t].size(); ++i)
      if (std::memcmp(&a[t][i], &b[t][i], sizeof(float)) != 0) {
        ADD_FAILURE() << "tensor " << t << " element " << i << ": " << a[t][i] << " vs " << b[t][i];
        break;
      }
  }
}

inline std::shared_ptr<Comm> local_comm() {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  return comm;
}

// Entries of a folder other than . and .. (0 if it cannot be opened): swap files left behind.
inline size_t entries_in(const std::string &path) {
  size_t n = 0;
  DIR *dir = opendir(path.c_str());
  if (dir == nullptr) return 0;
  while (dirent *e = readdir(dir))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  closedir(dir);
  return n;
}

// Every tensor's gathered working copy, equal dtype and bytes, read through the engines' devices
// (the copies may be GPU memory).
inline void expect_same_working_copies(Engine &a, Engine &b) {
  for (size_t t = 0; t < a.num_tensors(); ++t) {
    std::vector<uint8_t> x, y;
    dsrt_dtype dx, dy;
    ASSERT_TRUE(testing_util::read_working_values(a, t, &x, &dx).ok());
    Status s = testing_util::read_working_values(b, t, &y, &dy);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(dx, dy);
    EXPECT_EQ(x, y) << "working copy of tensor " << t;
  }
}

inline TrainConfig base_config(int stage) {
  TrainConfig c;
  c.zero.stage = stage;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 1000;
  c.zero.allgather_bucket_size = 1000;
  c.zero.stage3_param_persistence_threshold = 10;
  return c;
}

inline void set_nvme(TrainConfig *c, const std::string &path, int64_t sub_group, int64_t buffers, bool pipeline) {
  c->zero.offload_optimizer.device = OffloadDevice::Nvme;
  c->zero.offload_optimizer.nvme_path = path;
  c->zero.offload_optimizer.buffer_count = buffers;
  c->zero.offload_optimizer.pipeline_read = pipeline;
  c->zero.offload_optimizer.pipeline_write = pipeline;
  c->zero.sub_group_size = sub_group;
}

}  // namespace offload_test
}  // namespace dsrt
