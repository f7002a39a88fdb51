// defines: the DeepSpeed config schema table (types, DeepSpeed's defaults, ranges, dsrt support)
// and the lookups over it.
#include "config/schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "config/config_internal.h"
#include "util/status.h"

namespace dsrt {

const char *const kOptimizerTypes[] = {"Adam", "AdamW", "SGD", "Lamb", "Adagrad", "Lion", "OneBitAdam", "ZeroOneAdam",
                                       "OneBitLamb"};
const char *const kSchedulerTypes[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"};

bool Value::operator==(const Value &other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::Null:
    case Kind::Auto: return true;
    case Kind::Bool: return boolean == other.boolean;
    case Kind::Number: return number == other.number;
    case Kind::String: return text == other.text;
  }
  return false;
}

std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::fabs(value) < 1e19) return Format("%.0f", value);
  for (int precision = 6; precision <= 17; ++precision) {
    std::string text = Format("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return Format("%.17g", value);
}

std::string Value::to_text() const {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Auto: return "\"auto\"";
    case Kind::Bool: return boolean ? "true" : "false";
    case Kind::Number: return format_number(number);
    case Kind::String: return "\"" + text + "\"";
  }
  return "";
}

std::string KeySpec::name() const {
  size_t dot = path.rfind('.');
  if (type == KeyType::Number && dot != std::string::npos && dot > 0 && dot + 2 == path.size() &&
      std::isdigit(static_cast<unsigned char>(path.back()))) {
    size_t prev = path.rfind('.', dot - 1);  // pair element: "betas.0"
    return path.substr(prev == std::string::npos ? 0 : prev + 1);
  }
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string KeySpec::section() const {
  std::string n = name();
  return path.size() == n.size() ? "" : path.substr(0, path.size() - n.size() - 1);
}

std::string KeySpec::allowed() const {
  auto bound = [](double v) { return format_number(v); };
  bool has_min = min > -1e299, has_max = max < 1e299;
  std::string what;
  switch (type) {
    case KeyType::Bool: return "true or false";
    case KeyType::String: return "a string";
    case KeyType::Pair: return "a list of two numbers, e.g. [0.9, 0.999]";
    case KeyType::Choice: {
      for (size_t i = 0; i < choices.size(); ++i) {
        if (i) what += (i + 1 == choices.size()) ? " or " : ", ";
        what += "\"" + choices[i] + "\"";
      }
      return what;
    }
    case KeyType::Int: what = "an integer"; break;
    case KeyType::Number: what = "a number"; break;
  }
  if (has_min && has_max && !min_exclusive) return what + " from " + bound(min) + " to " + bound(max);
  if (has_min && has_max) return what + " > " + bound(min) + " and <= " + bound(max);
  if (has_min) return what + (min_exclusive ? " > " : " >= ") + bound(min);
  if (has_max) return what + " <= " + bound(max);
  return what;
}

namespace {

int edit_distance(const std::string &a, const std::string &b, int bound) {
  // The distance is at least the length gap, and a row's minimum never falls in later rows: once
  // either exceeds bound the exact value no longer matters.
  const int gap = static_cast<int>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
  if (gap > bound) return bound + 1;
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    int row_min = cur[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]))
                    ? 0
                    : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + sub});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > bound) return bound + 1;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], bound + 1);
}

std::string lower(const std::string &s) {
  std::string out = s;
  for (char &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<KeySpec> &all_keys() {
  static const std::vector<KeySpec> keys = build_schema_keys();
  return keys;
}

const std::vector<SectionSpec> &all_sections() {
  static const std::vector<SectionSpec> sections = build_schema_sections();
  return sections;
}

const KeySpec *find_key(const std::string &path, int optimizer_type, int scheduler_type) {
  for (const KeySpec &spec : all_keys()) {
    if (spec.path != path) continue;
    if (spec.optimizer_mask != kAllTypes &&
        (optimizer_type < 0 || !(spec.optimizer_mask & (1u << optimizer_type))))
      continue;
    if (spec.scheduler_mask != kAllTypes &&
        (scheduler_type < 0 || !(spec.scheduler_mask & (1u << scheduler_type))))
      continue;
    return &spec;
  }
  return nullptr;
}

const SectionSpec *find_section(const std::string &path) {
  for (const SectionSpec &spec : all_sections())
    if (spec.path == path) return &spec;
  return nullptr;
}

std::vector<std::string> section_children(const std::string &section, int optimizer_type, int scheduler_type) {
  std::vector<std::string> names;
  auto add = [&](const std::string &name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const KeySpec &spec : all_keys()) {
    if (spec.section() != section) continue;
    std::string name = spec.name();
    if (name.find('.') != std::string::npos) continue;  // pair elements are listed as their pair
    if (find_key(spec.path, optimizer_type, scheduler_type) == &spec) add(name);
  }
  for (const SectionSpec &spec : all_sections()) {
    if (spec.path.empty()) continue;
    size_t dot = spec.path.rfind('.');
    std::string parent = dot == std::string::npos ? "" : spec.path.substr(0, dot);
    if (parent == section) add(dot == std::string::npos ? spec.path : spec.path.substr(dot + 1));
  }
  return names;
}

std::string nearest_name(const std::string &word, const std::vector<std::string> &candidates) {
  // No key name is this long, and the edit distance costs |word| x |candidate|: a hostile
  // megabyte-long key gets no suggestion instead of minutes of work.
  constexpr size_t kMaxSuggestedLength = 100;
  if (word.size() > kMaxSuggestedLength) return "";
  std::string best;
  std::pair<int, int> best_score{1 << 30, 1 << 30};
  const std::string lw = lower(word);
  const int limit = std::max<int>(1, static_cast<int>(word.size()) / 3);
  for (const std::string &candidate : candidates) {
    // A candidate that contains the word ("stage3_prefetch_bucket" in "stage3_prefetch_bucket_size")
    // is a strong hint, whatever the edit distance; ties go to the closer spelling. Any other
    // candidate farther than limit is never suggested, so its distance is computed only that far.
    const bool contains = lw.size() >= 4 && lower(candidate).find(lw) != std::string::npos;
    const int distance = edit_distance(word, candidate, contains ? 1 << 29 : limit);
    const int score = contains ? std::min(distance, 1) : distance;
    std::pair<int, int> key{score, distance};
    if (key < best_score) {
      best_score = key;
      best = candidate;
    }
  }
  return best_score.first <= limit ? best : "";
}

int optimizer_type_index(const std::string &name) {
  for (int i = 0; i < kNumOptimizerTypes; ++i)
    if (lower(name) == lower(kOptimizerTypes[i])) return i;
  return -1;
}

int scheduler_type_index(const std::string &name) {
  for (int i = 1; i < kNumSchedulerTypes; ++i)
    if (name == kSchedulerTypes[i]) return i;
  return -1;
}

bool is_known_unsupported_optimizer(const std::string &name) {
  static const char *const names[] = {"MuAdam", "MuAdamW", "MuSGD", "Muon", "FusedAdam",
                                      "CPUAdam", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD",
                                      "Rprop", "LBFGS", "SparseAdam"};
  for (const char *n : names)
    if (lower(name) == lower(n)) return true;
  return false;
}

bool is_known_unsupported_scheduler(const std::string &name) {
  // DeepSpeed falls back to torch.optim.lr_scheduler for these names.
  static const char *const names[] = {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR",
                                      "MultiplicativeLR", "ConstantLR", "LinearLR", "CyclicLR", "OneCycleLR",
                                      "CosineAnnealingWarmRestarts", "ReduceLROnPlateau", "PolynomialLR",
                                      "SequentialLR", "ChainedScheduler"};
  for (const char *n : names)
    if (name == n) return true;
  return false;
}

}  // namespace dsrt
