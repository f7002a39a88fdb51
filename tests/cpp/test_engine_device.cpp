// The engine on every device this machine has: the same training cases (stages 0-3, fp32/bf16/fp16
// working copies, AdamW and Lamb, offload_optimizer none, cpu and (stage 3, gradients swapped) nvme) run on the CPU device and, where a
// GPU is visible, on CUDA (skipped with "no CUDA device" otherwise), with the host touching the
// engine's buffers only through the device's copies, as a GPU host would. Results are compared with
// an engine on the CPU device fed the same gradients: bitwise there, to fp32 rounding on a GPU.
// Also: DSRT_DEVICE parsing, the local rank, dsrt_engine_device, set_stream, and where the states
// are reported and reachable (master_partition() is null when they are in GPU memory).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/device_features.h"
#include "device/device_select.h"
#include "offload_test_util.h"

namespace dsrt {
namespace {

using namespace offload_test;

// Sets an environment variable for a scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(EngineDevice, DsrtDeviceChoices) {
  struct Row {
    const char *spec;
    int local_rank, gpus;
    bool cuda;
    dsrt_status code;
    dsrt_device_type type;
    int index;
  } rows[] = {
      {nullptr, 3, 0, false, DSRT_OK, DSRT_DEVICE_CPU, 0},     {nullptr, 3, 2, true, DSRT_OK, DSRT_DEVICE_CUDA, 1},
      {"", 0, 0, true, DSRT_OK, DSRT_DEVICE_CPU, 0},           {"cpu", 0, 4, true, DSRT_OK, DSRT_DEVICE_CPU, 0},
      {"cuda", 5, 4, true, DSRT_OK, DSRT_DEVICE_CUDA, 1},      {"cuda:3", 0, 4, true, DSRT_OK, DSRT_DEVICE_CUDA, 3},
      {"cuda:4", 0, 4, true, DSRT_ERR_DEVICE, DSRT_DEVICE_CPU, 0}, {"cuda", 0, 0, true, DSRT_ERR_DEVICE, DSRT_DEVICE_CPU, 0},
      {"cuda:1", 0, 2, false, DSRT_ERR_UNSUPPORTED, DSRT_DEVICE_CPU, 0},
      {"gpu", 0, 2, true, DSRT_ERR_CONFIG, DSRT_DEVICE_CPU, 0}, {"cuda:", 0, 2, true, DSRT_ERR_CONFIG, DSRT_DEVICE_CPU, 0},
      {"cuda:x", 0, 2, true, DSRT_ERR_CONFIG, DSRT_DEVICE_CPU, 0}, {"cuda:-1", 0, 2, true, DSRT_ERR_CONFIG, DSRT_DEVICE_CPU, 0},
  };
  for (const Row &r : rows) {
    SCOPED_TRACE(Format("DSRT_DEVICE=%s local rank %d, %d GPUs, cuda %d", r.spec ? r.spec : "(unset)", r.local_rank,
                        r.gpus, r.cuda));
    DeviceChoice c;
    const Status s = device_choose(r.spec, r.local_rank, r.gpus, r.cuda, &c);
    EXPECT_EQ(s.code(), r.code) << s.message();
    if (!s.ok()) {
      EXPECT_NE(s.message().find("DSRT_DEVICE"), std::string::npos) << s.message();
      continue;
    }
    EXPECT_EQ(c.type, r.type);
    EXPECT_EQ(c.index, r.index);
    EXPECT_FALSE(c.reason.empty());
  }
}

TEST(EngineDevice, LocalRankFromTheLaunchersEnvironment) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), mpich("MPI_LOCALRANKID", nullptr),
      slurm("SLURM_LOCALID", nullptr), mv2("MV2_COMM_WORLD_LOCAL_RANK", nullptr);
  {
    ScopedEnv local("LOCAL_RANK", nullptr);
    EXPECT_EQ(device_local_rank(7), 7);
  }
  ScopedEnv local("LOCAL_RANK", "5");
  EXPECT_EQ(device_local_rank(7), 5);
  ScopedEnv first("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  EXPECT_EQ(device_local_rank(7), 2);
  ScopedEnv bad("OMPI_COMM_WORLD_LOCAL_RANK", "two");
  EXPECT_EQ(device_local_rank(7), 5);
}

struct DeviceCase {
  int stage;
  dsrt_dtype working;
  OptimizerType optimizer = OptimizerType::AdamW;
  bool offload_cpu = false;
  bool offload_nvme = false;  // stage 3: the gradient partition swapped too (on a GPU: from the device)
};

// One micro-step through the device: gradients are written with Device::copy from host values.
void device_micro_step(Engine &e, uint32_t seed) {
  const Device &device = e.device();
  Device &dev = const_cast<Device &>(device);
  for (size_t t = e.num_tensors(); t-- > 0;) {
    void *data = nullptr;
    ASSERT_TRUE(e.acquire(t, &data, nullptr).ok());
    void *buffer = nullptr;
    dsrt_dtype dtype;
    ASSERT_TRUE(e.grad(t, &buffer, &dtype).ok());
    const std::vector<float> g = gaussian(seed * 7919u + static_cast<uint32_t>(e.rank()) * 131u + static_cast<uint32_t>(t),
                                          static_cast<size_t>(e.tensor_numel(t)), 0.1f);
    std::vector<char> host(g.size() * dtype_size(dtype));
    for (size_t i = 0; i < g.size(); ++i) from_float(host.data(), dtype, static_cast<int64_t>(i), g[i]);
    ASSERT_TRUE(dev.copy(buffer, host.data(), host.size(), nullptr).ok());
    ASSERT_TRUE(dev.synchronize(nullptr).ok());
    ASSERT_TRUE(e.grad_ready(t).ok());
    ASSERT_TRUE(e.release(t).ok());
  }
}

void device_train(Engine &e, int steps) {
  for (int s = 0; s < steps; ++s) {
    device_micro_step(e, 1 + static_cast<uint32_t>(s));
    Status st = e.step(nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

// Working copies read back through the device.
std::vector<std::vector<char>> working_copies(Engine &e) {
  std::vector<std::vector<char>> out;
  Device &dev = const_cast<Device &>(e.device());
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    void *data = nullptr;
    EXPECT_TRUE(e.acquire(t, &data, nullptr).ok());
    out.emplace_back(static_cast<size_t>(e.tensor_numel(t)) * dtype_size(e.working_dtype()));
    EXPECT_TRUE(dev.copy(out.back().data(), data, out.back().size(), nullptr).ok());
    EXPECT_TRUE(dev.synchronize(nullptr).ok());
    EXPECT_TRUE(e.release(t).ok());
  }
  return out;
}

void expect_close(const std::vector<std::vector<float>> &want, const std::vector<std::vector<float>> &got,
                  bool bitwise) {
  if (bitwise) return expect_bitwise_equal(want, got);
  for (size_t t = 0; t < want.size(); ++t)
    for (size_t i = 0; i < want[t].size(); ++i)
      ASSERT_NEAR(got[t][i], want[t][i], 1e-5 * std::fabs(want[t][i]) + 1e-6) << "tensor " << t << " element " << i;
}

std::vector<DeviceCase> device_cases() {
  std::vector<DeviceCase> cases;
  for (int stage : {0, 1, 2, 3})
    for (dsrt_dtype dt : {DSRT_F32, DSRT_BF16}) cases.push_back({stage, dt});
  cases.push_back({2, DSRT_F16});
  cases.push_back({2, DSRT_BF16, OptimizerType::Lamb});
  cases.push_back({1, DSRT_BF16, OptimizerType::AdamW, true});
  cases.push_back({3, DSRT_F32, OptimizerType::AdamW, true});
  cases.push_back({3, DSRT_F32, OptimizerType::AdamW, false, true});
  DeviceCase fp16_nvme{3, DSRT_F16, OptimizerType::AdamW, false, true};
  cases.push_back(fp16_nvme);
  return cases;
}

// Runs every case on the device DSRT_DEVICE=spec selects and compares with the CPU device.
void run_cases_on(const char *spec, dsrt_device_type want_type) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1000}, {33, 65}, {5}, {129}};
  for (const DeviceCase &c : device_cases()) {
    SCOPED_TRACE(Format("%s: stage %d working %s optimizer %d offload cpu %d nvme %d", spec, c.stage,
                        dtype_name(c.working), static_cast<int>(c.optimizer), c.offload_cpu, c.offload_nvme));
    TrainConfig config = base_config(c.stage);
    config.optimizer.type = c.optimizer;
    config.bf16_enabled = c.working == DSRT_BF16;
    if (c.working == DSRT_F16) {
      config.fp16.enabled = true;
      config.gradient_accumulation_steps = 2;
    }
    if (c.offload_cpu) config.zero.offload_optimizer.device = OffloadDevice::Cpu;
    std::shared_ptr<Comm> comm;
    ASSERT_TRUE(comm_create_local(&comm).ok());
    TempFolder swap_folder;  // outlives the engines (they remove their swap folder inside it)
    std::unique_ptr<Engine> reference, engine;
    {
      ScopedEnv env("DSRT_DEVICE", "cpu");
      Status s = make_engine(config, comm, shapes, &reference);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    if (c.offload_nvme) set_nvme(&config, swap_folder.path, 700, 2, true);  // the reference keeps all in memory
    {
      ScopedEnv env("DSRT_DEVICE", spec);
      Status s = make_engine(config, comm, shapes, &engine);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    ASSERT_EQ(engine->device().type(), want_type);
    const bool on_cpu = want_type == DSRT_DEVICE_CPU;
    const int steps = c.working == DSRT_F16 ? 6 : 3;
    train(*reference, steps);  // plain host writes: the reference is on the CPU device
    device_train(*engine, steps);
    EXPECT_EQ(engine->counters().applied_steps, reference->counters().applied_steps);
    EXPECT_GE(engine->counters().applied_steps, 2);
    expect_close(read_all(*reference), read_all(*engine), on_cpu);
    if (on_cpu) {
      EXPECT_EQ(working_copies(*reference), working_copies(*engine));
    }

    // States through the device, wherever they are; pointers only where host-addressable.
    const size_t n = static_cast<size_t>(engine->partitioning().partition_elems());
    std::vector<float> m(n), back(n);
    ASSERT_TRUE(engine->read_partition_state(0, 0, n, m.data()).ok());
    for (float &x : m) x *= 0.5f;
    ASSERT_TRUE(engine->write_partition_state(0, 0, n, m.data()).ok());
    ASSERT_TRUE(engine->read_partition_state(0, 0, n, back.data()).ok());
    EXPECT_EQ(std::memcmp(m.data(), back.data(), n * sizeof(float)), 0);
    const bool host_states = on_cpu || c.offload_cpu;
    if (!c.offload_nvme) {
      EXPECT_EQ(engine->master_partition() != nullptr, host_states);
      EXPECT_EQ(engine->optimizer_state(0) != nullptr, host_states);
    }
    dsrt_memory_stats mem;
    std::memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    ASSERT_TRUE(engine->memory(&mem).ok());
    const uint64_t part_bytes = n * sizeof(float);
    EXPECT_EQ(mem.master_params[c.offload_nvme ? DSRT_LOC_NVME : c.offload_cpu ? DSRT_LOC_HOST : DSRT_LOC_DEVICE],
              part_bytes);
    if (c.offload_nvme) {
      // The gradient partition on NVMe and none in host memory (on a GPU the reducer's device
      // accumulator sums the window; on the CPU device it is swapped during backward).
      EXPECT_EQ(mem.gradients[DSRT_LOC_NVME], part_bytes);
      EXPECT_EQ(mem.gradients[DSRT_LOC_HOST], 0u);
      EXPECT_EQ(mem.gradients[DSRT_LOC_DEVICE], on_cpu ? 0u : part_bytes);
      EXPECT_EQ(engine->host_grad_partition(), nullptr);
    }
    EXPECT_GT(mem.working_params[DSRT_LOC_DEVICE], 0u);
  }
}

TEST(EngineDevice, CasesOnTheCpuDevice) { run_cases_on("cpu", DSRT_DEVICE_CPU); }

TEST(EngineDevice, CasesOnCuda) {
  if (!device_has_cuda()) GTEST_SKIP() << "no CUDA device: the engine's GPU cases need a GPU";
  run_cases_on("cuda:0", DSRT_DEVICE_CUDA);
}

TEST(EngineDevice, CApiReportsTheDeviceAndTakesTheStreamBeforeBuild) {
  ScopedEnv env("DSRT_DEVICE", "cpu");
  dsrt_config *config = nullptr;
  ASSERT_EQ(dsrt_config_parse("{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"AdamW\"}}", &config), DSRT_OK);
  dsrt_comm *comm = nullptr;
  ASSERT_EQ(dsrt_comm_create_local(&comm), DSRT_OK);
  dsrt_engine *engine = nullptr;
  ASSERT_EQ(dsrt_engine_create(config, comm, &engine), DSRT_OK) << dsrt_last_error_message();
  int32_t type = -1, index = -1;
  ASSERT_EQ(dsrt_engine_device(engine, &type, &index), DSRT_OK);
  EXPECT_EQ(type, DSRT_DEVICE_CPU);
  EXPECT_EQ(index, 0);
  int dummy_stream = 0;
  EXPECT_EQ(dsrt_engine_set_stream(engine, &dummy_stream), DSRT_OK);  // stored, ignored on the CPU
  const int64_t shape[1] = {10};
  ASSERT_EQ(dsrt_engine_add_param(engine, "w", shape, 1, nullptr, nullptr), DSRT_OK);
  ASSERT_EQ(dsrt_engine_build(engine), DSRT_OK);
  EXPECT_EQ(dsrt_engine_set_stream(engine, nullptr), DSRT_ERR_STATE);
  dsrt_engine_destroy(engine);
  dsrt_comm_destroy(comm);
  dsrt_config_destroy(config);
}

TEST(EngineDevice, RefusesACudaRequestItCannotServe) {
  if (device_has_cuda()) GTEST_SKIP() << "a CUDA device is visible: the request can be served";
  ScopedEnv env("DSRT_DEVICE", "cuda");
  std::shared_ptr<Comm> comm;
  ASSERT_TRUE(comm_create_local(&comm).ok());
  std::unique_ptr<Engine> e;
  const Status s = Engine::create(base_config(2), comm, &e);
  EXPECT_TRUE(s.code() == DSRT_ERR_UNSUPPORTED || s.code() == DSRT_ERR_DEVICE) << s.message();
  EXPECT_NE(s.message().find("DSRT_DEVICE"), std::string::npos) << s.message();
  ScopedEnv bad("DSRT_DEVICE", "tpu");
  EXPECT_EQ(Engine::create(base_config(2), comm, &e).code(), DSRT_ERR_CONFIG);
}

}  // namespace
}  // namespace dsrt
