// defines: the bare words Infinity and -Infinity in config text, as Python's json module writes
// float("inf") (Accelerate fills "steps_per_print" that way) and DeepSpeed's reader accepts.
// The JSON reader takes only finite numbers, so each such word is first masked as the number 0
// padded with spaces (every other character keeps its line and column), and the Number read at
// its position is then given back its infinite value.
#include <cmath>
#include <limits>

#include "config/config_internal.h"

namespace dsrt {

namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

void restore(JsonNode *node, const std::vector<NonFiniteLiteral> &literals) {
  if (node->type == JsonNode::Type::Number) {
    for (const NonFiniteLiteral &literal : literals) {
      if (literal.line == node->line && literal.column == node->column) {
        node->number = literal.negative ? -std::numeric_limits<double>::infinity()
                                        : std::numeric_limits<double>::infinity();
        node->text = literal.negative ? "-Infinity" : "Infinity";
      }
    }
    return;
  }
  for (JsonNode &item : node->items) restore(&item, literals);
  for (auto &member : node->members) restore(&member.second, literals);
}

}  // namespace

std::string mask_nonfinite_literals(const std::string &text, std::vector<NonFiniteLiteral> *found) {
  static const std::string kWord = "Infinity";
  found->clear();
  std::string out = text;
  int line = 1, column = 1;
  size_t i = 0;
  auto step = [&]() {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
    ++i;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {  // a string: skip to its closing quote (an unclosed one is the reader's error)
      step();
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size()) step();
        step();
      }
      if (i < text.size()) step();
    } else if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
      while (i < text.size() && text[i] != '\n') step();
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      step();
      step();
      while (i < text.size() && !(text[i] == '*' && i + 1 < text.size() && text[i + 1] == '/')) step();
      if (i < text.size()) {
        step();
        step();
      }
    } else {
      const bool negative = c == '-';
      const size_t at = negative ? i + 1 : i;
      if (text.compare(at, kWord.size(), kWord) == 0 && (i == 0 || !word_char(text[i - 1])) &&
          (at + kWord.size() >= text.size() || !word_char(text[at + kWord.size()]))) {
        found->push_back(NonFiniteLiteral{line, column, negative});
        out[at] = '0';
        for (size_t k = 1; k < kWord.size(); ++k) out[at + k] = ' ';
        while (i < at + kWord.size()) step();
      } else {
        step();
      }
    }
  }
  return out;
}

void restore_nonfinite_literals(JsonNode *root, const std::vector<NonFiniteLiteral> &found) {
  if (!found.empty()) restore(root, found);
}

}  // namespace dsrt
