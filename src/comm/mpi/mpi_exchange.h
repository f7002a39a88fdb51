// mpi_exchange.h -- dsrt's own bandwidth-optimal collectives on point-to-point MPI, progressed by
// polling (so a deadline can stop them) instead of MPI's blocking calls.
//
// Reduce-scatter is a pairwise exchange: each rank sends every peer that peer's block in the
// buffer's own dtype (16-bit stays 16-bit on the wire) and sums the N-1 blocks it receives into an
// fp32 accumulator, rounding once. Every element is thus reduced in fp32 at one place with one
// rounding, unlike a ring, which would have to round partial sums at each hop or send fp32. Blocks
// travel in chunks so the reduction of one chunk overlaps the transfer of the next.
// All-gather is the same pairwise pattern writing straight into the destination (no copies).
#pragma once

#ifdef DSRT_HAVE_MPI
#include <chrono>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_checks.h"
#include "comm/mpi/mpi_runtime.h"
#include "util/aligned_buffer.h"

namespace dsrt {

// Per-communicator state the exchanges use; only the communicator's worker touches it.
struct ExchangeContext {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::chrono::steady_clock::time_point deadline;
  bool timed_out = false;   // set when the deadline passed (the caller reports which operation)
  size_t chunk_bytes = 1 << 20;
  int window = 8;           // chunks in flight per direction
  // How a rank waits for its peers (DSRT_COMM_SPIN_US, DSRT_COMM_NAP_US): it polls MPI without a
  // pause for spin after the last progress, then sleeps between polls, from a few microseconds
  // up to nap, doubling (nap 0: it yields the core between polls instead and never sleeps).
  std::chrono::microseconds spin{50};
  std::chrono::microseconds nap{200};
  AlignedBuffer slots;      // window receive slots of chunk_bytes
  AlignedBuffer accumulator;  // one chunk in fp32
};

// recv (this rank's block, count[rank] elements) = op over ranks of send's block rank.
// recv may be exactly send + offset[rank] (in place).
Status exchange_reduce_scatter(ExchangeContext &ctx, const void *send, void *recv, const BlockLayout &layout,
                               dsrt_dtype dtype, ReduceOp op);
// recv block r = rank r's send (layout in elements of element bytes). send may be exactly
// recv + offset[rank] (in place).
Status exchange_all_gather(ExchangeContext &ctx, const void *send, void *recv, const BlockLayout &layout,
                           size_t element);
// Block r of send (block_bytes each) goes to rank r; block r of recv comes from rank r. Pairwise:
// at distance k every rank sends to rank+k and receives from rank-k. send and recv do not overlap.
Status exchange_all_to_all(ExchangeContext &ctx, const void *send, void *recv, size_t block_bytes);
// Polls one request (a non-blocking MPI collective) until it completes or the deadline passes.
Status poll_request(ExchangeContext &ctx, MPI_Request *request, const char *call);

}  // namespace dsrt
#endif
