// dsrt's schema table against DeepSpeed's own config fields, as scripts/dump-deepspeed-schema.py
// read them from the DeepSpeed release named in tests/data/deepspeed-schema.json. Every key outside
// optimizer.params and scheduler.params (which DeepSpeed passes to the optimizer and scheduler
// constructors instead of validating) is compared: present on both sides, type, default and lower
// bound. A difference fails the test unless tests/data/deepspeed-schema-allow.txt lists it, with
// its reason, as "<path> <kind>: <reason>" (kind: missing, extra, type, default, range, removed); an allow-list
// line that no longer matches a difference fails too. Keys DeepSpeed does not have must be the
// ones marked dsrt_only in the table, which `dsrt config show` prints apart.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config.h"
#include "config/json_text.h"
#include "config/schema.h"

namespace dsrt {
namespace {

const std::string kData = DSRT_SOURCE_DIR "/tests/data";

std::string read_file(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

bool compared(const std::string &path) {
  return path.rfind("optimizer.", 0) != 0 && path.rfind("scheduler.", 0) != 0;
}

// Keys under a section dsrt keeps as written without validating it (comms_logger, ...).
bool under_opaque_section(const std::string &path) {
  for (const SectionSpec &section : all_sections())
    if (section.opaque && (path == section.path || path.rfind(section.path + ".", 0) == 0)) return true;
  return false;
}

bool is_section(const std::string &path) { return find_section(path) != nullptr; }

const KeySpec *key_at(const std::string &path) {
  for (const KeySpec &spec : all_keys())
    if (spec.path == path) return &spec;
  return nullptr;
}

std::string type_of(const KeySpec &spec) {
  switch (spec.type) {
    case KeyType::Bool: return "bool";
    case KeyType::Int: return "int";
    case KeyType::Number: return "number";
    case KeyType::String: return "string";
    case KeyType::Choice: return "choice";
    case KeyType::Pair: return "list";
  }
  return "?";
}

bool same_type(const KeySpec &spec, const std::string &ds) {
  const std::string mine = type_of(spec);
  if (mine == ds) return true;
  if (mine == "choice" && (ds == "string" || ds.find("string") != std::string::npos)) return true;
  if (mine == "string" && ds.find("string") != std::string::npos) return true;
  // DeepSpeed's float fields take integers; dsrt's Int keys are DeepSpeed's int fields.
  if (mine == "number" && (ds == "int|number" || ds == "number|int")) return true;
  if (mine == "int" && (ds == "int|number" || ds == "number|int")) return true;
  return false;
}

bool same_default(const KeySpec &spec, const JsonNode &ds) {
  const Value &mine = spec.default_value;
  switch (ds.type) {
    case JsonNode::Type::Null: return mine.kind == Value::Kind::Null;
    case JsonNode::Type::Bool: return mine.kind == Value::Kind::Bool && mine.boolean == ds.boolean;
    case JsonNode::Type::Number:
      return mine.kind == Value::Kind::Number &&
             std::fabs(mine.number - ds.number) <= 1e-12 * std::max(1.0, std::fabs(ds.number));
    case JsonNode::Type::String:
      if (mine.kind == Value::Kind::String) return mine.text == ds.text || (spec.case_insensitive && [&] {
        std::string a = mine.text, b = ds.text;
        for (char &c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (char &c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return a == b;
      }());
      if (mine.kind == Value::Kind::Number && (ds.text == "Infinity" || ds.text == "-Infinity"))
        return std::isinf(mine.number);
      return false;
    default: return false;
  }
}

// DeepSpeed's lower bound as "ge N" / "gt N", or "" when it has none.
std::string ds_lower(const JsonNode &field) {
  if (const JsonNode *ge = field.find("ge")) return "ge " + ge->text;
  if (const JsonNode *gt = field.find("gt")) return "gt " + gt->text;
  return "";
}

TEST(ConfigSchemaDeepSpeed, TableMatchesDeepSpeedOrTheDifferenceIsListed) {
  JsonNode root;
  Status status = parse_json_text(read_file(kData + "/deepspeed-schema.json"), "deepspeed-schema.json", &root);
  ASSERT_TRUE(status.ok()) << status.message();
  const JsonNode *fields = root.find("fields");
  ASSERT_NE(fields, nullptr);
  ASSERT_GE(fields->items.size(), 100u) << "the dump looks truncated";

  // The allow-list: "<path> <kind>: <reason>", # comments.
  std::map<std::string, std::string> allowed;  // "path kind" -> reason
  std::istringstream lines(read_file(kData + "/deepspeed-schema-allow.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << "allow-list line without ': reason': " << line;
    std::string reason = line.substr(colon + 1);
    ASSERT_GE(reason.size(), 10u) << "allow-list line without a reason: " << line;
    allowed[line.substr(0, colon)] = reason;
  }

  std::set<std::string> found;  // "path kind"
  std::vector<std::string> unlisted;
  auto difference = [&](const std::string &path, const std::string &kind, const std::string &detail) {
    const std::string id = path + " " + kind;
    found.insert(id);
    if (!allowed.count(id)) unlisted.push_back(id + ": " + detail);
  };

  std::set<std::string> ds_paths;
  for (const JsonNode &field : fields->items) {
    const JsonNode *path_node = field.find("path");
    const JsonNode *type_node = field.find("type");
    ASSERT_NE(path_node, nullptr);
    const std::string path = path_node->text;
    ds_paths.insert(path);
    const std::string ds_type = type_node ? type_node->text : "";
    if (!compared(path)) continue;
    if (field.find("removed")) {
      // DeepSpeed refuses the key now; dsrt still reading it needs a reason.
      if (is_section(path) || key_at(path)) difference(path, "removed", "DeepSpeed refuses it: " + field.find("removed")->text);
      continue;
    }
    if (under_opaque_section(path)) continue;
    if (field.find("deprecated")) {
      // A deprecated DeepSpeed name: dsrt reads it (an alias, with a warning), not as a table key.
      if (ds_type == "bool") {
        std::string json = "true";
        for (std::string at = path; !at.empty();) {
          size_t dot = at.rfind('.');
          json = "{\"" + (dot == std::string::npos ? at : at.substr(dot + 1)) + "\": " + json + "}";
          at = dot == std::string::npos ? "" : at.substr(0, dot);
        }
        std::unique_ptr<Config> config;
        Status read = Config::parse(json, "deprecated", &config);
        if (!read.ok()) difference(path, "missing", "a deprecated DeepSpeed name dsrt does not read: " + read.message());
      }
      continue;
    }
    if (ds_type == "object" || is_section(path)) {
      if (!is_section(path) && !key_at(path)) difference(path, "missing", "a DeepSpeed section dsrt's table lacks");
      continue;
    }
    const KeySpec *spec = key_at(path);
    if (spec == nullptr) {
      difference(path, "missing", "a DeepSpeed key dsrt's table lacks");
      continue;
    }
    EXPECT_FALSE(spec->dsrt_only) << path << " is DeepSpeed's key but marked dsrt_only";
    if (!ds_type.empty() && !same_type(*spec, ds_type))
      difference(path, "type", "DeepSpeed " + ds_type + ", dsrt " + type_of(*spec));
    if (const JsonNode *def = field.find("default"); def && !same_default(*spec, *def))
      difference(path, "default", "DeepSpeed " + def->to_text() + ", dsrt " + spec->default_value.to_text());
    const std::string lower = ds_lower(field);
    const bool numeric = spec->type == KeyType::Int || spec->type == KeyType::Number;
    if (!lower.empty() && numeric) {
      const JsonNode *bound = field.find(lower[1] == 'e' ? "ge" : "gt");
      bool exclusive = lower[1] == 't';
      double min = bound->number;
      if (exclusive && spec->type == KeyType::Int && min == std::floor(min)) {
        min += 1;  // an integer > N is an integer >= N + 1
        exclusive = false;
      }
      if (min != spec->min || exclusive != spec->min_exclusive)
        difference(path, "range", "DeepSpeed " + lower + ", dsrt " + spec->allowed());
    } else if (numeric && field.find("nullable") && spec->min > -1e299) {
      // A pydantic field without a bound takes any number; dsrt refusing some needs a reason.
      difference(path, "range", "DeepSpeed has no lower bound, dsrt " + spec->allowed());
    }
  }
  // dsrt's keys that the dump does not have: dsrt's own (dsrt_only, printed apart by `dsrt config
  // show`), or DeepSpeed's keys its classes do not declare (listed as "extra" with the reason).
  for (const KeySpec &spec : all_keys()) {
    if (!compared(spec.path) || under_opaque_section(spec.path)) continue;
    if (spec.name().find('.') != std::string::npos) continue;  // pair elements
    const bool deepspeeds = ds_paths.count(spec.path) != 0;
    if (deepspeeds) EXPECT_FALSE(spec.dsrt_only) << spec.path << " is DeepSpeed's key: clear dsrt_only";
    else if (!spec.dsrt_only) difference(spec.path, "extra", "not in DeepSpeed's config classes");
  }

  std::string report;
  for (const std::string &item : unlisted) report += "\n  " + item;
  EXPECT_TRUE(unlisted.empty()) << unlisted.size()
                                << " difference(s) from DeepSpeed not in tests/data/deepspeed-schema-allow.txt "
                                   "(fix the table, or list the difference with its reason):"
                                << report;
  for (const auto &entry : allowed)
    EXPECT_TRUE(found.count(entry.first)) << "stale allow-list line (no such difference any more): " << entry.first;
}

}  // namespace
}  // namespace dsrt
