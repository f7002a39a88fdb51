// defines: the hjson-compatible JSON reader used for DeepSpeed configs.
#include "config/json_text.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <cstdio>
#include <string>
#include <unordered_map>

namespace dsrt {

std::string shorten_key(const std::string &key) {
  constexpr size_t kShown = 60;
  if (key.size() <= kShown + 20) return key;
  return key.substr(0, kShown) + "...(" + std::to_string(key.size()) + " characters)";
}

namespace {

// Deep nesting is never a real config; the limit keeps hostile input from exhausting the stack.
constexpr int kMaxDepth = 64;

class Reader {
 public:
  Reader(const std::string &text, const std::string &origin) : text_(text), origin_(origin) {}

  Status parse_document(JsonNode *out) {
    if (text_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // a UTF-8 byte-order mark, as Windows editors write
    DSRT_RETURN_IF_ERROR(skip_space());
    if (at_end()) return error_here("the text is empty: expected a JSON object such as {\"zero_optimization\": {\"stage\": 2}}");
    DSRT_RETURN_IF_ERROR(parse_value(out, 0));
    DSRT_RETURN_IF_ERROR(skip_space());
    if (!at_end()) return error_here("unexpected text after the end of the top-level value");
    return Status::Ok();
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void advance() {
    if (at_end()) return;
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else if ((static_cast<unsigned char>(text_[pos_]) & 0xC0) != 0x80) {
      ++column_;  // count UTF-8 characters, not continuation bytes
    }
    ++pos_;
  }

  Status error_at(int line, int column, const std::string &message) const {
    return Error(DSRT_ERR_CONFIG, "%s:%d:%d: syntax error: %s", origin_.c_str(), line, column, message.c_str());
  }
  Status error_here(const std::string &message) const { return error_at(line_, column_, message); }

  std::string describe_current() const {
    if (at_end()) return "the end of the text";
    unsigned char c = static_cast<unsigned char>(peek());
    if (c >= 0x20 && c < 0x7F) return Format("'%c'", c);
    return Format("byte 0x%02X", c);
  }

  Status skip_space() {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '#' || (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/')) {
        while (!at_end() && peek() != '\n') advance();
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '*') {
        int line = line_, column = column_;
        advance();
        advance();
        while (!(peek() == '*' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/')) {
          if (at_end()) return error_at(line, column, "a /* comment is never closed with */");
          advance();
        }
        advance();
        advance();
      } else {
        break;
      }
    }
    return Status::Ok();
  }

  Status parse_value(JsonNode *out, int depth) {
    if (depth > kMaxDepth) return error_here(Format("nesting deeper than %d levels", kMaxDepth));
    out->line = line_;
    out->column = column_;
    char c = peek();
    if (c == '{') return parse_object(out, depth);
    if (c == '[') return parse_array(out, depth);
    if (c == '"') {
      out->type = JsonNode::Type::String;
      return parse_string(&out->text);
    }
    if (c == '-' || (c >= '0' && c <= '9') || c == 'I') return parse_number(out);
    if (match_word("true")) {
      out->type = JsonNode::Type::Bool;
      out->boolean = true;
      return Status::Ok();
    }
    if (match_word("false")) {
      out->type = JsonNode::Type::Bool;
      return Status::Ok();
    }
    if (match_word("null")) {
      out->type = JsonNode::Type::Null;
      return Status::Ok();
    }
    if (c == '\'') return error_here("strings must be in double quotes (\"...\"), not single quotes");
    if (at_end()) return error_here("the text ends where a value was expected");
    return error_here("expected a value (an object, array, string, number, true, false or null) but found " +
                      describe_current() + "; strings must be in double quotes");
  }

  bool match_word(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    size_t end = pos_ + n;
    if (end < text_.size()) {
      char next = text_[end];
      if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') || next == '_')
        return false;
    }
    for (size_t i = 0; i < n; ++i) advance();
    return true;
  }

  Status parse_object(JsonNode *out, int depth) {
    out->type = JsonNode::Type::Object;
    advance();  // '{'
    std::unordered_map<std::string, int> first_line;  // key -> line of its first occurrence
    for (;;) {
      DSRT_RETURN_IF_ERROR(skip_space());
      if (peek() == '}') {
        advance();
        return Status::Ok();
      }
      if (peek() != '"') {
        if (at_end()) return error_at(out->line, out->column, "this object is never closed with '}'");
        return error_here("expected a key in double quotes or '}' but found " + describe_current());
      }
      int key_line = line_, key_column = column_;
      std::string key;
      DSRT_RETURN_IF_ERROR(parse_string(&key));
      // One hash lookup per key: duplicate detection stays linear in the number of members.
      auto seen = first_line.emplace(key, key_line);
      if (!seen.second)
        return error_at(key_line, key_column,
                        Format("duplicate key \"%s\" (first given at line %d): remove one of them",
                               shorten_key(key).c_str(), seen.first->second));
      DSRT_RETURN_IF_ERROR(skip_space());
      if (peek() != ':')
        return error_here("expected ':' after the key \"" + shorten_key(key) + "\" but found " + describe_current());
      advance();
      DSRT_RETURN_IF_ERROR(skip_space());
      JsonNode value;
      DSRT_RETURN_IF_ERROR(parse_value(&value, depth + 1));
      out->members.emplace_back(std::move(key), std::move(value));
      DSRT_RETURN_IF_ERROR(skip_space());
      if (peek() == ',') {
        advance();
      } else if (peek() != '}') {
        if (at_end()) return error_at(out->line, out->column, "this object is never closed with '}'");
        return error_here("expected ',' or '}' after a member but found " + describe_current() +
                          " (is a comma missing?)");
      }
    }
  }

  Status parse_array(JsonNode *out, int depth) {
    out->type = JsonNode::Type::Array;
    advance();  // '['
    for (;;) {
      DSRT_RETURN_IF_ERROR(skip_space());
      if (peek() == ']') {
        advance();
        return Status::Ok();
      }
      if (at_end()) return error_at(out->line, out->column, "this array is never closed with ']'");
      JsonNode value;
      DSRT_RETURN_IF_ERROR(parse_value(&value, depth + 1));
      out->items.push_back(std::move(value));
      DSRT_RETURN_IF_ERROR(skip_space());
      if (peek() == ',') {
        advance();
      } else if (peek() != ']') {
        if (at_end()) return error_at(out->line, out->column, "this array is never closed with ']'");
        return error_here("expected ',' or ']' after an element but found " + describe_current());
      }
    }
  }

  static void append_utf8(uint32_t cp, std::string *out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status parse_hex4(uint32_t *out) {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      uint32_t digit;
      if (c >= '0' && c <= '9') digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      else return error_here("\\u must be followed by four hex digits");
      value = value * 16 + digit;
      advance();
    }
    *out = value;
    return Status::Ok();
  }

  Status parse_string(std::string *out) {
    int line = line_, column = column_;
    advance();  // opening quote
    out->clear();
    for (;;) {
      if (at_end()) return error_at(line, column, "this string is never closed with '\"'");
      char c = peek();
      if (c == '"') {
        advance();
        return Status::Ok();
      }
      if (c == '\n') return error_at(line, column, "this string is not closed before the end of the line");
      if (static_cast<unsigned char>(c) < 0x20)
        return error_here(Format("control character 0x%02X inside a string: write it as an escape", c));
      if (c != '\\') {
        out->push_back(c);
        advance();
        continue;
      }
      advance();
      char e = peek();
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          advance();
          uint32_t cp = 0;
          DSRT_RETURN_IF_ERROR(parse_hex4(&cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!(peek() == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == 'u'))
              return error_here("a \\u high surrogate must be followed by a \\u low surrogate");
            advance();
            advance();
            uint32_t low = 0;
            DSRT_RETURN_IF_ERROR(parse_hex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return error_here("invalid \\u low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return error_here("a \\u low surrogate without a high surrogate");
          }
          if (cp == 0) return error_here("\\u0000 is not allowed in a config string");
          append_utf8(cp, out);
          continue;  // parse_hex4 already advanced
        }
        default:
          return error_here("unknown escape \\" + std::string(1, e) + " in a string");
      }
      advance();
    }
  }

  Status parse_number(JsonNode *out) {
    size_t start = pos_;
    int line = line_, column = column_;
    auto digits = [&]() {
      size_t n = 0;
      while (peek() >= '0' && peek() <= '9') {
        advance();
        ++n;
      }
      return n;
    };
    const bool negative = peek() == '-';
    if (negative) advance();
    // Python's json module writes float("inf") as the bare word Infinity (Accelerate fills
    // "steps_per_print" so) and DeepSpeed's reader takes it: an infinite Number.
    if (match_word("Infinity")) {
      out->type = JsonNode::Type::Number;
      out->text = negative ? "-Infinity" : "Infinity";
      out->number = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return Status::Ok();
    }
    if (!negative && peek() == 'I')
      return error_here("expected a value (an object, array, string, number, true, false or null) but found " +
                        describe_current() + "; strings must be in double quotes");
    if (peek() == '0') {
      advance();
      if (peek() >= '0' && peek() <= '9') return error_at(line, column, "numbers must not have leading zeros");
    } else if (digits() == 0) {
      return error_at(line, column, "'-' must be followed by digits");
    }
    if (peek() == '.') {
      advance();
      if (digits() == 0) return error_here("a '.' in a number must be followed by digits");
    }
    if (peek() == 'e' || peek() == 'E') {
      advance();
      if (peek() == '+' || peek() == '-') advance();
      if (digits() == 0) return error_here("an exponent in a number must have digits");
    }
    out->type = JsonNode::Type::Number;
    out->text = text_.substr(start, pos_ - start);
    // from_chars is locale-independent, unlike strtod: a host that set LC_NUMERIC cannot change parsing.
    double value = 0.0;
    auto result = std::from_chars(out->text.data(), out->text.data() + out->text.size(), value);
    if (result.ec == std::errc::result_out_of_range || !std::isfinite(value)) {
      // Underflow to zero is harmless; overflow is not a usable setting.
      if (std::fabs(value) > 1.0 || result.ptr == out->text.data())
        return error_at(line, column, "the number " + out->text + " is out of range");
    }
    out->number = value;
    return Status::Ok();
  }

  const std::string &text_;
  const std::string &origin_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

void append_text(const JsonNode &node, std::string *out) {
  switch (node.type) {
    case JsonNode::Type::Null: *out += "null"; break;
    case JsonNode::Type::Bool: *out += node.boolean ? "true" : "false"; break;
    case JsonNode::Type::Number: *out += node.text; break;
    case JsonNode::Type::String: {
      out->push_back('"');
      for (char c : node.text) {
        if (c == '"' || c == '\\') {
          out->push_back('\\');
          out->push_back(c);
        } else if (static_cast<unsigned char>(c) < 0x20) {
          *out += Format("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out->push_back(c);
        }
      }
      out->push_back('"');
      break;
    }
    case JsonNode::Type::Array: {
      out->push_back('[');
      for (size_t i = 0; i < node.items.size(); ++i) {
        if (i) *out += ", ";
        append_text(node.items[i], out);
      }
      out->push_back(']');
      break;
    }
    case JsonNode::Type::Object: {
      out->push_back('{');
      for (size_t i = 0; i < node.members.size(); ++i) {
        if (i) *out += ", ";
        JsonNode key;
        key.type = JsonNode::Type::String;
        key.text = node.members[i].first;
        append_text(key, out);
        *out += ": ";
        append_text(node.members[i].second, out);
      }
      out->push_back('}');
      break;
    }
  }
}

}  // namespace

const JsonNode *JsonNode::find(const std::string &key) const {
  for (const auto &member : members)
    if (member.first == key) return &member.second;
  return nullptr;
}

std::string JsonNode::to_text() const {
  std::string out;
  append_text(*this, &out);
  return out;
}

const char *json_type_name(JsonNode::Type type) {
  switch (type) {
    case JsonNode::Type::Null: return "null";
    case JsonNode::Type::Bool: return "a boolean";
    case JsonNode::Type::Number: return "a number";
    case JsonNode::Type::String: return "a string";
    case JsonNode::Type::Array: return "a list";
    case JsonNode::Type::Object: return "an object";
  }
  return "a value";
}

Status parse_json_text(const std::string &text, const std::string &origin, JsonNode *out) {
  *out = JsonNode();
  if (text.size() > kMaxConfigTextBytes)
    return Error(DSRT_ERR_CONFIG, "%s: the config text is %zu bytes; dsrt reads configs of at most %zu bytes (a "
                 "DeepSpeed config is a few kilobytes: is this the right file?)", origin.c_str(), text.size(),
                 kMaxConfigTextBytes);
  Reader reader(text, origin);
  return reader.parse_document(out);
}

}  // namespace dsrt
