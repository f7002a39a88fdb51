// gloo_comm.h -- the host-memory communicator for ranks launched without MPI and without GPUs
// (torchrun on CPU hosts, DSRT_COMM=tcp or gloo): Gloo's TCP transport (the library
// torch.distributed uses on CPUs), its full mesh bootstrapped through dsrt's TCP rendezvous
// (gloo_store.h). Its backend name is "tcp".
//
// Collectives run in issue order on the shared queue (queued_comm.h). Each one first exchanges a
// small header with every peer (sequence number and byte count), so ranks that issued different
// collectives fail with a message saying so before any payload moves; then every rank sends to
// and receives from all peers at once. Reductions follow the MPI communicator's pairwise exchange
// exactly: rank r's block is its own contribution combined with those of ranks r-1, r-2, ...
// (mod size) in that order, in fp32, rounded once; results are bitwise those of the MPI
// communicator's exchange path.
#pragma once

#include <functional>
#include <memory>

#include "comm/comm.h"
#include "comm/tcp_rendezvous.h"

namespace dsrt {

struct TcpCommOptions {
  double timeout_s = -1;  // per collective; <= 0: DSRT_COMM_TIMEOUT_S
  // Called with this rank's listening port (Gloo's) before its address is published (tests
  // connect strangers to it).
  std::function<void(int port)> on_listening;
};

// Collective over world ranks: every rank calls it with the same rendezvous options.
// DSRT_ERR_UNSUPPORTED in a build without Gloo.
Status tcp_comm_create(const RendezvousOptions &rendezvous, int rank, int world, std::shared_ptr<Comm> *out,
                       const TcpCommOptions &options = TcpCommOptions());

}  // namespace dsrt
