/* rank_death.c -- a rank dies abruptly (no MPI_Finalize, no dsrt cleanup) while its peers wait in
** a collective; run by tests/mpi/rank_death.sh under an mpirun that lets survivors run. Every
** survivor must get DSRT_ERR_COMM from the collective within the configured timeout and then exit
** normally: dsrt must not call the collective MPI_Finalize at exit on a world with a dead rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsrt.h"

int main(void) {
  dsrt_comm *comm = NULL;
  if (dsrt_comm_create_from_env(&comm) != DSRT_OK) {
    fprintf(stderr, "rank_death: cannot create the communicator: %s\n", dsrt_last_error_message());
    return 2;
  }
  const int rank = dsrt_comm_rank(comm);
  if (dsrt_comm_barrier(comm) != DSRT_OK) {
    fprintf(stderr, "rank_death: the first barrier failed: %s\n", dsrt_last_error_message());
    return 2;
  }
  if (rank == dsrt_comm_world_size(comm) - 1) {
    fprintf(stderr, "rank_death: rank %d dies now\n", rank);
    fflush(stderr);
    _exit(0); /* as a killed process would: no finalize, no destructor */
  }
  const dsrt_status status = dsrt_comm_barrier(comm);
  if (status != DSRT_ERR_COMM) {
    fprintf(stderr, "rank_death: rank %d: the barrier with a dead rank returned %d, expected DSRT_ERR_COMM\n", rank,
            (int)status);
    return 3;
  }
  dsrt_comm_destroy(comm);
  /* exit() runs dsrt's exit handler: it must return instead of waiting in MPI_Finalize. */
  printf("rank_death: survivor rank %d got DSRT_ERR_COMM and exits\n", rank);
  fflush(stdout);
  return 0;
}
