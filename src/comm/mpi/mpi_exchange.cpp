// defines: pairwise-exchange reduce-scatter and all-gather on point-to-point MPI, and the polling
// loop with its deadline.
#ifdef DSRT_HAVE_MPI
#include "comm/mpi/mpi_exchange.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "comm/mpi/mpi_runtime.h"
#include "comm/reduce_kernels.h"
#include "util/half.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kGatherPieceBytes = size_t{1} << 30;

// One message: a chunk of a block between this rank and peer.
struct Piece {
  int peer = 0;
  char *data = nullptr;  // NULL for receives into a slot
  size_t bytes = 0;
  int tag = 0;
  size_t chunk = 0;     // chunk index within the block
  size_t elements = 0;
  int distance = 0;     // (peer - rank) mod size for sends, (rank - peer) mod size for receives
};

int chunk_tag(size_t chunk) { return static_cast<int>(chunk & 0x7fff); }

// Polls between MPI tests. MPI only advances inside these tests, so the poller first spins for
// ctx.spin after the last progress (a peer that is running answers within microseconds), then
// sleeps between tests, from kFirstNap doubling up to ctx.nap: a rank that waits for a peer which
// is still computing (or waiting for a core, on a machine with more runnable threads than cores)
// then costs no CPU time and leaves the core to that peer. A sleep delays noticing the peer by at
// most ctx.nap. With ctx.nap zero it yields the core every few tests instead and never sleeps.
// The deadline is checked without reading the clock on every poll.
class IdlePoller {
 public:
  explicit IdlePoller(ExchangeContext &ctx) : ctx_(ctx) {}
  // False when the deadline has passed.
  bool idle() {
    if (nap_.count() > 0) {  // sleeping between tests: each one is worth a clock read
      std::this_thread::sleep_for(nap_);
      nap_ = std::min(2 * nap_, ctx_.nap);
      return Clock::now() <= ctx_.deadline;
    }
    if ((++idle_ & 15) != 0) return true;
    auto now = Clock::now();
    if (idle_ == 16) idle_since_ = now;
    if (now - idle_since_ > ctx_.spin) {
      if (ctx_.nap.count() > 0) {
        nap_ = std::min(kFirstNap, ctx_.nap);
      } else {
        sched_yield();
      }
    }
    return now <= ctx_.deadline;
  }
  void progressed() {
    idle_ = 0;
    nap_ = std::chrono::microseconds{0};
  }

 private:
  static constexpr std::chrono::microseconds kFirstNap{5};
  ExchangeContext &ctx_;
  unsigned idle_ = 0;
  Clock::time_point idle_since_;
  std::chrono::microseconds nap_{0};  // the next sleep; zero while spinning
};

// Leaves outstanding requests in a state MPI can finish without us: unmatched receives are
// cancelled; sends are released (MPI completes or drops them).
void abandon(std::vector<MPI_Request> &requests, bool receives) {
  for (MPI_Request &request : requests) {
    if (request == MPI_REQUEST_NULL) continue;
    MpiCallLock lock;
    if (receives) {
      MPI_Cancel(&request);
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) continue;
    }
    MPI_Request_free(&request);
  }
}

Status ensure_buffer(AlignedBuffer &buffer, size_t bytes, const char *what) {
  if (buffer.bytes() >= bytes) return Status::Ok();
  if (!buffer.allocate(bytes, false))
    return Error(DSRT_ERR_OUT_OF_MEMORY, "communicator %s: cannot allocate %zu bytes of host memory", what, bytes);
  return Status::Ok();
}

// Runs sends and receives with at most `window` of each in flight; receives are handed to
// on_received in order. With slots, receive j lands in slot j % window.
// on_posted runs once, after the first window of messages is posted (local work that can overlap
// the transfers).
template <typename OnReceived, typename OnPosted>
Status run_exchange(ExchangeContext &ctx, const std::vector<Piece> &sends, std::vector<Piece> &recvs, bool use_slots,
                    size_t window, OnReceived &&on_received, OnPosted &&on_posted) {
  bool posted_once = false;
  std::vector<MPI_Request> send_requests(window, MPI_REQUEST_NULL), recv_requests(window, MPI_REQUEST_NULL);
  size_t sends_posted = 0, sends_done = 0, recvs_posted = 0, recvs_done = 0;
  IdlePoller poller(ctx);
  auto fail = [&](Status status) {
    abandon(recv_requests, true);
    abandon(send_requests, false);
    return status;
  };
  while (recvs_done < recvs.size() || sends_done < sends.size()) {
    while (recvs_posted < recvs.size() && recvs_posted - recvs_done < window) {
      Piece &piece = recvs[recvs_posted];
      if (use_slots) piece.data = ctx.slots.as<char>() + (recvs_posted % window) * ctx.chunk_bytes;
      MpiCallLock lock;
      int rc = MPI_Irecv(piece.data, static_cast<int>(piece.bytes), MPI_BYTE, piece.peer, piece.tag, ctx.comm,
                         &recv_requests[recvs_posted % window]);
      if (rc != MPI_SUCCESS) return fail(mpi_check(rc, "MPI_Irecv"));
      ++recvs_posted;
    }
    while (sends_posted < sends.size() && sends_posted - sends_done < window) {
      const Piece &piece = sends[sends_posted];
      MpiCallLock lock;
      int rc = MPI_Isend(piece.data, static_cast<int>(piece.bytes), MPI_BYTE, piece.peer, piece.tag, ctx.comm,
                         &send_requests[sends_posted % window]);
      if (rc != MPI_SUCCESS) return fail(mpi_check(rc, "MPI_Isend"));
      ++sends_posted;
    }
    if (!posted_once) {
      posted_once = true;
      on_posted();
    }
    bool progressed = false;
    if (recvs_done < recvs_posted) {
      int done = 0;
      int rc;
      {
        MpiCallLock lock;
        rc = MPI_Test(&recv_requests[recvs_done % window], &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) return fail(mpi_check(rc, "MPI_Test (receive)"));
      if (done) {
        on_received(recvs[recvs_done]);
        ++recvs_done;
        progressed = true;
      }
    }
    if (sends_done < sends_posted) {
      int done = 0;
      int rc;
      {
        MpiCallLock lock;
        rc = MPI_Test(&send_requests[sends_done % window], &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) return fail(mpi_check(rc, "MPI_Test (send)"));
      if (done) {
        ++sends_done;
        progressed = true;
      }
    }
    if (progressed) {
      poller.progressed();
    } else if (!poller.idle()) {
      ctx.timed_out = true;
      return fail(Error(DSRT_ERR_COMM, "timed out with %zu of %zu receives and %zu of %zu sends complete",
                        recvs_done, recvs.size(), sends_done, sends.size()));
    }
  }
  return Status::Ok();
}

size_t chunk_count(size_t elements, size_t chunk) { return (elements + chunk - 1) / chunk; }

}  // namespace

Status exchange_reduce_scatter(ExchangeContext &ctx, const void *send, void *recv, const BlockLayout &layout,
                               dsrt_dtype dtype, ReduceOp op) {
  const size_t element = dtype_size(dtype);
  const int n = ctx.size, me = ctx.rank;
  const char *source = static_cast<const char *>(send);
  char *dest = static_cast<char *>(recv);
  const char *own = source + layout.offset[me] * element;
  const size_t own_count = layout.count[me];
  if (n == 1) {
    if (dest != own && own_count > 0) std::memmove(dest, own, own_count * element);
    return Status::Ok();
  }
  const size_t chunk = std::max<size_t>(1, ctx.chunk_bytes / element);
  const size_t window = static_cast<size_t>(std::max(2, ctx.window));
  DSRT_RETURN_IF_ERROR(ensure_buffer(ctx.slots, window * ctx.chunk_bytes, "receive slots"));
  if (dtype != DSRT_F32) DSRT_RETURN_IF_ERROR(ensure_buffer(ctx.accumulator, chunk * sizeof(float), "accumulator"));

  std::vector<Piece> sends, recvs;
  size_t max_chunks = 0;
  for (size_t c : layout.count) max_chunks = std::max(max_chunks, chunk_count(c, chunk));
  for (size_t c = 0; c < max_chunks; ++c) {
    for (int k = 1; k < n; ++k) {
      int peer = (me + k) % n;
      if (c * chunk >= layout.count[peer]) continue;
      size_t elements = std::min(chunk, layout.count[peer] - c * chunk);
      sends.push_back({peer, const_cast<char *>(source) + (layout.offset[peer] + c * chunk) * element,
                       elements * element, chunk_tag(c), c, elements, k});
    }
  }
  for (size_t c = 0; c < chunk_count(own_count, chunk); ++c) {
    size_t elements = std::min(chunk, own_count - c * chunk);
    for (int k = 1; k < n; ++k)
      recvs.push_back({(me - k + n) % n, nullptr, elements * element, chunk_tag(c), c, elements, k});
  }

  float *scratch = ctx.accumulator.as<float>();
  auto reduce_piece = [&](const Piece &piece) {
    size_t first = piece.chunk * chunk;
    float *acc = dtype == DSRT_F32 ? reinterpret_cast<float *>(dest) + first : scratch;
    if (piece.distance == 1) {  // the chunk's first arrival: start from this rank's own contribution
      if (dtype == DSRT_F32) {
        if (acc != reinterpret_cast<const float *>(own) + first)
          std::memmove(acc, own + first * element, piece.elements * sizeof(float));
      } else {
        load_to_f32(acc, own + first * element, dtype, piece.elements);
      }
    }
    accumulate_f32(acc, piece.data, dtype, op, piece.elements);
    if (piece.distance == n - 1 && dtype != DSRT_F32) store_from_f32(dest + first * element, acc, dtype, piece.elements);
  };
  return run_exchange(ctx, sends, recvs, true, window, reduce_piece, [] {});
}

Status exchange_all_gather(ExchangeContext &ctx, const void *send, void *recv, const BlockLayout &layout,
                           size_t element) {
  const int n = ctx.size, me = ctx.rank;
  char *dest = static_cast<char *>(recv);
  char *own_dest = dest + layout.offset[me] * element;
  const char *own = static_cast<const char *>(send);
  auto copy_own = [&] {
    if (own != own_dest && layout.count[me] > 0) std::memmove(own_dest, own, layout.count[me] * element);
  };
  if (n == 1) {
    copy_own();
    return Status::Ok();
  }
  // Nothing to overlap with, so each block goes whole (MPI's single-copy path moves it at once);
  // pieces only keep counts within MPI's int.
  const size_t chunk = std::max<size_t>(1, kGatherPieceBytes / element);
  const size_t window = static_cast<size_t>(std::max(2, ctx.window));

  std::vector<Piece> sends, recvs;
  size_t max_chunks = 0;
  for (size_t c : layout.count) max_chunks = std::max(max_chunks, chunk_count(c, chunk));
  for (size_t c = 0; c < max_chunks; ++c) {
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n, from = (me - k + n) % n;
      if (c * chunk < layout.count[me]) {
        size_t elements = std::min(chunk, layout.count[me] - c * chunk);
        sends.push_back({to, const_cast<char *>(own) + c * chunk * element, elements * element, chunk_tag(c), c,
                         elements, k});
      }
      if (c * chunk < layout.count[from]) {
        size_t elements = std::min(chunk, layout.count[from] - c * chunk);
        recvs.push_back({from, dest + (layout.offset[from] + c * chunk) * element, elements * element, chunk_tag(c),
                         c, elements, k});
      }
    }
  }
  // Peers read this rank's block from send; the local copy overlaps their reads.
  return run_exchange(ctx, sends, recvs, false, window, [](const Piece &) {}, copy_own);
}

Status exchange_all_to_all(ExchangeContext &ctx, const void *send, void *recv, size_t block_bytes) {
  const int n = ctx.size, me = ctx.rank;
  const char *source = static_cast<const char *>(send);
  char *dest = static_cast<char *>(recv);
  auto copy_own = [&] {
    if (block_bytes > 0) std::memcpy(dest + static_cast<size_t>(me) * block_bytes,
                                     source + static_cast<size_t>(me) * block_bytes, block_bytes);
  };
  if (n == 1 || block_bytes == 0) {
    copy_own();
    return Status::Ok();
  }
  const size_t window = static_cast<size_t>(std::max(2, ctx.window));
  std::vector<Piece> sends, recvs;
  const size_t chunks = chunk_count(block_bytes, kGatherPieceBytes);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t first = c * kGatherPieceBytes, bytes = std::min(kGatherPieceBytes, block_bytes - first);
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n, from = (me - k + n) % n;
      sends.push_back({to, const_cast<char *>(source) + static_cast<size_t>(to) * block_bytes + first, bytes,
                       chunk_tag(c), c, bytes, k});
      recvs.push_back({from, dest + static_cast<size_t>(from) * block_bytes + first, bytes, chunk_tag(c), c, bytes,
                       k});
    }
  }
  return run_exchange(ctx, sends, recvs, false, window, [](const Piece &) {}, copy_own);
}

Status poll_request(ExchangeContext &ctx, MPI_Request *request, const char *call) {
  IdlePoller poller(ctx);
  for (;;) {
    int done = 0;
    int rc;
    {
      MpiCallLock lock;
      rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    }
    DSRT_RETURN_IF_ERROR(mpi_check(rc, call));
    if (done) return Status::Ok();
    if (!poller.idle()) {
      // A started collective cannot be cancelled or freed in MPI; the communicator is abandoned.
      ctx.timed_out = true;
      return Error(DSRT_ERR_COMM, "%s timed out", call);
    }
  }
}

}  // namespace dsrt
#endif
