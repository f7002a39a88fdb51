/* One config per refusal the config alone decides (every .json file of tests/configs/refusals): `dsrt config
** check --strict` and dsrt_engine_create refuse each with the same status and the same message,
** dsrt_config_check too, and the message holds the text the file's first line names:
**     // refuses CODE: TEXT
** A config the schema or a rule across keys refuses is refused by dsrt_config_load itself (with the
** same message `dsrt config check` prints). Usage: test_config_refusals DSRT_CLI FOLDER */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "dsrt.h"

static int failures = 0;

static void fail(const char *file, const char *what) {
  fprintf(stderr, "FAIL %s: %s\n", file, what);
  ++failures;
}

/* The whole output (stdout and stderr) of `dsrt config check FILE --strict`; *code its exit code. */
static char *run_check(const char *cli, const char *path, int *code) {
  char command[4096];
  snprintf(command, sizeof command, "'%s' config check '%s' --strict 2>&1", cli, path);
  FILE *pipe = popen(command, "r");
  if (pipe == NULL) return NULL;
  size_t size = 0, cap = 1 << 16;
  char *out = malloc(cap);
  if (out == NULL) {
    pclose(pipe);
    return NULL;
  }
  size_t n;
  while ((n = fread(out + size, 1, cap - 1 - size, pipe)) > 0) {
    size += n;
    if (size + 1 >= cap) {
      char *bigger = realloc(out, cap * 2);
      if (bigger == NULL) break;
      out = bigger;
      cap *= 2;
    }
  }
  out[size] = '\0';
  int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

static void check_file(const char *cli, const char *folder, const char *name) {
  char path[2048], line[1024];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  FILE *file = fopen(path, "r");
  if (file == NULL || fgets(line, sizeof line, file) == NULL) {
    if (file) fclose(file);
    fail(name, "cannot read the file");
    return;
  }
  fclose(file);
  int want_code = -1;
  int consumed = 0;
  if (sscanf(line, "// refuses %d: %n", &want_code, &consumed) != 1 || consumed == 0) {
    fail(name, "the first line is not '// refuses CODE: TEXT'");
    return;
  }
  char *want_text = line + consumed;
  want_text[strcspn(want_text, "\n")] = '\0';

  /* The library: load, then create an engine on a world of one (the CPU device). */
  char message[8192] = "";
  dsrt_config *config = NULL;
  dsrt_status got = dsrt_config_load(path, &config);
  int at_load = got != DSRT_OK;
  if (at_load) {
    snprintf(message, sizeof message, "%s", dsrt_last_error_message());
  } else {
    dsrt_status checked = dsrt_config_check(config, 0);
    char check_message[8192];
    snprintf(check_message, sizeof check_message, "%s", dsrt_last_error_message());
    dsrt_engine *engine = NULL;
    got = dsrt_engine_create(config, NULL, &engine);
    if (got == DSRT_OK) {
      dsrt_engine_destroy(engine);
      fail(name, "dsrt_engine_create accepted the config");
    } else {
      snprintf(message, sizeof message, "%s", dsrt_last_error_message());
      if (checked != got) fail(name, "dsrt_config_check and dsrt_engine_create return different codes");
      if (strcmp(check_message, message) != 0) {
        fprintf(stderr, "  check:  %s\n  create: %s\n", check_message, message);
        fail(name, "dsrt_config_check and dsrt_engine_create give different messages");
      }
    }
    dsrt_config_destroy(config);
  }
  if (got != want_code) {
    fprintf(stderr, "  got %d (%s): %s\n", got, dsrt_status_string(got), message);
    fail(name, "the library refused with another code than the file names");
  }
  if (strstr(message, want_text) == NULL) {
    fprintf(stderr, "  message: %s\n  lacks:   %s\n", message, want_text);
    fail(name, "the library's message lacks the text the file names");
  }

  /* The command: exits 1 and prints the library's message verbatim. */
  int code = 0;
  char *output = run_check(cli, path, &code);
  if (output == NULL) {
    fail(name, "cannot run dsrt config check");
    return;
  }
  if (code != 1) {
    fprintf(stderr, "  exit %d:\n%s\n", code, output);
    fail(name, "dsrt config check --strict did not exit 1");
  }
  if (message[0] == '\0' || strstr(output, message) == NULL) {
    fprintf(stderr, "  output:\n%s\n  lacks the library's message:\n%s\n", output, message);
    fail(name, "dsrt config check does not print dsrt_engine_create's message");
  }
  free(output);
  printf("ok %s (%s, %s)\n", name, dsrt_status_string(want_code), at_load ? "at load" : "at create");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_config_refusals DSRT_CLI FOLDER\n");
    return 2;
  }
  DIR *dir = opendir(argv[2]);
  if (dir == NULL) {
    fprintf(stderr, "cannot open %s\n", argv[2]);
    return 1;
  }
  int files = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    size_t len = strlen(entry->d_name);
    if (len < 6 || strcmp(entry->d_name + len - 5, ".json") != 0) continue;
    check_file(argv[1], argv[2], entry->d_name);
    ++files;
  }
  closedir(dir);
  if (files < 10) {
    fprintf(stderr, "FAIL: only %d configs in %s\n", files, argv[2]);
    ++failures;
  }
  printf("%d configs, %d failure(s)\n", files, failures);
  return failures == 0 ? 0 : 1;
}
