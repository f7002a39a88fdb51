// DeepSpeed's lower-memory bf16 mode on one rank: the float64 AdamW recomputation of
// bf16_master_cases.h at stages 1-3 with and without optimizer offload, the configurations
// DeepSpeed refuses (and the ones dsrt does not implement), the same training on the device
// and offloaded, checkpoints (round trip, and to and from an engine with fp32 masters), and
// `dsrt estimate-memory --bf16-...` against dsrt_engine_memory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "bf16_master_cases.h"
#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "config/bf16_master_rules.h"
#include "config/config.h"
#include "optim/cpu_optimizer.h"

namespace dsrt {
namespace {

using namespace bf16_master_test;

TEST(EngineBf16Master, MatchesFloat64ReferenceAtEveryStage) {
  for (const Bf16MasterCase &c : bf16_master_cases()) {
    SCOPED_TRACE(Format("stage %d, bf16 states %d, offload %d", c.stage, c.bf16_states, static_cast<int>(c.offload)));
    run_bf16_master_case(c, local_comm());
  }
}

// The keys are read from a DeepSpeed config (and the old section name "bfloat16"), not refused.
TEST(EngineBf16Master, ConfigKeysAreRead) {
  for (const char *section : {"bf16", "bfloat16"}) {
    const std::string json = Format(R"({"%s": {"enabled": true, "bf16_master_weights_and_grads": true,
        "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2}})", section);
    std::unique_ptr<Config> config;
    Status s = Config::parse(json, "test", &config);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(config->unsupported().empty());
    TrainConfig t;
    s = config->resolve(1, &t);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(t.bf16_master_weights);
    EXPECT_TRUE(t.bf16_optimizer_states);
    EXPECT_TRUE(check_bf16_master_rules(t).ok());
  }
}

TEST(EngineBf16Master, RefusesWhatDeepSpeedRefuses) {
  struct Refusal {
    const char *what;
    Bf16MasterCase c;
    void (*edit)(TrainConfig *);
    dsrt_status code;
    const char *needle;
  };
  const Refusal refusals[] = {
      {"stage 0", {0, true, OffloadDevice::None}, nullptr, DSRT_ERR_CONFIG, "stage 1, 2 or 3"},
      {"fp32 states without offload", {2, false, OffloadDevice::None}, nullptr, DSRT_ERR_CONFIG, "offload_optimizer"},
      {"states without masters", {2, true, OffloadDevice::None},
       [](TrainConfig *t) { t->bf16_master_weights = false; }, DSRT_ERR_CONFIG, "requires"},
      {"offload with SGD", {2, true, OffloadDevice::Cpu},
       [](TrainConfig *t) { t->optimizer.type = OptimizerType::SGD; }, DSRT_ERR_CONFIG, "Adam or AdamW"},
      {"partial offload", {3, true, OffloadDevice::Cpu},
       [](TrainConfig *t) { t->zero.offload_optimizer.ratio = 0.5; }, DSRT_ERR_UNSUPPORTED, "ratio"},
      {"bf16 off", {2, true, OffloadDevice::None}, [](TrainConfig *t) { t->bf16_enabled = false; },
       DSRT_ERR_UNSUPPORTED, "bf16.enabled"},
  };
  for (const Refusal &r : refusals) {
    SCOPED_TRACE(r.what);
    TrainConfig config = bf16_master_config(r.c);
    if (r.edit) r.edit(&config);
    std::unique_ptr<Engine> engine;
    const Status s = Engine::create(config, local_comm(), &engine);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), r.code) << s.message();
    EXPECT_NE(s.message().find(r.needle), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  }
  // The configurations DeepSpeed runs pass the rules: bf16 states on the device (any optimizer),
  // or CPU offload with Adam.
  TrainConfig lion = bf16_master_config({1, true, OffloadDevice::None});
  lion.optimizer.type = OptimizerType::Lion;
  EXPECT_TRUE(check_bf16_master_rules(lion).ok());
  EXPECT_TRUE(check_bf16_master_rules(bf16_master_config({3, false, OffloadDevice::Cpu})).ok());
}

// The same training on the device and with the optimizer offloaded gives the same bits (both are
// the CPU kernels here), for every optimizer the device path runs.
TEST(EngineBf16Master, OffloadedEqualsDeviceBitwise) {
  for (OptimizerType type : {OptimizerType::AdamW, OptimizerType::Adam}) {
    TrainConfig config = bf16_master_config({2, true, OffloadDevice::None});
    config.optimizer.type = type;
    config.gradient_clipping = 1.0;
    std::unique_ptr<Engine> device, offloaded;
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &device).ok());
    config.zero.offload_optimizer.device = OffloadDevice::Cpu;
    Status s = make_engine(config, local_comm(), bf16_shapes(), &offloaded);
    ASSERT_TRUE(s.ok()) << s.message();
    train(*device, 4);
    train(*offloaded, 4);
    expect_bitwise_equal(read_all(*device), read_all(*offloaded));
    expect_same_working_copies(*device, *offloaded);
  }
}

// Lion, SGD with momentum, Adagrad and Lamb keep their states in bf16 on the device too (DeepSpeed:
// any optimizer when the states are bf16 and nothing is offloaded): each state holds bf16 values,
// and the training equals the fp32-state engine's to bf16 accuracy.
TEST(EngineBf16Master, OtherOptimizersKeepBf16States) {
  for (OptimizerType type : {OptimizerType::Lion, OptimizerType::SGD, OptimizerType::Adagrad, OptimizerType::Lamb}) {
    SCOPED_TRACE(static_cast<int>(type));
    TrainConfig config = bf16_master_config({1, true, OffloadDevice::None});
    config.optimizer.type = type;
    config.optimizer.momentum = 0.9;
    config.optimizer.lr = type == OptimizerType::Lion ? 1e-3 : 1e-2;
    std::unique_ptr<Engine> low, full;
    Status s = make_engine(config, local_comm(), bf16_shapes(), &low);
    ASSERT_TRUE(s.ok()) << s.message();
    TrainConfig fp32 = config;
    fp32.bf16_master_weights = fp32.bf16_optimizer_states = false;
    ASSERT_TRUE(make_engine(fp32, local_comm(), bf16_shapes(), &full).ok());
    train(*low, 5);
    train(*full, 5);
    const auto a = read_all(*low), b = read_all(*full);
    double diff = 0, norm = 0;
    for (size_t t = 0; t < a.size(); ++t)
      for (size_t i = 0; i < a[t].size(); ++i) {
        EXPECT_TRUE(is_bf16_value(a[t][i]));
        diff += (double(a[t][i]) - b[t][i]) * (double(a[t][i]) - b[t][i]);
        norm += double(b[t][i]) * b[t][i];
      }
    EXPECT_LT(std::sqrt(diff / norm), 0.01);
    for (int state = 0; state < low->num_optimizer_states(); ++state) {
      std::vector<float> part(static_cast<size_t>(low->partitioning().partition_elems()));
      ASSERT_TRUE(low->read_partition_state(state, 0, part.size(), part.data()).ok());
      size_t nonzero = 0;
      for (float x : part) {
        EXPECT_TRUE(is_bf16_value(x));
        nonzero += x != 0.0f;
      }
      EXPECT_GT(nonzero, part.size() / 2);
    }
  }
}

std::string scratch(const char *name) {
  const std::string dir = "/tmp/dsrt-bf16-master-" + std::string(name) + "-" + std::to_string(::getpid());
  (void)remove_tree(dir);
  return dir;
}

std::vector<std::vector<float>> states_of(Engine &e) {
  std::vector<std::vector<float>> out;
  for (int state = -1; state < e.num_optimizer_states(); ++state) {
    out.emplace_back(static_cast<size_t>(e.partitioning().partition_elems()));
    EXPECT_TRUE(e.read_partition_state(state, 0, out.back().size(), out.back().data()).ok());
  }
  return out;
}

// Checkpoints hold fp32 values (bf16 values widened exactly): a bf16 engine's round trip is
// bitwise; a checkpoint of fp32 masters loads into a bf16 engine rounded to the nearest bf16, and
// a bf16 checkpoint loads into an fp32 engine exactly.
TEST(EngineBf16Master, CheckpointsRoundTripAndConvert) {
  for (const Bf16MasterCase &c : {Bf16MasterCase{2, true, OffloadDevice::None}, Bf16MasterCase{3, false, OffloadDevice::Cpu},
                                  Bf16MasterCase{3, true, OffloadDevice::Nvme}}) {
    SCOPED_TRACE(Format("stage %d, offload %d", c.stage, static_cast<int>(c.offload)));
    const std::string dir = scratch("ckpt");
    TempFolder swap;  // NVMe: every engine's private swap folder under it
    TrainConfig config = bf16_master_config(c);
    if (c.offload == OffloadDevice::Nvme) set_nvme(&config, swap.path, 700, 2, false);
    std::unique_ptr<Engine> saved, loaded;
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &saved).ok());
    train(*saved, 3);
    Status s = save_checkpoint(*saved, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &loaded, false).ok());
    s = load_checkpoint(*loaded, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(states_of(*saved), states_of(*loaded));
    expect_same_working_copies(*saved, *loaded);
    train(*saved, 2, 20);
    train(*loaded, 2, 20);
    expect_bitwise_equal(read_all(*saved), read_all(*loaded));

    // Into an engine with fp32 masters and states: exact widening.
    TrainConfig fp32 = config;
    fp32.bf16_master_weights = fp32.bf16_optimizer_states = false;
    if (c.offload == OffloadDevice::None) fp32.zero.offload_optimizer.device = OffloadDevice::Cpu;
    std::unique_ptr<Engine> wide;
    ASSERT_TRUE(make_engine(fp32, local_comm(), bf16_shapes(), &wide, false).ok());
    s = load_checkpoint(*wide, dir, "");
    ASSERT_TRUE(s.ok()) << s.message();
    std::unique_ptr<Engine> again;
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &again, false).ok());
    ASSERT_TRUE(load_checkpoint(*again, dir, "").ok());
    EXPECT_EQ(states_of(*wide), states_of(*again));

    // From fp32 masters: rounded to the nearest bf16 on load.
    train(*wide, 2, 40);
    const std::string dir2 = scratch("ckpt-fp32");
    ASSERT_TRUE(save_checkpoint(*wide, dir2, "").ok());
    s = load_checkpoint(*again, dir2, "");
    ASSERT_TRUE(s.ok()) << s.message();
    const auto w = states_of(*wide), g = states_of(*again);
    for (size_t k = 0; k < w.size(); ++k) {
      const bool rounded = k == 0 || c.bf16_states;
      size_t changed = 0;
      for (size_t i = 0; i < w[k].size(); ++i) {
        const float want = rounded ? bf16_to_float(float_to_bf16(w[k][i])) : w[k][i];
        ASSERT_EQ(g[k][i], want) << "state " << static_cast<int>(k) - 1 << " element " << i;
        changed += want != w[k][i];
      }
      if (rounded) {
        EXPECT_GT(changed, w[k].size() / 2);  // the fp32 values were not bf16 already
      }
    }
    EXPECT_TRUE(remove_tree(dir).ok());
    EXPECT_TRUE(remove_tree(dir2).ok());
  }
}

// `dsrt estimate-memory --json` with and without the mode: the bytes it says the mode saves equal
// the bytes dsrt_engine_memory reports the engine saves (masters and states; padding aside).
struct CliRun {
  int code = -1;
  std::string output;
};

CliRun run_cli(const std::string &args) {
  CliRun r;
  const std::string binary = std::string(DSRT_BINARY_DIR) + "/bin/dsrt";
  struct stat info;
  if (stat(binary.c_str(), &info) != 0) {
    r.output = "missing " + binary + " (build the dsrt_cli target)";
    return r;
  }
  FILE *pipe = popen((binary + " estimate-memory " + args + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The first configuration's field (e.g. "gpu_bytes") in the command's JSON.
double json_field(const std::string &json, const std::string &field) {
  const size_t at = json.find("\"" + field + "\": ");
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + field.size() + 4, nullptr);
}

uint64_t optimizer_side_bytes(Engine &e, int loc) {
  dsrt_memory_stats mem;
  std::memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  EXPECT_TRUE(e.memory(&mem).ok());
  return mem.master_params[loc] + mem.optimizer_states[loc];
}

TEST(EngineBf16Master, EstimatorCountsWhatTheEngineSaves) {
  int64_t params = 0;
  for (const auto &shape : bf16_shapes()) params += numel_of(shape);
  for (const Bf16MasterCase &c : {Bf16MasterCase{1, true, OffloadDevice::None}, Bf16MasterCase{2, true, OffloadDevice::None},
                                  Bf16MasterCase{3, true, OffloadDevice::None}, Bf16MasterCase{2, false, OffloadDevice::Cpu},
                                  Bf16MasterCase{3, true, OffloadDevice::Cpu}, Bf16MasterCase{3, false, OffloadDevice::Nvme}}) {
    SCOPED_TRACE(Format("stage %d, bf16 states %d, offload %d", c.stage, c.bf16_states, static_cast<int>(c.offload)));
    const bool cpu = c.offload == OffloadDevice::Cpu, nvme = c.offload == OffloadDevice::Nvme;
    const std::string common = Format("--json --params %lld --stage %d --largest-layer-params 2145 --offload-optimizer %s%s",
                                      static_cast<long long>(params), c.stage, cpu ? "cpu" : nvme ? "nvme" : "none",
                                      c.stage == 3 ? " --offload-param none" : "");
    const std::string flags = c.bf16_states ? " --bf16-master-weights --bf16-optimizer-states" : " --bf16-master-weights";
    const CliRun normal = run_cli(common), low = run_cli(common + flags);
    ASSERT_EQ(normal.code, 0) << normal.output;
    ASSERT_EQ(low.code, 0) << low.output;
    EXPECT_NE(low.output.find("\"bf16_master_weights\": true"), std::string::npos) << low.output;
    // Offloaded, the host figure carries DeepSpeed's buffer factor 1.5.
    const char *field = cpu ? "host_bytes" : nvme ? "nvme_bytes" : "gpu_bytes";
    const double factor = cpu ? 1.5 : 1.0;
    const double estimated = (json_field(normal.output, field) - json_field(low.output, field)) / factor;

    TempFolder swap;
    TrainConfig config = bf16_master_config(c);
    if (nvme) set_nvme(&config, swap.path, 1000, 2, false);
    std::unique_ptr<Engine> engine, reference;
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &engine).ok());
    config.bf16_master_weights = config.bf16_optimizer_states = false;
    ASSERT_TRUE(make_engine(config, local_comm(), bf16_shapes(), &reference).ok());
    const int loc = cpu ? DSRT_LOC_HOST : nvme ? DSRT_LOC_NVME : DSRT_LOC_DEVICE;
    const double measured =
        double(optimizer_side_bytes(*reference, loc)) - double(optimizer_side_bytes(*engine, loc));
    const double per_param = c.bf16_states ? 6.0 : 2.0;
    const double padding = double(engine->partitioning().partition_elems() - params) * per_param;
    EXPECT_EQ(estimated, per_param * double(params)) << normal.output << low.output;
    EXPECT_GE(measured, estimated);
    EXPECT_LE(measured, estimated + padding + 1.0);
  }
  // What does not run is refused or not shown.
  EXPECT_EQ(run_cli("--params 1B --stage 0 --bf16-master-weights").code, 2);
  EXPECT_EQ(run_cli("--params 1B --bf16-optimizer-states").code, 2);
  EXPECT_EQ(run_cli("--params 1B --stage 2 --offload-optimizer none --bf16-master-weights").code, 2);
  const CliRun rows = run_cli("--json --params 1B --bf16-master-weights");
  ASSERT_EQ(rows.code, 0) << rows.output;
  EXPECT_EQ(rows.output.find("\"offload_optimizer\": \"none\""), std::string::npos) << rows.output;
  EXPECT_EQ(rows.output.find("\"stage\": 0"), std::string::npos) << rows.output;
}

// The kernels' bf16 storage on its own: a slice stored in bf16 equals the fp32 kernel run on the
// widened values, each result rounded to the nearest bf16 (ties to even), on every instruction set.
TEST(EngineBf16Master, KernelRoundsEachStoreToNearest) {
  const size_t n = 1000;
  const std::vector<float> p0 = gaussian(1, n, 0.5f), g = gaussian(2, n, 0.1f), m0 = gaussian(3, n, 0.01f);
  std::vector<float> v0 = gaussian(4, n, 0.001f);
  for (float &x : v0) x = x * x;
  for (const char *isa : {"scalar", "avx2", "avx512"}) {
    if (!cpu_optimizer_isa_available(isa)) continue;
    SCOPED_TRACE(isa);
    ASSERT_TRUE(cpu_optimizer_set_isa(isa).ok());
    std::vector<uint16_t> pb(n), mb(n), vb(n), wb(n);
    std::vector<float> pf(n), mf(n), vf(n);
    for (size_t i = 0; i < n; ++i) {
      pb[i] = float_to_bf16(p0[i]);
      mb[i] = float_to_bf16(m0[i]);
      vb[i] = float_to_bf16(v0[i]);
      pf[i] = bf16_to_float(pb[i]);
      mf[i] = bf16_to_float(mb[i]);
      vf[i] = bf16_to_float(vb[i]);
    }
    OptimizerConfig oc;
    oc.type = OptimizerType::AdamW;
    oc.weight_decay = 0.1;
    const OptimizerHyper hyper = make_optimizer_hyper(oc, 1e-2, 3);
    OptimizerSlice low;
    low.master_bf16 = pb.data();
    low.state0_bf16 = mb.data();
    low.state1_bf16 = vb.data();
    low.grad = g.data();
    low.working = wb.data();
    low.working_dtype = DSRT_BF16;
    low.n = n;
    OptimizerSlice full;
    full.master = pf.data();
    full.state0 = mf.data();
    full.state1 = vf.data();
    full.grad = g.data();
    full.n = n;
    ASSERT_TRUE(cpu_optimizer_step(hyper, low, 0.5f).ok());
    ASSERT_TRUE(cpu_optimizer_step(hyper, full, 0.5f).ok());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(pb[i], float_to_bf16(pf[i])) << i;
      ASSERT_EQ(wb[i], pb[i]) << i;
      ASSERT_EQ(mb[i], float_to_bf16(mf[i])) << i;
      ASSERT_EQ(vb[i], float_to_bf16(vf[i])) << i;
    }
    // Both master pointers, or none: refused.
    low.master = pf.data();
    EXPECT_EQ(cpu_optimizer_step(hyper, low, 1.0f).code(), DSRT_ERR_INVALID_ARGUMENT);
  }
  ASSERT_TRUE(cpu_optimizer_set_isa(cpu_optimizer_isa_available("avx512") ? "avx512"
                                    : cpu_optimizer_isa_available("avx2") ? "avx2"
                                                                           : "scalar")
                  .ok());
}

}  // namespace
}  // namespace dsrt
