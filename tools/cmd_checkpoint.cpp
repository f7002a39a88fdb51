// `dsrt checkpoint import DS_DIR DSRT_DIR` / `dsrt checkpoint export DSRT_DIR DS_DIR`: conversion
// between DeepSpeed's checkpoint format and dsrt's. DeepSpeed's files are torch.save archives
// (pickles), so the conversion is dsrt's Python module dsrt.ds_checkpoint, which needs torch (not
// DeepSpeed); this command runs it with the Python named by DSRT_PYTHON (default python3), the
// build's or installation's Python package folder first on PYTHONPATH when it exists.
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/command.h"

extern char **environ;

namespace dsrt::cli {
namespace {

const char kUsage[] =
    "usage: dsrt checkpoint import DS_DIR DSRT_DIR [--tag TAG]\n"
    "       dsrt checkpoint export DSRT_DIR DS_DIR [--tag TAG] [--stage 0-3] [--world-size N]\n"
    "                                              [--dtype fp32|bf16|fp16] [--module-from FILE]\n"
    "\n"
    "Converts checkpoints between DeepSpeed's format and dsrt's, with everything training needs to\n"
    "go on: fp32 master weights, optimizer states, step counters, loss scaler, schedule, parameter\n"
    "groups and client state.\n"
    "\n"
    "  import   reads a checkpoint written by DeepSpeed (ZeRO stage 0-3, fp32/bf16/fp16, any\n"
    "           world size; DS_DIR is its save_dir holding 'latest', or one tag folder) and writes\n"
    "           it as a dsrt checkpoint under DSRT_DIR (same tag, 'latest' updated). dsrt loads it\n"
    "           at any world size and stage.\n"
    "  export   writes a dsrt checkpoint as one DeepSpeed's load_checkpoint goes on from and its\n"
    "           zero_to_fp32.py consolidates, laid out for --world-size ranks at ZeRO --stage with\n"
    "           --dtype working weights (each defaults to the dsrt checkpoint's own).\n"
    "  --tag    the tag to read (default: the one 'latest' names)\n"
    "  --module-from FILE  (export) a model file (.safetensors or a torch state_dict) whose buffers\n"
    "           and tied weights go into DeepSpeed's module state, which a dsrt checkpoint lacks\n"
    "           (e.g. the HF Trainer's checkpoint-N/model.safetensors)\n"
    "\n"
    "This command runs dsrt's Python module (python3 -m dsrt.ds_checkpoint), because DeepSpeed's\n"
    "files are torch.save pickles: it needs Python 3 with torch and dsrt's Python binding (not\n"
    "DeepSpeed). DSRT_PYTHON names the interpreter (default: python3 on PATH); the binding next\n"
    "to this program (../python) is put first on PYTHONPATH when it exists.\n"
    "\n"
    "Exit status: 0 on success, 1 if the conversion fails (the message says why) or Python, torch\n"
    "or the dsrt module is missing, 2 for a wrong command line.\n";

// Runs in the chosen Python: names what is missing exactly, then hands over to the module.
const char kBootstrap[] =
    "import sys\n"
    "try:\n"
    "    import torch\n"
    "except ImportError as e:\n"
    "    sys.exit('dsrt checkpoint: needs torch in %s (%s); install it (pip install torch) or set DSRT_PYTHON "
    "to a Python that has it' % (sys.executable, e))\n"
    "try:\n"
    "    from dsrt import ds_checkpoint\n"
    "except ImportError as e:\n"
    "    sys.exit('dsrt checkpoint: needs dsrt\\'s Python module in %s (%s); install the dsrt binding or put "
    "its folder on PYTHONPATH' % (sys.executable, e))\n"
    "sys.exit(ds_checkpoint._main(sys.argv[1:]))\n";

std::string python_folder() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  for (const char *rel : {"/../python", "/../lib/python"}) {
    const std::string candidate = dir + rel;
    struct stat st;
    if (stat((candidate + "/dsrt/ds_checkpoint.py").c_str(), &st) == 0) return candidate;
  }
  return "";
}

int run_checkpoint(const std::vector<std::string> &args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] != "import" && args[0] != "export") {
    std::fprintf(stderr, "dsrt checkpoint: unknown subcommand '%s' (import or export)\n\n%s", args[0].c_str(), kUsage);
    return kExitUsage;
  }
  for (const std::string &a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
  const char *env_python = std::getenv("DSRT_PYTHON");
  const std::string python = env_python && *env_python ? env_python : "python3";
  const std::string folder = python_folder();
  if (!folder.empty()) {
    const char *old = std::getenv("PYTHONPATH");
    const std::string path = old && *old ? folder + ":" + old : folder;
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> argv_text = {python, "-c", kBootstrap};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : argv_text) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    std::fprintf(stderr,
                 "dsrt checkpoint: cannot run '%s' (%s): the import and export run in Python 3 with torch and "
                 "dsrt's Python module; install Python 3 or set DSRT_PYTHON to its path\n",
                 python.c_str(), std::strerror(err));
    return kExitFailure;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "dsrt checkpoint: waiting for %s failed: %s\n", python.c_str(), std::strerror(errno));
      return kExitFailure;
    }
  }
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    return code == 0 ? kExitOk : code == 2 ? kExitUsage : kExitFailure;
  }
  std::fprintf(stderr, "dsrt checkpoint: %s was killed by signal %d\n", python.c_str(),
               WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  return kExitFailure;
}

const bool registered = register_command({"checkpoint",
                                          "import a DeepSpeed checkpoint / export one DeepSpeed loads (via Python)",
                                          run_checkpoint});

}  // namespace
}  // namespace dsrt::cli
