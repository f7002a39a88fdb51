// The TCP rendezvous that bootstraps NCCL under torchrun: ranks as threads on 127.0.0.1 exchange
// random contributions (each must receive every rank's bytes), and every failure the launcher can
// produce -- an unresolvable host, no rank 0, a port already in use, mismatched world sizes, a
// duplicate rank -- ends in DSRT_ERR_COMM naming host:port instead of a hang.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_rendezvous.h"

namespace dsrt {
namespace {

// A listening socket on an ephemeral port of 127.0.0.1; port() tells which.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr *>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port that was free a moment ago.
int free_port() { return Listener().port(); }

std::string random_bytes(std::mt19937 &rng, size_t n) {
  std::string s(n, '\0');
  for (char &c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct RankResult {
  Status status;
  std::vector<std::string> all;
};

// Runs world ranks as threads; rank r starts after delays[r] ms (rank 0 may come last).
std::vector<RankResult> run_world(int world, int port, const std::vector<std::string> &payloads,
                                  const std::vector<int> &delays_ms, double timeout_s = 20) {
  std::vector<RankResult> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delays_ms.empty() ? 0 : delays_ms[r]));
      RendezvousOptions options{"127.0.0.1", port, timeout_s};
      results[r].status = tcp_rendezvous_all_gather(options, r, world, payloads[r], &results[r].all);
    });
  for (auto &t : threads) t.join();
  return results;
}

TEST(TcpRendezvous, EveryRankGetsEveryContribution) {
  std::mt19937 rng(7);
  for (int world : {2, 3, 5}) {
    std::vector<std::string> payloads;
    for (int r = 0; r < world; ++r) payloads.push_back(random_bytes(rng, r == 1 ? 0 : 128 + 977 * r));
    // rank 0 arrives last, so the others must retry their connections
    std::vector<int> delays(world, 0);
    delays[0] = 300;
    auto results = run_world(world, free_port(), payloads, delays);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status.message();
      ASSERT_EQ(results[r].all.size(), static_cast<size_t>(world));
      for (int q = 0; q < world; ++q) EXPECT_EQ(results[r].all[q], payloads[q]) << "rank " << r << " entry " << q;
    }
  }
}

TEST(TcpRendezvous, LargeContributionAndWorldOfOne) {
  std::mt19937 rng(11);
  std::vector<std::string> payloads{random_bytes(rng, 128), random_bytes(rng, kRendezvousMaxPayload)};
  auto results = run_world(2, free_port(), payloads, {});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].status.ok()) << results[r].status.message();
    EXPECT_EQ(results[r].all, payloads);
  }
  std::vector<std::string> all;
  ASSERT_TRUE(tcp_rendezvous_all_gather({"", 1, 1}, 0, 1, "alone", &all).ok());
  EXPECT_EQ(all, std::vector<std::string>{"alone"});
  std::string too_big(kRendezvousMaxPayload + 1, 'x');
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", free_port(), 1}, 1, 2, too_big, &all).code(),
            DSRT_ERR_INVALID_ARGUMENT);
}

TEST(TcpRendezvous, UnresolvableHostFailsAtOnce) {
  std::vector<std::string> all;
  auto start = std::chrono::steady_clock::now();
  Status status = tcp_rendezvous_all_gather({"no-such-host.invalid", 29500, 30}, 1, 2, "x", &all);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_LT(seconds_since(start), 15.0);
  EXPECT_NE(status.message().find("no-such-host.invalid"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("MASTER_ADDR"), std::string::npos) << status.message();
  EXPECT_TRUE(all.empty());
}

TEST(TcpRendezvous, NoRankZeroTimesOut) {
  std::vector<std::string> all;
  const int port = free_port();
  auto start = std::chrono::steady_clock::now();
  Status status = tcp_rendezvous_all_gather({"127.0.0.1", port, 1.0}, 2, 3, "x", &all);
  double waited = seconds_since(start);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 10.0);
  const std::string where = "127.0.0.1:" + std::to_string(port);
  for (const std::string &needle : {where, std::string("rank 2 of 3"), std::string("DSRT_RENDEZVOUS_PORT")})
    EXPECT_NE(status.message().find(needle), std::string::npos) << needle << " missing from " << status.message();
}

TEST(TcpRendezvous, MissingPeerTimesOutOnRankZero) {
  std::vector<std::string> payloads{"a", "b", "c"};
  const int port = free_port();
  std::vector<RankResult> results(2);
  auto start = std::chrono::steady_clock::now();
  // a world of three where rank 2 never comes
  std::thread r0([&] { results[0].status = tcp_rendezvous_all_gather({"127.0.0.1", port, 1.5}, 0, 3, "a", &results[0].all); });
  std::thread r1([&] { results[1].status = tcp_rendezvous_all_gather({"127.0.0.1", port, 1.5}, 1, 3, "b", &results[1].all); });
  r0.join();
  r1.join();
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(results[0].status.code(), DSRT_ERR_COMM);
  EXPECT_NE(results[0].status.message().find("2 of 3 ranks joined"), std::string::npos) << results[0].status.message();
  EXPECT_NE(results[0].status.message().find("timed out"), std::string::npos) << results[0].status.message();
  EXPECT_EQ(results[1].status.code(), DSRT_ERR_COMM) << "rank 1 must not get a partial table";
  EXPECT_TRUE(results[1].all.empty());
}

TEST(TcpRendezvous, PortInUse) {
  Listener other;
  std::vector<std::string> all;
  Status status = tcp_rendezvous_all_gather({"127.0.0.1", other.port(), 2}, 0, 2, "x", &all);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_NE(status.message().find("in use"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::to_string(other.port())), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("DSRT_RENDEZVOUS_PORT"), std::string::npos) << status.message();
}

// A listener that is not a dsrt rank 0 (another service on the port) is named as such.
TEST(TcpRendezvous, ForeignListener) {
  Listener other;
  std::thread foreign([&] {
    int conn = ::accept(other.fd(), nullptr, nullptr);
    ASSERT_GE(conn, 0);
    char hello[64];
    (void)::recv(conn, hello, sizeof hello, 0);
    const char answer[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    (void)::send(conn, answer, sizeof answer - 1, MSG_NOSIGNAL);
    ::close(conn);
  });
  std::vector<std::string> all;
  Status status = tcp_rendezvous_all_gather({"127.0.0.1", other.port(), 5.0}, 1, 2, "x", &all);
  foreign.join();
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_NE(status.message().find("not a dsrt rank 0"), std::string::npos) << status.message();
  EXPECT_TRUE(all.empty());
}

// A rank 0 that dies after accepting: the joining rank reports the closed connection.
TEST(TcpRendezvous, RankZeroClosesEarly) {
  Listener other;
  std::thread dying([&] {
    int conn = ::accept(other.fd(), nullptr, nullptr);
    ASSERT_GE(conn, 0);
    ::close(conn);
  });
  std::vector<std::string> all;
  Status status = tcp_rendezvous_all_gather({"127.0.0.1", other.port(), 5.0}, 1, 2, "x", &all);
  dying.join();
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_TRUE(status.message().find("closed the connection") != std::string::npos ||
              status.message().find("send failed") != std::string::npos ||
              status.message().find("recv failed") != std::string::npos)
      << status.message();
}

TEST(TcpRendezvous, MismatchedWorldSizeIsRejected) {
  const int port = free_port();
  RankResult root, peer;
  std::thread r0([&] { root.status = tcp_rendezvous_all_gather({"127.0.0.1", port, 10}, 0, 2, "a", &root.all); });
  std::thread r1([&] { peer.status = tcp_rendezvous_all_gather({"127.0.0.1", port, 10}, 1, 3, "b", &peer.all); });
  r0.join();
  r1.join();
  for (const RankResult *r : {&root, &peer}) {
    EXPECT_EQ(r->status.code(), DSRT_ERR_COMM);
    EXPECT_NE(r->status.message().find("WORLD_SIZE=3"), std::string::npos) << r->status.message();
  }
  EXPECT_NE(peer.status.message().find("rejected"), std::string::npos) << peer.status.message();
}

TEST(TcpRendezvous, DuplicateRankIsRejected) {
  const int port = free_port();
  std::vector<RankResult> results(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      int rank = i == 0 ? 0 : 1;  // two processes both claim rank 1 of 3
      if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      results[i].status = tcp_rendezvous_all_gather({"127.0.0.1", port, 10}, rank, 3, "p", &results[i].all);
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(results[0].status.code(), DSRT_ERR_COMM);
  EXPECT_NE(results[0].status.message().find("two processes claim rank 1"), std::string::npos)
      << results[0].status.message();
  EXPECT_EQ(results[1].status.code(), DSRT_ERR_COMM);
  EXPECT_EQ(results[2].status.code(), DSRT_ERR_COMM);
}

TEST(TcpRendezvous, BadArguments) {
  std::vector<std::string> all;
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", 0, 1}, 1, 2, "x", &all).code(), DSRT_ERR_COMM);
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", 70000, 1}, 1, 2, "x", &all).code(), DSRT_ERR_COMM);
  EXPECT_EQ(tcp_rendezvous_all_gather({"", 29501, 1}, 1, 2, "x", &all).code(), DSRT_ERR_COMM);
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", 29501, 1}, 2, 2, "x", &all).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", 29501, 0}, 1, 2, "x", &all).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tcp_rendezvous_all_gather({"127.0.0.1", 29501, 1}, 0, 2, "x", nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dsrt
