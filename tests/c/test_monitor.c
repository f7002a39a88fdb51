/* test_monitor.c -- DeepSpeed's monitor events and csv_monitor files through the C API: the
** losses and host times reported, the events of each boundary (names, values, sample steps),
** the CSV files' layout, the progress line's loss, and the errors. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsrt.h"

static int failures = 0;

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              dsrt_last_error_message());                                                \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)
#define STATUS(call, want)                                                                          \
  do {                                                                                              \
    dsrt_status got_ = (call);                                                                      \
    if (got_ != (want)) {                                                                           \
      fprintf(stderr, "%s:%d: %s gave %d, expected %d: %s\n", __FILE__, __LINE__, #call, (int)got_, \
              (int)(want), dsrt_last_error_message());                                              \
      failures++;                                                                                   \
    }                                                                                               \
  } while (0)
#define OK(call) STATUS(call, DSRT_OK)

static char progress[16384];
static void keep_progress(int32_t level, const char *msg, void *user) {
  (void)user;
  if (level == DSRT_LOG_INFO && (strstr(msg, "samples/s") != NULL || strstr(msg, "time per step") != NULL) &&
      strlen(progress) + strlen(msg) + 2 < sizeof progress) {
    strcat(progress, msg);
    strcat(progress, "\n");
  }
}

/* The value of event `name` in an events text, and its step; 0 when absent. */
static int find_event(const char *text, const char *name, double *value, int64_t *step) {
  size_t n = strlen(name);
  for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, name, n) == 0 && line[n] == ',') {
      char *end = NULL;
      *value = strtod(line + n + 1, &end);
      *step = strtoll(end + 1, NULL, 10);
      return 1;
    }
  }
  return 0;
}

static int count_lines(const char *text) {
  int lines = 0;
  for (; *text; ++text) lines += *text == '\n';
  return lines;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buffer[4096];
  size_t got = fread(buffer, 1, sizeof buffer - 1, f);
  buffer[got] = '\0';
  fclose(f);
  return buffer;
}

/* Checks a CSV file: `headers` header rows, then rows "step,value" matching steps[] and values[]
** exactly (the shortest round-trip digits read back as the same double). */
static void check_csv(const char *path, const char *header, int headers, const int64_t *steps, const double *values,
                      int rows) {
  char *text = read_file(path);
  EXPECT(text != NULL);
  if (!text) return;
  int seen_headers = 0, row = 0;
  for (char *line = text; *line;) {
    char *end = strstr(line, "\r\n");
    EXPECT(end != NULL); /* DeepSpeed's csv.writer ends rows with \r\n */
    if (!end) return;
    *end = '\0';
    if (strcmp(line, header) == 0) {
      seen_headers++;
    } else {
      char *comma = strchr(line, ',');
      EXPECT(comma != NULL && row < rows);
      if (comma && row < rows) {
        EXPECT(strtoll(line, NULL, 10) == steps[row]);
        EXPECT(strtod(comma + 1, NULL) == values[row]);
        EXPECT(strchr(comma + 1, '.') != NULL || strchr(comma + 1, 'e') != NULL); /* Python's float text */
      }
      row++;
    }
    line = end + 2;
  }
  EXPECT(seen_headers == headers);
  EXPECT(row == rows);
}

static const char *kConfig =
    "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2, \"steps_per_print\": 1,"
    " \"wall_clock_breakdown\": true, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.0, \"warmup_max_lr\": 0.01,"
    "   \"warmup_num_steps\": 5, \"warmup_type\": \"linear\"}}}";

static dsrt_engine *make_engine(const char *folder, dsrt_tensor **w) {
  dsrt_config *cfg = NULL;
  dsrt_engine *engine = NULL;
  OK(dsrt_config_parse(kConfig, &cfg));
  OK(dsrt_config_set_bool(cfg, "csv_monitor.enabled", 1));
  OK(dsrt_config_set_string(cfg, "csv_monitor.output_path", folder));
  OK(dsrt_config_set_string(cfg, "csv_monitor.job_name", "job one"));
  OK(dsrt_engine_create(cfg, NULL, &engine));
  dsrt_config_destroy(cfg);
  if (!engine) return NULL;
  const int64_t shape[1] = {4};
  const float init[4] = {0.5f, -0.25f, 1.0f, 2.0f};
  OK(dsrt_engine_add_param(engine, "w", shape, 1, init, w));
  return engine;
}

/* One micro-step: a gradient, the loss and host times reported, step. */
static void micro_step(dsrt_engine *engine, dsrt_tensor *w, double loss, double forward_s, double backward_s) {
  void *grad = NULL;
  dsrt_dtype dtype;
  OK(dsrt_tensor_grad(w, &grad, &dtype));
  EXPECT(dtype == DSRT_F16);
  uint16_t *g = (uint16_t *)grad;
  for (int i = 0; i < 4; ++i) g[i] = 0x3C00; /* 1.0 in fp16 */
  OK(dsrt_tensor_grad_ready(w));
  OK(dsrt_engine_report_loss(engine, loss));
  OK(dsrt_engine_report_host_time(engine, DSRT_HOST_FORWARD, forward_s));
  OK(dsrt_engine_report_host_time(engine, DSRT_HOST_BACKWARD, backward_s));
  OK(dsrt_engine_step(engine, NULL));
}

int main(void) {
  char folder[] = "/tmp/dsrt_monitor_XXXXXX";
  if (mkdtemp(folder) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  dsrt_set_log_callback(keep_progress, NULL);
  dsrt_tensor *w = NULL;
  dsrt_engine *engine = make_engine(folder, &w);
  if (!engine) return 1;
  char *text = NULL;
  STATUS(dsrt_engine_report_loss(engine, 1.0), DSRT_ERR_STATE); /* before build */
  STATUS(dsrt_engine_report_host_time(engine, DSRT_HOST_FORWARD, 0.1), DSRT_ERR_STATE);
  STATUS(dsrt_engine_events(engine, &text), DSRT_ERR_STATE);
  EXPECT(text == NULL);
  OK(dsrt_engine_build(engine));
  STATUS(dsrt_engine_report_host_time(engine, 2, 0.1), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_report_host_time(engine, DSRT_HOST_BACKWARD, -1.0), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_report_host_time(engine, DSRT_HOST_BACKWARD, NAN), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_events(engine, NULL), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_report_loss(NULL, 1.0), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_report_host_time(NULL, 0, 1.0), DSRT_ERR_INVALID_ARGUMENT);
  STATUS(dsrt_engine_events(NULL, &text), DSRT_ERR_INVALID_ARGUMENT);
  OK(dsrt_engine_events(engine, &text));
  EXPECT(text != NULL && text[0] == '\0'); /* no step yet */
  dsrt_free(text);

  /* Three boundaries of two micro-steps; losses chosen so that nothing is a round number. */
  srand(19);
  const int64_t batch = 4; /* micro 2 x accumulation 2 x one rank */
  int64_t loss_steps[3], lr_steps[3];
  double loss_values[3], lr_values[3], scale_values[3];
  for (int b = 0; b < 3; ++b) {
    double l0 = 1.0 + rand() / (double)RAND_MAX, l1 = 2.0 + rand() / (double)RAND_MAX;
    double f0 = 0.001 * (1 + b), f1 = 0.002, b0 = 0.003, b1 = 0.004 * (1 + b);
    micro_step(engine, w, l0, f0, b0);
    OK(dsrt_engine_events(engine, &text));
    EXPECT(text != NULL && text[0] == '\0'); /* not a boundary */
    dsrt_free(text);
    micro_step(engine, w, l1, f1, b1);
    OK(dsrt_engine_events(engine, &text));
    EXPECT(text != NULL);
    if (!text) continue;
    double value = 0, lr = 0, scale = 0;
    int64_t step = -1;
    EXPECT(count_lines(text) == 7); /* train_loss, lr, loss_scale, forward, backward, allreduce, step */
    EXPECT(find_event(text, "Train/Samples/train_loss", &value, &step));
    /* DeepSpeed: the sum of loss / gradient_accumulation_steps, at the samples before the boundary. */
    EXPECT(value == l0 / 2 + l1 / 2);
    EXPECT(step == b * batch);
    loss_values[b] = value;
    loss_steps[b] = step;
    OK(dsrt_engine_get_lr(engine, &lr));
    EXPECT(find_event(text, "Train/Samples/lr", &value, &step));
    EXPECT(value == lr && step == (b + 1) * batch); /* the lr after the boundary */
    /* DeepSpeed's WarmupLR: the k-th step runs at the constructor's lr (warmup_min_lr), the next
    ** ones at the formula of iteration k - 2, linear here: after boundary b + 1 the next lr is
    ** min + (max - min) * b / warmup_num_steps. */
    EXPECT(fabs(lr - 0.01 * b / 5.0) < 1e-12);
    lr_values[b] = value;
    lr_steps[b] = step;
    OK(dsrt_engine_loss_scale(engine, &scale));
    EXPECT(find_event(text, "Train/Samples/loss_scale", &value, &step));
    EXPECT(value == scale && scale == 256.0 && step == (b + 1) * batch);
    scale_values[b] = value;
    EXPECT(find_event(text, "Train/Samples/elapsed_time_ms_forward", &value, &step));
    EXPECT(fabs(value - 1e3 * (f0 + f1)) < 1e-9 && step == (b + 1) * batch);
    EXPECT(find_event(text, "Train/Samples/elapsed_time_ms_backward", &value, &step));
    EXPECT(fabs(value - 1e3 * (b0 + b1)) < 1e-9);
    EXPECT(find_event(text, "Train/Samples/elapsed_time_ms_backward_allreduce", &value, &step));
    EXPECT(value >= 0 && value < 60e3);
    EXPECT(find_event(text, "Train/Samples/elapsed_time_ms_step", &value, &step));
    EXPECT(value > 0 && value < 60e3);
    dsrt_free(text);
  }
  /* The progress line (steps_per_print 1) ends with the boundary's loss. */
  EXPECT(strstr(progress, "step 3: ") != NULL);
  {
    const char *line = strstr(progress, "step 3: ");
    const char *loss = line ? strstr(line, ", loss ") : NULL;
    EXPECT(loss != NULL && strtod(loss + 7, NULL) == loss_values[2]);
    /* wall_clock_breakdown's line carries the host's times per step: boundary 3 reported
    ** forward 0.003 + 0.002 s and backward 0.003 + 0.012 s. */
    const char *times = strstr(progress, "step 3 time per step:");
    const char *forward = times ? strstr(times, "host forward ") : NULL;
    const char *backward = times ? strstr(times, "host backward ") : NULL;
    EXPECT(forward != NULL && fabs(strtod(forward + 13, NULL) - 5.0) < 1e-3);
    EXPECT(backward != NULL && fabs(strtod(backward + 14, NULL) - 15.0) < 1e-3);
  }

  /* DeepSpeed's files: "job one" -> folder/job one/, '/' -> '_', a header, then step,value rows. */
  char path[512];
  snprintf(path, sizeof path, "%s/job one/Train_Samples_train_loss.csv", folder);
  check_csv(path, "step,train_loss", 1, loss_steps, loss_values, 3);
  snprintf(path, sizeof path, "%s/job one/Train_Samples_lr.csv", folder);
  check_csv(path, "step,lr", 1, lr_steps, lr_values, 3);
  snprintf(path, sizeof path, "%s/job one/Train_Samples_loss_scale.csv", folder);
  check_csv(path, "step,loss_scale", 1, lr_steps, scale_values, 3);
  {
    char *csv = read_file(path);
    EXPECT(csv != NULL && strstr(csv, ",256.0\r\n") != NULL); /* Python writes 256.0, not 256 */
  }
  snprintf(path, sizeof path, "%s/job one/Train_Samples_elapsed_time_ms_step.csv", folder);
  EXPECT(read_file(path) != NULL);
  dsrt_engine_destroy(engine);

  /* A new engine appends to the same files, with a header of its own (as DeepSpeed's monitor
  ** does after a restart); a boundary without a reported loss writes no train_loss. */
  progress[0] = '\0';
  engine = make_engine(folder, &w);
  OK(dsrt_engine_build(engine));
  for (int i = 0; i < 2; ++i) {
    void *grad = NULL;
    dsrt_dtype dtype;
    OK(dsrt_tensor_grad(w, &grad, &dtype));
    OK(dsrt_tensor_grad_ready(w));
    OK(dsrt_engine_step(engine, NULL));
  }
  OK(dsrt_engine_events(engine, &text));
  double lr2 = 0;
  OK(dsrt_engine_get_lr(engine, &lr2));
  {
    double value;
    int64_t step;
    EXPECT(text && !find_event(text, "Train/Samples/train_loss", &value, &step));
    EXPECT(text && find_event(text, "Train/Samples/lr", &value, &step) && step == batch);
    EXPECT(text && !find_event(text, "Train/Samples/elapsed_time_ms_forward", &value, &step));
    EXPECT(strstr(progress, "step 1 time per step:") != NULL && strstr(progress, "host forward") == NULL);
  }
  dsrt_free(text);
  dsrt_engine_destroy(engine);
  snprintf(path, sizeof path, "%s/job one/Train_Samples_train_loss.csv", folder);
  check_csv(path, "step,train_loss", 1, loss_steps, loss_values, 3);
  {
    int64_t steps[4] = {lr_steps[0], lr_steps[1], lr_steps[2], batch};
    double values[4] = {lr_values[0], lr_values[1], lr_values[2], lr2};
    snprintf(path, sizeof path, "%s/job one/Train_Samples_lr.csv", folder);
    check_csv(path, "step,lr", 2, steps, values, 4);
  }

  /* A folder that cannot be made fails at create, naming it. */
  {
    dsrt_config *cfg = NULL;
    dsrt_engine *bad = (dsrt_engine *)&failures;
    char file_path[512];
    snprintf(file_path, sizeof file_path, "%s/job one/Train_Samples_lr.csv", folder); /* a file, not a folder */
    OK(dsrt_config_parse(kConfig, &cfg));
    OK(dsrt_config_set_bool(cfg, "csv_monitor.enabled", 1));
    OK(dsrt_config_set_string(cfg, "csv_monitor.output_path", file_path));
    STATUS(dsrt_engine_create(cfg, NULL, &bad), DSRT_ERR_IO);
    EXPECT(bad == NULL);
    EXPECT(strstr(dsrt_last_error_message(), "csv_monitor") != NULL);
    EXPECT(strstr(dsrt_last_error_message(), "Train_Samples_lr.csv") != NULL);
    dsrt_config_destroy(cfg);
  }
  dsrt_set_log_callback(NULL, NULL);
  char command[600];
  snprintf(command, sizeof command, "rm -rf '%s'", folder);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", folder);
  if (failures) fprintf(stderr, "test_monitor: %d failures\n", failures);
  return failures ? 1 : 0;
}
