// tcp_comm.h -- a host-memory communicator over plain TCP sockets, for ranks launched without MPI
// and without GPUs (torchrun on CPU hosts). Every rank listens on an ephemeral port, the ranks
// exchange "host:port" through the TCP rendezvous, then build a full mesh (one socket per pair,
// each opened with a hello carrying a job token, so a stranger is rejected).
//
// Collectives run in issue order on a worker thread; each one sends to and receives from all
// peers at once over non-blocking sockets driven by poll(), so it cannot deadlock on full socket
// buffers. Reductions follow the MPI communicator's pairwise exchange exactly: rank r's block is
// its own contribution combined with those of ranks r-1, r-2, ... (mod size) in that order, in
// fp32, rounded once; results are bitwise those of the MPI communicator's exchange path.
#pragma once

#include <functional>
#include <memory>

#include "comm/comm.h"
#include "comm/tcp_rendezvous.h"

namespace dsrt {

struct TcpCommOptions {
  double timeout_s = -1;  // per collective; <= 0: DSRT_COMM_TIMEOUT_S (the config key overrides either)
  // Called with this rank's listening port before the rendezvous (tests connect strangers to it).
  std::function<void(int port)> on_listening;
};

// Collective over world ranks: every rank calls it with the same rendezvous options.
Status tcp_comm_create(const RendezvousOptions &rendezvous, int rank, int world, std::shared_ptr<Comm> *out,
                       const TcpCommOptions &options = TcpCommOptions());

}  // namespace dsrt
