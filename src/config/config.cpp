// defines: Config::parse/load -- reading DeepSpeed JSON into validated values, with aliases,
// misplaced sections and every error collected.
#include "config/config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "config/config_internal.h"
#include "util/log.h"

namespace dsrt {

namespace {

struct Alias {
  const char *section;
  const char *old_name;
  const char *name;
  bool deprecated;  // warn; otherwise an accepted second spelling (DeepSpeed's field names)
};

const Alias kAliases[] = {
    {"", "bfloat16", "bf16", true},
    {"zero_optimization", "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
     true},
    {"zero_optimization", "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", false},
    {"zero_optimization", "prefetch_bucket_size", "stage3_prefetch_bucket_size", false},
    {"zero_optimization", "param_persistence_threshold", "stage3_param_persistence_threshold", false},
    {"zero_optimization", "model_persistence_threshold", "stage3_model_persistence_threshold", false},
    {"zero_optimization", "max_live_parameters", "stage3_max_live_parameters", false},
    {"zero_optimization", "max_reuse_distance", "stage3_max_reuse_distance", false},
    {"zero_optimization", "module_granularity_threshold", "stage3_module_granularity_threshold", false},
    {"zero_optimization", "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params", false},
    {"zero_optimization", "allgather_sequential", "stage3_allgather_sequential", false},
};

}  // namespace

std::string canonical_key_path(const std::string &path) {
  if (path.rfind("zero_optimization.aio.", 0) == 0) return canonical_key_path(path.substr(18));
  if (path.rfind("bfloat16.", 0) == 0) return "bf16." + path.substr(9);
  size_t dot = path.rfind('.');
  const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  for (const Alias &alias : kAliases)
    if (section == alias.section && name == alias.old_name) return join_path(section, alias.name);
  return path;
}

Status Config::parse(const std::string &text, const std::string &origin, std::unique_ptr<Config> *out) {
  out->reset();
  JsonNode root;
  DSRT_RETURN_IF_ERROR(parse_json_text(text, origin, &root));
  auto config = std::make_unique<Config>();
  config->origin_ = origin;
  std::vector<Problem> errors;
  if (root.type != JsonNode::Type::Object) {
    return Error(DSRT_ERR_CONFIG, "%s: the config must be a JSON object ({...}), not %s", origin.c_str(),
                 json_type_name(root.type));
  }
  config->read_section(root, "", "", &errors);
  config->check(&errors);
  // Warnings are logged also when there are errors: they may explain them.
  for (const std::string &warning : config->warnings_) logf(DSRT_LOG_WARN, "%s", warning.c_str());
  if (!errors.empty()) return config->errors_to_status(errors);
  *out = std::move(config);
  return Status::Ok();
}

Status Config::load(const std::string &path, std::unique_ptr<Config> *out) {
  out->reset();
  std::ifstream file(path, std::ios::binary);
  if (!file) return Error(DSRT_ERR_IO, "cannot open config file '%s': %s", path.c_str(), std::strerror(errno));
  // Read at most one byte past the limit, so a huge or endless file (a device, a pipe) stops there.
  std::string text;
  char chunk[65536];
  while (text.size() <= kMaxConfigTextBytes && file.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, static_cast<size_t>(file.gcount()));
  if (file.bad()) return Error(DSRT_ERR_IO, "cannot read config file '%s': %s", path.c_str(), std::strerror(errno));
  if (text.size() > kMaxConfigTextBytes)
    return Error(DSRT_ERR_CONFIG, "config file '%s' is larger than %zu bytes; a DeepSpeed config is a few kilobytes "
                 "(is this the right file?)", path.c_str(), kMaxConfigTextBytes);
  return parse(text, path, out);
}

Status Config::errors_to_status(const std::vector<Problem> &errors) const {
  std::string message;
  if (errors.size() > 1) message = Format("%zu errors in %s:", errors.size(), origin_.c_str());
  for (const Problem &problem : errors) {
    if (!message.empty()) message += "\n";
    std::string location = problem.line > 0 ? Format("%s:%d:%d", origin_.c_str(), problem.line, problem.column)
                                             : where(problem.path);
    message += location + ": " + (problem.path.empty() ? "" : problem.path + ": ") + problem.message;
  }
  return Status(DSRT_ERR_CONFIG, message);
}

std::string Config::where(const std::string &path) const {
  // A key that is not in the file is reported at its nearest enclosing section that is.
  for (std::string at = path; !at.empty();) {
    auto found = positions_.find(at);
    if (found != positions_.end())
      return Format("%s:%d:%d", origin_.c_str(), found->second.first, found->second.second);
    size_t dot = at.rfind('.');
    at = dot == std::string::npos ? "" : at.substr(0, dot);
  }
  return origin_;
}

void Config::read_section(const JsonNode &node, const std::string &section, const std::string &display,
                          std::vector<Problem> *errors) {
  for (const auto &member : node.members) read_member(section, display, member.first, member.second, errors);
}

void Config::read_member(const std::string &section, const std::string &display, const std::string &name,
                         const JsonNode &node, std::vector<Problem> *errors) {
  const std::string shown = join_path(display, name);
  auto problem = [&](const std::string &message) {
    // A hostile megabyte-long key is named by its start, not copied into the message.
    const std::string path = shorten_key(shown);
    errors->push_back(Problem{path, message, node.line, node.column});
  };
  std::string canonical = name;
  for (const Alias &alias : kAliases) {
    if (section == alias.section && name == alias.old_name) {
      canonical = alias.name;
      if (alias.deprecated)
        parse_warnings_.push_back(Format("%s: %s: %s is a deprecated name; write %s", where_at(node).c_str(),
                                         shown.c_str(), name.c_str(), canonical.c_str()));
    }
  }

  if (section == "aio" && name == "thread_count") {
    // Dropped by DeepSpeed 0.17 (not renamed: intra_op_parallelism is a different setting).
    parse_warnings_.push_back(Format("%s: %s: DeepSpeed no longer reads aio.thread_count (dropped in 0.17) and "
                                     "dsrt ignores it too; it is not intra_op_parallelism, which sets the I/O "
                                     "threads per request",
                                     where_at(node).c_str(), shown.c_str()));
    return;
  }
  if (section == "zero_optimization" && name == "aio") {
    parse_warnings_.push_back(Format("%s: zero_optimization.aio belongs at the top level of the config "
                                     "(\"aio\": {...} next to \"zero_optimization\"); dsrt reads it as the "
                                     "top-level aio section",
                                     where_at(node).c_str()));
    if (node.type == JsonNode::Type::Object) read_section(node, "aio", shown, errors);
    else if (node.type != JsonNode::Type::Null) problem(std::string("expected an object ({...}), got ") + json_type_name(node.type));
    return;
  }
  if (section == "zero_optimization" &&
      (name == "cpu_offload" || name == "cpu_offload_param" || name == "cpu_offload_use_pin_memory")) {
    if (node.type != JsonNode::Type::Bool) {
      problem(std::string("expected true or false, got ") + node.to_text());
      return;
    }
    const char *replacement = name == "cpu_offload"         ? "\"offload_optimizer\": {\"device\": \"cpu\"}"
                              : name == "cpu_offload_param" ? "\"offload_param\": {\"device\": \"cpu\"}"
                                                            : "\"pin_memory\": true inside offload_optimizer and offload_param";
    parse_warnings_.push_back(Format("%s: zero_optimization.%s is deprecated; write %s", where_at(node).c_str(),
                                     name.c_str(), replacement));
    if (!node.boolean) return;
    if (name == "cpu_offload") {
      store("zero_optimization.offload_optimizer.device", Value::of_string("cpu"), node.line, node.column, shown, errors);
    } else if (name == "cpu_offload_param") {
      store("zero_optimization.offload_param.device", Value::of_string("cpu"), node.line, node.column, shown, errors);
    } else {
      store("zero_optimization.offload_optimizer.pin_memory", Value::of_bool(true), node.line, node.column, shown, errors);
      store("zero_optimization.offload_param.pin_memory", Value::of_bool(true), node.line, node.column, shown, errors);
    }
    return;
  }

  const std::string path = join_path(section, canonical);
  const std::string shown_canonical = join_path(display, canonical);
  if (const SectionSpec *sec = find_section(path)) {
    if (sec->opaque) {
      opaque_[path] = node;
      positions_[path] = {node.line, node.column};
      return;
    }
    if (node.type == JsonNode::Type::Null) return;  // DeepSpeed treats a null section as absent
    if (!positions_.count(path)) positions_[path] = {node.line, node.column};
    if (node.type != JsonNode::Type::Object) {
      if (path == "zero_optimization" && node.type == JsonNode::Type::Bool) {
        // DeepSpeed's oldest form: true is stage 1.
        const char *stage = node.boolean ? "1" : "0";
        parse_warnings_.push_back(Format("%s: \"zero_optimization\": %s is deprecated; write \"zero_optimization\": "
                                         "{\"stage\": %s}", where_at(node).c_str(), node.boolean ? "true" : "false", stage));
        store("zero_optimization.stage", Value::of_number(node.boolean ? 1 : 0), node.line, node.column, shown, errors);
      } else if (path == "zero_optimization" && node.type == JsonNode::Type::Number) {
        problem("\"zero_optimization\": " + node.to_text() + " is not a DeepSpeed form; write \"zero_optimization\": "
                "{\"stage\": " + node.to_text() + "}");
      } else
        problem(std::string("expected an object ({...}), got ") + json_type_name(node.type) + " " + node.to_text());
      return;
    }
    if (path == "optimizer") read_optimizer(node, errors);
    else if (path == "scheduler") read_scheduler(node, errors);
    else read_section(node, path, shown_canonical, errors);
    return;
  }
  if (const KeySpec *spec = spec_for(path)) {
    read_key(*spec, node, shown, errors);
    return;
  }
  if (section == "optimizer.params" && name == "max_grad_norm") {
    // DeepSpeed's engine refuses it among the optimizer's parameters, whatever its value.
    problem("not an optimizer parameter (DeepSpeed refuses it too); clip with the top-level \"gradient_clipping\": " +
            (node.type == JsonNode::Type::Number ? node.to_text() : std::string("<norm>")) +
            " and remove it from optimizer.params");
    return;
  }
  if (section.empty() && !top_level_mistake(name)) {
    // DeepSpeed ignores top-level keys it does not know (only its sections refuse extra keys). The
    // first few are named; the rest are counted (check() says how many), so a generated config with
    // 100,000 of them does not print 100,000 lines.
    constexpr size_t kNamedUnknownTopLevelKeys = 20;
    if (++unknown_top_level_keys_ <= kNamedUnknownTopLevelKeys)
      parse_warnings_.push_back(Format("%s: %s: unknown top-level key; DeepSpeed ignores it and so does dsrt",
                                       where_at(node).c_str(), shorten_key(name).c_str()));
    else if (unknown_top_level_keys_ == kNamedUnknownTopLevelKeys + 1)
      unknown_top_level_summary_ = parse_warnings_.size();
    return;
  }
  // Explaining an unknown key ("did you mean", where it belongs) scans the schema: a config with
  // 100,000 unknown keys gets the explanation for its first problems only, so checking stays linear.
  constexpr size_t kExplainedProblems = 100;
  problem(errors->size() < kExplainedProblems ? unknown_key_message(section, name) : "unknown key");
}

bool Config::top_level_mistake(const std::string &name) const {
  if (known_misplacement(name) != nullptr) return true;
  // The names of every section's keys and subsections: one of them at the top level is misplaced.
  // Built once; each unknown top-level key then costs one lookup, not a scan of the schema.
  static const std::unordered_set<std::string> nested_names = [] {
    std::unordered_set<std::string> names;
    for (const KeySpec &spec : all_keys()) names.insert(spec.name());
    for (const SectionSpec &spec : all_sections()) {
      size_t dot = spec.path.rfind('.');
      if (dot != std::string::npos) names.insert(spec.path.substr(dot + 1));
    }
    return names;
  }();
  if (nested_names.count(name) != 0) return true;
  // The top level's names do not depend on the optimizer or scheduler type (only their params do).
  static const std::vector<std::string> top_level_names = section_children("", -1, -1);
  return !nearest_name(name, top_level_names).empty();
}

std::string Config::where_at(const JsonNode &node) const {
  return Format("%s:%d:%d", origin_.c_str(), node.line, node.column);
}

void Config::read_key(const KeySpec &spec, const JsonNode &node, const std::string &shown,
                      std::vector<Problem> *errors) {
  auto problem = [&](const JsonNode &at, const std::string &where_path, const std::string &message) {
    errors->push_back(Problem{where_path, message, at.line, at.column});
  };
  if (spec.type == KeyType::Pair) {
    const KeySpec *first = spec_for(spec.path + ".0");
    const KeySpec *second = spec_for(spec.path + ".1");
    if (node.type == JsonNode::Type::String && node.text == "auto") {
      store(first->path, Value::automatic(), node.line, node.column, shown, errors);
      store(second->path, Value::automatic(), node.line, node.column, shown, errors);
      return;
    }
    if (node.type != JsonNode::Type::Array || node.items.size() != 2) {
      problem(node, shown, "expected " + spec.allowed() + " (or \"auto\"), got " + node.to_text());
      return;
    }
    for (int i = 0; i < 2; ++i) {
      const KeySpec *element = i == 0 ? first : second;
      Value value;
      std::string message = value_from_json(*element, node.items[i], &value);
      if (!message.empty()) {
        problem(node.items[i], shown + "." + std::to_string(i), message);
        continue;
      }
      store(element->path, value, node.items[i].line, node.items[i].column, shown + "." + std::to_string(i), errors);
    }
    return;
  }
  Value value;
  std::string message = value_from_json(spec, node, &value);
  if (!message.empty()) {
    problem(node, shown, message);
    return;
  }
  store(spec.path, value, node.line, node.column, shown, errors);
}

void Config::store(const std::string &path, const Value &value, int line, int column, const std::string &spelled,
                   std::vector<Problem> *errors) {
  auto found = values_.find(path);
  if (found != values_.end()) {
    auto position = positions_[path];
    auto previous = spellings_.count(path) ? spellings_[path] : path;
    errors->push_back(Problem{path,
                              Format("given twice: as %s (line %d) and as %s (line %d); keep only one",
                                     previous.c_str(), position.first, spelled.c_str(), line),
                              line, column});
    return;
  }
  values_[path] = value;
  positions_[path] = {line, column};
  spellings_[path] = spelled;
}

void Config::read_optimizer(const JsonNode &node, std::vector<Problem> *errors) {
  positions_["optimizer"] = {node.line, node.column};
  const JsonNode *type = node.find("type");
  std::string known;
  for (int i = 0; i < kNumOptimizerTypes; ++i) known += std::string(i ? ", " : "") + kOptimizerTypes[i];
  if (type == nullptr) {
    errors->push_back(Problem{"optimizer", "the section has no \"type\"; add one of " + known, node.line, node.column});
    return;
  }
  if (type->type != JsonNode::Type::String || type->text == "auto") {
    errors->push_back(Problem{"optimizer.type", "expected the optimizer's name (" + known + "), got " + type->to_text(),
                              type->line, type->column});
    return;
  }
  int index = optimizer_type_index(type->text);
  if (index >= 0) {
    store("optimizer.type", Value::of_string(kOptimizerTypes[index]), type->line, type->column, "optimizer.type", errors);
  } else if (is_known_unsupported_optimizer(type->text)) {
    store("optimizer.type", Value::of_string(type->text), type->line, type->column, "optimizer.type", errors);
  } else {
    std::vector<std::string> names(kOptimizerTypes, kOptimizerTypes + kNumOptimizerTypes);
    std::string near = nearest_name(type->text, names);
    errors->push_back(Problem{"optimizer.type",
                              "\"" + type->text + "\" is not an optimizer DeepSpeed knows; allowed: " + known +
                                  (near.empty() ? "" : "; did you mean \"" + near + "\"?"),
                              type->line, type->column});
    return;
  }
  read_typed_members(node, "optimizer", index >= 0, errors);
}

void Config::read_scheduler(const JsonNode &node, std::vector<Problem> *errors) {
  positions_["scheduler"] = {node.line, node.column};
  const JsonNode *type = node.find("type");
  std::string known;
  for (int i = 1; i < kNumSchedulerTypes; ++i) known += std::string(i > 1 ? ", " : "") + kSchedulerTypes[i];
  if (type == nullptr) {
    errors->push_back(Problem{"scheduler", "the section has no \"type\"; add one of " + known, node.line, node.column});
    return;
  }
  if (type->type != JsonNode::Type::String || type->text == "auto") {
    errors->push_back(Problem{"scheduler.type", "expected the scheduler's name (" + known + "), got " + type->to_text(),
                              type->line, type->column});
    return;
  }
  int index = scheduler_type_index(type->text);
  if (index > 0 || is_known_unsupported_scheduler(type->text)) {
    store("scheduler.type", Value::of_string(type->text), type->line, type->column, "scheduler.type", errors);
  } else {
    std::vector<std::string> names(kSchedulerTypes + 1, kSchedulerTypes + kNumSchedulerTypes);
    std::string near = nearest_name(type->text, names);
    errors->push_back(Problem{"scheduler.type",
                              "\"" + type->text + "\" is not a scheduler DeepSpeed knows; allowed: " + known +
                                  " (names are case-sensitive)" +
                                  (near.empty() ? "" : "; did you mean \"" + near + "\"?"),
                              type->line, type->column});
    return;
  }
  read_typed_members(node, "scheduler", index > 0, errors);
}

// The members of an "optimizer" or "scheduler" section after its type: "params" is validated
// against the schema when the type is one dsrt implements, and kept as given (reported by the
// unsupported-type check) when it is not.
void Config::read_typed_members(const JsonNode &node, const std::string &section, bool implemented,
                                std::vector<Problem> *errors) {
  const std::string params_path = section + ".params";
  for (const auto &member : node.members) {
    if (member.first == "type") continue;
    if (member.first == "params") {
      const JsonNode &params = member.second;
      if (params.type == JsonNode::Type::Null) continue;
      if (params.type != JsonNode::Type::Object) {
        errors->push_back(Problem{params_path, std::string("expected an object ({...}), got ") +
                                                   json_type_name(params.type),
                                  params.line, params.column});
      } else if (implemented) {
        positions_[params_path] = {params.line, params.column};
        read_section(params, params_path, params_path, errors);
      } else {
        opaque_[params_path] = params;
      }
      continue;
    }
    read_member(section, section, member.first, member.second, errors);
  }
}

const char *known_misplacement(const std::string &name) {
  // Top-level names users write for a DeepSpeed section that is spelled otherwise.
  static const std::pair<const char *, const char *> kMisplaced[] = {
      {"comms_config", "comms_logger"},
      {"comm_config", "comms_logger"},
      {"monitor_config", "csv_monitor, tensorboard or wandb"},
      {"monitor", "csv_monitor, tensorboard or wandb"},
      {"zero_config", "zero_optimization"},
      {"zero", "zero_optimization"},
      {"optimizer_config", "optimizer"},
      {"scheduler_config", "scheduler"},
      {"lr_scheduler", "scheduler"},
  };
  for (const auto &entry : kMisplaced)
    if (name == entry.first) return entry.second;
  return nullptr;
}

std::string Config::unknown_key_message(const std::string &section, const std::string &name) const {
  const std::string path = join_path(section, name);
  if (section.empty()) {
    if (const char *meant = known_misplacement(name))
      return std::string("not a DeepSpeed key (DeepSpeed would ignore it); did you mean ") + meant + "?";
  }
  // A parameter of another optimizer or scheduler type.
  if (section == "optimizer.params" || section == "scheduler.params") {
    bool optimizer = section == "optimizer.params";
    std::string owners;
    int count = optimizer ? kNumOptimizerTypes : kNumSchedulerTypes;
    for (int t = optimizer ? 0 : 1; t < count; ++t) {
      const KeySpec *spec = optimizer ? find_key(path, t, -1) : find_key(path, -1, t);
      if (spec) owners += std::string(owners.empty() ? "" : ", ") + (optimizer ? kOptimizerTypes[t] : kSchedulerTypes[t]);
    }
    std::string type = optimizer ? values_.at("optimizer.type").text : values_.at("scheduler.type").text;
    if (!owners.empty())
      return "not a parameter of " + type + " (it is one of " + owners + "); remove it or change the type";
  }
  std::vector<std::string> candidates = section_children(section, optimizer_type(), scheduler_type());
  std::string near = nearest_name(name, candidates);
  if (!near.empty()) return "unknown key; did you mean " + near + "?";
  // A key that exists, but in another section.
  for (const KeySpec &spec : all_keys()) {
    if (spec.name() == name && spec.section() != section)
      return "unknown key here; it belongs in " + (spec.section().empty() ? "the top level" : spec.section()) +
             " (" + spec.path + ")";
  }
  for (const SectionSpec &spec : all_sections()) {
    size_t dot = spec.path.rfind('.');
    std::string last = dot == std::string::npos ? spec.path : spec.path.substr(dot + 1);
    if (last == name && !spec.path.empty() && spec.path != path)
      return "unknown key here; the section " + name + " belongs at " + spec.path;
  }
  std::string listing;
  if (candidates.size() <= 16) {
    for (size_t i = 0; i < candidates.size(); ++i) listing += (i ? ", " : "") + candidates[i];
    return "unknown key; valid keys here: " + listing;
  }
  return "unknown key; `dsrt config show` lists every valid key with its default";
}

int Config::optimizer_type() const {
  auto found = values_.find("optimizer.type");
  if (found == values_.end() || found->second.kind != Value::Kind::String) return -1;
  return optimizer_type_index(found->second.text);
}

int Config::scheduler_type() const {
  auto found = values_.find("scheduler.type");
  if (found == values_.end() || found->second.kind != Value::Kind::String) return -1;
  int index = scheduler_type_index(found->second.text);
  return index > 0 ? index : -1;
}

}  // namespace dsrt
