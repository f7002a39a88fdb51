// `dsrt estimate-memory`: how much GPU and host memory the model states of an N-parameter model
// need at each ZeRO stage and offload choice, and which configurations fit a given GPU.
//
// Stages 2 and 3 use DeepSpeed's own estimators (estimate_zero2_model_states_mem_needs and
// estimate_zero3_model_states_mem_needs, additional_buffer_factor 1.5), so the numbers agree with
// what DeepSpeed users already read. DeepSpeed has no estimator for stages 0 and 1; for them the
// GPU figure is the ZeRO paper's model ((2+2+K)Ψ and 2Ψ+2Ψ+KΨ/W with K=12) and the host figure is
// DeepSpeed's non-offload host rule (every GPU's process holds an fp32 copy while loading). NVMe
// offload (stage 3 only, as in DeepSpeed) moves the bytes DeepSpeed counts for CPU offload from
// host memory to NVMe; with no NVMe in the choice, the formulas reduce to DeepSpeed's exactly.
// Those 16 bytes include the 4 of the fp32 gradient: dsrt's stage-3 engine swaps its gradient
// partition with the optimizer states, and its dsrt_engine_memory reports them on NVMe
// (tests/cpp/test_offload_nvme_grads.cpp compares the two).
//
// ZeRO-Offload++ (--offload-ratio R < 1, stage 3 with optimizer offload to the CPU; DeepSpeed's
// estimator has no such option): a fraction 1 - R of the partition keeps its fp32 master and Adam
// states (12 bytes per parameter) on the GPU instead of the host -- 12(1-R)Ψ/W more per GPU,
// 12(1-R)Ψ per node less on the host (times the buffer factor); the fp32 gradient copy (4 bytes)
// stays on the host. dsrt splits by sub-groups, so an engine's split is within one sub-group of it.
//
// Frozen parameters (--trainable-params T < --params N: F = N - T frozen, as in LoRA fine-tuning)
// have a 16-bit working copy only, no gradient, master or optimizer state (dsrt's frozen tensors):
// the formulas above run with T, and the F frozen parameters add 2 bytes each on the GPU (divided
// by the world size at stage 3) and, where the host figure is the fp32 copy every process holds
// while loading the model (no optimizer offload at stages 0-2, and stage 3 without zero_init), 4
// bytes each per GPU of the host times the buffer factor. With parameter offload at stage 3 their
// shards move with the trainable ones (dsrt's offload_param moves frozen shards too): the 2F/W
// bytes per GPU go to the host (cpu, times the buffer factor, as DeepSpeed counts parameter
// offload) or to NVMe, i.e. 2F per node divided by the node count.
//
// DeepSpeed's lower-memory bf16 mode (--bf16-master-weights: bf16.bf16_master_weights_and_grads;
// --bf16-optimizer-states: bf16.bf16_optimizer_states) keeps the master in bf16 (2 bytes per
// trainable parameter less) and the two Adam moments in bf16 (4 bytes less), wherever the
// formulas above put the master and the states (the partitioned optimizer side, or the host with
// offload, or NVMe). dsrt keeps the reduced gradient partition in fp32 in this mode too, so the
// gradient bytes are unchanged. Only the configurations that run are shown: stages 1-3, with
// optimizer offload unless the states are bf16 too (DeepSpeed's rule).
//
// ZeRO++ hpZ (--hpz K, zero_hpz_partition_size, stage 3): each GPU also holds a secondary 16-bit
// partition of the trainable parameters over its group of K GPUs, 2T/K bytes (docs/zero.md);
// DeepSpeed's estimator has no term for it, dsrt adds it to the GPU figure of the stage-3 rows.
//
// MiCS (--mics-shard-size K, mics_shard_size, stage 3): the model states are partitioned over a
// shard group of K GPUs instead of the world (replicated across the groups), so the stage-3
// formulas divide by K where DeepSpeed's divide by the world size: K/W more per GPU, and per node
// the host and NVMe bytes of its GPUs' shards (G/K of the offloaded states instead of 1/nodes).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/command.h"

namespace dsrt::cli {
namespace {

constexpr double kBufferFactor = 1.5;  // DeepSpeed's additional_buffer_factor default

enum class Place { kNone, kCpu, kNvme };

const char *place_name(Place p) { return p == Place::kNone ? "none" : p == Place::kCpu ? "cpu" : "nvme"; }

struct Hardware {
  int64_t world_size = 1;     // total GPUs
  int64_t gpus_per_node = 1;  // GPUs per host
  int64_t nodes() const { return world_size / gpus_per_node; }
};

struct Choice {
  int stage = 0;
  Place optimizer = Place::kNone;
  Place param = Place::kNone;
  bool zero_init = true;  // stage 3 only: parameters created already partitioned
  int64_t hpz = 1;        // stage 3: zero_hpz_partition_size (1: off)
  int64_t mics = 0;       // stage 3: mics_shard_size (0: off, the world is one group)
  double ratio = 1.0;     // offload_optimizer.ratio (stage 3, optimizer "cpu")
};

// The bf16 mode (see the top): bytes per trainable parameter the optimizer side saves.
struct Bf16Mode {
  bool master = false;  // bf16.bf16_master_weights_and_grads
  bool states = false;  // bf16.bf16_optimizer_states
  double saved() const { return (master ? 2.0 : 0.0) + (states ? 4.0 : 0.0); }
  // Whether DeepSpeed and dsrt run the mode with this choice.
  bool runs(const Choice &c) const {
    if (!master) return true;
    if (c.stage == 0) return false;
    return states || c.optimizer != Place::kNone;
  }
};

struct Estimate {
  int64_t hpz_bytes = 0;   // per GPU, included in gpu_bytes: the hpZ secondary partition
  int64_t gpu_bytes = 0;   // per GPU
  int64_t host_bytes = 0;  // per host (node)
  int64_t nvme_bytes = 0;  // per host (node)
};

// DeepSpeed's estimate_zero2_model_states_mem_needs, also used for stage 1 with CPU offload
// (DeepSpeed runs stages 1 and 2 through the same optimizer and estimator).
Estimate zero2(double params, const Hardware &hw, bool cpu_offload, double saved) {
  const double total_gpus = double(hw.world_size);
  Estimate e;
  if (cpu_offload) {
    e.gpu_bytes = int64_t(2 * params);
    e.host_bytes = int64_t(params * std::max(4 * total_gpus, 16.0 - saved) * kBufferFactor);
  } else {
    e.gpu_bytes = int64_t(4 * params + std::trunc((16 - saved) * params / total_gpus));
    e.host_bytes = int64_t(params * 4 * double(hw.gpus_per_node) * kBufferFactor);
  }
  return e;
}

// DeepSpeed's estimate_zero3_model_states_mem_needs, with NVMe taking the share of the CPU-offload
// host bytes that belongs to the state placed on NVMe (2Ψ for parameters, 16Ψ for the optimizer).
Estimate zero3(double params, double largest_layer, const Hardware &hw, const Choice &c, double saved) {
  // MiCS partitions over the shard group; per node, its GPUs' shards (1/nodes without MiCS).
  const double total_gpus = c.mics > 0 ? double(c.mics) : double(hw.world_size);
  const double g = double(hw.gpus_per_node);
  const double gpus_factor = c.mics > 0 ? g / double(c.mics) : 1.0 / double(hw.nodes());
  const double largest_layer_memory = 4 * largest_layer;
  Estimate e;
  if (c.optimizer == Place::kNone) {
    e.gpu_bytes = int64_t(largest_layer_memory + std::trunc((18 - saved) * params / total_gpus));
    e.host_bytes = int64_t(c.zero_init ? largest_layer * 4 * g * kBufferFactor : params * 4 * g * kBufferFactor);
    return e;
  }
  const bool param_offloaded = c.param != Place::kNone;
  e.gpu_bytes = int64_t(param_offloaded ? largest_layer_memory
                                        : largest_layer_memory + std::trunc(2 * params / total_gpus));
  // Per-parameter bytes DeepSpeed keeps on the host: 16 for the optimizer side, 2 more for params.
  const double host_factor = (c.optimizer == Place::kCpu ? 16 - saved : 0) + (c.param == Place::kCpu ? 2 : 0);
  const double nvme_factor = (c.optimizer == Place::kNvme ? 16 - saved : 0) + (c.param == Place::kNvme ? 2 : 0);
  const double host_share = host_factor * gpus_factor;
  e.host_bytes = int64_t(params * (c.zero_init ? host_share : std::max(4 * g, host_share)) * kBufferFactor);
  e.nvme_bytes = int64_t(params * nvme_factor * gpus_factor);
  if (c.optimizer == Place::kCpu && c.ratio < 1.0) {
    // The device share of the masters and states (see the top).
    const double moved = 12 * (1.0 - c.ratio) * params;
    e.gpu_bytes += int64_t(std::trunc(moved / total_gpus));
    e.host_bytes -= int64_t(moved * gpus_factor * kBufferFactor);
  }
  return e;
}

Estimate estimate(double params, double largest_layer, const Hardware &hw, const Choice &c, double saved) {
  const double w = double(hw.world_size);
  switch (c.stage) {
    case 0: {
      Estimate e;
      e.gpu_bytes = int64_t((16 - saved) * params);
      e.host_bytes = int64_t(params * 4 * double(hw.gpus_per_node) * kBufferFactor);
      return e;
    }
    case 1:
      if (c.optimizer == Place::kCpu) return zero2(params, hw, true, saved);
      {
        Estimate e = zero2(params, hw, false, saved);
        e.gpu_bytes = int64_t(4 * params + std::trunc((12 - saved) * params / w));
        return e;
      }
    case 2: return zero2(params, hw, c.optimizer == Place::kCpu, saved);
    default: return zero3(params, largest_layer, hw, c, saved);
  }
}

// The estimate for T trainable parameters plus the frozen ones' working copies (see the top).
Estimate estimate_with_frozen(double trainable, double frozen, double largest_layer, const Hardware &hw,
                              const Choice &c, double saved) {
  Estimate e = estimate(trainable, largest_layer, hw, c, saved);
  if (c.stage == 3 && c.hpz > 1) {
    e.hpz_bytes = int64_t(std::trunc(2 * trainable / double(c.hpz)));
    e.gpu_bytes += e.hpz_bytes;
  }
  if (frozen <= 0) return e;
  if (c.stage == 3 && c.optimizer != Place::kNone && c.param != Place::kNone) {
    const double per_node = 2 * frozen / double(hw.nodes());
    if (c.param == Place::kCpu) e.host_bytes += int64_t(per_node * kBufferFactor);
    else e.nvme_bytes += int64_t(per_node);
    return e;
  }
  const double frozen_group = c.mics > 0 ? double(c.mics) : double(hw.world_size);
  e.gpu_bytes += c.stage == 3 ? int64_t(std::trunc(2 * frozen / frozen_group)) : int64_t(2 * frozen);
  const bool loading_copy = c.optimizer == Place::kNone && (c.stage < 3 || !c.zero_init);
  if (loading_copy) e.host_bytes += int64_t(frozen * 4 * double(hw.gpus_per_node) * kBufferFactor);
  return e;
}

// Every configuration worth showing for one stage, in DeepSpeed's table order.
std::vector<Choice> choices_for_stage(int stage, bool have_optimizer, Place optimizer, bool have_param, Place param) {
  std::vector<Choice> out;
  const std::vector<Place> places = stage == 3 ? std::vector<Place>{Place::kCpu, Place::kNvme, Place::kNone}
                                   : stage == 0 ? std::vector<Place>{Place::kNone}
                                                : std::vector<Place>{Place::kCpu, Place::kNone};
  for (Place opt : places) {
    if (have_optimizer && opt != optimizer) continue;
    std::vector<Place> param_places{Place::kNone};
    if (stage == 3 && opt != Place::kNone) param_places = {opt, Place::kNone};
    if (stage == 3 && opt == Place::kNvme) param_places = {Place::kNvme, Place::kCpu, Place::kNone};
    for (Place par : param_places) {
      if (have_param && par != param) continue;
      if (stage == 3) {
        for (bool zi : {true, false}) out.push_back(Choice{stage, opt, par, zi});
      } else {
        out.push_back(Choice{stage, opt, par, true});
      }
    }
  }
  return out;
}

// "7B", "1.3e9", "350M", "125000000" -> parameter count (decimal suffixes K, M, B/G, T).
bool parse_count(const std::string &text, double *out) {
  if (text.empty()) return false;
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(v) || v <= 0) return false;
  std::string suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M" || suffix == "m") scale = 1e6;
  else if (suffix == "B" || suffix == "b" || suffix == "G" || suffix == "g") scale = 1e9;
  else if (suffix == "T" || suffix == "t") scale = 1e12;
  else if (!suffix.empty()) return false;
  *out = std::floor(v * scale);
  return *out >= 1;
}

// "80G", "80GiB", "40960M", "85899345920" -> bytes. K/M/G/T (and KiB...) are binary; KB/MB/GB/TB decimal.
bool parse_bytes(const std::string &text, double *out) {
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(v) || v <= 0) return false;
  std::string s(end);
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b') && s.size() == 3 && (s[1] == 'i' || s[1] == 'I'))
    s = s.substr(0, 1);  // "GiB" -> "G"
  const std::string units = "KMGT";
  double scale = 1;
  if (s.empty()) scale = 1;
  else if (s.size() == 1 && units.find(char(std::toupper(s[0]))) != std::string::npos)
    scale = std::pow(1024.0, double(units.find(char(std::toupper(s[0]))) + 1));
  else if (s.size() == 2 && (s[1] == 'B' || s[1] == 'b') && units.find(char(std::toupper(s[0]))) != std::string::npos)
    scale = std::pow(1000.0, double(units.find(char(std::toupper(s[0]))) + 1));
  else return false;
  *out = v * scale;
  return true;
}

bool parse_int(const std::string &text, int64_t lo, int64_t hi, int64_t *out) {
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parse_place(const std::string &text, Place *out) {
  if (text == "none") *out = Place::kNone;
  else if (text == "cpu") *out = Place::kCpu;
  else if (text == "nvme") *out = Place::kNvme;
  else return false;
  return true;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / 1073741824.0);
  return buf;
}

void print_help() {
  std::printf(
      "usage: dsrt estimate-memory --params N [--trainable-params T] [--world-size W] [--gpus-per-node G] [--stage S]\n"
      "                            [--offload-optimizer none|cpu|nvme] [--offload-param none|cpu|nvme]\n"
      "                            [--offload-ratio R]\n"
      "                            [--largest-layer-params L] [--hpz K] [--mics-shard-size K]\n"
      "                            [--gpu-memory SIZE] [--json]\n"
      "                            [--bf16-master-weights [--bf16-optimizer-states]]\n\n"
      "Memory for the model states (parameters, gradients, optimizer states) of an N-parameter model\n"
      "trained with mixed-precision Adam, per GPU and per host, for each ZeRO stage and offload choice.\n"
      "Activations, the CUDA context and fragmentation are not included.\n\n"
      "  --params N               parameter count: 125000000, 1.3e9, 350M, 7B, 1T\n"
      "  --trainable-params T     of which trainable (default N); the other N-T are frozen: a 16-bit\n"
      "                           working copy only (divided by the world size at stage 3)\n"
      "  --world-size W           total GPUs (default 1)\n"
      "  --gpus-per-node G        GPUs per host (default W: one host); W must be a multiple of G\n"
      "  --stage S                0, 1, 2 or 3 (default: every stage)\n"
      "  --offload-optimizer P    only this optimizer placement (stages 1-3; nvme needs stage 3)\n"
      "  --offload-param P        only this parameter placement (stage 3)\n"
      "  --offload-ratio R        offload_optimizer.ratio (ZeRO-Offload++; needs --stage 3 --offload-optimizer cpu):\n"
      "                           the other 1-R of the fp32 masters and Adam states stay on the GPU\n"
      "  --largest-layer-params L parameters of the largest layer (needed for stage 3, as in DeepSpeed;\n"
      "                           for a transformer usually the embedding, vocab*hidden)\n"
      "  --hpz K                  ZeRO++ hpZ at stage 3 (zero_hpz_partition_size): adds the secondary\n"
      "                           16-bit partition over K GPUs, 2T/K bytes per GPU (K >= 1, at most W,\n"
      "                           dividing W)\n"
      "  --mics-shard-size K      MiCS at stage 3 (mics_shard_size): the model states are partitioned\n"
      "                           over shard groups of K GPUs (K dividing W) and replicated across them\n"
      "  --gpu-memory SIZE        memory of one GPU (80G = 80 GiB, 80GB = 80e9 bytes): prints which\n"
      "                           configurations fit\n"
      "  --json                   machine-readable output, exact byte counts\n"
      "  --bf16-master-weights    bf16.bf16_master_weights_and_grads: bf16 masters (2 bytes per\n"
      "                           trainable parameter less); shows only the configurations that run\n"
      "                           it (stages 1-3; optimizer offload unless the states are bf16 too)\n"
      "  --bf16-optimizer-states  bf16.bf16_optimizer_states: bf16 Adam moments (4 bytes less; needs\n"
      "                           --bf16-master-weights)\n\n"
      "Stages 2 and 3 use DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (additional buffer\n"
      "factor 1.5; host figures are per node; zero_init=1 means parameters are created partitioned).\n"
      "Stages 0 and 1 use the ZeRO paper's model for the GPU (K=12) and DeepSpeed's host rule. NVMe\n"
      "moves the bytes DeepSpeed counts on the host for that state to NVMe.\n\n"
      "exit codes: 0 success (and, with --gpu-memory, at least one configuration fits);\n"
      "            1 with --gpu-memory, no shown configuration fits; 2 bad command line.\n");
}

int usage_error(const char *fmt, const std::string &arg) {
  std::fprintf(stderr, "dsrt estimate-memory: ");
  std::fprintf(stderr, fmt, arg.c_str());
  std::fprintf(stderr, "\n(see dsrt estimate-memory --help)\n");
  return kExitUsage;
}

int run_estimate_memory(const std::vector<std::string> &args) {
  double params = 0, largest_layer = 0, gpu_memory = 0, trainable = 0;
  bool have_trainable = false;
  bool have_params = false, have_largest = false, have_gpu_memory = false, json = false;
  bool have_gpn = false, have_optimizer = false, have_param = false;
  int64_t stage = -1, hpz = 1, mics = 0;
  double ratio = 1.0;
  bool have_ratio = false;
  Hardware hw;
  Place optimizer = Place::kNone, param = Place::kNone;
  Bf16Mode bf16;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--help" || a == "-h") {
      print_help();
      return kExitOk;
    }
    if (a == "--json") {
      json = true;
      continue;
    }
    if (a == "--bf16-master-weights") {
      bf16.master = true;
      continue;
    }
    if (a == "--bf16-optimizer-states") {
      bf16.states = true;
      continue;
    }
    std::string key = a, value;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      key = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else if (a.rfind("--", 0) == 0) {
      if (i + 1 >= args.size()) return usage_error("option %s needs a value", a);
      value = args[++i];
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
    if (key == "--params") {
      if (!parse_count(value, &params)) return usage_error("--params: '%s' is not a positive count (e.g. 7B, 1.3e9)", value);
      have_params = true;
    } else if (key == "--trainable-params") {
      if (!parse_count(value, &trainable)) return usage_error("--trainable-params: '%s' is not a positive count", value);
      have_trainable = true;
    } else if (key == "--largest-layer-params") {
      if (!parse_count(value, &largest_layer)) return usage_error("--largest-layer-params: '%s' is not a positive count", value);
      have_largest = true;
    } else if (key == "--world-size") {
      if (!parse_int(value, 1, 1 << 24, &hw.world_size)) return usage_error("--world-size: '%s' is not a positive integer", value);
    } else if (key == "--gpus-per-node") {
      if (!parse_int(value, 1, 1 << 16, &hw.gpus_per_node)) return usage_error("--gpus-per-node: '%s' is not a positive integer", value);
      have_gpn = true;
    } else if (key == "--hpz") {
      if (!parse_int(value, 1, 1 << 24, &hpz)) return usage_error("--hpz: '%s' is not a positive integer", value);
    } else if (key == "--mics-shard-size") {
      if (!parse_int(value, 1, 1 << 24, &mics))
        return usage_error("--mics-shard-size: '%s' is not a positive integer", value);
    } else if (key == "--stage") {
      if (!parse_int(value, 0, 3, &stage)) return usage_error("--stage: '%s' is not 0, 1, 2 or 3", value);
    } else if (key == "--offload-optimizer") {
      if (!parse_place(value, &optimizer)) return usage_error("--offload-optimizer: '%s' is not none, cpu or nvme", value);
      have_optimizer = true;
    } else if (key == "--offload-param") {
      if (!parse_place(value, &param)) return usage_error("--offload-param: '%s' is not none, cpu or nvme", value);
      have_param = true;
    } else if (key == "--offload-ratio") {
      char *end = nullptr;
      ratio = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(ratio >= 0.0 && ratio <= 1.0))
        return usage_error("--offload-ratio: '%s' is not a number in [0, 1]", value);
      have_ratio = true;
    } else if (key == "--gpu-memory") {
      if (!parse_bytes(value, &gpu_memory)) return usage_error("--gpu-memory: '%s' is not a size (e.g. 80G, 40GB)", value);
      have_gpu_memory = true;
    } else {
      return usage_error("unknown option '%s'", key);
    }
  }
  if (!have_params) return usage_error("%s--params N is required", "");
  if (!have_gpn) hw.gpus_per_node = hw.world_size;
  if (hw.world_size % hw.gpus_per_node != 0)
    return usage_error("--world-size must be a multiple of --gpus-per-node%s", "");
  if (have_trainable && trainable > params) return usage_error("--trainable-params exceeds --params%s", "");
  if (!have_trainable) trainable = params;
  if (have_largest && largest_layer > params) return usage_error("--largest-layer-params exceeds --params%s", "");
  if (have_param && param != Place::kNone && stage != -1 && stage != 3)
    return usage_error("--offload-param needs --stage 3 (parameters are partitioned only at stage 3)%s", "");
  if (have_optimizer && optimizer == Place::kNvme && stage != -1 && stage != 3)
    return usage_error("--offload-optimizer nvme needs --stage 3 (as in DeepSpeed)%s", "");
  if (have_optimizer && optimizer != Place::kNone && stage == 0)
    return usage_error("--offload-optimizer needs stage 1, 2 or 3%s", "");
  if (hpz > hw.world_size) hpz = hw.world_size;  // as DeepSpeed: never larger than the world
  if (hw.world_size % hpz != 0) return usage_error("--hpz must divide --world-size (hpZ groups tile the world)%s", "");
  if (hpz > 1 && stage != -1 && stage != 3) return usage_error("--hpz needs stage 3 (it partitions parameters)%s", "");
  if (mics > 0 && hw.world_size % mics != 0)
    return usage_error("--mics-shard-size must divide --world-size (MiCS shard groups tile the world)%s", "");
  if (mics > 0 && stage != -1 && stage != 3)
    return usage_error("--mics-shard-size needs stage 3 (MiCS shards parameters)%s", "");
  if (mics > 0 && hpz > 1) return usage_error("--mics-shard-size and --hpz exclude each other (as the config keys)%s", "");
  if (have_ratio && ratio < 1.0 && (stage != 3 || !have_optimizer || optimizer != Place::kCpu))
    return usage_error("--offload-ratio below 1 needs --stage 3 and --offload-optimizer cpu (as in DeepSpeed)%s", "");
  if (have_ratio && ratio < 1.0 && bf16.master)
    return usage_error("--offload-ratio below 1 with --bf16-master-weights: dsrt refuses that mix (the device part of "
                       "a split keeps fp32 masters); use one of them%s", "");
  if (mics > 0 && have_ratio && ratio < 1.0)
    return usage_error("--offload-ratio below 1 with --mics-shard-size: dsrt refuses that mix (as the config keys)%s", "");
  if (stage == 3 && !have_largest)
    return usage_error("--stage 3 needs --largest-layer-params L (DeepSpeed's estimator needs it too)%s", "");
  if (bf16.states && !bf16.master)
    return usage_error("--bf16-optimizer-states needs --bf16-master-weights (as bf16.bf16_optimizer_states needs "
                       "bf16.bf16_master_weights_and_grads)%s", "");
  if (bf16.master && stage == 0)
    return usage_error("--bf16-master-weights needs stage 1, 2 or 3%s", "");
  if (bf16.master && !bf16.states && have_optimizer && optimizer == Place::kNone)
    return usage_error("--bf16-master-weights without --bf16-optimizer-states needs --offload-optimizer cpu or "
                       "nvme%s", "");

  std::vector<Choice> rows;
  for (int s = 0; s <= 3; ++s) {
    if (stage != -1 && s != stage) continue;
    if (s == 3 && !have_largest) continue;
    if (have_param && param != Place::kNone && s != 3) continue;
    if (have_optimizer && optimizer == Place::kNvme && s != 3) continue;
    if (have_optimizer && optimizer != Place::kNone && s == 0) continue;
    for (Choice c : choices_for_stage(s, have_optimizer, optimizer, have_param, param)) {
      if (s == 3) c.hpz = hpz;
      if (s == 3) c.mics = mics;
      c.ratio = ratio;
      if (bf16.runs(c)) rows.push_back(c);
    }
  }

  bool any_fits = false;
  std::vector<Estimate> estimates;
  for (const Choice &c : rows) {
    estimates.push_back(estimate_with_frozen(trainable, params - trainable, largest_layer, hw, c, bf16.saved()));
    if (have_gpu_memory && double(estimates.back().gpu_bytes) <= gpu_memory) any_fits = true;
  }

  if (json) {
    std::printf("{\n  \"params\": %.0f,\n  \"trainable_params\": %.0f,\n  \"largest_layer_params\": %.0f,\n  \"world_size\": %lld,\n"
                "  \"gpus_per_node\": %lld,\n  \"nodes\": %lld,\n  \"additional_buffer_factor\": %.1f,\n"
                "  \"bf16_master_weights\": %s,\n  \"bf16_optimizer_states\": %s,\n  \"hpz_partition_size\": %lld,\n  \"mics_shard_size\": %lld,\n",
                params, trainable, largest_layer, (long long)hw.world_size, (long long)hw.gpus_per_node,
                (long long)hw.nodes(), kBufferFactor, bf16.master ? "true" : "false", bf16.states ? "true" : "false",
                (long long)hpz, (long long)mics);
    if (have_gpu_memory) std::printf("  \"gpu_memory_bytes\": %.0f,\n", gpu_memory);
    std::printf("  \"configurations\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Choice &c = rows[i];
      const Estimate &e = estimates[i];
      std::printf("    {\"stage\": %d, \"offload_optimizer\": \"%s\", \"offload_param\": \"%s\", \"zero_init\": %s, "
                  "\"gpu_bytes\": %lld, \"hpz_secondary_bytes\": %lld, \"host_bytes\": %lld, \"nvme_bytes\": %lld%s}%s\n",
                  c.stage, place_name(c.optimizer), place_name(c.param), c.zero_init ? "true" : "false",
                  (long long)e.gpu_bytes, (long long)e.hpz_bytes, (long long)e.host_bytes, (long long)e.nvme_bytes,
                  have_gpu_memory ? (double(e.gpu_bytes) <= gpu_memory ? ", \"fits\": true" : ", \"fits\": false") : "",
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("  ]\n}\n");
    return have_gpu_memory && !any_fits ? kExitFailure : kExitOk;
  }

  std::printf("Model states of a %.3gB-parameter model (mixed-precision Adam%s)", params / 1e9,
              bf16.states ? ", bf16 masters and moments" : bf16.master ? ", bf16 masters" : "");
  if (trainable < params) std::printf(", %.3gB of them trainable (the rest frozen)", trainable / 1e9);
  if (have_largest) std::printf(", largest layer %.3gM parameters", largest_layer / 1e6);
  std::printf("\non %lld GPU%s: %lld node%s x %lld GPU%s per node.\n\n", (long long)hw.world_size,
              hw.world_size > 1 ? "s" : "", (long long)hw.nodes(), hw.nodes() > 1 ? "s" : "",
              (long long)hw.gpus_per_node, hw.gpus_per_node > 1 ? "s" : "");
  std::printf("  stage  offload_optimizer  offload_param  zero_init     per GPU    per host    NVMe/host%s\n",
              have_gpu_memory ? "  fits" : "");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Choice &c = rows[i];
    const Estimate &e = estimates[i];
    std::printf("  %5d  %17s  %13s  %9s  %10s  %10s  %11s%s\n", c.stage, place_name(c.optimizer),
                place_name(c.param), c.stage == 3 ? (c.zero_init ? "1" : "0") : "-", gib(e.gpu_bytes).c_str(),
                gib(e.host_bytes).c_str(), e.nvme_bytes ? gib(e.nvme_bytes).c_str() : "-",
                have_gpu_memory ? (double(e.gpu_bytes) <= gpu_memory ? "  yes" : "  no") : "");
  }
  if (hpz > 1 && have_largest)
    std::printf("\nStage 3 rows include hpZ's secondary partition over %lld GPUs: %s per GPU.\n", (long long)hpz,
                gib(int64_t(std::trunc(2 * trainable / double(hpz)))).c_str());
  if (mics > 0 && have_largest)
    std::printf("\nStage 3 rows partition the model states over MiCS shard groups of %lld GPUs (replicated %lld times).\n",
                (long long)mics, (long long)(hw.world_size / mics));
  if (stage == -1 && !have_largest)
    std::printf("\n(stage 3 not shown: give --largest-layer-params L, as DeepSpeed's estimator needs it)\n");
  if (have_gpu_memory) {
    std::printf("\nFits a %s GPU (model states only; leave room for activations):", gib(int64_t(gpu_memory)).c_str());
    bool first = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (double(estimates[i].gpu_bytes) > gpu_memory) continue;
      const Choice &c = rows[i];
      if (c.stage == 3 && !c.zero_init) continue;  // same GPU figure as zero_init=1
      std::printf("%s stage %d", first ? "" : ";", c.stage);
      if (c.optimizer != Place::kNone) std::printf(" + offload_optimizer=%s", place_name(c.optimizer));
      if (c.param != Place::kNone) std::printf(" + offload_param=%s", place_name(c.param));
      first = false;
    }
    std::printf("%s\n", first ? " none of the configurations shown" : "");
  }
  return have_gpu_memory && !any_fits ? kExitFailure : kExitOk;
}

const bool registered = register_command(
    Command{"estimate-memory", "memory per GPU and per host at each ZeRO stage and offload choice",
            run_estimate_memory});

}  // namespace
}  // namespace dsrt::cli
