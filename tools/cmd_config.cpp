// `dsrt config check|show FILE [--hidden-size H] [--world-size W]`: validate a DeepSpeed config the way
// the library will, or print the effective config with every default filled in.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
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
    "       on (warnings) and the enabled features dsrt does not implement.\n"
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

int run_config(const std::vector<std::string> &args) {
  Options options;
  int early = parse_options(args, &options);
  if (early >= 0) return early;
  // Warnings are printed below, once, with the rest of the report (also when there are errors).
  std::vector<std::string> load_warnings;
  dsrt_set_log_callback(collect_warnings, &load_warnings);

  std::unique_ptr<Config> config;
  Status status = Config::load(options.file, &config);
  dsrt_set_log_callback(nullptr, nullptr);
  if (status.ok() && options.hidden_size > 0) status = config->set_hidden_size(options.hidden_size);
  if (status.ok() && options.world_size > 0) status = config->set_world_size(static_cast<int>(options.world_size));
  if (!status.ok()) {
    const std::vector<std::string> &warnings = config ? config->warnings() : load_warnings;
    for (const std::string &warning : warnings) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return kExitFailure;
  }

  if (options.action == "show") {
    std::vector<std::string> apart;
    std::fputs(config->to_deepspeed_json(&apart).c_str(), stdout);
    if (!apart.empty()) {
      std::fprintf(stderr, "not in the DeepSpeed JSON above (dsrt's keys, and defaults dsrt applies):\n");
      for (const std::string &line : apart) std::fprintf(stderr, "  %s\n", line.c_str());
    }
    return kExitOk;
  }

  const std::vector<std::string> pending = config->unresolved();
  const std::vector<std::string> &unsupported = config->unsupported();
  // With the world size given and nothing left open, resolve exactly as dsrt_engine_create will.
  if (options.world_size > 0 && pending.empty() && unsupported.empty()) {
    TrainConfig resolved;
    status = config->resolve(static_cast<int>(options.world_size), &resolved);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return kExitFailure;
    }
  }
  for (const std::string &warning : config->warnings()) std::printf("warning: %s\n", warning.c_str());
  if (!pending.empty()) {
    std::printf("%zu \"auto\" value%s for the host to resolve before dsrt_engine_create:\n", pending.size(),
                pending.size() == 1 ? "" : "s");
    for (const std::string &path : pending) {
      std::printf("  %s: %s\n", path.c_str(), config->how_to_resolve(path).c_str());
    }
  }
  if (!unsupported.empty()) {
    std::printf("not implemented by dsrt (dsrt_engine_create fails with DSRT_ERR_UNSUPPORTED while %s on):\n",
                unsupported.size() == 1 ? "it is" : "they are");
    for (const std::string &item : unsupported) std::printf("  %s\n", item.c_str());
  }
  bool open = !pending.empty() || !unsupported.empty();
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
