// json_text.h -- reads configuration text the way DeepSpeed does (it uses hjson): JSON plus
// // # and /* */ comments and trailing commas. Unlike plain JSON readers it rejects duplicate keys
// and keeps the line and column of every value, so validation errors can point into the file.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace dsrt {

struct JsonNode {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0.0;
  std::string text;  // a String's value, or a Number's literal as written ("2e8", "2.5")
  std::vector<JsonNode> items;                             // Array
  std::vector<std::pair<std::string, JsonNode>> members;   // Object, in file order
  int line = 0;  // 1-based position of the value's first character
  int column = 0;

  const JsonNode *find(const std::string &key) const;
  // The value as it would be written in JSON (compact), for messages.
  std::string to_text() const;
};

const char *json_type_name(JsonNode::Type type);

// A key as quoted in a message: a hostile 10 MB key is cut to its start and its length, not copied
// into every message.
std::string shorten_key(const std::string &key);

// The largest config text dsrt reads (16 MiB); longer text (or a file that never ends, such as
// /dev/zero) is refused with DSRT_ERR_CONFIG.
constexpr size_t kMaxConfigTextBytes = size_t(16) << 20;

// Parses text; origin names the source in messages ("ds_config.json:3:17: ...").
// Fails with DSRT_ERR_CONFIG on a syntax error or a duplicate key.
Status parse_json_text(const std::string &text, const std::string &origin, JsonNode *out);

}  // namespace dsrt
