/* test_header_calls.c -- every function of dsrt.h called from plain C (built as C11 by CTest and as
** C99 and C11 with -pedantic by scripts/test-abi.sh). Each function is called with NULL or invalid
** arguments and must answer the status the header documents; then a real call sequence runs a
** one-tensor engine through its whole life, including the struct_size (append-only) contract. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
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
#define EXPECT_STATUS(call, want) expect_status((call), (want), #call, __LINE__)
#define OK(call) EXPECT_STATUS(call, DSRT_OK)

static void expect_status(dsrt_status got, dsrt_status want, const char *call, int line) {
  if (got != want) {
    fprintf(stderr, "line %d: %s gave %d (%s), expected %d (%s): %s\n", line, call, (int)got, dsrt_status_string(got),
            (int)want, dsrt_status_string(want), dsrt_last_error_message());
    failures++;
  } else if (want != DSRT_OK && dsrt_last_error_message()[0] == '\0') {
    fprintf(stderr, "line %d: %s failed without a message\n", line, call);
    failures++;
  }
}

/* For calls whose documented answer depends on the build (e.g. UNSUPPORTED without NCCL). */
static int either(dsrt_status got, dsrt_status a, dsrt_status b) { return got == a || got == b; }

static int log_calls = 0;
static void count_logs(int32_t level, const char *msg, void *user) {
  (void)level;
  (void)msg;
  (*(int *)user)++;
}

static const char *kConfig =
    "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 1,\n"
    " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},\n"
    " \"zero_optimization\": {\"stage\": 0}}";

static void null_and_invalid_arguments(void) {
  dsrt_config *cfg = (dsrt_config *)&failures; /* poison: must be overwritten with NULL */
  dsrt_comm *comm = (dsrt_comm *)&failures;
  dsrt_engine *engine = (dsrt_engine *)&failures;
  dsrt_checkpoint *ckpt = (dsrt_checkpoint *)&failures;
  dsrt_tensor *tensor = (dsrt_tensor *)&failures;
  char *text = (char *)&failures;
  double number = 0.0;
  int64_t i64 = 0;
  int32_t i32 = 0, i32b = 0;
  void *ptr = NULL;
  const void *cptr = NULL;
  uint64_t u64 = 0;
  dsrt_dtype dtype = DSRT_F32;
  float f[4] = {0};
  unsigned char id[128];
  dsrt_step_result step_result;
  dsrt_memory_stats stats;
  memset(&step_result, 0, sizeof step_result);
  memset(&stats, 0, sizeof stats);
  step_result.struct_size = sizeof step_result;
  stats.struct_size = sizeof stats;

  /* Always-safe functions. */
  EXPECT(dsrt_version_number() == DSRT_VERSION_NUMBER);
  EXPECT(strcmp(dsrt_version_string(), DSRT_VERSION_STRING) == 0);
  EXPECT(strcmp(dsrt_status_string(DSRT_ERR_CONFIG), "invalid configuration") == 0);
  EXPECT(dsrt_last_error_message() != NULL);
  dsrt_free(NULL);
  EXPECT(dsrt_has_feature(NULL) == 0);
  EXPECT(dsrt_has_feature("no-such-feature") == 0);
  EXPECT(dsrt_has_feature("tcp") == 1);
  EXPECT(dsrt_has_feature("avx2") == 0 || dsrt_has_feature("avx2") == 1);
  dsrt_set_log_callback(count_logs, &log_calls);
  dsrt_set_log_callback(NULL, NULL);

  /* Config. */
  EXPECT_STATUS(dsrt_config_parse(NULL, &cfg), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(cfg == NULL);
  EXPECT_STATUS(dsrt_config_parse(kConfig, NULL), DSRT_ERR_INVALID_ARGUMENT);
  cfg = (dsrt_config *)&failures;
  EXPECT_STATUS(dsrt_config_parse("{\"train_micro_batch_size_per_gpu\": ", &cfg), DSRT_ERR_CONFIG);
  EXPECT(cfg == NULL);
  EXPECT_STATUS(dsrt_config_load(NULL, &cfg), DSRT_ERR_INVALID_ARGUMENT);
  cfg = (dsrt_config *)&failures;
  EXPECT_STATUS(dsrt_config_load("/nonexistent/dsrt/ds_config.json", &cfg), DSRT_ERR_IO);
  EXPECT(cfg == NULL);
  EXPECT(strstr(dsrt_last_error_message(), "/nonexistent/dsrt/ds_config.json") != NULL);
  EXPECT_STATUS(dsrt_config_set_number(NULL, "optimizer.params.lr", 1.0), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_set_string(NULL, "optimizer.type", "Adam"), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_set_bool(NULL, "zero_optimization.overlap_comm", 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_set_hidden_size(NULL, 64), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_set_world_size(NULL, 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_get_number(NULL, "optimizer.params.lr", &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_get_string(NULL, "optimizer.type", &text), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(text == NULL);
  text = (char *)&failures;
  EXPECT_STATUS(dsrt_config_to_json(NULL, &text), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(text == NULL);
  EXPECT_STATUS(dsrt_config_unresolved(NULL, &text), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_config_warnings(NULL, &text), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_config_destroy(NULL);

  /* Communicator. */
  EXPECT_STATUS(dsrt_comm_create_local(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_comm_create_from_env(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(either(dsrt_nccl_unique_id(NULL), DSRT_ERR_INVALID_ARGUMENT, DSRT_ERR_UNSUPPORTED));
  if (!dsrt_has_feature("nccl")) {
    /* UNSUPPORTED without NCCL in the build; with NCCL but no GPU the id is made and joining is DEVICE. */
    dsrt_status made = dsrt_nccl_unique_id(id);
    EXPECT(either(made, DSRT_OK, DSRT_ERR_UNSUPPORTED));
    comm = (dsrt_comm *)&failures;
    memset(id, 0, sizeof id);
    EXPECT_STATUS(dsrt_comm_create_nccl(id, 0, 1, 0, &comm), made == DSRT_OK ? DSRT_ERR_DEVICE : DSRT_ERR_UNSUPPORTED);
    EXPECT(comm == NULL);
  }
  EXPECT(either(dsrt_comm_create_nccl(NULL, 0, 1, 0, &comm), DSRT_ERR_INVALID_ARGUMENT, DSRT_ERR_UNSUPPORTED));
  EXPECT(dsrt_comm_rank(NULL) == -1);
  EXPECT(dsrt_comm_world_size(NULL) == -1);
  EXPECT_STATUS(dsrt_comm_barrier(NULL), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_comm_destroy(NULL);

  /* Engine and tensors. */
  EXPECT_STATUS(dsrt_engine_create(NULL, NULL, &engine), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(engine == NULL);
  EXPECT_STATUS(dsrt_engine_add_param(NULL, "w", &i64, 1, NULL, &tensor), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(tensor == NULL);
  EXPECT_STATUS(dsrt_engine_build(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_set_stream(NULL, NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_device(NULL, &i32, &i32b), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_acquire(NULL, &ptr, &dtype), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_release(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_grad(NULL, &ptr, &dtype), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_grad_ready(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_loss_scale(NULL, &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_step(NULL, &step_result), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_end_backward(NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_global_step(NULL, &i64), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_get_lr(NULL, &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_read_fp32(NULL, f, 4), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_write_fp32(NULL, f, 4), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(dsrt_tensor_name(NULL) == NULL);
  EXPECT(dsrt_tensor_ndim(NULL) == -1);
  EXPECT_STATUS(dsrt_tensor_shape(NULL, &i64), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(dsrt_tensor_numel(NULL) == -1);
  EXPECT(dsrt_engine_num_tensors(NULL) <= 0);
  EXPECT(dsrt_engine_tensor(NULL, 0) == NULL);
  EXPECT_STATUS(dsrt_engine_memory(NULL, &stats), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_set_client_state(NULL, "x", 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_client_state(NULL, &cptr, &u64), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_report_loss(NULL, 1.0), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_report_host_time(NULL, DSRT_HOST_FORWARD, 1.0), DSRT_ERR_INVALID_ARGUMENT);
  text = (char *)&failures;
  EXPECT_STATUS(dsrt_engine_events(NULL, &text), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(text == NULL);
  EXPECT_STATUS(dsrt_engine_save_checkpoint(NULL, "/tmp", NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_load_checkpoint(NULL, "/tmp", NULL), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_save_16bit_model(NULL, "/tmp/x.safetensors"), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_engine_destroy(NULL);
  /* Parameter groups, host-driven hyperparameters and boundaries. */
  EXPECT_STATUS(dsrt_engine_add_group(NULL, &i32), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(dsrt_engine_num_groups(NULL) == -1);
  EXPECT_STATUS(dsrt_tensor_set_group(NULL, 0), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(dsrt_tensor_group(NULL) == -1);
  EXPECT_STATUS(dsrt_engine_set_group_hyper(NULL, 0, "lr", 0.1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_get_group_hyper(NULL, 0, "lr", &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_group_lr(NULL, 0, &number), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_set_accumulation_boundary(NULL, 1), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_set_scale_wrt_gas(NULL, 0), DSRT_ERR_INVALID_ARGUMENT);
  {
    dsrt_engine *e = (dsrt_engine *)&failures;
    dsrt_engine_options opts;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.device_type = DSRT_DEVICE_CPU;
    EXPECT_STATUS(dsrt_engine_create_with_options(NULL, NULL, &opts, &e), DSRT_ERR_INVALID_ARGUMENT);
    EXPECT(e == NULL);
  }

  /* Offline checkpoints. */
  EXPECT_STATUS(dsrt_checkpoint_open(NULL, NULL, &ckpt), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(ckpt == NULL);
  ckpt = (dsrt_checkpoint *)&failures;
  EXPECT(dsrt_checkpoint_open("/nonexistent/dsrt/ckpt", NULL, &ckpt) != DSRT_OK);
  EXPECT(ckpt == NULL);
  EXPECT(dsrt_checkpoint_num_tensors(NULL) == -1);
  EXPECT(dsrt_checkpoint_tensor_name(NULL, 0) == NULL);
  EXPECT_STATUS(dsrt_checkpoint_tensor_shape(NULL, "w", &i64, &i32), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_checkpoint_read_tensor_fp32(NULL, "w", f, 4), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_checkpoint_export_safetensors(NULL, "/tmp/x.safetensors", DSRT_F32), DSRT_ERR_INVALID_ARGUMENT);
  dsrt_checkpoint_close(NULL);
}

static void whole_life_of_an_engine(void) {
  dsrt_config *cfg = NULL;
  dsrt_comm *comm = NULL;
  dsrt_engine *engine = NULL;
  dsrt_tensor *w = NULL, *bad = NULL, *frozen = NULL;
  char *text = NULL;
  double number = 0.0;
  const int64_t shape[2] = {2, 2};
  const int64_t bad_shape[2] = {2, -1};
  const float init[4] = {0.5f, -0.25f, 1.0f, 2.0f};
  float out[4] = {0};

  OK(dsrt_config_parse(kConfig, &cfg));
  OK(dsrt_config_set_number(cfg, "optimizer.params.lr", 0.02));
  EXPECT_STATUS(dsrt_config_set_number(cfg, "optimizer.params.no_such_key", 1.0), DSRT_ERR_CONFIG);
  EXPECT_STATUS(dsrt_config_set_number(cfg, NULL, 1.0), DSRT_ERR_INVALID_ARGUMENT);
  OK(dsrt_config_set_string(cfg, "optimizer.type", "AdamW"));
  OK(dsrt_config_set_bool(cfg, "zero_optimization.overlap_comm", 0));
  EXPECT(dsrt_config_set_hidden_size(cfg, 0) != DSRT_OK);
  OK(dsrt_config_set_hidden_size(cfg, 64)); /* nothing is "auto": changes nothing */
  OK(dsrt_config_set_world_size(cfg, 1));
  OK(dsrt_config_get_number(cfg, "optimizer.params.lr", &number));
  EXPECT(number == 0.02);
  OK(dsrt_config_get_string(cfg, "optimizer.type", &text));
  EXPECT(text != NULL && strcmp(text, "AdamW") == 0);
  dsrt_free(text);
  OK(dsrt_config_to_json(cfg, &text));
  EXPECT(text != NULL && strstr(text, "train_micro_batch_size_per_gpu") != NULL);
  dsrt_free(text);
  OK(dsrt_config_unresolved(cfg, &text));
  EXPECT(text != NULL && text[0] == '\0');
  dsrt_free(text);
  OK(dsrt_config_warnings(cfg, &text));
  EXPECT(text != NULL);
  dsrt_free(text);

  OK(dsrt_comm_create_local(&comm));
  EXPECT(dsrt_comm_rank(comm) == 0 && dsrt_comm_world_size(comm) == 1);
  OK(dsrt_comm_barrier(comm));
  {
    /* The device as an engine option: the CPU, whatever DSRT_DEVICE says; bad options are refused. */
    dsrt_engine *e = NULL;
    dsrt_engine_options opts;
    int32_t type = -1, index = -1;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.device_type = DSRT_DEVICE_CPU;
    OK(dsrt_engine_create_with_options(cfg, comm, &opts, &e));
    OK(dsrt_engine_device(e, &type, &index));
    EXPECT(type == DSRT_DEVICE_CPU);
    dsrt_engine_destroy(e);
    e = NULL;
    opts.device_type = 7;
    EXPECT_STATUS(dsrt_engine_create_with_options(cfg, comm, &opts, &e), DSRT_ERR_INVALID_ARGUMENT);
    EXPECT(e == NULL);
    opts.device_type = DSRT_DEVICE_CUDA;
    opts.device_index = 999;
    EXPECT(dsrt_engine_create_with_options(cfg, comm, &opts, &e) != DSRT_OK); /* no such GPU, or no CUDA */
    opts.struct_size = 4;
    EXPECT_STATUS(dsrt_engine_create_with_options(cfg, comm, &opts, &e), DSRT_ERR_INVALID_ARGUMENT);
    OK(dsrt_engine_create_with_options(cfg, comm, NULL, &e));
    dsrt_engine_destroy(e);
  }
  OK(dsrt_engine_create(cfg, comm, &engine));
  dsrt_comm_destroy(comm);  /* the engine keeps its own reference */
  dsrt_config_destroy(cfg); /* the engine copied it */

  EXPECT_STATUS(dsrt_engine_step(engine, NULL), DSRT_ERR_STATE);
  EXPECT_STATUS(dsrt_engine_end_backward(engine), DSRT_ERR_STATE); /* before build */
  EXPECT_STATUS(dsrt_engine_add_param(engine, NULL, shape, 2, NULL, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_add_param(engine, "bad", bad_shape, 2, NULL, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_add_param(engine, "bad", shape, 9, NULL, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_add_param(engine, "bad", NULL, 2, NULL, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(bad == NULL);
  OK(dsrt_engine_add_param(engine, "w", shape, 2, init, &w));
  EXPECT(dsrt_engine_add_param(engine, "w", shape, 2, init, &bad) != DSRT_OK); /* duplicate name */
  EXPECT_STATUS(dsrt_engine_add_frozen_param(NULL, "f", shape, 2, init, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_add_frozen_param(engine, "w", shape, 2, init, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_engine_add_frozen_param(engine, "f", bad_shape, 2, init, &bad), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT(bad == NULL);
  OK(dsrt_engine_add_frozen_param(engine, "frozen", shape, 2, init, &frozen));
  EXPECT(frozen != NULL && dsrt_tensor_numel(frozen) == dsrt_tensor_numel(w));
  {
    int32_t group = -1;
    double value = 0.0;
    OK(dsrt_engine_add_group(engine, &group));
    EXPECT(group == 1 && dsrt_engine_num_groups(engine) == 2);
    EXPECT_STATUS(dsrt_tensor_set_group(w, 2), DSRT_ERR_INVALID_ARGUMENT);
    OK(dsrt_tensor_set_group(w, 1));
    EXPECT(dsrt_tensor_group(w) == 1);
    OK(dsrt_engine_get_group_hyper(engine, 1, "lr", &value));
    EXPECT(value == 0.02); /* a new group starts as the config's optimizer section */
    OK(dsrt_engine_set_group_hyper(engine, 1, "lr", 0.02));
    EXPECT_STATUS(dsrt_engine_set_group_hyper(engine, 1, "lr", -1.0), DSRT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(dsrt_engine_set_group_hyper(engine, 1, "momentum", 0.9), DSRT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(dsrt_engine_set_group_hyper(engine, 7, "lr", 0.1), DSRT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(dsrt_engine_set_group_hyper(engine, 1, NULL, 0.1), DSRT_ERR_INVALID_ARGUMENT);
    OK(dsrt_engine_group_lr(engine, 1, &value));
    EXPECT(value == 0.02);
    EXPECT_STATUS(dsrt_engine_set_accumulation_boundary(engine, 2), DSRT_ERR_INVALID_ARGUMENT);
    OK(dsrt_engine_set_accumulation_boundary(engine, -1));
    EXPECT_STATUS(dsrt_engine_set_scale_wrt_gas(engine, 5), DSRT_ERR_INVALID_ARGUMENT);
    OK(dsrt_engine_set_scale_wrt_gas(engine, 1));
  }
  {
    dsrt_status s = dsrt_engine_set_stream(engine, NULL);
    EXPECT(s == DSRT_OK || s == DSRT_ERR_UNSUPPORTED);
  }
  OK(dsrt_engine_build(engine));
  EXPECT_STATUS(dsrt_engine_build(engine), DSRT_ERR_STATE);
  EXPECT_STATUS(dsrt_engine_add_param(engine, "late", shape, 2, NULL, &bad), DSRT_ERR_STATE);
  EXPECT_STATUS(dsrt_engine_add_frozen_param(engine, "late", shape, 2, NULL, &bad), DSRT_ERR_STATE);
  {
    void *fdata = NULL, *fgrad = NULL;
    float fvalues[64];
    int64_t k, n = dsrt_tensor_numel(frozen);
    EXPECT(n <= 64);
    EXPECT_STATUS(dsrt_tensor_grad(frozen, &fgrad, NULL), DSRT_ERR_STATE);
    EXPECT(strstr(dsrt_last_error_message(), "frozen") != NULL);
    EXPECT_STATUS(dsrt_tensor_grad_ready(frozen), DSRT_ERR_STATE);
    OK(dsrt_tensor_acquire(frozen, &fdata, NULL));
    EXPECT(fdata != NULL);
    OK(dsrt_tensor_release(frozen));
    OK(dsrt_tensor_read_fp32(frozen, fvalues, (uint64_t)n));
    for (k = 0; k < n; ++k) EXPECT(fvalues[k] == init[k]);
  }

  int32_t device_type = -1, device_index = -1;
  OK(dsrt_engine_device(engine, &device_type, &device_index));
  EXPECT(device_type == DSRT_DEVICE_CPU || device_type == DSRT_DEVICE_CUDA);
  EXPECT(dsrt_engine_num_tensors(engine) == 1);
  EXPECT(dsrt_engine_tensor(engine, 0) == w);
  EXPECT(dsrt_engine_tensor(engine, 1) == NULL);
  EXPECT(dsrt_engine_tensor(engine, -1) == NULL);
  EXPECT(strcmp(dsrt_tensor_name(w), "w") == 0);
  EXPECT(dsrt_tensor_ndim(w) == 2 && dsrt_tensor_numel(w) == 4);
  {
    int64_t got[8] = {0};
    OK(dsrt_tensor_shape(w, got));
    EXPECT(got[0] == 2 && got[1] == 2);
  }

  void *data = NULL, *grad = NULL;
  dsrt_dtype dtype = DSRT_BF16;
  OK(dsrt_tensor_acquire(w, &data, &dtype));
  EXPECT(data != NULL && dtype == DSRT_F32);
  if (device_type == DSRT_DEVICE_CPU && data != NULL) EXPECT(memcmp(data, init, sizeof init) == 0);
  OK(dsrt_tensor_release(w));
  OK(dsrt_engine_loss_scale(engine, &number));
  EXPECT(number == 1.0);
  OK(dsrt_tensor_grad(w, &grad, &dtype));
  EXPECT(grad != NULL && dtype == DSRT_F32);
  if (device_type == DSRT_DEVICE_CPU && grad != NULL) {
    const float g[4] = {1.0f, -1.0f, 0.5f, 0.0f};
    memcpy(grad, g, sizeof g);
  }
  OK(dsrt_tensor_grad_ready(w));
  OK(dsrt_engine_end_backward(engine)); /* the micro-step's reduction, inside the host's backward */
  OK(dsrt_engine_end_backward(engine)); /* again before the next gradient: a no-op */

  /* struct_size: the library writes no more than the caller's struct holds. An older caller's
  ** struct ends before loss_scale; the bytes after it must be left alone. */
  {
    dsrt_step_result r;
    memset(&r, 0xAB, sizeof r);
    r.struct_size = offsetof(dsrt_step_result, loss_scale);
    OK(dsrt_engine_step(engine, &r));
    EXPECT(r.global_step == 1 && r.boundary == 1 && r.overflow == 0);
    EXPECT(r.lr > 0.0199 && r.lr < 0.0201);
    unsigned char after[sizeof(double)];
    memset(after, 0xAB, sizeof after);
    EXPECT(memcmp(&r.loss_scale, after, sizeof after) == 0);
  }
  OK(dsrt_engine_step(engine, NULL));
  {
    int64_t steps = 0;
    OK(dsrt_engine_global_step(engine, &steps));
    EXPECT(steps == 2);
    OK(dsrt_engine_get_lr(engine, &number));
    EXPECT(number > 0.0199 && number < 0.0201);
  }

  OK(dsrt_tensor_read_fp32(w, out, 4));
  EXPECT(out[0] < init[0] && out[1] > init[1]); /* moved against the gradient */
  EXPECT_STATUS(dsrt_tensor_read_fp32(w, out, 3), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(dsrt_tensor_read_fp32(w, NULL, 4), DSRT_ERR_INVALID_ARGUMENT);
  OK(dsrt_tensor_write_fp32(w, init, 4));
  OK(dsrt_tensor_read_fp32(w, out, 4));
  EXPECT(memcmp(out, init, sizeof init) == 0);
  EXPECT_STATUS(dsrt_tensor_write_fp32(w, init, 5), DSRT_ERR_INVALID_ARGUMENT);

  {
    dsrt_memory_stats m;
    memset(&m, 0xCD, sizeof m);
    m.struct_size = sizeof m;
    OK(dsrt_engine_memory(engine, &m));
    EXPECT(m.working_params[DSRT_LOC_DEVICE] + m.working_params[DSRT_LOC_HOST] >= 4 * sizeof(float));
    EXPECT(m.optimizer_states[DSRT_LOC_DEVICE] + m.optimizer_states[DSRT_LOC_HOST] >= 2 * 4 * sizeof(float));
    memset(&m, 0xCD, sizeof m);
    m.struct_size = offsetof(dsrt_memory_stats, buffers);
    OK(dsrt_engine_memory(engine, &m));
    EXPECT(m.buffers[0] == 0xCDCDCDCDCDCDCDCDull && m.buffers[2] == 0xCDCDCDCDCDCDCDCDull);
  }

  {
    const void *state = NULL;
    uint64_t size = 1;
    OK(dsrt_engine_client_state(engine, &state, &size));
    EXPECT(size == 0);
    OK(dsrt_engine_set_client_state(engine, "abc", 3));
    OK(dsrt_engine_client_state(engine, &state, &size));
    EXPECT(size == 3 && state != NULL && memcmp(state, "abc", 3) == 0);
  }

  /* Checkpoints: save, reload, open offline. UNSUPPORTED is a valid answer of a build without them. */
  char dir[] = "/tmp/dsrt_header_calls_XXXXXX";
  if (mkdtemp(dir) != NULL) {
    char path[128];
    dsrt_status s = dsrt_engine_save_checkpoint(engine, dir, "t1");
    EXPECT(s == DSRT_OK || s == DSRT_ERR_UNSUPPORTED);
    if (s == DSRT_OK) {
      dsrt_checkpoint *ckpt = NULL;
      int64_t ckpt_shape[8] = {0};
      int32_t ndim = 0;
      OK(dsrt_tensor_write_fp32(w, out, 4));
      OK(dsrt_engine_load_checkpoint(engine, dir, NULL));
      OK(dsrt_checkpoint_open(dir, "t1", &ckpt));
      /* the trainable tensor, then the frozen one */
      EXPECT(dsrt_checkpoint_num_tensors(ckpt) == 2);
      EXPECT(dsrt_checkpoint_tensor_name(ckpt, 0) != NULL && strcmp(dsrt_checkpoint_tensor_name(ckpt, 0), "w") == 0);
      EXPECT(dsrt_checkpoint_tensor_name(ckpt, 1) != NULL &&
             strcmp(dsrt_checkpoint_tensor_name(ckpt, 1), "frozen") == 0);
      EXPECT(dsrt_checkpoint_tensor_name(ckpt, 2) == NULL);
      OK(dsrt_checkpoint_tensor_shape(ckpt, "w", ckpt_shape, &ndim));
      EXPECT(ndim == 2 && ckpt_shape[0] == 2 && ckpt_shape[1] == 2);
      OK(dsrt_checkpoint_read_tensor_fp32(ckpt, "w", out, 4));
      EXPECT(memcmp(out, init, sizeof init) == 0);
      OK(dsrt_checkpoint_read_tensor_fp32(ckpt, "frozen", out, 4));
      EXPECT(memcmp(out, init, sizeof init) == 0);
      EXPECT(dsrt_checkpoint_read_tensor_fp32(ckpt, "nope", out, 4) != DSRT_OK);
      snprintf(path, sizeof path, "%s/consolidated.safetensors", dir);
      OK(dsrt_checkpoint_export_safetensors(ckpt, path, DSRT_BF16));
      dsrt_checkpoint_close(ckpt);
      remove(path);
    } else {
      EXPECT_STATUS(s, DSRT_ERR_UNSUPPORTED);
      printf("note: checkpoints answer DSRT_ERR_UNSUPPORTED in this build: %s\n", dsrt_last_error_message());
    }
    snprintf(path, sizeof path, "%s/model16.safetensors", dir);
    s = dsrt_engine_save_16bit_model(engine, path);
    EXPECT(s == DSRT_OK || s == DSRT_ERR_UNSUPPORTED);
    remove(path);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  dsrt_engine_destroy(engine);
}

int main(void) {
  null_and_invalid_arguments();
  whole_life_of_an_engine();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("every dsrt.h function answered as documented\n");
  return 0;
}
