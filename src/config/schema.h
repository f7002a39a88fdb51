// schema.h -- every key DeepSpeed's training config has, with its type, DeepSpeed's default, the
// values allowed, and whether dsrt implements it. The Config class validates against this table
// and prints the effective config from it, so adding a key is one line here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

// One configuration value as written or set: JSON null, the placeholder "auto", or a scalar.
struct Value {
  enum class Kind { Null, Auto, Bool, Number, String };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  std::string text;

  static Value null() { return Value(); }
  static Value automatic() { Value v; v.kind = Kind::Auto; return v; }
  static Value of_bool(bool b) { Value v; v.kind = Kind::Bool; v.boolean = b; return v; }
  static Value of_number(double d) { Value v; v.kind = Kind::Number; v.number = d; return v; }
  static Value of_string(std::string s) { Value v; v.kind = Kind::String; v.text = std::move(s); return v; }

  bool is_auto() const { return kind == Kind::Auto; }
  bool operator==(const Value &other) const;
  bool operator!=(const Value &other) const { return !(*this == other); }
  // As JSON text for messages: true, 2.5, 200000000, "cpu", "auto", null.
  std::string to_text() const;
};

// Shortest text that reads back as the same double ("2.5", "1e-10", "200000000").
std::string format_number(double value);

enum class KeyType {
  Bool,
  Int,     // a JSON number with no fractional part (2e8 is fine, 2.5 is not)
  Number,
  String,  // free text (a path, a name)
  Choice,  // one of KeySpec::choices
  Pair,    // a list of two numbers (betas); its elements are the keys "<name>.0" and "<name>.1"
};

// What dsrt does with a key or section.
enum class Support {
  Implemented,
  HostSide,     // the host program's business (activation checkpointing, monitors): a warning
                // says dsrt does not act on it when it is set to anything but its default
  Ignored,      // a DeepSpeed implementation detail with no counterpart in dsrt: same warning
  Unsupported,  // a feature dsrt does not implement: any non-default value makes the engine
                // refuse the config (DSRT_ERR_UNSUPPORTED), so it never silently does less
};

// Optimizer and scheduler types, for keys that exist only under some of them (bit i = index i).
// The order matches OptimizerType / SchedulerType in train_config.h.
extern const char *const kOptimizerTypes[];  // "Adam", "AdamW", "SGD", "Lamb", "Adagrad", "Lion", "OneBitAdam",
                                             // "ZeroOneAdam", "OneBitLamb"
constexpr int kNumOptimizerTypes = 9;
extern const char *const kSchedulerTypes[];  // "", "WarmupLR", ... (index 0 = none)
constexpr int kNumSchedulerTypes = 6;
constexpr uint32_t kAllTypes = 0xFFFFFFFFu;

struct KeySpec {
  std::string path;  // canonical dotted path: "zero_optimization.offload_param.device"
  KeyType type = KeyType::Bool;
  Value default_value;  // DeepSpeed's default; Null where DeepSpeed has None (derived or absent)
  double min = -1e300, max = 1e300;
  bool min_exclusive = false;  // "> min" rather than ">= min"
  std::vector<std::string> choices;
  bool case_insensitive = false;  // Choice matched ignoring case, stored in canonical spelling
  bool nullable = false;          // JSON null accepted (DeepSpeed's Optional)
  bool infinity_ok = false;       // Infinity accepted (steps_per_print: Infinity means never)
  bool dsrt_only = false;         // not a key of DeepSpeed's config (`dsrt config show` prints it apart)
  Support support = Support::Implemented;
  uint32_t optimizer_mask = kAllTypes;  // for optimizer.params.*
  uint32_t scheduler_mask = kAllTypes;  // for scheduler.params.*
  std::string note;  // why unsupported, or what the range means

  std::string name() const;     // last path component ("device"; "betas.0" for pair elements)
  std::string section() const;  // the enclosing section's path ("" at the top level)
  // "an integer from 0 to 3", "a number > 0", "\"none\", \"cpu\" or \"nvme\"", ...
  std::string allowed() const;
};

// A section: an object of keys. Opaque sections are DeepSpeed features dsrt keeps but neither
// validates nor implements; their "enabled" (or, without one, their mere presence) decides.
struct SectionSpec {
  std::string path;
  Support support = Support::Implemented;
  bool opaque = false;
  bool nullable = false;
  std::string note;
};

const std::vector<KeySpec> &all_keys();
const std::vector<SectionSpec> &all_sections();

// The key at path for the given optimizer/scheduler type index (-1 = none or not typed), or null.
const KeySpec *find_key(const std::string &path, int optimizer_type, int scheduler_type);
const SectionSpec *find_section(const std::string &path);

// Key and subsection names directly inside a section, for "did you mean" and listings.
std::vector<std::string> section_children(const std::string &section, int optimizer_type, int scheduler_type);

// The candidate closest to word by edit distance (case-insensitive), or "" if none is close.
std::string nearest_name(const std::string &word, const std::vector<std::string> &candidates);

// Optimizer type index for a name (case-insensitive, as DeepSpeed lowercases it), -1 if not one.
int optimizer_type_index(const std::string &name);
int scheduler_type_index(const std::string &name);  // case-sensitive, as DeepSpeed; 0 never

// Optimizer and scheduler names DeepSpeed accepts that dsrt does not implement (ZeroOneAdam,
// torch schedulers, ...): the config is valid, but engines refuse it.
bool is_known_unsupported_optimizer(const std::string &name);
bool is_known_unsupported_scheduler(const std::string &name);

}  // namespace dsrt
