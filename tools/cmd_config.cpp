// `dsrt config check|show FILE [--hidden-size H] [--world-size W]`: validate a DeepSpeed config the way
// the library will, or print the effective config with every default filled in. Only the public C
// interface (dsrt.h) is used: the command reports what any host would get from the library.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dsrt.h"
#include "tools/command.h"

namespace dsrt::cli {
namespace {

const char kUsage[] =
    "usage: dsrt config check FILE [--hidden-size H] [--world-size W] [--strict]\n"
    "       dsrt config show  FILE [--hidden-size H] [--world-size W]\n"
    "\n"
    "check  validates a DeepSpeed JSON config (comments and trailing commas are accepted) against\n"
    "       DeepSpeed's schema and prints every error found, each with its line:column and key path.\n"
    "       It lists the \"auto\" values the host still has to resolve, the settings dsrt does not act\n"
    "       on (warnings) and the enabled features dsrt does not implement. Once no \"auto\" is left\n"
    "       it makes every check dsrt_engine_create makes on the config (dsrt_config_check, at the\n"
    "       world size given, else the one the batch terms imply) and prints its message verbatim.\n"
    "show   prints the effective config as DeepSpeed JSON (stdout) that DeepSpeed itself accepts: every\n"
    "       key DeepSpeed has, with the value in force. dsrt's own keys, and the optimizer/scheduler\n"
    "       parameters the file does not give (with the defaults dsrt applies), are listed apart on stderr.\n"
    "\n"
    "  --hidden-size H  resolve the \"auto\" hidden-size keys as the HF Trainer does: reduce_bucket_size =\n"
    "                   H*H, stage3_prefetch_bucket_size = 0.9*H*H, stage3_param_persistence_threshold = 10*H\n"
    "  --world-size W   apply the batch rule train_batch_size = micro * gradient_accumulation_steps * W\n"
    "  --strict         (check) also fail while an \"auto\" is unresolved or an unimplemented feature is on\n"
    "\n"
    "exit codes: 0 valid; 1 invalid (the errors are printed); 2 bad command line.\n";

struct Options {
  std::string action;
  std::string file;
  long long hidden_size = 0;
  long long world_size = 0;
  bool strict = false;
};

bool parse_positive(const std::string &text, long long *out) {
  if (text.empty()) return false;
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value <= 0) return false;
  *out = value;
  return true;
}

// Returns -1 when the options are fine, else the exit code to return.
int parse_options(const std::vector<std::string> &args, Options *options) {
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  options->action = args[0];
  if (options->action != "check" && options->action != "show") {
    std::fprintf(stderr, "dsrt config: unknown action '%s' (use check or show)\n\n%s", args[0].c_str(), kUsage);
    return kExitUsage;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (arg == "--strict" && options->action == "check") {
      options->strict = true;
    } else if (arg == "--hidden-size" || arg == "--world-size") {
      long long *target = arg == "--hidden-size" ? &options->hidden_size : &options->world_size;
      if (i + 1 >= args.size() || !parse_positive(args[i + 1], target) ||
          (arg == "--world-size" && *target > 1000000000)) {
        std::fprintf(stderr, "dsrt config: %s needs a positive integer%s\n\n%s", arg.c_str(),
                     i + 1 < args.size() ? (", got '" + args[i + 1] + "'").c_str() : "", kUsage);
        return kExitUsage;
      }
      ++i;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "dsrt config: unknown option '%s'\n\n%s", arg.c_str(), kUsage);
      return kExitUsage;
    } else if (options->file.empty()) {
      options->file = arg;
    } else {
      std::fprintf(stderr, "dsrt config: more than one FILE given ('%s' and '%s')\n\n%s", options->file.c_str(),
                   arg.c_str(), kUsage);
      return kExitUsage;
    }
  }
  if (options->file.empty()) {
    std::fprintf(stderr, "dsrt config %s: FILE is missing\n\n%s", options->action.c_str(), kUsage);
    return kExitUsage;
  }
  return -1;
}

// Warnings reading the file raises are collected here, to be printed even when it has errors.
void collect_warnings(int32_t level, const char *message, void *user) {
  if (level == DSRT_LOG_WARN && message != nullptr) static_cast<std::vector<std::string> *>(user)->push_back(message);
}

// A string the library returned (freed with dsrt_free), split into lines.
std::vector<std::string> take_lines(char *text) {
  std::vector<std::string> lines;
  if (text == nullptr) return lines;
  std::string all(text);
  dsrt_free(text);
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) lines.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string take_string(char *text) {
  std::string out = text ? text : "";
  dsrt_free(text);
  return out;
}

// The config's warnings (from the library's list), or those logged while reading it.
std::vector<std::string> warnings_of(const dsrt_config *config) {
  char *text = nullptr;
  if (dsrt_config_warnings(config, &text) != DSRT_OK) return {};
  return take_lines(text);
}

struct ConfigHandle {
  dsrt_config *config = nullptr;
  ~ConfigHandle() { dsrt_config_destroy(config); }
};

int run_config(const std::vector<std::string> &args) {
  Options options;
  int early = parse_options(args, &options);
  if (early >= 0) return early;
  // Warnings are printed below, once, with the rest of the report (also when there are errors).
  std::vector<std::string> load_warnings;
  dsrt_set_log_callback(collect_warnings, &load_warnings);

  ConfigHandle handle;
  dsrt_status status = dsrt_config_load(options.file.c_str(), &handle.config);
  dsrt_set_log_callback(nullptr, nullptr);
  if (status == DSRT_OK && options.hidden_size > 0)
    status = dsrt_config_set_hidden_size(handle.config, options.hidden_size);
  if (status == DSRT_OK && options.world_size > 0)
    status = dsrt_config_set_world_size(handle.config, static_cast<int32_t>(options.world_size));
  if (status != DSRT_OK) {
    const std::string message = dsrt_last_error_message();
    const std::vector<std::string> warnings = handle.config ? warnings_of(handle.config) : load_warnings;
    for (const std::string &warning : warnings) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    std::fprintf(stderr, "%s\n", message.c_str());
    return kExitFailure;
  }
  dsrt_config *config = handle.config;

  if (options.action == "show") {
    char *json = nullptr, *apart_text = nullptr;
    if (dsrt_config_to_deepspeed_json(config, &json, &apart_text) != DSRT_OK) {
      std::fprintf(stderr, "%s\n", dsrt_last_error_message());
      return kExitFailure;
    }
    std::fputs(take_string(json).c_str(), stdout);
    const std::vector<std::string> apart = take_lines(apart_text);
    if (!apart.empty()) {
      std::fprintf(stderr, "not in the DeepSpeed JSON above (dsrt's keys, and defaults dsrt applies):\n");
      for (const std::string &line : apart) std::fprintf(stderr, "  %s\n", line.c_str());
    }
    return kExitOk;
  }

  char *text = nullptr;
  std::vector<std::string> pending, unsupported;
  if (dsrt_config_unresolved(config, &text) == DSRT_OK) pending = take_lines(text);
  if (dsrt_config_unsupported(config, &text) == DSRT_OK) unsupported = take_lines(text);
  // Nothing left "auto": check exactly as dsrt_engine_create will (the same call, the same
  // message), at the world size given, else the one the batch terms imply.
  std::string refusal;
  dsrt_status refused = DSRT_OK;
  if (pending.empty()) {
    refused = dsrt_config_check(config, static_cast<int32_t>(options.world_size));
    if (refused != DSRT_OK) refusal = dsrt_last_error_message();
    if (refused != DSRT_OK && refused != DSRT_ERR_UNSUPPORTED) {
      for (const std::string &warning : warnings_of(config)) std::fprintf(stderr, "warning: %s\n", warning.c_str());
      std::fprintf(stderr, "%s\n", refusal.c_str());
      return kExitFailure;
    }
  }
  for (const std::string &warning : warnings_of(config)) std::printf("warning: %s\n", warning.c_str());
  if (!pending.empty()) {
    std::printf("%zu \"auto\" value%s for the host to resolve before dsrt_engine_create:\n", pending.size(),
                pending.size() == 1 ? "" : "s");
    for (const std::string &path : pending) {
      char *hint = nullptr;
      std::string how = dsrt_config_resolve_hint(config, path.c_str(), &hint) == DSRT_OK ? take_string(hint) : "";
      std::printf("  %s: %s\n", path.c_str(), how.c_str());
    }
  }
  if (refused == DSRT_ERR_UNSUPPORTED) {
    // dsrt_engine_create's own message, verbatim.
    std::printf("not implemented by dsrt (dsrt_engine_create fails with DSRT_ERR_UNSUPPORTED):\n%s\n",
                refusal.c_str());
  } else if (!unsupported.empty()) {
    std::printf("not implemented by dsrt (dsrt_engine_create fails with DSRT_ERR_UNSUPPORTED while %s on):\n",
                unsupported.size() == 1 ? "it is" : "they are");
    for (const std::string &item : unsupported) std::printf("  %s\n", item.c_str());
  }
  bool open = !pending.empty() || !unsupported.empty() || refused == DSRT_ERR_UNSUPPORTED;
  std::printf("%s: valid DeepSpeed config%s\n", options.file.c_str(),
              open ? (pending.empty() ? "; it enables features dsrt does not implement"
                                      : "; resolve the \"auto\" values above before use")
                   : (options.world_size > 0 ? "; ready for the engine at this world size" : ""));
  return options.strict && open ? kExitFailure : kExitOk;
}

const bool registered = register_command(
    {"config", "validate a DeepSpeed config (check) or print the effective config (show)", run_config});

}  // namespace
}  // namespace dsrt::cli
