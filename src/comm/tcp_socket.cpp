// defines: the sockets of the TCP rendezvous -- an owned descriptor, errno text, and the address
// this host is reached at (what Gloo's device binds and advertises).
#include "comm/tcp_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dsrt {

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

}  // namespace dsrt
