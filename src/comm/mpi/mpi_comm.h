// mpi_comm.h -- the MPI communicator: a duplicate of MPI_COMM_WORLD per dsrt communicator, with a
// worker thread that runs its collectives in issue order while the host computes.
#pragma once

#include <memory>

#include "comm/comm.h"

namespace dsrt {

// Joins MPI_COMM_WORLD (initializing MPI if needed). expected_rank/expected_size come from the
// launcher's environment (-1 = unknown); a mismatch with MPI's view is DSRT_ERR_COMM.
// launcher names the launcher for messages. DSRT_ERR_UNSUPPORTED in a build without MPI.
Status mpi_comm_create_world(int expected_rank, int expected_size, const char *launcher, std::shared_ptr<Comm> *out);

// True when MPI is already initialized in this process (by the host or by dsrt).
bool mpi_already_initialized();

}  // namespace dsrt
