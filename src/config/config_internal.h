// config_internal.h -- helpers shared by the config/*.cpp files (not used outside src/config).
#pragma once

#include <string>
#include <vector>

#include "config/json_text.h"
#include "config/schema.h"

namespace dsrt {

// Internal linkage: src/ckpt has its own dsrt::join_path (directory joining), and two external
// definitions of one signature would make the shared library call the wrong one.
static inline std::string join_path(const std::string &section, const std::string &name) {
  return section.empty() ? name : section + "." + name;
}

// The schema tables (schema_table.cpp), built once by all_keys() and all_sections().
std::vector<KeySpec> build_schema_keys();
std::vector<SectionSpec> build_schema_sections();

// The canonical dotted path for one written with an accepted alternative name
// ("aio.thread_count" -> "aio.intra_op_parallelism", "zero_optimization.aio.x" -> "aio.x").
std::string canonical_key_path(const std::string &path);

// For a top-level name users write for a section DeepSpeed spells otherwise ("comms_config"),
// the section(s) meant ("comms_logger"); null for any other name.
const char *known_misplacement(const std::string &name);

// Converts a JSON value for spec (a Pair is handled by the caller); "" or what is wrong
// ("expected ..., got ..."), without the key path.
std::string value_from_json(const KeySpec &spec, const JsonNode &node, Value *out);

// Checks a value against spec's type and range, canonicalizing a Choice's spelling;
// "" or what is wrong, without the key path.
std::string check_value(const KeySpec &spec, Value *value);

// How the host resolves an "auto" at path (the setter to call).
std::string resolve_hint(const KeySpec &spec);

// Pretty-prints a JSON tree (two-space indent); an infinite Number prints as Infinity.
std::string print_json(const JsonNode &node);


}  // namespace dsrt
