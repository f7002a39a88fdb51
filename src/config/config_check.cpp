// defines: Config::check (rules across keys, features dsrt does not implement, settings it does not
// act on), Config::effective and the batch-size rule.
#include <cmath>
#include <map>

#include "config/config.h"
#include "config/config_internal.h"

namespace dsrt {

Value Config::effective(const KeySpec &spec) const {
  auto found = values_.find(spec.path);
  if (found != values_.end() && found->second.kind != Value::Kind::Null) return found->second;
  if (spec.path == "zero_optimization.overlap_comm") {
    // DeepSpeed's default depends on the stage: overlapping is on at stage 3 only.
    Value stage = effective(*spec_for("zero_optimization.stage"));
    if (stage.kind == Value::Kind::Number) return Value::of_bool(stage.number == 3);
    return Value::null();
  }
  return spec.default_value;
}

namespace {

std::string optimizer_list() {
  std::string out;
  // The 1-bit optimizers (last in the list) are not suggested as replacements.
  for (int i = 0; i < static_cast<int>(OptimizerType::OneBitAdam); ++i) out += std::string(i ? ", " : "") + kOptimizerTypes[i];
  return out;
}

std::string scheduler_list() {
  std::string out;
  for (int i = 1; i < kNumSchedulerTypes; ++i) out += std::string(i > 1 ? ", " : "") + kSchedulerTypes[i];
  return out;
}

bool opaque_active(const JsonNode &node) {
  if (node.type == JsonNode::Type::Null) return false;
  if (node.type == JsonNode::Type::Bool) return node.boolean;
  if (node.type != JsonNode::Type::Object) return true;
  if (const JsonNode *enabled = node.find("enabled")) {
    if (enabled->type == JsonNode::Type::Bool) return enabled->boolean;
    return enabled->type != JsonNode::Type::Null;
  }
  return !node.members.empty();
}

}  // namespace

void Config::check(std::vector<Problem> *errors) {
  warnings_ = parse_warnings_;
  if (unknown_top_level_keys_ > 20)
    warnings_.insert(warnings_.begin() + static_cast<std::ptrdiff_t>(unknown_top_level_summary_),
                     Format("%zu more unknown top-level keys; DeepSpeed ignores them and so does dsrt",
                            unknown_top_level_keys_ - 20));
  unsupported_.clear();
  auto error = [&](const std::string &path, const std::string &message) {
    auto position = positions_.find(path);
    Problem problem{path, message, 0, 0};
    if (position != positions_.end()) {
      problem.line = position->second.first;
      problem.column = position->second.second;
    }
    errors->push_back(problem);
  };
  auto value_of = [&](const std::string &path) {
    const KeySpec *spec = spec_for(path);
    return spec ? effective(*spec) : Value::null();
  };
  auto number_of = [&](const std::string &path, double *out) {
    Value v = value_of(path);
    if (v.kind != Value::Kind::Number) return false;
    *out = v.number;
    return true;
  };

  // --- values dsrt does not implement or does not act on
  std::map<std::string, std::string> host_sections;  // section -> "key = value, ..."
  std::map<std::string, std::string> host_notes;
  for (const auto &entry : values_) {
    const KeySpec *spec = spec_for(entry.first);
    const Value &value = entry.second;
    if (!spec || value.kind == Value::Kind::Auto || value.kind == Value::Kind::Null || value == spec->default_value)
      continue;
    // DeepSpeed turns hpZ on only for a partition above 1.
    if (entry.first == "zero_optimization.zero_hpz_partition_size" && value.number <= 1) continue;
    const std::string setting = entry.first + " = " + value.to_text();
    switch (spec->support) {
      case Support::Implemented: break;
      case Support::Unsupported: unsupported_.push_back(setting + ": " + spec->note); break;
      case Support::HostSide: {
        const SectionSpec *section = find_section(spec->section());
        if (section && section->support == Support::HostSide && !section->path.empty()) {
          std::string &list = host_sections[section->path];
          list += (list.empty() ? "" : ", ") + spec->name() + " = " + value.to_text();
          host_notes[section->path] = spec->note;
        } else {
          warnings_.push_back(where(entry.first) + ": " + setting + ": dsrt does not act on it: " + spec->note);
        }
        break;
      }
      case Support::Ignored:
        warnings_.push_back(where(entry.first) + ": " + setting + " has no effect in dsrt: " + spec->note);
        break;
    }
  }
  for (const auto &entry : host_sections)
    warnings_.push_back(where(entry.first) + ": " + entry.first + " (" + entry.second + "): " + host_notes[entry.first]);

  if (has_optimizer()) {
    const std::string &name = values_.at("optimizer.type").text;
    if (optimizer_type() < 0)
      unsupported_.push_back("optimizer.type = \"" + name + "\": this optimizer is not implemented by dsrt; use one of " +
                             optimizer_list());
  }
  if (has_scheduler() && scheduler_type() < 0)
    unsupported_.push_back("scheduler.type = \"" + values_.at("scheduler.type").text +
                           "\": torch.optim.lr_scheduler types are not implemented by dsrt; use one of " +
                           scheduler_list());
  for (const auto &entry : opaque_) {
    const SectionSpec *section = find_section(entry.first);
    // optimizer.params / scheduler.params of an unimplemented type are reported with the type.
    if (!section || !section->opaque || !opaque_active(entry.second)) continue;
    if (section->support == Support::Unsupported)
      unsupported_.push_back(entry.first + " is enabled: " + section->note);
    else
      warnings_.push_back(where(entry.first) + ": " + entry.first + " is set: " + section->note);
  }

  // dsrt accumulates gradients in fp32 (exact over micro-steps and ranks): "fp32" says just that.
  Value accum = value_of("data_types.grad_accum_dtype");
  if (accum.kind == Value::Kind::String && accum.text != "fp32")
    unsupported_.push_back("data_types.grad_accum_dtype = " + accum.to_text() +
                           ": accumulating gradients in 16 bits is not implemented (dsrt accumulates them in fp32, "
                           "which is exact and costs 4 bytes per element); set it to \"fp32\" or remove it");

  // data_types.param_dtype: DeepSpeed casts the parameters to it; dsrt's working copies are in the
  // precision's dtype (fp16/bf16/fp32), so only that one is implemented.
  Value param_dtype = value_of("data_types.param_dtype");
  if (param_dtype.kind == Value::Kind::String) {
    const std::string working = value_of("fp16.enabled") == Value::of_bool(true)   ? "fp16"
                                : value_of("bf16.enabled") == Value::of_bool(true) ? "bf16"
                                                                                    : "fp32";
    if (param_dtype.text != working)
      unsupported_.push_back("data_types.param_dtype = " + param_dtype.to_text() + ": parameters in another dtype "
                             "than the precision's (" + working + ") are not implemented; remove it or set it to \"" +
                             working + "\"");
  }

  // --- rules across keys
  if (value_of("fp16.enabled") == Value::of_bool(true) && value_of("bf16.enabled") == Value::of_bool(true))
    error("bf16.enabled", "fp16.enabled and bf16.enabled are both true; enable at most one of them");

  double stage = 0;
  bool stage_known = number_of("zero_optimization.stage", &stage);
  for (const char *which : {"offload_optimizer", "offload_param"}) {
    const std::string base = std::string("zero_optimization.") + which;
    Value device = value_of(base + ".device");
    if (device.kind != Value::Kind::String || device.text == "none") continue;
    bool is_param = std::string(which) == "offload_param";
    // DeepSpeed reads offload_param only at stage 3 and offload_optimizer only from stage 1 on, and
    // ignores them below; so does dsrt (resolve() leaves them off), saying so.
    if (stage_known && ((is_param && stage != 3) || (!is_param && stage == 0))) {
      warnings_.push_back(where(base + ".device") + ": " + base + ".device = " + device.to_text() + " has no effect at " +
                          "zero_optimization.stage " + format_number(stage) + " (DeepSpeed ignores it too): " +
                          (is_param ? "parameter offload needs stage 3" : "optimizer offload needs stage 1, 2 or 3"));
      continue;
    }
    // DeepSpeed refuses NVMe optimizer offload below stage 3; dsrt's engine runs it at stages 1 and 2
    // too (bitwise equal to the in-memory engine). Said, so a config shared with DeepSpeed is not a surprise there.
    if (stage_known && !is_param && (stage == 1 || stage == 2) && device.text == "nvme")
      warnings_.push_back(where(base + ".device") + ": " + base + ".device is \"nvme\" at stage " +
                          format_number(stage) + ": dsrt runs it, but DeepSpeed accepts NVMe optimizer offload only at "
                          "stage 3 (ZeRO-Infinity)");
    if (device.text == "nvme") {
      Value path = value_of(base + ".nvme_path");
      if (path.kind != Value::Kind::Auto && (path.kind != Value::Kind::String || path.text.empty()))
        error(base + ".device", "device \"nvme\" needs " + base + ".nvme_path (a directory on the NVMe drive)");
    }
  }
  // DeepSpeed asserts that its 1-bit optimizers run without ZeRO.
  if (stage_known && stage != 0 && has_optimizer() &&
      (optimizer_type() == static_cast<int>(OptimizerType::OneBitAdam) ||
       optimizer_type() == static_cast<int>(OptimizerType::ZeroOneAdam) ||
       optimizer_type() == static_cast<int>(OptimizerType::OneBitLamb)))
    error("zero_optimization.stage", "optimizer.type " + std::string(kOptimizerTypes[optimizer_type()]) + " needs zero_optimization.stage 0 (it is " +
                                         format_number(stage) + "): DeepSpeed's 1-bit optimizers are not compatible "
                                         "with ZeRO; set the stage to 0 or use Adam/AdamW");
  double ratio = 1;
  if (number_of("zero_optimization.offload_optimizer.ratio", &ratio) && ratio < 1 && stage_known && stage != 3)
    error("zero_optimization.offload_optimizer.ratio",
          "partial optimizer offload (ratio " + format_number(ratio) + " < 1) needs stage 3, but the stage is " +
              format_number(stage));
  if (stage_known && stage < 3) {
    for (const auto &entry : values_) {
      if (entry.first.rfind("zero_optimization.stage3_", 0) != 0) continue;
      const KeySpec *spec = spec_for(entry.first);
      if (spec && entry.second.kind != Value::Kind::Auto && entry.second != spec->default_value)
        warnings_.push_back(where(entry.first) + ": " + entry.first + " has no effect below stage 3 (the stage is " +
                            format_number(stage) + ")");
    }
  }

  double block = 0;
  if (number_of("aio.block_size", &block) && std::fmod(block, 4096.0) != 0)
    error("aio.block_size", format_number(block) + " is not a multiple of 4096, which O_DIRECT needs; use e.g. " +
                                format_number(std::ceil(block / 4096.0) * 4096.0));

  int sched = scheduler_type();
  if (sched > 0) {
    const std::string type = kSchedulerTypes[sched];
    auto require = [&](const std::string &name, const std::string &what) {
      const std::string path = "scheduler.params." + name;
      if (values_.count(path) == 0 || values_.at(path).kind == Value::Kind::Null)
        error(path, "required by " + type + "; set it to " + what + " (or \"auto\" for the host to fill in)");
    };
    if (type == "WarmupDecayLR" || type == "WarmupCosineLR") require("total_num_steps", "the number of training steps");
    if (type == "OneCycle") {
      require("cycle_min_lr", "the lowest learning rate of the cycle");
      require("cycle_max_lr", "the highest learning rate of the cycle");
      double lo = 0, hi = 0;
      if (number_of("scheduler.params.cycle_min_lr", &lo) && number_of("scheduler.params.cycle_max_lr", &hi) && lo > hi)
        error("scheduler.params.cycle_min_lr", "cycle_min_lr (" + format_number(lo) + ") is above cycle_max_lr (" +
                                                   format_number(hi) + ")");
    }
  }
  if (sched == 4 && (optimizer_type() == 2 || optimizer_type() == 4) &&
      value_of("scheduler.params.cycle_momentum") == Value::of_bool(true))
    warnings_.push_back(where("scheduler.params.cycle_momentum") +
                        ": scheduler.params.cycle_momentum is true, but " + kOptimizerTypes[optimizer_type()] +
                        " has no betas: as in DeepSpeed, OneCycle does not cycle its momentum");
  if (optimizer_type() == 3 || optimizer_type() == static_cast<int>(OptimizerType::OneBitLamb)) {  // Lamb, OneBitLamb
    double lo = 0, hi = 0;
    if (number_of("optimizer.params.min_coeff", &lo) && number_of("optimizer.params.max_coeff", &hi) && lo > hi)
      error("optimizer.params.min_coeff",
            "min_coeff (" + format_number(lo) + ") is above max_coeff (" + format_number(hi) + ")");
    if (number_of("optimizer.params.factor_min", &lo) && number_of("optimizer.params.factor_max", &hi) && lo > hi)
      error("optimizer.params.factor_min",
            "factor_min (" + format_number(lo) + ") is above factor_max (" + format_number(hi) + ")");
  }

  // --- batch sizes: the full rule once the world size is known, divisibility before that
  if (world_size_ > 0) {
    Batch batch;
    Status status = derive_batch(world_size_, &batch);
    if (!status.ok()) error("train_batch_size", status.message());
  } else {
    double train = 0, micro = 0, gas = 0;
    bool has_train = number_of("train_batch_size", &train), has_micro = number_of("train_micro_batch_size_per_gpu", &micro);
    bool has_gas = number_of("gradient_accumulation_steps", &gas);
    if (has_train && has_micro && has_gas && std::fmod(train, micro * gas) != 0)
      error("train_batch_size",
            Format("train_batch_size (%s) must equal train_micro_batch_size_per_gpu (%s) * gradient_accumulation_steps "
                   "(%s) * the world size, but it is not a multiple of %s",
                   format_number(train).c_str(), format_number(micro).c_str(), format_number(gas).c_str(),
                   format_number(micro * gas).c_str()));
    else if (has_train && has_micro && !has_gas && std::fmod(train, micro) != 0)
      error("train_batch_size",
            Format("train_batch_size (%s) must be train_micro_batch_size_per_gpu (%s) * gradient_accumulation_steps * "
                   "the world size, but it is not a multiple of %s",
                   format_number(train).c_str(), format_number(micro).c_str(), format_number(micro).c_str()));
  }
}

Status Config::derive_batch(int world, Batch *out) const {
  *out = Batch();
  enum class State { Given, Auto, Absent };
  struct Term {
    const char *path;
    State state = State::Absent;
    int64_t value = 0;
  };
  Term terms[3] = {{"train_batch_size"}, {"train_micro_batch_size_per_gpu"}, {"gradient_accumulation_steps"}};
  for (Term &term : terms) {
    auto found = values_.find(term.path);
    if (found == values_.end() || found->second.kind == Value::Kind::Null) continue;
    if (found->second.kind == Value::Kind::Auto) {
      term.state = State::Auto;
    } else {
      term.state = State::Given;
      term.value = static_cast<int64_t>(found->second.number);
    }
  }
  Term &train = terms[0], &micro = terms[1], &gas = terms[2];
  const int64_t w = world;
  auto fail_product = [&]() {
    return Error(DSRT_ERR_CONFIG,
                 "train_batch_size (%lld) must equal train_micro_batch_size_per_gpu (%lld) * "
                 "gradient_accumulation_steps (%lld) * world size (%lld) = %lld; change one of them, or leave one "
                 "out and dsrt derives it",
                 (long long)train.value, (long long)micro.value, (long long)gas.value, (long long)w,
                 (long long)(micro.value * gas.value * w));
  };
  auto fail_divide = [&](const char *derived, int64_t divisor, const std::string &divisor_text) {
    return Error(DSRT_ERR_CONFIG,
                 "train_batch_size (%lld) is not a multiple of %s = %lld, so %s cannot be derived; change "
                 "train_batch_size or give all three terms",
                 (long long)train.value, divisor_text.c_str(), (long long)divisor, derived);
  };
  bool t = train.state == State::Given, m = micro.state == State::Given, g = gas.state == State::Given;
  if (t && m && g) {
    if (train.value != micro.value * gas.value * w) return fail_product();
  } else if (t && m) {
    int64_t divisor = micro.value * w;
    if (train.value % divisor != 0)
      return fail_divide("gradient_accumulation_steps", divisor,
                         Format("train_micro_batch_size_per_gpu (%lld) * world size (%lld)", (long long)micro.value,
                                (long long)w));
    gas.value = train.value / divisor;
    gas.state = State::Given;
  } else if (t && g) {
    int64_t divisor = gas.value * w;
    if (train.value % divisor != 0)
      return fail_divide("train_micro_batch_size_per_gpu", divisor,
                         Format("gradient_accumulation_steps (%lld) * world size (%lld)", (long long)gas.value,
                                (long long)w));
    micro.value = train.value / divisor;
    micro.state = State::Given;
  } else if (m && g) {
    train.value = micro.value * gas.value * w;
    train.state = State::Given;
  } else if (t && gas.state == State::Absent && micro.state != State::Given) {
    // DeepSpeed: only train_batch_size given -> one accumulation step.
    if (train.value % w != 0)
      return fail_divide("train_micro_batch_size_per_gpu", w, Format("world size (%lld)", (long long)w));
    gas.value = 1;
    micro.value = train.value / w;
    gas.state = micro.state = State::Given;
  } else if (m && gas.state == State::Absent) {
    gas.value = 1;
    train.value = micro.value * w;
    gas.state = train.state = State::Given;
  } else if (train.state == State::Absent && micro.state == State::Absent && gas.state == State::Absent) {
    // No batch terms at all (DeepSpeed refuses this): one sample per rank and step.
    micro.value = gas.value = 1;
    train.value = w;
    train.state = micro.state = gas.state = State::Given;
  } else if (!t && !m && g && train.state == State::Absent && micro.state == State::Absent) {
    micro.value = 1;
    train.value = gas.value * w;
    train.state = micro.state = State::Given;
  }
  for (const Term &term : terms) {
    if (term.state == State::Auto) out->unresolved.push_back(term.path);
    else if (term.state == State::Absent) out->unresolved.push_back(term.path);
  }
  if (out->unresolved.empty() && (train.value < 1 || micro.value < 1 || gas.value < 1)) return fail_product();
  out->train = train.value;
  out->micro = micro.value;
  out->gas = gas.value;
  return Status::Ok();
}

}  // namespace dsrt
