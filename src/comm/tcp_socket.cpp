// defines: the TCP communicator's sockets -- listening, the advertised address, and the mesh of
// hello-checked connections, every wait a poll() bounded by one deadline.
#include "comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "util/log.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x44535443;  // "DSTC"
constexpr uint32_t kHelloVersion = 1;
constexpr size_t kHelloBytes = 24;
constexpr size_t kMaxPendingStrangers = 64;

struct Hello {
  uint32_t magic = 0, version = 0, rank = 0, world = 0;
  uint64_t token = 0;
};

void put_u32(char *p, uint32_t v) {
  v = htonl(v);
  std::memcpy(p, &v, 4);
}
uint32_t get_u32(const char *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

std::string encode(const Hello &h) {
  std::string out(kHelloBytes, '\0');
  put_u32(&out[0], h.magic);
  put_u32(&out[4], h.version);
  put_u32(&out[8], h.rank);
  put_u32(&out[12], h.world);
  put_u32(&out[16], static_cast<uint32_t>(h.token >> 32));
  put_u32(&out[20], static_cast<uint32_t>(h.token));
  return out;
}
Hello decode(const char *p) {
  Hello h;
  h.magic = get_u32(p);
  h.version = get_u32(p + 4);
  h.rank = get_u32(p + 8);
  h.world = get_u32(p + 12);
  h.token = (uint64_t{get_u32(p + 16)} << 32) | get_u32(p + 20);
  return h;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

Status configure(int fd, const char *what) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: fcntl(O_NONBLOCK) on %s failed: %s", what,
                 errno_text(errno).c_str());
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: setsockopt(TCP_NODELAY) on %s failed: %s", what,
                 errno_text(errno).c_str());
  // Explicit buffer sizes turn off Linux's autotuning (which grows past them), so they are only
  // set when asked for.
  if (const char *text = std::getenv("DSRT_TCP_SOCKET_BUFFER_BYTES")) {
    int bytes = std::atoi(text);
    if (bytes > 0 && (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) < 0 ||
                      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) < 0))
      return Error(DSRT_ERR_COMM, "tcp communicator: setting DSRT_TCP_SOCKET_BUFFER_BYTES=%s on %s failed: %s", text,
                   what, errno_text(errno).c_str());
  }
  return Status::Ok();
}

// Blocking-with-deadline transfer of a few bytes on a non-blocking socket.
Status transfer(int fd, char *data, size_t bytes, bool sending, Clock::time_point deadline, const std::string &what) {
  while (bytes > 0) {
    ssize_t n = sending ? ::send(fd, data, bytes, MSG_NOSIGNAL) : ::recv(fd, data, bytes, 0);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Error(DSRT_ERR_COMM, "%s: the peer closed the connection (it failed; see its own error)",
                             what.c_str());
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Error(DSRT_ERR_COMM, "%s: %s failed: %s", what.c_str(), sending ? "send" : "recv",
                   errno_text(errno).c_str());
    int left = remaining_ms(deadline);
    if (left == 0) return Error(DSRT_ERR_COMM, "%s: timed out", what.c_str());
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, left) < 0 && errno != EINTR)
      return Error(DSRT_ERR_COMM, "%s: poll failed: %s", what.c_str(), errno_text(errno).c_str());
  }
  return Status::Ok();
}

Status connect_to(const MeshPeer &peer, int peer_rank, Clock::time_point deadline, double timeout_s, Fd *out) {
  std::string port = std::to_string(peer.port), last = "no attempt finished";
  for (int attempt = 0;; ++attempt) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    int gai = ::getaddrinfo(peer.host.c_str(), port.c_str(), &hints, &found);
    if (gai != 0) {
      last = Format("getaddrinfo: %s", gai_strerror(gai));
    } else {
      for (addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
        Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (fd.get() < 0) {
          last = Format("socket: %s", errno_text(errno).c_str());
          continue;
        }
        int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
          pollfd p{fd.get(), POLLOUT, 0};
          int ready = ::poll(&p, 1, std::min(remaining_ms(deadline), 2000));
          int err = ETIMEDOUT;
          socklen_t len = sizeof err;
          if (ready > 0 && ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rc == 0) {
          ::freeaddrinfo(found);
          *out = std::move(fd);
          return Status::Ok();
        }
        last = Format("connect: %s", errno_text(errno).c_str());
      }
      ::freeaddrinfo(found);
    }
    if (remaining_ms(deadline) == 0)
      return Error(DSRT_ERR_COMM, "tcp communicator: could not connect to rank %d at %s:%d within %g s (%s): check "
                   "that this host can reach it (firewall; DSRT_TCP_ADDR on that rank names the address to use)",
                   peer_rank, peer.host.c_str(), peer.port, timeout_s, last.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(remaining_ms(deadline), 50)));
  }
}

struct Pending {
  Fd fd;
  std::string bytes;
};

}  // namespace

std::string errno_text(int err) { return Format("%s (errno %d)", std::strerror(err), err); }

Fd &Fd::operator=(Fd &&other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}
void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status tcp_listen_ephemeral(Fd *out, int *port) {
  Fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = fd.get() >= 0;
  if (!v6) fd = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Error(DSRT_ERR_COMM, "tcp communicator: socket failed: %s", errno_text(errno).c_str());
  int rc;
  if (v6) {
    int zero = 0;
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0)
      return Error(DSRT_ERR_COMM, "tcp communicator: setsockopt(IPV6_V6ONLY) failed: %s", errno_text(errno).c_str());
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  }
  if (rc < 0) return Error(DSRT_ERR_COMM, "tcp communicator: bind to an ephemeral port failed: %s",
                           errno_text(errno).c_str());
  if (::listen(fd.get(), 128) < 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: listen failed: %s", errno_text(errno).c_str());
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&addr), &len) < 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: getsockname failed: %s", errno_text(errno).c_str());
  *port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in *>(&addr)->sin_port);
  int flags = fcntl(fd.get(), F_GETFL, 0);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: fcntl(O_NONBLOCK) failed: %s", errno_text(errno).c_str());
  *out = std::move(fd);
  return Status::Ok();
}

Status tcp_local_address(const std::string &toward_host, std::string *out) {
  if (const char *forced = std::getenv("DSRT_TCP_ADDR")) {
    if (*forced != '\0') {
      *out = forced;
      return Status::Ok();
    }
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *found = nullptr;
  int gai = ::getaddrinfo(toward_host.c_str(), "9", &hints, &found);
  if (gai != 0)
    return Error(DSRT_ERR_COMM, "tcp communicator: cannot resolve '%s' (%s) to find this host's address: set "
                 "MASTER_ADDR to a reachable host, or DSRT_TCP_ADDR to this host's address", toward_host.c_str(),
                 gai_strerror(gai));
  std::string last = "no address";
  for (addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN + 1] = {0};
    if (fd.get() < 0 || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&local), &len) < 0 ||
        ::getnameinfo(reinterpret_cast<sockaddr *>(&local), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) {
      last = errno_text(errno);
      continue;
    }
    ::freeaddrinfo(found);
    *out = text;
    return Status::Ok();
  }
  ::freeaddrinfo(found);
  return Error(DSRT_ERR_COMM, "tcp communicator: no route toward '%s' to find this host's address (%s): set "
               "DSRT_TCP_ADDR to this host's address", toward_host.c_str(), last.c_str());
}

Status tcp_build_mesh(Fd listener, int rank, int world, uint64_t token, const std::vector<MeshPeer> &peers,
                      double timeout_s, std::vector<Fd> *sockets) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::min(timeout_s, 1e7)));
  sockets->clear();
  sockets->resize(world);
  Hello mine{kHelloMagic, kHelloVersion, static_cast<uint32_t>(rank), static_cast<uint32_t>(world), token};
  // Lower ranks: connect, say who we are, and check who answers.
  for (int j = 0; j < rank; ++j) {
    Fd fd;
    DSRT_RETURN_IF_ERROR(connect_to(peers[j], j, deadline, timeout_s, &fd));
    std::string where = Format("tcp communicator: connection to rank %d at %s:%d", j, peers[j].host.c_str(),
                               peers[j].port);
    DSRT_RETURN_IF_ERROR(configure(fd.get(), where.c_str()));
    std::string hello = encode(mine);
    DSRT_RETURN_IF_ERROR(transfer(fd.get(), &hello[0], hello.size(), true, deadline, where));
    std::string reply(kHelloBytes, '\0');
    DSRT_RETURN_IF_ERROR(transfer(fd.get(), &reply[0], reply.size(), false, deadline, where + " (its hello)"));
    Hello theirs = decode(reply.data());
    if (theirs.magic != kHelloMagic || theirs.token != token || theirs.rank != static_cast<uint32_t>(j))
      return Error(DSRT_ERR_COMM, "%s: the listener is not rank %d of this job (another process took the port, or "
                   "ranks of different jobs share the rendezvous port)", where.c_str(), j);
    (*sockets)[j] = std::move(fd);
  }
  // Higher ranks: accept, keeping connections whose hello has not arrived yet apart, so a silent
  // stranger cannot hold up a real peer.
  std::vector<Pending> pending;
  int joined = rank + 1;
  while (joined < world) {
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (Pending &p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    int left = remaining_ms(deadline);
    if (left == 0)
      return Error(DSRT_ERR_COMM, "tcp communicator: rank %d timed out after %g s waiting for %d of ranks %d..%d to "
                   "connect (a rank died or cannot reach this host; DSRT_TCP_ADDR names the address to advertise)",
                   rank, timeout_s, world - joined, rank + 1, world - 1);
    int rc = ::poll(fds.data(), fds.size(), left);
    if (rc < 0 && errno != EINTR)
      return Error(DSRT_ERR_COMM, "tcp communicator: poll failed: %s", errno_text(errno).c_str());
    if (rc <= 0) continue;
    for (size_t i = pending.size(); i-- > 0;) {
      if (fds[i + 1].revents == 0) continue;
      Pending &p = pending[i];
      char buf[kHelloBytes];
      ssize_t n = ::recv(p.fd.get(), buf, kHelloBytes - p.bytes.size(), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n > 0) p.bytes.append(buf, static_cast<size_t>(n));
      std::string why;
      if (n <= 0) {
        why = "it closed before its hello";
      } else if (p.bytes.size() == kHelloBytes) {
        Hello h = decode(p.bytes.data());
        if (h.magic != kHelloMagic) why = "not a dsrt peer";
        else if (h.version != kHelloVersion) why = Format("hello version %u, this rank speaks %u", h.version, kHelloVersion);
        else if (h.token != token) why = "a dsrt rank of another job (different token)";
        else if (h.world != static_cast<uint32_t>(world)) why = Format("world size %u, not %d", h.world, world);
        else if (h.rank <= static_cast<uint32_t>(rank) || h.rank >= static_cast<uint32_t>(world))
          why = Format("claims rank %u, not one of %d..%d", h.rank, rank + 1, world - 1);
        else if ((*sockets)[h.rank].get() >= 0) why = Format("a second connection claiming rank %u", h.rank);
        if (why.empty()) {
          std::string where = Format("tcp communicator: connection from rank %u", h.rank);
          std::string reply = encode(mine);
          DSRT_RETURN_IF_ERROR(configure(p.fd.get(), where.c_str()));
          DSRT_RETURN_IF_ERROR(transfer(p.fd.get(), &reply[0], reply.size(), true, deadline, where));
          (*sockets)[h.rank] = std::move(p.fd);
          ++joined;
          pending.erase(pending.begin() + static_cast<long>(i));
          continue;
        }
      } else {
        continue;  // part of a hello; the rest comes later
      }
      logf(DSRT_LOG_WARN, "tcp communicator: rank %d rejected a connection on its port: %s", rank, why.c_str());
      pending.erase(pending.begin() + static_cast<long>(i));
    }
    if (fds[0].revents != 0) {
      Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd.get() < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
          return Error(DSRT_ERR_COMM, "tcp communicator: accept failed: %s", errno_text(errno).c_str());
      } else {
        if (pending.size() >= kMaxPendingStrangers) pending.erase(pending.begin());
        pending.push_back({std::move(fd), std::string()});
      }
    }
  }
  return Status::Ok();
}

}  // namespace dsrt
