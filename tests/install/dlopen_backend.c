#define _GNU_SOURCE /* RTLD_DEFAULT */
/* dlopen_backend.c -- dsrt used the way a trainer loads a backend plugin: the library is opened by
** path with dlopen(RTLD_NOW | RTLD_LOCAL) (nothing is linked at build time), every function is
** resolved by name, the library's version is checked against the header this program was compiled
** with (same MAJOR = ABI-compatible), and one optimizer step is trained and verified.
** Usage: dlopen_backend /path/to/libdsrt.so.MAJOR */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dsrt.h"

/* One function pointer per entry point used, typed from the header's own declaration. */
#define DSRT_FN(name) static __typeof__(&name) p_##name
DSRT_FN(dsrt_version_number);
DSRT_FN(dsrt_version_string);
DSRT_FN(dsrt_status_string);
DSRT_FN(dsrt_last_error_message);
DSRT_FN(dsrt_config_parse);
DSRT_FN(dsrt_config_destroy);
DSRT_FN(dsrt_engine_create);
DSRT_FN(dsrt_engine_add_param);
DSRT_FN(dsrt_engine_build);
DSRT_FN(dsrt_tensor_grad);
DSRT_FN(dsrt_tensor_grad_ready);
DSRT_FN(dsrt_engine_step);
DSRT_FN(dsrt_tensor_read_fp32);
DSRT_FN(dsrt_engine_destroy);

static int resolve(void *lib, const char *name, void **slot) {
  dlerror();
  *slot = dlsym(lib, name);
  const char *err = dlerror();
  if (err != NULL || *slot == NULL) {
    fprintf(stderr, "dlsym(%s): %s\n", name, err ? err : "NULL");
    return 0;
  }
  return 1;
}
#define RESOLVE(name) resolve(lib, #name, (void **)&p_##name)

#define CHECK(call)                                                                          \
  do {                                                                                       \
    dsrt_status s_ = (call);                                                                 \
    if (s_ != DSRT_OK) {                                                                     \
      fprintf(stderr, "%s: %s: %s\n", #call, p_dsrt_status_string(s_), p_dsrt_last_error_message()); \
      goto fail;                                                                             \
    }                                                                                        \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libdsrt.so.%d\n", argv[0], DSRT_VERSION_MAJOR);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  /* RTLD_LOCAL: the library's symbols must not leak into the global namespace. */
  if (dlsym(RTLD_DEFAULT, "dsrt_version_number") != NULL) {
    fprintf(stderr, "dsrt_version_number is visible globally after an RTLD_LOCAL dlopen\n");
    return 1;
  }
  if (!(RESOLVE(dsrt_version_number) && RESOLVE(dsrt_version_string) && RESOLVE(dsrt_status_string) &&
        RESOLVE(dsrt_last_error_message) && RESOLVE(dsrt_config_parse) && RESOLVE(dsrt_config_destroy) &&
        RESOLVE(dsrt_engine_create) && RESOLVE(dsrt_engine_add_param) && RESOLVE(dsrt_engine_build) &&
        RESOLVE(dsrt_tensor_grad) && RESOLVE(dsrt_tensor_grad_ready) && RESOLVE(dsrt_engine_step) &&
        RESOLVE(dsrt_tensor_read_fp32) && RESOLVE(dsrt_engine_destroy)))
    return 1;
  /* Internal C++ symbols are hidden: only the C interface is reachable. */
  if (dlsym(lib, "_ZN4dsrt5ErrorEiPKcz") != NULL) {
    fprintf(stderr, "an internal C++ symbol is exported\n");
    return 1;
  }

  /* The compatibility rule: same MAJOR works; the loaded MINOR may be newer than the header's. */
  const int32_t loaded = p_dsrt_version_number();
  printf("header %s (%d), library %s (%d)\n", DSRT_VERSION_STRING, DSRT_VERSION_NUMBER, p_dsrt_version_string(),
         (int)loaded);
  if (loaded / 10000 != DSRT_VERSION_MAJOR || loaded < DSRT_VERSION_NUMBER) {
    fprintf(stderr, "incompatible library: need %d.x with x >= %d\n", DSRT_VERSION_MAJOR, DSRT_VERSION_MINOR);
    return 1;
  }

  int ok = 0;
  dsrt_config *config = NULL;
  dsrt_engine *engine = NULL;
  dsrt_tensor *w = NULL;
  /* No clipping (the default clips at 1.0, and this gradient's norm is 1.5): plain SGD below. */
  CHECK(p_dsrt_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 0, "
                            "\"optimizer\": {\"type\": \"SGD\", "
                            "\"params\": {\"lr\": 0.5}}, \"zero_optimization\": {\"stage\": 1}}",
                            &config));
  CHECK(p_dsrt_engine_create(config, NULL, &engine));
  const int64_t shape[1] = {4};
  const float init[4] = {1.0f, -2.0f, 3.0f, 0.25f};
  CHECK(p_dsrt_engine_add_param(engine, "w", shape, 1, init, &w));
  CHECK(p_dsrt_engine_build(engine));
  void *grad = NULL;
  dsrt_dtype dtype;
  CHECK(p_dsrt_tensor_grad(w, &grad, &dtype));
  if (dtype != DSRT_F32) {
    fprintf(stderr, "expected an fp32 gradient buffer, got dtype %d\n", (int)dtype);
    goto fail;
  }
  const float g[4] = {0.5f, 1.0f, -1.0f, 0.0f};
  memcpy(grad, g, sizeof g); /* CPU engine: the buffer is host memory */
  CHECK(p_dsrt_tensor_grad_ready(w));
  dsrt_step_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  CHECK(p_dsrt_engine_step(engine, &result));
  float after[4];
  CHECK(p_dsrt_tensor_read_fp32(w, after, 4));
  /* Plain SGD (no momentum): w - lr * g. */
  for (int i = 0; i < 4; ++i) {
    const float expected = init[i] - 0.5f * g[i];
    if (fabsf(after[i] - expected) > 1e-6f) {
      fprintf(stderr, "w[%d] = %g after one SGD step, expected %g\n", i, after[i], expected);
      goto fail;
    }
  }
  if (result.global_step != 1 || result.boundary != 1 || fabs(result.lr - 0.5) > 1e-12) {
    fprintf(stderr, "step result: global_step %lld boundary %d lr %g\n", (long long)result.global_step,
            (int)result.boundary, result.lr);
    goto fail;
  }
  printf("trained one step through dlopen: w = [%g %g %g %g]\n", after[0], after[1], after[2], after[3]);
  ok = 1;
fail:
  p_dsrt_engine_destroy(engine);
  p_dsrt_config_destroy(config);
  if (dlclose(lib) != 0) {
    fprintf(stderr, "dlclose: %s\n", dlerror());
    ok = 0;
  }
  return ok ? 0 : 1;
}
