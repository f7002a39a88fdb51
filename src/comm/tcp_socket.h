// tcp_socket.h -- the sockets of the TCP rendezvous: an owned descriptor, errno text, and the
// address peers should use to reach this host (the address Gloo's device binds).
#pragma once

#include <string>

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

// The address peers should use for this host: DSRT_TCP_ADDR if set, else the local address of a
// (UDP, never sent on) socket connected toward toward_host.
Status tcp_local_address(const std::string &toward_host, std::string *out);

}  // namespace dsrt
