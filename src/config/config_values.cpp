// defines: conversion and checking of single values against their KeySpec, and the JSON printer.
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "config/config_internal.h"
#include "util/status.h"

namespace dsrt {

namespace {

std::string lower(std::string s) {
  for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string got(const JsonNode &node) {
  std::string text = node.to_text();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  if (node.type == JsonNode::Type::String) return "the string " + text;
  if (node.type == JsonNode::Type::Object || node.type == JsonNode::Type::Array)
    return std::string(json_type_name(node.type)) + " " + text;
  return text;
}

void print(const JsonNode &node, int indent, std::string *out) {
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  const std::string inner(static_cast<size_t>(indent + 1) * 2, ' ');
  switch (node.type) {
    case JsonNode::Type::Object:
      if (node.members.empty()) {
        *out += "{}";
        return;
      }
      *out += "{\n";
      for (size_t i = 0; i < node.members.size(); ++i) {
        JsonNode key;
        key.type = JsonNode::Type::String;
        key.text = node.members[i].first;
        *out += inner + key.to_text() + ": ";
        print(node.members[i].second, indent + 1, out);
        *out += i + 1 < node.members.size() ? ",\n" : "\n";
      }
      *out += pad + "}";
      return;
    case JsonNode::Type::Array: {
      bool scalars = true;
      for (const auto &item : node.items)
        if (item.type == JsonNode::Type::Object || item.type == JsonNode::Type::Array) scalars = false;
      if (scalars) {
        *out += node.to_text();
        return;
      }
      *out += "[\n";
      for (size_t i = 0; i < node.items.size(); ++i) {
        *out += inner;
        print(node.items[i], indent + 1, out);
        *out += i + 1 < node.items.size() ? ",\n" : "\n";
      }
      *out += pad + "]";
      return;
    }
    default:
      *out += node.to_text();
  }
}

}  // namespace

std::string value_from_json(const KeySpec &spec, const JsonNode &node, Value *out) {
  if (node.type == JsonNode::Type::String && node.text == "auto") {
    *out = Value::automatic();
    return "";
  }
  std::string expected = "expected " + spec.allowed();
  switch (node.type) {
    case JsonNode::Type::Null:
      if (spec.nullable) {
        *out = Value::null();
        return "";
      }
      return "null is not allowed; " + expected;
    case JsonNode::Type::Bool:
      if (spec.type != KeyType::Bool) return expected + ", got " + got(node);
      *out = Value::of_bool(node.boolean);
      break;
    case JsonNode::Type::Number:
      if (spec.type != KeyType::Int && spec.type != KeyType::Number) {
        if (spec.type == KeyType::Bool && (node.number == 0 || node.number == 1))
          return expected + ", got " + got(node) + "; write " + (node.number != 0 ? "true" : "false");
        return expected + ", got " + got(node);
      }
      *out = Value::of_number(node.number);
      break;
    case JsonNode::Type::String:
      if (spec.type == KeyType::String || spec.type == KeyType::Choice) {
        *out = Value::of_string(node.text);
        break;
      }
      if (spec.type == KeyType::Bool && (lower(node.text) == "true" || lower(node.text) == "false"))
        return expected + ", got " + got(node) + "; write " + lower(node.text) + " without quotes";
      if (spec.type == KeyType::Int || spec.type == KeyType::Number) {
        char *end = nullptr;
        std::strtod(node.text.c_str(), &end);
        if (!node.text.empty() && end && *end == '\0')
          return expected + ", got " + got(node) + "; write the number without quotes";
      }
      return expected + " (or \"auto\"), got " + got(node);
    default:
      return expected + ", got " + got(node);
  }
  return check_value(spec, out);
}

std::string check_value(const KeySpec &spec, Value *value) {
  if (value->kind == Value::Kind::Auto) return "";
  if (value->kind == Value::Kind::Null) {
    if (spec.nullable) return "";
    return "null is not allowed; expected " + spec.allowed();
  }
  const std::string allowed = "; allowed: " + spec.allowed() + (spec.note.empty() ? "" : " (" + spec.note + ")");
  switch (spec.type) {
    case KeyType::Bool:
      if (value->kind != Value::Kind::Bool) return "expected true or false, got " + value->to_text();
      return "";
    case KeyType::Int:
    case KeyType::Number: {
      if (value->kind != Value::Kind::Number) return "expected " + spec.allowed() + ", got " + value->to_text();
      double v = value->number;
      if (spec.infinity_ok && std::isinf(v) && v > 0) return "";
      if (!std::isfinite(v)) return value->to_text() + " is not a finite number" + allowed;
      if (spec.type == KeyType::Int) {
        if (v != std::floor(v)) return format_number(v) + " is not an integer" + allowed;
        if (std::fabs(v) > 9.3e18) return format_number(v) + " is too large" + allowed;
      }
      bool below = spec.min_exclusive ? v <= spec.min : v < spec.min;
      if (below || v > spec.max) return format_number(v) + " is out of range" + allowed;
      return "";
    }
    case KeyType::String:
      if (value->kind != Value::Kind::String) return "expected a string, got " + value->to_text();
      return "";
    case KeyType::Choice: {
      if (value->kind != Value::Kind::String) return "expected " + spec.allowed() + ", got " + value->to_text();
      for (const std::string &choice : spec.choices) {
        if (value->text == choice) return "";
        if (spec.case_insensitive && lower(value->text) == lower(choice)) {
          value->text = choice;
          return "";
        }
      }
      std::string near = nearest_name(value->text, spec.choices);
      return value->to_text() + " is not allowed" + allowed + (near.empty() ? "" : "; did you mean \"" + near + "\"?");
    }
    case KeyType::Pair:
      return "is a list of two numbers; set its elements " + spec.path + ".0 and " + spec.path + ".1";
  }
  return "";
}

std::string resolve_hint(const KeySpec &spec) {
  const std::string name = spec.name();
  if (name == "reduce_bucket_size" || name == "stage3_prefetch_bucket_size" ||
      name == "stage3_param_persistence_threshold")
    return "dsrt_config_set_hidden_size, or dsrt_config_set_number";
  if (spec.path == "train_batch_size" || spec.path == "train_micro_batch_size_per_gpu" ||
      spec.path == "gradient_accumulation_steps")
    return "dsrt_config_set_number; dsrt_config_set_world_size derives one batch term from the other two";
  switch (spec.type) {
    case KeyType::Bool: return "dsrt_config_set_bool";
    case KeyType::String: return "dsrt_config_set_string";
    case KeyType::Choice: return "dsrt_config_set_string with " + spec.allowed();
    default: return "dsrt_config_set_number";
  }
}

std::string print_json(const JsonNode &node) {
  std::string out;
  print(node, 0, &out);
  out += "\n";
  return out;
}

}  // namespace dsrt
