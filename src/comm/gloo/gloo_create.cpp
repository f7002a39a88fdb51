// defines: tcp_comm_create (the full mesh of gloo_mesh.h over the rendezvous store, a token check
// on every pair, the ranks' agreement, and new attempts on fresh ports), and its refusal in a
// build without Gloo.
#include "comm/gloo/gloo_comm.h"

#ifdef DSRT_HAVE_GLOO
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/gloo/gloo_comm_make.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/gloo/gloo_store.h"
#include "comm/tcp_socket.h"
#include "util/log.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo's TCP transport writes with writev, which raises SIGPIPE when the peer has gone: a rank
// dying mid-collective would kill its peers by signal instead of failing their collective with
// DSRT_ERR_COMM naming it. As gRPC does, ignore SIGPIPE process-wide, but only where the host left it
// at its default (a host that installed a handler keeps it; Python already ignores it).
void ignore_sigpipe_where_default() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (sigaction(SIGPIPE, &ignore, nullptr) != 0)
      logf(DSRT_LOG_WARN, "could not ignore SIGPIPE: a peer that dies mid-collective may end this process");
  });
}

}  // namespace

Status tcp_comm_create(const RendezvousOptions &rendezvous, int rank, int world, std::shared_ptr<Comm> *out,
                       const TcpCommOptions &options) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_comm_create: out is NULL");
  if (world < 1 || rank < 0 || rank >= world)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_comm_create: rank %d is not in 0..%d", rank, world - 1);
  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : comm_timeout_seconds_from_env();
  ignore_sigpipe_where_default();
  if (world == 1) {
    *out = gloo_comm_make(0, 1, nullptr, timeout_s, std::string());
    return Status::Ok();
  }
  std::string host;
  DSRT_RETURN_IF_ERROR(tcp_local_address(rendezvous.host, &host));
  uint64_t token = 0;
  if (rank == 0) {
    std::random_device device;
    token = (uint64_t{device()} << 32) ^ device() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  // Debian's Gloo listens once per pair and takes the first connection it gets, so a stranger on a
  // pair's port takes the peer's place. Such an attempt fails (the token check, or a connect that
  // times out) on some rank; the ranks agree on every attempt through the store and retry on
  // fresh ports, which only the ranks learn.
  constexpr int kAttempts = 3;
  const double attempt_s = std::min(rendezvous.timeout_s, 15.0);
  RendezvousStore store(rendezvous, rank, world, token, [&](const std::string &key, const std::vector<char> &value) {
    if (key == "a0/" + std::to_string(rank) && options.on_listening)
      options.on_listening(gloo_listening_port(value, world));
  });
  Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::shared_ptr<Comm> comm;
    Status status;
    try {
      auto context = gloo_connect_full_mesh(store, host, rank, world, attempt_s, Format("a%d/", attempt));
      comm = gloo_comm_make(rank, world, context, timeout_s, host);
      status = gloo_comm_check_pairs(*comm, store.token(), attempt_s);
    } catch (const std::exception &e) {
      if (!store.error().ok()) return store.error().with_context(Format("rank %d of %d", rank, world));
      status = Error(DSRT_ERR_COMM, "Gloo could not connect the ranks (this host's address %s, from DSRT_TCP_ADDR or "
                     "the route toward MASTER_ADDR): %s", host.c_str(), e.what());
    }
    if (!status.ok()) comm.reset();
    std::vector<std::string> verdicts;
    try {
      store.set(Format("ok%d/%d", attempt, rank), std::vector<char>{status.ok() ? '1' : '0'});
      for (int p = 0; p < world; ++p) verdicts.push_back(Format("ok%d/%d", attempt, p));
      store.wait(verdicts);
    } catch (const std::exception &) {
      return store.error().with_context(Format("rank %d of %d", rank, world));
    }
    int failed = -1;
    for (int p = 0; p < world && failed < 0; ++p)
      if (store.get(verdicts[p]) != std::vector<char>{'1'}) failed = p;
    if (failed < 0) {
      DSRT_RETURN_IF_ERROR(store.finish().with_context(Format("rank %d of %d", rank, world)));
      log_set_rank(rank);
      *out = std::move(comm);
      return Status::Ok();
    }
    last = status.ok() ? Error(DSRT_ERR_COMM, "rank %d could not connect to its peers; see its own error", failed)
                       : status;
    logf(DSRT_LOG_WARN, "rank %d of %d: forming the tcp communicator's mesh failed (attempt %d of %d: %s)%s", rank,
         world, attempt + 1, kAttempts, last.message().c_str(), attempt + 1 < kAttempts ? "; retrying on new ports" : "");
  }
  return last.with_context(Format("joining the tcp communicator (Gloo) as rank %d of %d", rank, world));
}

}  // namespace dsrt

#else  // no Gloo in this build

namespace dsrt {
Status tcp_comm_create(const RendezvousOptions &, int, int world, std::shared_ptr<Comm> *, const TcpCommOptions &) {
  return Error(DSRT_ERR_UNSUPPORTED,
               "the tcp communicator (for %d ranks without MPI and without GPUs) needs Gloo, and this build of dsrt "
               "has none: install libgloo-dev (make deps) and rebuild, or launch with mpirun", world);
}
}  // namespace dsrt
#endif
