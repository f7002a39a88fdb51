// Gloo's store over the TCP rendezvous (src/comm/gloo/gloo_store.h), ranks as threads on
// 127.0.0.1: keys set by every rank reach every rank through rounds of the all-gather, also when
// ranks ask for keys in different orders and numbers of times; finish() returns on every rank once
// all are done; a rank that joins with something other than a store round (what an NCCL rank
// sends) is named; a key nobody sets fails at the deadline instead of hanging.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_store.h"

namespace dsrt {
namespace {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

RendezvousOptions options_on(int port, double timeout_s) {
  RendezvousOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.timeout_s = timeout_s;
  return options;
}

std::vector<char> bytes(const std::string &s) { return std::vector<char>(s.begin(), s.end()); }

TEST(GlooStore, KeysReachEveryRankAndFinishReturnsEverywhere) {
  for (int n : {2, 3, 5}) {
    const RendezvousOptions options = options_on(free_port(), 60);
    std::vector<std::string> failures(n);
    std::vector<uint64_t> tokens(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        RendezvousStore store(options, r, n, r == 0 ? 0x1234abcdull : 0);
        try {
          // Every rank sets two keys; odd ranks read the others' first key before setting their
          // second, so ranks need different numbers of rounds.
          store.set("first/" + std::to_string(r), bytes("one from " + std::to_string(r)));
          if (r % 2 == 1) {
            for (int p = 0; p < n; ++p)
              if (store.get("first/" + std::to_string(p)) != bytes("one from " + std::to_string(p)))
                failures[r] += "wrong first/" + std::to_string(p) + "; ";
          }
          store.set("second/" + std::to_string(r), bytes(std::string(1000 + r, static_cast<char>('a' + r))));
          std::vector<std::string> keys;
          for (int p = n; p-- > 0;) keys.push_back("second/" + std::to_string(p));
          store.wait(keys, std::chrono::milliseconds(60000));
          for (int p = 0; p < n; ++p)
            if (store.get("second/" + std::to_string(p)) != bytes(std::string(1000 + p, static_cast<char>('a' + p))))
              failures[r] += "wrong second/" + std::to_string(p) + "; ";
        } catch (const std::exception &e) {
          failures[r] += std::string("threw: ") + e.what();
        }
        Status finished = store.finish();
        if (!finished.ok()) failures[r] += "finish: " + finished.message();
        tokens[r] = store.token();
      });
    }
    for (auto &t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(failures[r], "") << n << " ranks, rank " << r;
      EXPECT_EQ(tokens[r], 0x1234abcdull) << "rank 0's token, on rank " << r;
    }
  }
}

TEST(GlooStore, ARankThatSendsSomethingElseIsNamed) {
  const RendezvousOptions options = options_on(free_port(), 30);
  std::string message;
  std::thread store_rank([&] {
    RendezvousStore store(options, 0, 2, 7);
    try {
      store.wait({"1"});
    } catch (const std::exception &) {
    }
    message = store.error().message();
  });
  std::vector<std::string> all;
  Status other = tcp_rendezvous_all_gather(options, 1, 2, std::string(136, 'x'), &all);
  store_rank.join();
  EXPECT_TRUE(other.ok()) << other.message();
  EXPECT_NE(message.find("rank 1 joined the rendezvous with something other than a tcp communicator"),
            std::string::npos) << message;
}

// Rank 0 waits 1.5 s for a key nobody sets and fails then, naming the key; rank 1, left alone in
// its next round, fails at the store's own deadline naming the rendezvous.
TEST(GlooStore, AKeyNobodySetsFailsAtTheDeadline) {
  const RendezvousOptions options = options_on(free_port(), 6);
  std::vector<std::string> messages(2);
  std::vector<double> seconds(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto start = std::chrono::steady_clock::now();
      RendezvousStore store(options, r, 2, 1);
      Status status;
      try {
        if (r == 0) store.wait({"never"}, std::chrono::milliseconds(1500));
        else status = store.finish();
      } catch (const std::exception &) {
      }
      messages[r] = r == 0 ? store.error().message() : status.message();
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_GE(seconds[0], 1.4);
  EXPECT_LT(seconds[0], 4.0);
  EXPECT_NE(messages[0].find("'never'"), std::string::npos) << messages[0];
  EXPECT_LT(seconds[1], 15.0);
  EXPECT_NE(messages[1].find("rendezvous"), std::string::npos) << messages[1];
}

}  // namespace
}  // namespace dsrt
