// defines: tcp_rendezvous_all_gather -- rank 0 accepts world-1 connections, reads each rank's
// hello, and answers every one with the table of contributions. Sockets are non-blocking and every
// wait is a poll() bounded by the one deadline of the exchange.
#include "comm/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "comm/tcp_socket.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x44535256;  // "DSRV"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kAccepted = 0, kRejected = 1;

struct Endpoint {
  std::string where;  // "host:port", for messages
  Clock::time_point deadline;
  double timeout_s;
};

Status set_nonblocking(int fd, const Endpoint &ep) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Error(DSRT_ERR_COMM, "rendezvous at %s: fcntl(O_NONBLOCK) failed: %s", ep.where.c_str(),
                 errno_text(errno).c_str());
  return Status::Ok();
}

int remaining_ms(const Endpoint &ep) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ep.deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits until fd is ready for events; DSRT_ERR_COMM (naming `what`) when the deadline passes.
Status wait_ready(int fd, short events, const Endpoint &ep, const char *what) {
  for (;;) {
    int left = remaining_ms(ep);
    if (left == 0)
      return Error(DSRT_ERR_COMM, "rendezvous at %s: timed out after %g s %s: a rank did not arrive (still "
                                  "starting, died, or was launched with another world size); raise "
                                  "DSRT_COMM_TIMEOUT_S if ranks legitimately start that far apart",
                   ep.where.c_str(), ep.timeout_s, what);
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0)
      return Error(DSRT_ERR_COMM, "rendezvous at %s: poll failed %s: %s", ep.where.c_str(), what,
                   errno_text(errno).c_str());
    if (rc > 0) return Status::Ok();
  }
}

Status send_all(int fd, const void *data, size_t bytes, const Endpoint &ep, const char *what) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      DSRT_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, ep, what));
      continue;
    }
    return Error(DSRT_ERR_COMM, "rendezvous at %s: send failed %s: %s", ep.where.c_str(), what,
                 errno_text(errno).c_str());
  }
  return Status::Ok();
}

Status recv_all(int fd, void *data, size_t bytes, const Endpoint &ep, const char *what) {
  char *p = static_cast<char *>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0)
      return Error(DSRT_ERR_COMM, "rendezvous at %s: the peer closed the connection %s (it failed or gave up; see "
                                  "its own error)", ep.where.c_str(), what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      DSRT_RETURN_IF_ERROR(wait_ready(fd, POLLIN, ep, what));
      continue;
    }
    return Error(DSRT_ERR_COMM, "rendezvous at %s: recv failed %s: %s", ep.where.c_str(), what,
                 errno_text(errno).c_str());
  }
  return Status::Ok();
}

Status send_u32(int fd, uint32_t value, const Endpoint &ep, const char *what) {
  uint32_t wire = htonl(value);
  return send_all(fd, &wire, sizeof wire, ep, what);
}
Status recv_u32(int fd, uint32_t *value, const Endpoint &ep, const char *what) {
  uint32_t wire = 0;
  DSRT_RETURN_IF_ERROR(recv_all(fd, &wire, sizeof wire, ep, what));
  *value = ntohl(wire);
  return Status::Ok();
}
Status send_string(int fd, const std::string &s, const Endpoint &ep, const char *what) {
  DSRT_RETURN_IF_ERROR(send_u32(fd, static_cast<uint32_t>(s.size()), ep, what));
  return send_all(fd, s.data(), s.size(), ep, what);
}
Status recv_string(int fd, std::string *s, const Endpoint &ep, const char *what) {
  uint32_t size = 0;
  DSRT_RETURN_IF_ERROR(recv_u32(fd, &size, ep, what));
  if (size > kRendezvousMaxPayload)
    return Error(DSRT_ERR_COMM, "rendezvous at %s: a peer announced %u bytes %s (more than %zu): not a dsrt "
                                "rendezvous peer, or another program uses this port",
                 ep.where.c_str(), size, what, kRendezvousMaxPayload);
  s->assign(size, '\0');
  return recv_all(fd, &(*s)[0], size, ep, what);
}

// ---- rank 0 ---------------------------------------------------------------------------------

Status listen_on(int port, const Endpoint &ep, Fd *out) {
  // Dual-stack where IPv6 exists, so peers resolving MASTER_ADDR to either family can connect.
  Fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = fd.get() >= 0;
  if (!v6) fd = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0)
    return Error(DSRT_ERR_COMM, "rendezvous at %s: socket failed: %s", ep.where.c_str(), errno_text(errno).c_str());
  int one = 1, zero = 0;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
    return Error(DSRT_ERR_COMM, "rendezvous at %s: setsockopt(SO_REUSEADDR) failed: %s", ep.where.c_str(),
                 errno_text(errno).c_str());
  int rc;
  if (v6) {
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0)
      return Error(DSRT_ERR_COMM, "rendezvous at %s: setsockopt(IPV6_V6ONLY) failed: %s", ep.where.c_str(),
                   errno_text(errno).c_str());
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  }
  if (rc < 0) {
    int err = errno;
    if (err == EADDRINUSE)
      return Error(DSRT_ERR_COMM, "rendezvous: rank 0 cannot listen on port %d: it is already in use on this host "
                                  "(another job, or torch's store when the port equals MASTER_PORT). Set "
                                  "DSRT_RENDEZVOUS_PORT to a free port, the same on every rank",
                   port);
    return Error(DSRT_ERR_COMM, "rendezvous: rank 0 cannot bind port %d: %s; set DSRT_RENDEZVOUS_PORT to a port "
                                "this user may open", port, errno_text(err).c_str());
  }
  if (::listen(fd.get(), 128) < 0)
    return Error(DSRT_ERR_COMM, "rendezvous: listen on port %d failed: %s", port, errno_text(errno).c_str());
  DSRT_RETURN_IF_ERROR(set_nonblocking(fd.get(), ep));
  *out = std::move(fd);
  return Status::Ok();
}

Status reject(int fd, const std::string &why, const Endpoint &ep) {
  DSRT_RETURN_IF_ERROR(send_u32(fd, kMagic, ep, "rejecting a peer"));
  DSRT_RETURN_IF_ERROR(send_u32(fd, kRejected, ep, "rejecting a peer"));
  return send_string(fd, why, ep, "rejecting a peer");
}

Status serve(const RendezvousOptions &options, int world, const std::string &mine, const Endpoint &ep,
             std::vector<std::string> *all) {
  Fd listener;
  DSRT_RETURN_IF_ERROR(listen_on(options.port, ep, &listener));
  std::vector<Fd> peers(world);
  all->assign(world, std::string());
  (*all)[0] = mine;
  for (int joined = 1; joined < world;) {
    std::string what = Format("waiting for rank connections (%d of %d ranks joined)", joined, world);
    DSRT_RETURN_IF_ERROR(wait_ready(listener.get(), POLLIN, ep, what.c_str()));
    Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.get() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
      return Error(DSRT_ERR_COMM, "rendezvous at %s: accept failed: %s", ep.where.c_str(), errno_text(errno).c_str());
    }
    uint32_t magic = 0, version = 0, rank = 0, peer_world = 0;
    // A connection that is not a dsrt peer (a port scanner, a health check) is dropped.
    if (!recv_u32(peer.get(), &magic, ep, "reading a peer's hello").ok() || magic != kMagic) continue;
    DSRT_RETURN_IF_ERROR(recv_u32(peer.get(), &version, ep, "reading a peer's hello"));
    DSRT_RETURN_IF_ERROR(recv_u32(peer.get(), &rank, ep, "reading a peer's hello"));
    DSRT_RETURN_IF_ERROR(recv_u32(peer.get(), &peer_world, ep, "reading a peer's hello"));
    std::string payload;
    DSRT_RETURN_IF_ERROR(recv_string(peer.get(), &payload, ep, "reading a peer's contribution"));
    std::string why;
    if (version != kVersion) {
      why = Format("rank %u speaks rendezvous version %u, rank 0 version %u: every rank must run the same dsrt",
                   rank, version, kVersion);
    } else if (static_cast<int>(peer_world) != world) {
      why = Format("rank %u was launched with WORLD_SIZE=%u but rank 0 with WORLD_SIZE=%d: every rank must belong to "
                   "the same launch", rank, peer_world, world);
    } else if (rank == 0 || static_cast<int>(rank) >= world) {
      why = Format("a peer claims rank %u, not in 1..%d", rank, world - 1);
    } else if (peers[rank].get() >= 0) {
      why = Format("two processes claim rank %u: RANK must be unique", rank);
    }
    if (!why.empty()) {
      (void)reject(peer.get(), why, ep);
      return Error(DSRT_ERR_COMM, "rendezvous at %s: %s", ep.where.c_str(), why.c_str());
    }
    (*all)[rank] = std::move(payload);
    peers[rank] = std::move(peer);
    ++joined;
  }
  // Closed before answering: a rank that reads the table and comes back for another exchange (the
  // Gloo store runs several) is refused and retries, instead of waiting in this backlog for a
  // reset.
  listener.reset();
  for (int r = 1; r < world; ++r) {
    std::string what = Format("sending the table to rank %d", r);
    DSRT_RETURN_IF_ERROR(send_u32(peers[r].get(), kMagic, ep, what.c_str()));
    DSRT_RETURN_IF_ERROR(send_u32(peers[r].get(), kAccepted, ep, what.c_str()));
    for (const std::string &entry : *all) DSRT_RETURN_IF_ERROR(send_string(peers[r].get(), entry, ep, what.c_str()));
  }
  // Each peer closes first once it has read everything; waiting for that keeps the table from
  // being cut off by a reset when rank 0 exits early.
  for (int r = 1; r < world; ++r) {
    char byte;
    while (wait_ready(peers[r].get(), POLLIN, ep, "waiting for peers to read the table").ok()) {
      ssize_t n = ::recv(peers[r].get(), &byte, 1, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }
  return Status::Ok();
}

// ---- other ranks ----------------------------------------------------------------------------

Status connect_to_root(const RendezvousOptions &options, const Endpoint &ep, Fd *out) {
  std::string port = std::to_string(options.port);
  std::string last_error = "no attempt finished";
  for (int attempt = 0;; ++attempt) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    int gai = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found);
    if (gai == EAI_NONAME || gai == EAI_SERVICE || gai == EAI_FAMILY || gai == EAI_ADDRFAMILY ||
        gai == EAI_NODATA)
      return Error(DSRT_ERR_COMM, "rendezvous: cannot resolve rank 0's host '%s' (%s): set MASTER_ADDR to a host "
                                  "name or address every rank can reach",
                   options.host.c_str(), gai_strerror(gai));
    if (gai != 0) {
      last_error = Format("getaddrinfo: %s", gai_strerror(gai));
    } else {
      for (addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
        Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (fd.get() < 0) {
          last_error = Format("socket: %s", errno_text(errno).c_str());
          continue;
        }
        int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
          Endpoint attempt_ep = ep;
          attempt_ep.deadline = std::min(ep.deadline, Clock::now() + std::chrono::seconds(2));
          if (wait_ready(fd.get(), POLLOUT, attempt_ep, "connecting").ok()) {
            int err = 0;
            socklen_t len = sizeof err;
            if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
            rc = err == 0 ? 0 : -1;
            errno = err;
          } else {
            errno = ETIMEDOUT;
          }
        }
        if (rc == 0) {
          ::freeaddrinfo(found);
          int one = 1;
          (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          *out = std::move(fd);
          return Status::Ok();
        }
        last_error = Format("connect: %s", errno_text(errno).c_str());
      }
      ::freeaddrinfo(found);
    }
    // Rank 0 may not be listening yet: retry until the deadline.
    if (remaining_ms(ep) == 0)
      return Error(DSRT_ERR_COMM, "rendezvous: could not connect to rank 0 at %s within %g s (%d attempts, last: "
                                  "%s). Check that rank 0 is running, that MASTER_ADDR is reachable from this host "
                                  "and that the port is open (DSRT_RENDEZVOUS_PORT, default MASTER_PORT+1, the same "
                                  "on every rank)",
                   ep.where.c_str(), ep.timeout_s, attempt + 1, last_error.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(remaining_ms(ep), attempt < 20 ? 50 : 250)));
  }
}

Status not_a_dsrt_root(const Endpoint &ep) {
  return Error(DSRT_ERR_COMM, "rendezvous at %s: the listener is not a dsrt rank 0 (another program holds the "
                              "port?); set DSRT_RENDEZVOUS_PORT to a free port, the same on every rank",
               ep.where.c_str());
}

Status join(const RendezvousOptions &options, int rank, int world, const std::string &mine, const Endpoint &ep,
            std::vector<std::string> *all) {
  Fd fd;
  DSRT_RETURN_IF_ERROR(connect_to_root(options, ep, &fd));
  // One write for the whole hello: a foreign listener that answers and closes after its first read
  // would otherwise reset the connection between our small writes and hide what it said.
  std::string hello;
  for (uint32_t field : {kMagic, kVersion, static_cast<uint32_t>(rank), static_cast<uint32_t>(world),
                         static_cast<uint32_t>(mine.size())}) {
    const uint32_t wire = htonl(field);
    hello.append(reinterpret_cast<const char *>(&wire), sizeof wire);
  }
  hello += mine;
  Status sent = send_all(fd.get(), hello.data(), hello.size(), ep, "sending this rank's hello to rank 0");
  if (!sent.ok()) {
    // If the listener already answered before resetting, its answer says who it is.
    uint32_t wire = 0;
    if (::recv(fd.get(), &wire, sizeof wire, MSG_DONTWAIT | MSG_PEEK) == static_cast<ssize_t>(sizeof wire) &&
        ntohl(wire) != kMagic)
      return not_a_dsrt_root(ep);
    return sent;
  }
  const char *reply = "waiting for rank 0's table (every rank must join first)";
  uint32_t magic = 0, verdict = 0;
  DSRT_RETURN_IF_ERROR(recv_u32(fd.get(), &magic, ep, reply));
  if (magic != kMagic) return not_a_dsrt_root(ep);
  DSRT_RETURN_IF_ERROR(recv_u32(fd.get(), &verdict, ep, reply));
  if (verdict != kAccepted) {
    std::string why;
    DSRT_RETURN_IF_ERROR(recv_string(fd.get(), &why, ep, reply));
    return Error(DSRT_ERR_COMM, "rendezvous at %s: rank 0 rejected rank %d: %s", ep.where.c_str(), rank,
                 why.c_str());
  }
  all->assign(world, std::string());
  for (int r = 0; r < world; ++r) DSRT_RETURN_IF_ERROR(recv_string(fd.get(), &(*all)[r], ep, reply));
  return Status::Ok();
}

}  // namespace

Status tcp_rendezvous_all_gather(const RendezvousOptions &options, int rank, int world, const std::string &mine,
                                 std::vector<std::string> *all) {
  if (all == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_rendezvous_all_gather: all is NULL");
  if (world < 1 || rank < 0 || rank >= world)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_rendezvous_all_gather: rank %d is not in 0..%d", rank, world - 1);
  if (options.port < 1 || options.port > 65535)
    return Error(DSRT_ERR_COMM, "rendezvous: port %d is not in 1..65535 (MASTER_PORT+1, or DSRT_RENDEZVOUS_PORT)",
                 options.port);
  if (options.host.empty() && rank != 0)
    return Error(DSRT_ERR_COMM, "rendezvous: rank 0's host is empty: set MASTER_ADDR");
  if (mine.size() > kRendezvousMaxPayload)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_rendezvous_all_gather: %zu bytes exceed %zu", mine.size(),
                 kRendezvousMaxPayload);
  if (!(options.timeout_s > 0))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_rendezvous_all_gather: timeout %g s is not positive",
                 options.timeout_s);
  if (world == 1) {
    all->assign(1, mine);
    return Status::Ok();
  }
  Endpoint ep;
  ep.where = Format("%s:%d", options.host.empty() ? "*" : options.host.c_str(), options.port);
  ep.timeout_s = options.timeout_s;
  ep.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::min(options.timeout_s, 1e7)));
  Status status = rank == 0 ? serve(options, world, mine, ep, all) : join(options, rank, world, mine, ep, all);
  if (!status.ok()) all->clear();
  return status.with_context(Format("rank %d of %d", rank, world));
}

}  // namespace dsrt
