// defines: Config's setters, getters, set_hidden_size/set_world_size, unresolved() and to_json().
#include <algorithm>
#include <cmath>

#include "config/config.h"
#include "config/config_internal.h"

namespace dsrt {

namespace {

std::string canonical_path(const std::string &path) { return canonical_key_path(path); }

bool is_batch_key(const std::string &path) {
  return path == "train_batch_size" || path == "train_micro_batch_size_per_gpu" ||
         path == "gradient_accumulation_steps";
}

JsonNode *child_object(JsonNode *parent, const std::string &name) {
  for (auto &member : parent->members)
    if (member.first == name) return &member.second;
  JsonNode node;
  node.type = JsonNode::Type::Object;
  parent->members.emplace_back(name, std::move(node));
  return &parent->members.back().second;
}

JsonNode *object_at(JsonNode *root, const std::string &path) {
  JsonNode *node = root;
  size_t start = 0;
  while (start < path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    node = child_object(node, path.substr(start, dot - start));
    start = dot + 1;
  }
  return node;
}

JsonNode to_node(const Value &value) {
  JsonNode node;
  switch (value.kind) {
    case Value::Kind::Null: break;
    case Value::Kind::Auto:
      node.type = JsonNode::Type::String;
      node.text = "auto";
      break;
    case Value::Kind::Bool:
      node.type = JsonNode::Type::Bool;
      node.boolean = value.boolean;
      break;
    case Value::Kind::Number:
      node.type = JsonNode::Type::Number;
      node.number = value.number;
      // Python's json (DeepSpeed's reader) writes and reads an infinite number as Infinity.
      node.text = std::isinf(value.number) ? (value.number > 0 ? "Infinity" : "-Infinity") : format_number(value.number);
      break;
    case Value::Kind::String:
      node.type = JsonNode::Type::String;
      node.text = value.text;
      break;
  }
  return node;
}

// Keys and sections DeepSpeed 0.19 removed and refuses outright (dsrt still reads them, off, so
// that configs written for earlier DeepSpeed load): left out of the DeepSpeed JSON.
bool removed_by_deepspeed(const std::string &path) {
  static const char *const kRemoved[] = {
      "sparse_gradients", "graph_harvesting", "zero_optimization.mics_shard_size",
      "zero_optimization.mics_hierarchical_params_gather", "zero_optimization.zeropp_loco_param", "amp",
      "compression_training", "curriculum_learning", "eigenvalue", "elasticity", "nebula", "progressive_layer_drop",
      "quantize_training", "sparse_attention"};
  for (const char *removed : kRemoved)
    if (path == removed) return true;
  return false;
}

}  // namespace

Status Config::set_value(const std::string &key_path, const Value &input, const char *setter) {
  const std::string path = canonical_path(key_path);
  Value value = input;
  if (path.rfind("optimizer.params.", 0) == 0 && !has_optimizer())
    return Error(DSRT_ERR_CONFIG, "%s: the config has no optimizer section; set optimizer.type first "
                 "(dsrt_config_set_string(config, \"optimizer.type\", \"AdamW\"))", key_path.c_str());
  if (path.rfind("scheduler.params.", 0) == 0 && !has_scheduler())
    return Error(DSRT_ERR_CONFIG, "%s: the config has no scheduler section; set scheduler.type first "
                 "(dsrt_config_set_string(config, \"scheduler.type\", \"WarmupLR\"))", key_path.c_str());
  if ((path.rfind("optimizer.params.", 0) == 0 && optimizer_type() < 0) ||
      (path.rfind("scheduler.params.", 0) == 0 && scheduler_type() < 0))
    return Error(DSRT_ERR_CONFIG, "%s: the parameters of a type dsrt does not implement cannot be set",
                 key_path.c_str());
  const KeySpec *spec = spec_for(path);
  if (spec == nullptr) {
    if (find_section(path))
      return Error(DSRT_ERR_CONFIG, "%s is a section, not a value; set one of its keys (\"%s.<key>\")",
                   key_path.c_str(), key_path.c_str());
    size_t dot = path.rfind('.');
    std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
    if (!section.empty() && !find_section(section)) {
      // An element of a list ("optimizer.params.betas.2") or a path through an unknown section.
      if (const KeySpec *pair = spec_for(section); pair && pair->type == KeyType::Pair)
        return Error(DSRT_ERR_CONFIG, "%s: %s has two elements, %s.0 and %s.1", key_path.c_str(), section.c_str(),
                     section.c_str(), section.c_str());
      return Error(DSRT_ERR_CONFIG, "%s: unknown section %s", key_path.c_str(), section.c_str());
    }
    return Error(DSRT_ERR_CONFIG, "%s: %s", key_path.c_str(), unknown_key_message(section, name).c_str());
  }
  if (spec->type == KeyType::Pair)
    return Error(DSRT_ERR_CONFIG, "%s is a list of two numbers; set its elements %s.0 and %s.1 with "
                 "dsrt_config_set_number", key_path.c_str(), path.c_str(), path.c_str());

  const bool want_bool = spec->type == KeyType::Bool;
  const bool want_number = spec->type == KeyType::Int || spec->type == KeyType::Number;
  if (value.kind == Value::Kind::String && value.text == "auto") {
    if (path == "optimizer.type" || path == "scheduler.type")
      return Error(DSRT_ERR_CONFIG, "%s cannot be \"auto\": name the type", key_path.c_str());
    value = Value::automatic();
  } else if (value.kind == Value::Kind::Bool && !want_bool) {
    return Error(DSRT_ERR_CONFIG, "%s is not a boolean (it takes %s); use %s", key_path.c_str(),
                 spec->allowed().c_str(), want_number ? "dsrt_config_set_number" : "dsrt_config_set_string");
  } else if (value.kind == Value::Kind::Number && !want_number) {
    return Error(DSRT_ERR_CONFIG, "%s is not a number (it takes %s); use %s", key_path.c_str(),
                 spec->allowed().c_str(), want_bool ? "dsrt_config_set_bool" : "dsrt_config_set_string");
  } else if (value.kind == Value::Kind::String && (want_bool || want_number)) {
    return Error(DSRT_ERR_CONFIG, "%s is not a string (it takes %s); use %s", key_path.c_str(),
                 spec->allowed().c_str(), want_bool ? "dsrt_config_set_bool" : "dsrt_config_set_number");
  }

  Config next = *this;
  if (path == "optimizer.type" || path == "scheduler.type") {
    bool optimizer = path == "optimizer.type";
    int index = optimizer ? optimizer_type_index(value.text) : scheduler_type_index(value.text);
    if (index >= 0 && optimizer) value.text = kOptimizerTypes[index];
    bool known = index >= 0 && (optimizer || index > 0);
    if (!known && !(optimizer ? is_known_unsupported_optimizer(value.text) : is_known_unsupported_scheduler(value.text))) {
      std::string message = check_value(*spec, &value);
      return Error(DSRT_ERR_CONFIG, "%s: %s", key_path.c_str(), message.c_str());
    }
    next.values_[path] = value;
    const std::string prefix = optimizer ? "optimizer.params." : "scheduler.params.";
    for (const auto &entry : next.values_) {
      if (entry.first.rfind(prefix, 0) == 0 && !next.spec_for(entry.first))
        return Error(DSRT_ERR_CONFIG, "%s: cannot change the type to \"%s\": the config sets %s, which %s does "
                     "not have", key_path.c_str(), value.text.c_str(), entry.first.c_str(), value.text.c_str());
    }
  } else {
    std::string message = check_value(*spec, &value);
    if (!message.empty()) return Error(DSRT_ERR_CONFIG, "%s: %s", key_path.c_str(), message.c_str());
    next.values_[path] = value;
  }
  next.positions_.erase(path);
  next.spellings_[path] = std::string(setter) + "(\"" + key_path + "\")";
  std::vector<Problem> errors;
  next.check(&errors);
  if (!errors.empty()) return next.errors_to_status(errors);
  *this = std::move(next);
  return Status::Ok();
}

Status Config::set_number(const std::string &key_path, double value) {
  return set_value(key_path, Value::of_number(value), "dsrt_config_set_number");
}

Status Config::set_string(const std::string &key_path, const std::string &value) {
  return set_value(key_path, Value::of_string(value), "dsrt_config_set_string");
}

Status Config::set_bool(const std::string &key_path, bool value) {
  return set_value(key_path, Value::of_bool(value), "dsrt_config_set_bool");
}

Status Config::set_hidden_size(int64_t hidden_size) {
  // h*h must stay an exact integer in a double and in int64.
  if (hidden_size <= 0 || hidden_size > 94906265)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_config_set_hidden_size: hidden_size must be from 1 to 94906265, "
                 "got %lld", (long long)hidden_size);
  const double h = static_cast<double>(hidden_size);
  const std::pair<const char *, double> rules[] = {
      {"zero_optimization.reduce_bucket_size", h * h},
      {"zero_optimization.stage3_prefetch_bucket_size", std::floor(0.9 * h * h)},
      {"zero_optimization.stage3_param_persistence_threshold", 10 * h},
  };
  Config next = *this;
  for (const auto &rule : rules) {
    auto found = next.values_.find(rule.first);
    if (found != next.values_.end() && found->second.is_auto()) found->second = Value::of_number(rule.second);
  }
  std::vector<Problem> errors;
  next.check(&errors);
  if (!errors.empty()) return next.errors_to_status(errors);
  *this = std::move(next);
  return Status::Ok();
}

Status Config::set_world_size(int world_size) {
  if (world_size < 1)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "world size must be at least 1, got %d", world_size);
  Batch batch;
  Status status = derive_batch(world_size, &batch);
  if (!status.ok()) return Status(DSRT_ERR_CONFIG, origin_ + ": " + status.message());
  world_size_ = world_size;
  std::vector<Problem> errors;
  check(&errors);
  if (!errors.empty()) return errors_to_status(errors);
  return Status::Ok();
}

Status Config::get_number(const std::string &key_path, double *out) const {
  *out = 0;
  const std::string path = canonical_path(key_path);
  const KeySpec *spec = spec_for(path);
  if (spec == nullptr || spec->type == KeyType::Pair) {
    if (spec || find_section(path))
      return Error(DSRT_ERR_CONFIG, "%s is not a single value%s", key_path.c_str(),
                   spec ? "; read its elements .0 and .1" : " but a section");
    return Error(DSRT_ERR_CONFIG, "%s: unknown key (or not part of this config's optimizer/scheduler type)",
                 key_path.c_str());
  }
  if (is_batch_key(path) && world_size_ > 0) {
    Batch batch;
    if (derive_batch(world_size_, &batch).ok() &&
        std::find(batch.unresolved.begin(), batch.unresolved.end(), path) == batch.unresolved.end()) {
      *out = static_cast<double>(path == "train_batch_size" ? batch.train
                                 : path == "train_micro_batch_size_per_gpu" ? batch.micro : batch.gas);
      return Status::Ok();
    }
  }
  Value value = effective(*spec);
  switch (value.kind) {
    case Value::Kind::Auto:
      return Error(DSRT_ERR_CONFIG, "%s is still \"auto\"; resolve it with %s", key_path.c_str(),
                   resolve_hint(*spec).c_str());
    case Value::Kind::Null:
      if (is_batch_key(path))
        return Error(DSRT_ERR_CONFIG, "%s is not given; it is derived once the world size is known "
                     "(dsrt_config_set_world_size)", key_path.c_str());
      return Error(DSRT_ERR_CONFIG, "%s has no value (not given, and DeepSpeed's default is None)", key_path.c_str());
    case Value::Kind::Bool: *out = value.boolean ? 1 : 0; return Status::Ok();
    case Value::Kind::Number: *out = value.number; return Status::Ok();
    case Value::Kind::String:
      return Error(DSRT_ERR_CONFIG, "%s is a string (\"%s\"); use dsrt_config_get_string", key_path.c_str(),
                   value.text.c_str());
  }
  return Status::Ok();
}

Status Config::get_string(const std::string &key_path, std::string *out) const {
  out->clear();
  const std::string path = canonical_path(key_path);
  const KeySpec *spec = spec_for(path);
  if (spec && spec->type != KeyType::Pair) {
    Value value = effective(*spec);
    if (value.kind == Value::Kind::String) {
      *out = value.text;
      return Status::Ok();
    }
    if (value.kind == Value::Kind::Null)
      return Error(DSRT_ERR_CONFIG, "%s has no value (not given, and DeepSpeed's default is None)", key_path.c_str());
  }
  // Numbers and booleans as text, so bindings can read any scalar one way.
  double number = 0;
  DSRT_RETURN_IF_ERROR(get_number(key_path, &number));
  *out = spec && spec->type == KeyType::Bool ? (number != 0 ? "true" : "false") : format_number(number);
  return Status::Ok();
}

std::vector<std::string> Config::unresolved() const {
  std::vector<std::string> out;
  Batch batch;
  bool batch_known = world_size_ > 0 && derive_batch(world_size_, &batch).ok();
  for (const KeySpec &spec : all_keys()) {
    if (spec.type == KeyType::Pair || spec_for(spec.path) != &spec) continue;
    auto found = values_.find(spec.path);
    if (found == values_.end() || !found->second.is_auto()) continue;
    if (is_batch_key(spec.path) && batch_known &&
        std::find(batch.unresolved.begin(), batch.unresolved.end(), spec.path) == batch.unresolved.end())
      continue;
    out.push_back(spec.path);
  }
  return out;
}

std::string Config::how_to_resolve(const std::string &path) const {
  const KeySpec *spec = spec_for(canonical_path(path));
  return spec ? resolve_hint(*spec) : "";
}

std::string Config::to_json() const { return build_json(false, nullptr); }

std::string Config::to_deepspeed_json(std::vector<std::string> *dsrt_only) const {
  return build_json(true, dsrt_only);
}

std::string Config::build_json(bool deepspeed, std::vector<std::string> *apart) const {
  JsonNode root;
  root.type = JsonNode::Type::Object;
  Batch batch;
  bool batch_known = world_size_ > 0 && derive_batch(world_size_, &batch).ok();
  if (apart) apart->clear();
  for (const KeySpec &spec : all_keys()) {
    if (spec_for(spec.path) != &spec) continue;
    if (spec.path.rfind("optimizer.", 0) == 0 && !has_optimizer()) continue;
    if (spec.path.rfind("scheduler.", 0) == 0 && !has_scheduler()) continue;
    const std::string name = spec.name();
    if (name.find('.') != std::string::npos) continue;  // pair elements are printed with their pair
    if (deepspeed && removed_by_deepspeed(spec.path)) {
      if (apart) apart->push_back(spec.path + " = " + effective(spec).to_text() + "  (DeepSpeed 0.19 removed this key and refuses it)");
      continue;
    }
    if (deepspeed && spec.dsrt_only) {
      if (apart) apart->push_back(spec.path + " = " + effective(spec).to_text() + "  (dsrt's key: " + spec.note + ")");
      continue;
    }
    // DeepSpeed hands optimizer.params and scheduler.params to the constructors, which refuse
    // names they do not take: only the parameters the config gives are DeepSpeed JSON.
    const bool optimizer_param = spec.path.rfind("optimizer.params.", 0) == 0;
    const bool scheduler_param = spec.path.rfind("scheduler.params.", 0) == 0;
    // A type dsrt does not know keeps its params as given (opaque_): the schema's keys for every
    // type (last_batch_iteration) would be written into them a second time on each read-back.
    if ((optimizer_param && optimizer_type() < 0) || (scheduler_param && scheduler_type() < 0)) continue;
    const bool params = optimizer_param || scheduler_param;
    if (deepspeed && params && !values_.count(spec.path) && !values_.count(spec.path + ".0")) {
      if (apart) {
        Value v = spec.type == KeyType::Pair ? Value::null() : effective(spec);
        std::string shown = v.to_text();
        if (spec.type == KeyType::Pair)
          shown = "[" + effective(*spec_for(spec.path + ".0")).to_text() + ", " +
                  effective(*spec_for(spec.path + ".1")).to_text() + "]";
        apart->push_back(spec.path + " = " + shown + "  (default dsrt applies; not written, as DeepSpeed's " +
                         (spec.path[0] == 'o' ? "optimizer" : "scheduler") + " constructor may not take it)");
      }
      continue;
    }
    JsonNode *section = object_at(&root, spec.section());
    JsonNode node;
    if (spec.type == KeyType::Pair) {
      Value first = effective(*spec_for(spec.path + ".0")), second = effective(*spec_for(spec.path + ".1"));
      if (first.is_auto() && second.is_auto()) {
        node = to_node(first);
      } else {
        node.type = JsonNode::Type::Array;
        node.items = {to_node(first), to_node(second)};
      }
    } else if (is_batch_key(spec.path) && batch_known &&
               std::find(batch.unresolved.begin(), batch.unresolved.end(), spec.path) == batch.unresolved.end()) {
      node = to_node(Value::of_number(static_cast<double>(
          spec.path == "train_batch_size" ? batch.train
          : spec.path == "train_micro_batch_size_per_gpu" ? batch.micro : batch.gas)));
    } else {
      node = to_node(effective(spec));
    }
    section->members.emplace_back(name, std::move(node));
    if (spec.path == "optimizer.type" && optimizer_type() < 0 && opaque_.count("optimizer.params"))
      section->members.emplace_back("params", opaque_.at("optimizer.params"));
    if (spec.path == "scheduler.type" && scheduler_type() < 0 && opaque_.count("scheduler.params"))
      section->members.emplace_back("params", opaque_.at("scheduler.params"));
  }
  for (const auto &entry : opaque_) {
    if (entry.first == "optimizer.params" || entry.first == "scheduler.params") continue;
    if (deepspeed && removed_by_deepspeed(entry.first)) {
      if (apart) apart->push_back(entry.first + " = " + entry.second.to_text() + "  (DeepSpeed 0.19 removed this section and refuses it)");
      continue;
    }
    size_t dot = entry.first.rfind('.');
    JsonNode *section = object_at(&root, dot == std::string::npos ? "" : entry.first.substr(0, dot));
    section->members.emplace_back(dot == std::string::npos ? entry.first : entry.first.substr(dot + 1), entry.second);
  }
  return print_json(root);
}

}  // namespace dsrt
