// The TCP communicator with ranks as threads on 127.0.0.1 (worlds of 1 to 4): every collective on
// odd sizes, bitwise against a reference that combines the ranks' data in the MPI exchange's
// order (own block, then ranks r-1, r-2, ... in fp32, rounded once); zero lengths, in place, many
// handles in flight; a peer that closes, a skipped collective, mismatched sizes, strangers on a
// rank's port.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_checks.h"
#include "comm/gloo/gloo_comm.h"
#include "util/half.h"

namespace dsrt {
namespace {

const dsrt_dtype kDtypes[] = {DSRT_F32, DSRT_F16, DSRT_BF16};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

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

// A reusable barrier for the rank threads (std::barrier is C++20).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

// Creates a world of n ranks as threads and runs body(rank, comm) on each.
void run_world(int n, const std::function<void(int, std::shared_ptr<Comm> &)> &body, TcpCommOptions options = {},
               std::function<void(int, TcpCommOptions &)> per_rank = nullptr) {
  RendezvousOptions rendezvous;
  rendezvous.host = "127.0.0.1";
  rendezvous.port = free_port();
  rendezvous.timeout_s = 60;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TcpCommOptions mine = options;
      if (per_rank) per_rank(r, mine);
      std::shared_ptr<Comm> comm;
      Status status = tcp_comm_create(rendezvous, r, n, &comm, mine);
      ASSERT_TRUE(status.ok()) << "rank " << r << ": " << status.message();
      EXPECT_STREQ(comm->backend(), "tcp");
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), n);
      body(r, comm);
    });
  }
  for (auto &t : threads) t.join();
}

std::vector<uint8_t> rank_data(int r, size_t count, dsrt_dtype dtype, unsigned salt) {
  std::mt19937 rng(1000003u * static_cast<unsigned>(r + 1) + salt);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype) + 1);  // +1: never empty
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

float combine(float acc, float x, ReduceOp op) {
  if (op == ReduceOp::Sum) return acc + x;
  if (std::isnan(acc) || std::isnan(x)) return std::isnan(acc) ? acc : x;
  return op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x);
}

// Element i of owner's block reduced as the MPI exchange does, rounded to dtype, as raw bits.
std::vector<uint8_t> expected_block(int n, int owner, size_t first, size_t count, dsrt_dtype dtype, ReduceOp op,
                                    unsigned salt, size_t total) {
  std::vector<std::vector<uint8_t>> data;
  for (int r = 0; r < n; ++r) data.push_back(rank_data(r, total, dtype, salt));
  std::vector<uint8_t> out(count * dtype_size(dtype) + 1);
  for (size_t i = 0; i < count; ++i) {
    float acc = to_float(data[owner].data(), dtype, first + i);
    for (int k = 1; k < n; ++k) acc = combine(acc, to_float(data[(owner - k + n) % n].data(), dtype, first + i), op);
    from_float(out.data(), dtype, i, acc);
  }
  return out;
}

void expect_bytes(const void *got, const void *want, size_t bytes, const std::string &what) {
  EXPECT_EQ(0, std::memcmp(got, want, bytes)) << what;
}

std::string label(const char *name, dsrt_dtype dtype, ReduceOp op, size_t count, int rank) {
  return Format("%s %s %s n=%zu rank %d", name, dtype_name(dtype), reduce_op_name(op), count, rank);
}

class TcpWorld : public ::testing::TestWithParam<int> {};

TEST_P(TcpWorld, ReductionsMatchTheExchangeOrderBitwise) {
  const int n = GetParam();
  run_world(n, [n](int me, std::shared_ptr<Comm> &comm) {
    unsigned salt = 1;
    for (dsrt_dtype dtype : kDtypes)
      for (ReduceOp op : kOps) {
        const size_t element = dtype_size(dtype);
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{20001}}) {
          ++salt;
          auto buffer = rank_data(me, count, dtype, salt);
          CommHandle handle;
          ASSERT_TRUE(comm->all_reduce(buffer.data(), count, dtype, op, &handle).ok());
          Status status = handle->wait();
          ASSERT_TRUE(status.ok()) << status.message();
          BlockLayout layout = split_blocks(count, n);
          for (int o = 0; o < n; ++o) {
            auto want = expected_block(n, o, layout.offset[o], layout.count[o], dtype, op, salt, count);
            expect_bytes(buffer.data() + layout.offset[o] * element, want.data(), layout.count[o] * element,
                         label("all_reduce", dtype, op, count, me));
          }
        }
        for (size_t count : {size_t{0}, size_t{1}, size_t{333}, size_t{9001}}) {
          ++salt;
          auto send = rank_data(me, count * n, dtype, salt);
          std::vector<uint8_t> recv(count * element + 1, 0xee);
          Status status = comm->reduce_scatter_sync(send.data(), recv.data(), count, dtype, op);
          ASSERT_TRUE(status.ok()) << status.message();
          auto want = expected_block(n, me, me * count, count, dtype, op, salt, count * n);
          expect_bytes(recv.data(), want.data(), count * element, label("reduce_scatter", dtype, op, count, me));
          uint8_t *own = send.data() + me * count * element;
          status = comm->reduce_scatter_sync(send.data(), own, count, dtype, op);
          ASSERT_TRUE(status.ok()) << status.message();
          expect_bytes(own, want.data(), count * element, label("reduce_scatter in place", dtype, op, count, me));
        }
      }
  });
}

TEST_P(TcpWorld, UnevenFormsGathersAndBroadcasts) {
  const int n = GetParam();
  run_world(n, [n](int me, std::shared_ptr<Comm> &comm) {
    std::vector<size_t> counts(n), offsets(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts[r] = r == 1 ? 0 : 37 * static_cast<size_t>(r) + 5;
      offsets[r] = total;
      total += counts[r];
    }
    unsigned salt = 300;
    for (dsrt_dtype dtype : kDtypes) {
      ++salt;
      const size_t element = dtype_size(dtype);
      auto send = rank_data(me, total, dtype, salt);
      std::vector<uint8_t> recv(counts[me] * element + 1);
      CommHandle handle;
      ASSERT_TRUE(comm->reduce_scatter_v(send.data(), recv.data(), counts.data(), dtype, ReduceOp::Sum, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      auto want = expected_block(n, me, offsets[me], counts[me], dtype, ReduceOp::Sum, salt, total);
      expect_bytes(recv.data(), want.data(), counts[me] * element, "reduce_scatter_v");

      // all_gather_v, out of place and in place
      auto mine = rank_data(me, counts[me], dtype, salt + 7);
      std::vector<uint8_t> gathered(total * element + 1, 0), in_place(total * element + 1, 0);
      std::memcpy(in_place.data() + offsets[me] * element, mine.data(), counts[me] * element);
      ASSERT_TRUE(comm->all_gather_v(mine.data(), gathered.data(), counts.data(), dtype, &handle).ok());
      CommHandle second;
      ASSERT_TRUE(comm->all_gather_v(in_place.data() + offsets[me] * element, in_place.data(), counts.data(), dtype,
                                     &second).ok());
      ASSERT_TRUE(second->wait().ok());  // waited out of order
      ASSERT_TRUE(handle->wait().ok());
      for (int r = 0; r < n; ++r) {
        auto theirs = rank_data(r, counts[r], dtype, salt + 7);
        expect_bytes(gathered.data() + offsets[r] * element, theirs.data(), counts[r] * element, "all_gather_v");
        expect_bytes(in_place.data() + offsets[r] * element, theirs.data(), counts[r] * element,
                     "all_gather_v in place");
      }
      for (size_t count : {size_t{0}, size_t{1}, size_t{12345}}) {
        auto block = rank_data(me, count, dtype, salt + 11);
        std::vector<uint8_t> all(count * n * element + 1, 0xab);
        ASSERT_TRUE(comm->all_gather_sync(block.data(), all.data(), count, dtype).ok());
        for (int r = 0; r < n; ++r)
          expect_bytes(all.data() + r * count * element, rank_data(r, count, dtype, salt + 11).data(),
                       count * element, "all_gather");
      }
      for (int root = 0; root < n; ++root) {
        auto expected = rank_data(root, 4097, dtype, 500 + root);
        auto buffer = me == root ? expected : std::vector<uint8_t>(expected.size(), 0x5a);
        ASSERT_TRUE(comm->broadcast_sync(buffer.data(), 4097, dtype, root).ok());
        expect_bytes(buffer.data(), expected.data(), 4097 * element, Format("broadcast from root %d", root));
      }
    }
    std::string text = me == n - 1 ? "manifest from the last rank" : std::string(27, '?');
    ASSERT_TRUE(comm->broadcast_bytes(&text[0], text.size(), n - 1).ok());
    EXPECT_EQ(text, "manifest from the last rank");
    ASSERT_TRUE(comm->broadcast_bytes(nullptr, 0, 0).ok());
  });
}

TEST_P(TcpWorld, ControlValuesNanAndBarrier) {
  const int n = GetParam();
  run_world(n, [n](int me, std::shared_ptr<Comm> &comm) {
    double values[3] = {me + 0.5, -static_cast<double>(me), 1.0};
    if (me == n - 1) values[2] = NAN;
    ASSERT_TRUE(comm->all_reduce_f64(values, 3, ReduceOp::Max).ok());
    EXPECT_EQ(values[0], n - 0.5);
    EXPECT_EQ(values[1], 0.0);
    EXPECT_TRUE(std::isnan(values[2]));
    double sums[2] = {static_cast<double>(me), 0.1 * (me + 1)};
    ASSERT_TRUE(comm->all_reduce_f64(sums, 2, ReduceOp::Sum).ok());
    EXPECT_EQ(sums[0], n * (n - 1) / 2.0);
    double want = 0.1;
    for (int r = 1; r < n; ++r) want += 0.1 * (r + 1);  // rank order: identical bits everywhere
    EXPECT_EQ(sums[1], want);
    uint64_t counters[2] = {1ull << 40, static_cast<uint64_t>(me) + 3};
    ASSERT_TRUE(comm->all_reduce_u64(counters, 1, ReduceOp::Sum).ok());
    EXPECT_EQ(counters[0], static_cast<uint64_t>(n) << 40);
    ASSERT_TRUE(comm->all_reduce_u64(counters + 1, 1, ReduceOp::Min).ok());
    EXPECT_EQ(counters[1], 3u);
    ASSERT_TRUE(comm->all_reduce_u64(nullptr, 0, ReduceOp::Sum).ok());
    std::vector<uint16_t> grads(40000, float_to_bf16(1.0f));
    if (me == 0) grads[39998] = float_to_bf16(NAN);
    ASSERT_TRUE(comm->all_reduce_sync(grads.data(), grads.size(), DSRT_BF16, ReduceOp::Max).ok());
    EXPECT_TRUE(std::isnan(bf16_to_float(grads[39998])));
    EXPECT_EQ(bf16_to_float(grads[0]), 1.0f);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(comm->barrier().ok());
  });
}

// Many collectives issued before any wait: they run in order and all complete.
TEST_P(TcpWorld, ManyHandlesInFlight) {
  const int n = GetParam();
  run_world(n, [n](int me, std::shared_ptr<Comm> &comm) {
    constexpr int kOpsInFlight = 24;
    const size_t count = 3001;
    std::vector<std::vector<uint8_t>> buffers, gathered;
    std::vector<CommHandle> handles(kOpsInFlight);
    for (int i = 0; i < kOpsInFlight; ++i) {
      buffers.push_back(rank_data(me, count, DSRT_BF16, 900 + i));
      gathered.emplace_back(count * 2 * n + 1);
    }
    for (int i = 0; i < kOpsInFlight; ++i) {
      if (i % 2 == 0)
        ASSERT_TRUE(comm->all_reduce(buffers[i].data(), count, DSRT_BF16, ReduceOp::Sum, &handles[i]).ok());
      else
        ASSERT_TRUE(comm->all_gather(buffers[i].data(), gathered[i].data(), count, DSRT_BF16, &handles[i]).ok());
    }
    for (int i = kOpsInFlight; i-- > 0;) ASSERT_TRUE(handles[i]->wait().ok()) << i;
    BlockLayout layout = split_blocks(count, n);
    for (int i = 0; i < kOpsInFlight; ++i) {
      if (i % 2 == 0) {
        for (int o = 0; o < n; ++o) {
          auto want = expected_block(n, o, layout.offset[o], layout.count[o], DSRT_BF16, ReduceOp::Sum, 900 + i, count);
          expect_bytes(buffers[i].data() + layout.offset[o] * 2, want.data(), layout.count[o] * 2, "queued all_reduce");
        }
      } else {
        for (int r = 0; r < n; ++r)
          expect_bytes(gathered[i].data() + r * count * 2, rank_data(r, count, DSRT_BF16, 900 + i).data(), count * 2,
                       "queued all_gather");
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, TcpWorld, ::testing::Values(1, 2, 3, 4));

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rank 1 destroys its communicator; the others' next collective names it at once, and later
// calls fail fast.
TEST(TcpComm, PeerThatClosesIsNamed) {
  ThreadBarrier barrier(3);
  TcpCommOptions options;
  options.timeout_s = 60;
  run_world(3, [&](int me, std::shared_ptr<Comm> &comm) {
    std::vector<float> data(1000, 1.0f);
    ASSERT_TRUE(comm->all_reduce_sync(data.data(), data.size(), DSRT_F32, ReduceOp::Sum).ok());
    barrier.arrive_and_wait();
    if (me == 1) comm.reset();
    barrier.arrive_and_wait();
    if (me != 1) {
      comm->set_step(9);
      auto start = std::chrono::steady_clock::now();
      Status status = comm->all_reduce_sync(data.data(), data.size(), DSRT_F32, ReduceOp::Sum);
      EXPECT_LT(seconds_since(start), 30.0);
      EXPECT_EQ(status.code(), DSRT_ERR_COMM);
      for (const char *needle : {"rank 1 closed its connection", "all_reduce", "step 9", "see its own error"})
        EXPECT_NE(status.message().find(needle), std::string::npos) << needle << " missing from: " << status.message();
      start = std::chrono::steady_clock::now();
      status = comm->barrier();
      EXPECT_LT(seconds_since(start), 0.5);
      EXPECT_EQ(status.code(), DSRT_ERR_COMM);
      EXPECT_NE(status.message().find("unusable"), std::string::npos) << status.message();
      EXPECT_NE(status.message().find("rank 1 closed"), std::string::npos) << status.message();
    }
    barrier.arrive_and_wait();  // keep every communicator alive until all have checked
  }, options);
}

// Rank 0 enters a collective rank 1 skips: it fails after the timeout naming the operation, the
// peer and the step.
TEST(TcpComm, SkippedCollectiveTimesOut) {
  ThreadBarrier barrier(2);
  TcpCommOptions options;
  options.timeout_s = 1;
  run_world(2, [&](int me, std::shared_ptr<Comm> &comm) {
    if (me == 0) {
      comm->set_step(42);
      std::vector<float> send(128, 1.0f), recv(64);
      auto start = std::chrono::steady_clock::now();
      Status status = comm->reduce_scatter_sync(send.data(), recv.data(), 64, DSRT_F32, ReduceOp::Sum);
      EXPECT_GE(seconds_since(start), 0.9);
      EXPECT_EQ(status.code(), DSRT_ERR_COMM);
      for (const char *needle : {"reduce_scatter", "rank 0 of 2", "step 42", "rank 1", "DSRT_COMM_TIMEOUT_S"})
        EXPECT_NE(status.message().find(needle), std::string::npos) << needle << " missing from: " << status.message();
      CommHandle handle;
      EXPECT_EQ(comm->all_reduce(recv.data(), 64, DSRT_F32, ReduceOp::Sum, &handle).code(), DSRT_ERR_COMM);
      EXPECT_FALSE(handle);
    }
    barrier.arrive_and_wait();
  }, options);
}

// Ranks that issue different sizes fail at once with a message saying so instead of mixing
// streams (a rank that saw it first closes its sockets, so the other may only see that).
TEST(TcpComm, MismatchedSizesAreReported) {
  ThreadBarrier barrier(2);
  TcpCommOptions options;
  options.timeout_s = 60;
  std::atomic<int> saw_mismatch{0};
  run_world(2, [&](int me, std::shared_ptr<Comm> &comm) {
    std::vector<float> mine(11, 1.0f), all(22);
    auto start = std::chrono::steady_clock::now();
    Status status = comm->all_gather_sync(mine.data(), all.data(), me == 0 ? 10 : 11, DSRT_F32);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
    EXPECT_EQ(status.code(), DSRT_ERR_COMM);
    bool mismatch = status.message().find("different collectives") != std::string::npos;
    saw_mismatch += mismatch ? 1 : 0;
    EXPECT_TRUE(mismatch || status.message().find("closed its connection") != std::string::npos) << status.message();
    barrier.arrive_and_wait();
  }, options);
  EXPECT_GE(saw_mismatch.load(), 1);
}

// Connections that are not peers of this job (garbage, silence, an early close) on a rank's
// listening port do not reach the collectives: the mesh is formed again on fresh ports if a
// stranger took a peer's place, and the collectives are unaffected.
TEST(TcpComm, StrangersAreRejected) {
  std::vector<int> strangers;
  std::mutex mutex;
  run_world(3, [](int me, std::shared_ptr<Comm> &comm) {
    std::vector<float> data(777, static_cast<float>(me));
    ASSERT_TRUE(comm->all_reduce_sync(data.data(), data.size(), DSRT_F32, ReduceOp::Sum).ok());
    EXPECT_EQ(data[0], 3.0f);
    EXPECT_EQ(data[776], 3.0f);
  }, TcpCommOptions(), [&](int rank, TcpCommOptions &options) {
    if (rank == 0) return;  // ranks 0 only connects; 1 and 2 accept
    options.on_listening = [&](int port) {
      for (int kind = 0; kind < 3; ++kind) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>(port));
        // Gloo listens once per pair: once a stranger took the listener's one connection, the
        // next ones are refused (and the ranks form the mesh again on ports only they know).
        if (::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
          ::close(fd);
          continue;
        }
        if (kind == 0) {
          const char garbage[] = "GET / HTTP/1.0\r\n\r\nmore bytes";
          ASSERT_GT(::send(fd, garbage, sizeof garbage, MSG_NOSIGNAL), 0);
        }
        if (kind == 2) {
          ::close(fd);
          continue;
        }
        std::lock_guard<std::mutex> guard(mutex);
        strangers.push_back(fd);  // the silent one stays open through the mesh's creation
      }
    };
  });
  for (int fd : strangers) ::close(fd);
}

}  // namespace
}  // namespace dsrt
