// config.h -- a DeepSpeed JSON configuration: read, validated against DeepSpeed's schema, edited
// by dotted key path, printed with every default filled in, and resolved into the TrainConfig the
// engine runs on. A Config is a value object (clone() copies it).
//
// Validation is stricter than DeepSpeed: an unknown key, a wrong type or a value out of range is an
// error naming the key's full path, the value and what is allowed; a DeepSpeed feature dsrt does not
// implement makes resolve() fail with DSRT_ERR_UNSUPPORTED when it is enabled (settings that belong
// to the host program, such as monitors or activation checkpointing, only warn). "auto" values are
// kept until the host resolves them with the setters, set_hidden_size and set_world_size.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/json_text.h"
#include "config/schema.h"
#include "config/train_config.h"
#include "util/status.h"

namespace dsrt {

class Config {
 public:
  // Parses and validates DeepSpeed JSON (hjson-style comments and trailing commas accepted).
  // origin names the text in messages (a file name, or "config"). On DSRT_ERR_CONFIG the message
  // lists every error found, one per line, each with its line:column and key path.
  static Status parse(const std::string &text, const std::string &origin, std::unique_ptr<Config> *out);
  // Reads a file (DSRT_ERR_IO if it cannot be read) and parses it with the file name as origin.
  static Status load(const std::string &path, std::unique_ptr<Config> *out);

  // Set or resolve one value by dotted path ("optimizer.params.lr", "optimizer.params.betas.0").
  // The value is validated as if it had been in the file; on error nothing changes.
  Status set_number(const std::string &key_path, double value);
  Status set_string(const std::string &key_path, const std::string &value);  // "auto" re-marks a key
  Status set_bool(const std::string &key_path, bool value);

  // Resolves the "auto" hidden-size keys as the HF Trainer and Accelerate do: reduce_bucket_size =
  // h*h, stage3_prefetch_bucket_size = 0.9*h*h, stage3_param_persistence_threshold = 10*h.
  Status set_hidden_size(int64_t hidden_size);
  // Applies the batch rule for this world size (deriving missing or "auto" terms as DeepSpeed
  // does); fails, showing the three numbers, when they are inconsistent.
  Status set_world_size(int world_size);
  int world_size() const { return world_size_; }  // 0 until set

  // Effective values (defaults filled in). get_number gives booleans as 0/1; get_string gives
  // any scalar as text. Both fail on an unknown key, a section, or a value still "auto".
  Status get_number(const std::string &key_path, double *out) const;
  Status get_string(const std::string &key_path, std::string *out) const;

  // The effective config as pretty-printed JSON: every section and key DeepSpeed has, with the
  // value in force ("auto" where unresolved, null where DeepSpeed's default is None).
  std::string to_json() const;
  // The same as DeepSpeed JSON that DeepSpeed itself accepts: keys that are dsrt's only, and the
  // optimizer/scheduler parameters the config does not give (DeepSpeed passes those sections to
  // constructors that refuse unknown names), are left out and listed in dsrt_only, one
  // "path = value  (why)" each.
  std::string to_deepspeed_json(std::vector<std::string> *dsrt_only) const;
  // Dotted paths of values still "auto" (batch terms the world size derives are not listed).
  std::vector<std::string> unresolved() const;
  // Deprecated aliases, misplaced sections, settings dsrt does not act on.
  const std::vector<std::string> &warnings() const { return warnings_; }
  // Enabled features dsrt does not implement, one message each ("" free: empty when none).
  const std::vector<std::string> &unsupported() const { return unsupported_; }
  // Which setter resolves the "auto" at path (for messages and `dsrt config check`).
  std::string how_to_resolve(const std::string &path) const;
  std::unique_ptr<Config> clone() const { return std::make_unique<Config>(*this); }

  // Resolves into the typed struct for this world size. DSRT_ERR_CONFIG for an unresolved "auto"
  // (naming each and how to resolve it) or inconsistent batch sizes; DSRT_ERR_UNSUPPORTED when an
  // enabled feature is not implemented. Fills every field, including effective_json.
  Status resolve(int world_size, TrainConfig *out) const;
  // What dsrt_engine_create would refuse about this config alone: resolve() at world_size, or
  // when it is 0 at the world size set_world_size gave, or else at the world size the batch terms
  // imply (train / (micro * gas) when all three are given, 1 otherwise).
  Status validate(int world_size) const;

  Config() = default;

 private:
  struct Problem {
    std::string path;
    std::string message;
    int line = 0, column = 0;
  };

  // Parsing.
  // section is the canonical path; display is how the user wrote it (for messages).
  void read_section(const JsonNode &node, const std::string &section, const std::string &display,
                    std::vector<Problem> *errors);
  void read_member(const std::string &section, const std::string &display, const std::string &name,
                   const JsonNode &node, std::vector<Problem> *errors);
  void read_optimizer(const JsonNode &node, std::vector<Problem> *errors);
  void read_scheduler(const JsonNode &node, std::vector<Problem> *errors);
  void read_typed_members(const JsonNode &node, const std::string &section, bool implemented,
                          std::vector<Problem> *errors);
  void read_key(const KeySpec &spec, const JsonNode &node, const std::string &shown, std::vector<Problem> *errors);
  std::string where_at(const JsonNode &node) const;
  void store(const std::string &path, const Value &value, int line, int column, const std::string &spelled,
             std::vector<Problem> *errors);
  std::string unknown_key_message(const std::string &section, const std::string &name) const;
  // An unknown top-level name that is an error rather than a warning: close to a known name (a
  // typo), a known misplaced section, or a key of a section written at the top level.
  bool top_level_mistake(const std::string &name) const;

  std::string build_json(bool deepspeed, std::vector<std::string> *apart) const;
  // Cross-key rules, unsupported features and warnings; refreshes warnings_ and unsupported_.
  void check(std::vector<Problem> *errors);
  Status errors_to_status(const std::vector<Problem> &errors) const;
  Status set_value(const std::string &key_path, const Value &value, const char *setter);

  // Typed views of the current values.
  int optimizer_type() const;  // index into kOptimizerTypes, -1 when none/unsupported
  int scheduler_type() const;  // index into kSchedulerTypes, -1 when none/unsupported
  bool has_optimizer() const { return values_.count("optimizer.type") != 0; }
  bool has_scheduler() const { return values_.count("scheduler.type") != 0; }
  const KeySpec *spec_for(const std::string &path) const {
    return find_key(path, optimizer_type(), scheduler_type());
  }
  Value effective(const KeySpec &spec) const;  // explicit value, or the default in force
  std::string where(const std::string &path) const;  // "origin:line:col" of a key, or origin

  struct Batch {
    int64_t train = 0, micro = 0, gas = 0;
    std::vector<std::string> unresolved;  // batch terms still "auto" and not derivable
  };
  Status derive_batch(int world_size, Batch *out) const;

  std::string origin_ = "config";
  std::map<std::string, Value> values_;  // explicitly given values, by canonical path
  std::map<std::string, std::pair<int, int>> positions_;  // line/column of given values
  std::map<std::string, std::string> spellings_;  // the name a value was given under, if an alias
  std::map<std::string, JsonNode> opaque_;  // sections kept as written (see SectionSpec::opaque)
  std::vector<std::string> parse_warnings_;
  size_t unknown_top_level_keys_ = 0;      // unknown top-level keys read (warnings name the first few)
  size_t unknown_top_level_summary_ = 0;   // where in parse_warnings_ the "N more" warning goes
  std::vector<std::string> warnings_;
  std::vector<std::string> unsupported_;
  int world_size_ = 0;
};

}  // namespace dsrt
