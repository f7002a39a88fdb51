// tcp_rendezvous.h -- a one-shot all-gather of small byte strings over plain TCP, for worlds that
// have no MPI to bootstrap NCCL with (torchrun: MASTER_ADDR / MASTER_PORT). Rank 0 listens, every
// other rank connects (retrying until the deadline, since rank 0 may start later) and sends its
// contribution; rank 0 answers each with the table of all contributions. Every socket call is
// checked and bounded by the deadline, so a missing rank or an unreachable host is an error that
// names host:port, never a hang.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace dsrt {

struct RendezvousOptions {
  std::string host;        // where rank 0 listens (MASTER_ADDR); rank 0 itself binds every interface
  int port = 0;            // MASTER_PORT + 1 by default (torch's own store holds MASTER_PORT)
  double timeout_s = 300;  // for the whole exchange, connection retries included
};

// Largest contribution of one rank.
constexpr size_t kRendezvousMaxPayload = size_t{1} << 20;

// Collective over world ranks: every rank passes its contribution `mine`; on success all[r] holds
// rank r's contribution, identical on every rank. DSRT_ERR_COMM names host:port and what to do
// (unresolvable host, port in use, no rank 0 within the timeout, a peer of another world size).
Status tcp_rendezvous_all_gather(const RendezvousOptions &options, int rank, int world, const std::string &mine,
                                 std::vector<std::string> *all);

}  // namespace dsrt
