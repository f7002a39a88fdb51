// gloo_test_comm.h -- a Gloo communicator over the launcher's world, for multi-rank tests that
// compare it with MPI: rank 0 picks a free loopback port and every rank rendezvouses on it.
#pragma once

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "comm/gloo/gloo_comm.h"

namespace dsrt {

inline std::shared_ptr<Comm> make_gloo_over(Comm &world) {
  uint64_t port = 0;
  if (world.rank() == 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len), 0);
    ::close(fd);
    port = ntohs(addr.sin_port);
  }
  EXPECT_TRUE(world.all_reduce_u64(&port, 1, ReduceOp::Max).ok());
  RendezvousOptions options;
  options.host = "127.0.0.1";
  options.port = static_cast<int>(port);
  options.timeout_s = 60;
  std::shared_ptr<Comm> gloo;
  Status status = tcp_comm_create(options, world.rank(), world.size(), &gloo);
  EXPECT_TRUE(status.ok()) << status.message();
  return gloo;
}

}  // namespace dsrt
