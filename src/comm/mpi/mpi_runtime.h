// mpi_runtime.h -- MPI for the whole process: initialized once on first use (unless the host did
// it), finalized at exit only when dsrt initialized it; the thread level decides whether each
// communicator may drive MPI from its own thread. Compiled only with DSRT_HAVE_MPI.
#pragma once

#ifdef DSRT_HAVE_MPI
// Only MPI's C interface is linked: keep mpi.h from declaring the deprecated C++ bindings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <mutex>

#include "comm/comm.h"

namespace dsrt {

struct MpiRuntime {
  int thread_level = MPI_THREAD_SINGLE;  // what MPI provides
  bool initialized_by_dsrt = false;
  // Communicators may call MPI from their own worker threads (MULTIPLE, or SERIALIZED when dsrt
  // owns MPI and serializes its calls itself). Otherwise they run collectives on the caller.
  bool worker_threads = false;
  // NaN-propagating max/min for MPI_FLOAT and MPI_DOUBLE (MPI's own may drop a NaN).
  MPI_Op max_nan = MPI_OP_NULL;
  MPI_Op min_nan = MPI_OP_NULL;
};

// Initializes MPI on the first call (MPI_THREAD_MULTIPLE requested) and returns the process state.
Status mpi_runtime_start(const MpiRuntime **out);
// True once MPI_Finalize has run (dsrt must not call MPI after that).
bool mpi_runtime_finalized();
// Called when a collective failed (timeout, MPI error): the world may hold a dead rank, so the
// exit handler dsrt installed (when dsrt initialized MPI) runs the collective MPI_Finalize under a
// watchdog that ends the process (status 1) if it has not returned within the collective timeout.
// A host that initialized MPI itself should call MPI_Abort rather than MPI_Finalize after a
// DSRT_ERR_COMM from a collective when a rank may have died.
void mpi_runtime_mark_broken();
bool mpi_runtime_broken();
// DSRT_ERR_COMM naming the call and MPI's error text when rc is not MPI_SUCCESS.
Status mpi_check(int rc, const char *call);

// Sanitizer builds: maps Open MPI's plugins for good, so that leak reports at exit can name the
// plugin that kept an allocation (tests/lsan.supp). dsrt calls it before it initializes MPI; a
// program that calls MPI_Init itself calls it first. Does nothing in other builds.
void mpi_keep_plugins_mapped();

// Held around each MPI call; takes a process-wide lock only when MPI is SERIALIZED.
class MpiCallLock {
 public:
  MpiCallLock();
  ~MpiCallLock();
  MpiCallLock(const MpiCallLock &) = delete;
  MpiCallLock &operator=(const MpiCallLock &) = delete;

 private:
  bool locked_ = false;
};

}  // namespace dsrt
#endif
