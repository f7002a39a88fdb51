/* test_abi_layout.c -- the parts of the ABI that are fixed forever: status codes, enum values,
** and the size and offset of every field of the public structs. A change here breaks every
** program compiled against an earlier header; this test must never be edited to make it pass,
** only extended when a field is appended. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dsrt.h"

/* Status codes (API.md): fixed forever, new ones are appended. */
_Static_assert(DSRT_OK == 0, "DSRT_OK");
_Static_assert(DSRT_ERR_INVALID_ARGUMENT == 1, "DSRT_ERR_INVALID_ARGUMENT");
_Static_assert(DSRT_ERR_CONFIG == 2, "DSRT_ERR_CONFIG");
_Static_assert(DSRT_ERR_STATE == 3, "DSRT_ERR_STATE");
_Static_assert(DSRT_ERR_OUT_OF_MEMORY == 4, "DSRT_ERR_OUT_OF_MEMORY");
_Static_assert(DSRT_ERR_IO == 5, "DSRT_ERR_IO");
_Static_assert(DSRT_ERR_COMM == 6, "DSRT_ERR_COMM");
_Static_assert(DSRT_ERR_DEVICE == 7, "DSRT_ERR_DEVICE");
_Static_assert(DSRT_ERR_CHECKPOINT == 8, "DSRT_ERR_CHECKPOINT");
_Static_assert(DSRT_ERR_UNSUPPORTED == 9, "DSRT_ERR_UNSUPPORTED");
_Static_assert(DSRT_ERR_INTERNAL == 10, "DSRT_ERR_INTERNAL");
_Static_assert(sizeof(dsrt_status) == 4, "dsrt_status is int32_t");

/* Enums and constants. */
_Static_assert(DSRT_F32 == 0 && DSRT_F16 == 1 && DSRT_BF16 == 2, "dsrt_dtype values");
_Static_assert(sizeof(dsrt_dtype) == 4, "dsrt_dtype is passed as a 32-bit int");
_Static_assert(DSRT_DEVICE_CPU == 0 && DSRT_DEVICE_CUDA == 1, "dsrt_device_type values");
_Static_assert(DSRT_LOC_DEVICE == 0 && DSRT_LOC_HOST == 1 && DSRT_LOC_NVME == 2, "dsrt_location values");
_Static_assert(DSRT_NUM_LOCATIONS == 3, "DSRT_NUM_LOCATIONS");
_Static_assert(DSRT_LOG_ERROR == 0 && DSRT_LOG_WARN == 1 && DSRT_LOG_INFO == 2 && DSRT_LOG_DEBUG == 3,
               "log levels");
_Static_assert(DSRT_VERSION_NUMBER == DSRT_VERSION_MAJOR * 10000 + DSRT_VERSION_MINOR * 100 + DSRT_VERSION_PATCH,
               "version formula");

/* dsrt_engine_options: struct_size first, fields only appended. */
_Static_assert(offsetof(dsrt_engine_options, struct_size) == 0, "engine_options.struct_size");
_Static_assert(offsetof(dsrt_engine_options, device_type) == 8, "engine_options.device_type");
_Static_assert(offsetof(dsrt_engine_options, device_index) == 12, "engine_options.device_index");
_Static_assert(DSRT_DEVICE_DEFAULT == -1, "DSRT_DEVICE_DEFAULT");

/* dsrt_step_result: struct_size first, fields only appended. */
_Static_assert(offsetof(dsrt_step_result, struct_size) == 0, "step_result.struct_size");
_Static_assert(offsetof(dsrt_step_result, global_step) == 8, "step_result.global_step");
_Static_assert(offsetof(dsrt_step_result, boundary) == 16, "step_result.boundary");
_Static_assert(offsetof(dsrt_step_result, overflow) == 20, "step_result.overflow");
_Static_assert(offsetof(dsrt_step_result, grad_norm) == 24, "step_result.grad_norm");
_Static_assert(offsetof(dsrt_step_result, lr) == 32, "step_result.lr");
_Static_assert(offsetof(dsrt_step_result, loss_scale) == 40, "step_result.loss_scale");
_Static_assert(sizeof(dsrt_step_result) >= 48, "step_result v0.1 size");
_Static_assert(sizeof(((dsrt_step_result *)0)->struct_size) == 8, "struct_size is uint64_t");

/* dsrt_memory_stats: five arrays of DSRT_NUM_LOCATIONS uint64_t after struct_size. */
_Static_assert(offsetof(dsrt_memory_stats, struct_size) == 0, "memory_stats.struct_size");
_Static_assert(offsetof(dsrt_memory_stats, working_params) == 8, "memory_stats.working_params");
_Static_assert(offsetof(dsrt_memory_stats, gradients) == 32, "memory_stats.gradients");
_Static_assert(offsetof(dsrt_memory_stats, master_params) == 56, "memory_stats.master_params");
_Static_assert(offsetof(dsrt_memory_stats, optimizer_states) == 80, "memory_stats.optimizer_states");
_Static_assert(offsetof(dsrt_memory_stats, buffers) == 104, "memory_stats.buffers");
_Static_assert(sizeof(dsrt_memory_stats) >= 128, "memory_stats v0.1 size");

static int failures = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                          \
    }                                                                      \
  } while (0)

int main(void) {
  /* The library loaded at run time agrees with the header on the version and its major. */
  CHECK(dsrt_version_number() / 10000 == DSRT_VERSION_MAJOR);
  CHECK(dsrt_version_number() == DSRT_VERSION_NUMBER);
  CHECK(strcmp(dsrt_version_string(), DSRT_VERSION_STRING) == 0);

  /* Every code has its own static text; unknown codes say so. */
  for (dsrt_status a = DSRT_OK; a <= DSRT_ERR_INTERNAL; ++a) {
    const char *sa = dsrt_status_string(a);
    CHECK(sa != NULL && sa[0] != '\0' && strcmp(sa, "unknown status") != 0);
    for (dsrt_status b = DSRT_OK; b < a; ++b) CHECK(strcmp(sa, dsrt_status_string(b)) != 0);
  }
  CHECK(strcmp(dsrt_status_string(-1), "unknown status") == 0);
  CHECK(strcmp(dsrt_status_string(DSRT_ERR_INTERNAL + 1000), "unknown status") == 0);

  if (failures) {
    fprintf(stderr, "%d ABI check(s) failed\n", failures);
    return 1;
  }
  printf("ABI layout: sizeof(dsrt_step_result)=%zu sizeof(dsrt_memory_stats)=%zu, all fixed fields in place\n",
         sizeof(dsrt_step_result), sizeof(dsrt_memory_stats));
  return 0;
}
