/* test_init_macros.c -- the *_INIT macros of the public header's output structs compile warning-free
** as C (this file is built with -Wall -Wextra -Werror), set struct_size to the struct's size and zero
** every other field; dsrt_engine_memory and dsrt_engine_step accept such structs (they fail here on a
** NULL engine, naming it, without touching the struct). */
#include <stdio.h>
#include <string.h>

#include "dsrt.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  dsrt_step_result step = DSRT_STEP_RESULT_INIT;
  CHECK(step.struct_size == sizeof(dsrt_step_result));
  CHECK(step.global_step == 0 && step.boundary == 0 && step.overflow == 0);
  CHECK(step.grad_norm == 0.0 && step.lr == 0.0 && step.loss_scale == 0.0);

  dsrt_memory_stats memory = DSRT_MEMORY_STATS_INIT;
  CHECK(memory.struct_size == sizeof(dsrt_memory_stats));
  for (int i = 0; i < DSRT_NUM_LOCATIONS; ++i) {
    CHECK(memory.working_params[i] == 0 && memory.gradients[i] == 0 && memory.master_params[i] == 0);
    CHECK(memory.optimizer_states[i] == 0 && memory.buffers[i] == 0);
  }

  dsrt_memory_stats before = memory;
  CHECK(dsrt_engine_memory(NULL, &memory) == DSRT_ERR_INVALID_ARGUMENT);
  CHECK(memcmp(&before, &memory, sizeof memory) == 0);
  CHECK(dsrt_engine_step(NULL, &step) == DSRT_ERR_INVALID_ARGUMENT);

  if (failures != 0) {
    fprintf(stderr, "test_init_macros: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_init_macros: ok\n");
  return 0;
}
