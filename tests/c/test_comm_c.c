/* The communicator's C API in a world of one: creation, rank/size, barrier, NULL handling, and
** the NCCL entry points of a build without NCCL. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsrt.h"

static int failures = 0;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                        \
    }                                                                    \
  } while (0)

static int message_has(const char *needle) { return strstr(dsrt_last_error_message(), needle) != NULL; }

static void clear_launcher_env(void) {
  const char *names[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
                         "SLURM_STEP_ID", "SLURM_PROCID", "RANK", "WORLD_SIZE", "DSRT_COMM"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
}

int main(void) {
  dsrt_comm *comm = (dsrt_comm *)&failures; /* must be overwritten with NULL on failure */
  clear_launcher_env();

  CHECK(dsrt_comm_create_local(NULL) == DSRT_ERR_INVALID_ARGUMENT);
  CHECK(message_has("out"));

  CHECK(dsrt_comm_create_local(&comm) == DSRT_OK);
  CHECK(comm != NULL);
  CHECK(dsrt_comm_rank(comm) == 0);
  CHECK(dsrt_comm_world_size(comm) == 1);
  CHECK(dsrt_comm_barrier(comm) == DSRT_OK);
  dsrt_comm_destroy(comm);

  CHECK(dsrt_comm_rank(NULL) == -1);
  CHECK(dsrt_comm_world_size(NULL) == -1);
  CHECK(dsrt_comm_barrier(NULL) == DSRT_ERR_INVALID_ARGUMENT);
  CHECK(message_has("comm"));
  dsrt_comm_destroy(NULL);

  /* started alone: a world of one */
  comm = NULL;
  CHECK(dsrt_comm_create_from_env(&comm) == DSRT_OK);
  CHECK(dsrt_comm_world_size(comm) == 1);
  CHECK(dsrt_comm_barrier(comm) == DSRT_OK);
  dsrt_comm_destroy(comm);
  CHECK(dsrt_comm_create_from_env(NULL) == DSRT_ERR_INVALID_ARGUMENT);

  /* torchrun's variables without MPI: without a GPU auto picks TCP, which needs MASTER_ADDR */
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "4", 1);
  comm = (dsrt_comm *)&failures;
  if (!dsrt_has_feature("nccl")) {
    CHECK(dsrt_comm_create_from_env(&comm) == DSRT_ERR_COMM);
    CHECK(comm == NULL);
    CHECK(message_has("MASTER_ADDR"));
  }
  setenv("DSRT_COMM", "nccl", 1);
  comm = (dsrt_comm *)&failures;
  if (!dsrt_has_feature("nccl")) {
    /* UNSUPPORTED in a build without NCCL, DEVICE in one with NCCL on a machine without a GPU. */
    dsrt_status torchrun = dsrt_comm_create_from_env(&comm);
    CHECK(torchrun == DSRT_ERR_UNSUPPORTED || torchrun == DSRT_ERR_DEVICE);
    CHECK(comm == NULL);
    CHECK(message_has("torchrun"));
  }
  clear_launcher_env();

  /* NCCL is not part of this build */
  unsigned char id[128];
  memset(id, 0, sizeof id);
  CHECK(dsrt_nccl_unique_id(NULL) == DSRT_ERR_INVALID_ARGUMENT);
  if (!dsrt_has_feature("nccl")) {
    /* Without NCCL in the build both calls are UNSUPPORTED; with NCCL but no GPU a unique id can
    ** still be made (it needs no GPU), and joining fails with DEVICE naming the missing GPU. */
    dsrt_status made = dsrt_nccl_unique_id(id);
    CHECK(made == DSRT_OK || made == DSRT_ERR_UNSUPPORTED);
    if (made == DSRT_ERR_UNSUPPORTED) CHECK(message_has("NCCL communicator not available in this build"));
    comm = (dsrt_comm *)&failures;
    dsrt_status joined = dsrt_comm_create_nccl(id, 0, 1, 0, &comm);
    CHECK(joined == (made == DSRT_OK ? DSRT_ERR_DEVICE : DSRT_ERR_UNSUPPORTED));
    if (joined == DSRT_ERR_DEVICE) CHECK(message_has("GPU"));
    CHECK(comm == NULL);
  }
  CHECK(dsrt_comm_create_nccl(NULL, 0, 1, 0, &comm) == DSRT_ERR_INVALID_ARGUMENT);
  CHECK(dsrt_comm_create_nccl(id, 2, 2, 0, &comm) == DSRT_ERR_INVALID_ARGUMENT);
  CHECK(message_has("rank 2"));
  CHECK(dsrt_comm_create_nccl(id, 0, 1, 0, NULL) == DSRT_ERR_INVALID_ARGUMENT);

  if (failures) {
    fprintf(stderr, "test_comm_c: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_comm_c: ok\n");
  return 0;
}
