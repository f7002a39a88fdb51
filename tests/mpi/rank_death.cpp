// rank_death.cpp -- a rank dies abruptly (no MPI_Finalize, no destructor) while its peers are in a
// large collective with it; run by tests/mpi/rank_death.sh under an mpirun that lets survivors
// run. Every survivor must get DSRT_ERR_COMM within the configured timeout and then exit normally:
// dsrt must not call the collective MPI_Finalize at exit on a world with a dead rank (it waited
// for ever on the unmatched transfers to the dead rank).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "config/config.h"
#include "engine/engine.h"

int main() {
  std::shared_ptr<dsrt::Comm> comm;
  dsrt::Status status = dsrt::comm_create_from_env(&comm);
  if (!status.ok()) {
    std::fprintf(stderr, "rank_death: cannot create the communicator: %s\n", status.message().c_str());
    return 2;
  }
  const int rank = comm->rank();
  // Large enough that MPI sends it by rendezvous: a survivor's transfer to the dead rank is never
  // matched.
  std::vector<float> values(size_t(8) << 20, 1.0f + static_cast<float>(rank));
  status = comm->all_reduce_sync(values.data(), values.size(), DSRT_F32, dsrt::ReduceOp::Sum);
  if (!status.ok()) {
    std::fprintf(stderr, "rank_death: the first all-reduce failed: %s\n", status.message().c_str());
    return 2;
  }
  // The collective timeout comes from the config key (the launcher's DSRT_COMM_TIMEOUT_S is 120 s,
  // which the 30 s bound of rank_death.sh would not survive): an engine created with it sets it
  // (after the first all-reduce, which a sanitizer build may take a while over).
  std::unique_ptr<dsrt::Config> config;
  dsrt::TrainConfig train;
  std::unique_ptr<dsrt::Engine> engine;
  status = dsrt::Config::parse("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\"}, "
                               "\"comm_timeout\": 2}", "rank_death", &config);
  if (status.ok()) status = config->resolve(comm->size(), &train);
  if (status.ok()) status = dsrt::Engine::create(train, comm, &engine);
  if (!status.ok()) {
    std::fprintf(stderr, "rank_death: cannot create the engine: %s\n", status.message().c_str());
    return 2;
  }
  if (rank == comm->size() - 1) {
    std::fprintf(stderr, "rank_death: rank %d dies now\n", rank);
    std::fflush(stderr);
    ::_exit(0);  // as a killed process would
  }
  status = comm->all_reduce_sync(values.data(), values.size(), DSRT_F32, dsrt::ReduceOp::Sum);
  if (status.code() != DSRT_ERR_COMM) {
    std::fprintf(stderr, "rank_death: rank %d: the all-reduce with a dead rank returned %d, expected DSRT_ERR_COMM\n",
                 rank, static_cast<int>(status.code()));
    return 3;
  }
  // Returning destroys the engine and the communicator, then runs dsrt's exit handler, which must
  // not wait for ever in MPI_Finalize for the dead rank (without the fix, about one run in five
  // hung there; with it, a watchdog ends such a process after the collective timeout).
  std::printf("rank_death: survivor rank %d got DSRT_ERR_COMM and exits\n", rank);
  std::fflush(stdout);
  return 0;
}
