// tcp_socket.h -- the sockets of the TCP communicator and the rendezvous: an owned descriptor, the listening socket,
// the address peers should use to reach this host, and the full mesh of connections between the
// ranks, each opened with a hello that names the rank and carries the job's token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/tcp_rendezvous.h"
#include "util/status.h"

namespace dsrt {

std::string errno_text(int err);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd &&other) noexcept : fd_(other.release()) {}
  Fd &operator=(Fd &&other) noexcept;
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// A non-blocking socket listening on every interface (dual-stack where IPv6 exists) on an
// ephemeral port.
Status tcp_listen_ephemeral(Fd *out, int *port);

// The address peers should use for this host: DSRT_TCP_ADDR if set, else the local address of a
// (UDP, never sent on) socket connected toward toward_host.
Status tcp_local_address(const std::string &toward_host, std::string *out);

struct MeshPeer {
  std::string host;
  int port = 0;
};

// Connects this rank to every other one: rank i connects to every j < i and accepts every j > i
// on listener. Connections whose hello lacks the magic, the token, this world size or a valid
// unclaimed rank are closed and logged, and the mesh goes on waiting. sockets[r] is the
// (non-blocking, TCP_NODELAY) socket to rank r; sockets[rank] stays empty.
Status tcp_build_mesh(Fd listener, int rank, int world, uint64_t token, const std::vector<MeshPeer> &peers,
                      double timeout_s, std::vector<Fd> *sockets);

}  // namespace dsrt
