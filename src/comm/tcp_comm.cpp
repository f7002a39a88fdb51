// defines: TcpComm (worker thread, ordered op queue, exchanges over the mesh driven by poll(),
// timeouts, broken state) and tcp_comm_create.
#include "comm/tcp_comm.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/reduce_kernels.h"
#include "comm/tcp_socket.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kOpMagic = 0x4453544f;  // "DSTO"
constexpr size_t kHeaderBytes = 16;
constexpr size_t kIoPieceBytes = size_t{1} << 30;  // one send()/recv() call at most

// What one op moves between this rank and one peer: a header, then byte ranges in order.
struct Segment {
  char *data;
  size_t bytes;
};
struct Flow {
  std::vector<Segment> out, in;
  size_t out_i = 0, out_off = 0, in_i = 0, in_off = 0;
  char header_out[kHeaderBytes], header_in[kHeaderBytes];
  uint64_t expect_in = 0;  // payload bytes this rank expects from the peer
  bool out_done() const { return out_i == out.size(); }
  bool in_done() const { return in_i == in.size(); }
};

void put_u64(char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (56 - 8 * i));
}
uint64_t get_u64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

struct OpState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
  void finish(Status result) {
    std::lock_guard<std::mutex> guard(mutex);
    status = std::move(result);
    done = true;
    cv.notify_all();
  }
};

class TcpRequest final : public CommRequest {
 public:
  explicit TcpRequest(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  Status wait() override {
    std::unique_lock<std::mutex> guard(state_->mutex);
    state_->cv.wait(guard, [&] { return state_->done; });
    return state_->status;
  }

 private:
  std::shared_ptr<OpState> state_;
};

class TcpComm;
using Body = std::function<Status(TcpComm &)>;

struct QueuedOp {
  std::string description;
  int64_t step = 0;
  Body body;
  std::shared_ptr<OpState> state;
};

class TcpComm final : public Comm {
 public:
  TcpComm(int rank, int size, std::vector<Fd> sockets, double timeout_s)
      : rank_(rank), size_(size), timeout_s_(timeout_s), sockets_(std::move(sockets)) {
    worker_ = std::thread([this] { worker_loop(); });
  }
  ~TcpComm() override {
    {
      std::lock_guard<std::mutex> guard(queue_mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backend() const override { return "tcp"; }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    std::string what = Format("all_reduce (%s, %zu elements, %s)", dtype_name(dtype), count, reduce_op_name(op));
    return submit(std::move(what), handle, [buffer, count, dtype, op](TcpComm &c) {
      BlockLayout layout = split_blocks(count, c.size_);
      char *own = static_cast<char *>(buffer) + layout.offset[c.rank_] * dtype_size(dtype);
      DSRT_RETURN_IF_ERROR(c.reduce_scatter_blocks(buffer, own, layout, dtype, op));
      return c.all_gather_blocks(own, buffer, layout, dtype);
    });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    std::string what = Format("reduce_scatter (%s, %zu elements per rank, %s)", dtype_name(dtype), recv_count,
                              reduce_op_name(op));
    return submit(std::move(what), handle, [send, recv, recv_count, dtype, op](TcpComm &c) {
      return c.reduce_scatter_blocks(send, recv, equal_blocks(recv_count, c.size_), dtype, op);
    });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, size_);
    std::string what = Format("reduce_scatter_v (%s, %zu elements in all, %zu here, %s)", dtype_name(dtype),
                              layout.total, layout.count[rank_], reduce_op_name(op));
    return submit(std::move(what), handle, [send, recv, layout, dtype, op](TcpComm &c) {
      return c.reduce_scatter_blocks(send, recv, layout, dtype, op);
    });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    std::string what = Format("all_gather (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle, [send, recv, count, dtype](TcpComm &c) {
      return c.all_gather_blocks(send, recv, equal_blocks(count, c.size_), dtype);
    });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, size_);
    std::string what = Format("all_gather_v (%s, %zu elements in all, %zu here)", dtype_name(dtype), layout.total,
                              layout.count[rank_]);
    return submit(std::move(what), handle, [send, recv, layout, dtype](TcpComm &c) {
      return c.all_gather_blocks(send, recv, layout, dtype);
    });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    std::string what = Format("broadcast (%s, %zu elements, root %d)", dtype_name(dtype), count, root);
    size_t bytes = count * dtype_size(dtype);
    return submit(std::move(what), handle,
                  [buffer, bytes, root](TcpComm &c) { return c.broadcast_raw(buffer, bytes, root); });
  }

  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_f64", values, count, op));
    return run_blocking(Format("all_reduce_f64 (%zu values, %s)", count, reduce_op_name(op)),
                        [values, count, op](TcpComm &c) { return c.control_reduce(values, count, op); });
  }
  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_u64", values, count, op));
    return run_blocking(Format("all_reduce_u64 (%zu values, %s)", count, reduce_op_name(op)),
                        [values, count, op](TcpComm &c) { return c.control_reduce(values, count, op); });
  }
  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_bytes_args(*this, data, bytes, root));
    return run_blocking(Format("broadcast_bytes (%zu bytes, root %d)", bytes, root),
                        [data, bytes, root](TcpComm &c) { return c.broadcast_raw(data, bytes, root); });
  }
  Status barrier() override {
    return run_blocking("barrier", [](TcpComm &c) {
      std::vector<Flow> flows(c.size_);
      return c.exchange(flows);
    });
  }

 private:
  // ---- exchanges (worker thread only) ------------------------------------------------------

  // Moves every flow's header and segments at once; flows[rank_] is ignored.
  Status exchange(std::vector<Flow> &flows) {
    ++sequence_;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Flow &f = flows[p];
      uint64_t out_bytes = 0;
      for (const Segment &s : f.out) out_bytes += s.bytes;
      for (const Segment &s : f.in) f.expect_in += s.bytes;
      put_u64(f.header_out, (uint64_t{kOpMagic} << 32) | (sequence_ & 0xffffffffu));
      put_u64(f.header_out + 8, out_bytes);
      f.out.insert(f.out.begin(), Segment{f.header_out, kHeaderBytes});
      f.in.insert(f.in.begin(), Segment{f.header_in, kHeaderBytes});
      drop_empty(f.out);
      drop_empty(f.in);
    }
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (;;) {
      fds.clear();
      who.clear();
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        short events = static_cast<short>((flows[p].out_done() ? 0 : POLLOUT) | (flows[p].in_done() ? 0 : POLLIN));
        if (events == 0) continue;
        fds.push_back({sockets_[p].get(), events, 0});
        who.push_back(p);
      }
      if (fds.empty()) return Status::Ok();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        std::string waiting;
        for (int p : who)
          waiting += Format("%srank %d (%s)", waiting.empty() ? "" : ", ", p,
                            flows[p].in_done() ? "sending to it" : "receiving from it");
        return Error(DSRT_ERR_COMM, "still waiting for %s", waiting.c_str());
      }
      int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 1000)));
      if (rc < 0 && errno != EINTR) return Error(DSRT_ERR_COMM, "poll failed: %s", errno_text(errno).c_str());
      if (rc <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        int p = who[i];
        if (!flows[p].in_done()) DSRT_RETURN_IF_ERROR(pump_in(p, flows[p]));
        if (!flows[p].out_done()) DSRT_RETURN_IF_ERROR(pump_out(p, flows[p]));
      }
    }
  }

  static void drop_empty(std::vector<Segment> &segments) {
    segments.erase(std::remove_if(segments.begin(), segments.end(), [](const Segment &s) { return s.bytes == 0; }),
                   segments.end());
  }

  Status closed(int p, int err) {
    peer_closed_ = true;
    return Error(DSRT_ERR_COMM, "rank %d closed its connection%s: it exited, crashed or failed; see its own error", p,
                 err == 0 ? "" : Format(" (%s)", errno_text(err).c_str()).c_str());
  }

  Status pump_in(int p, Flow &f) {
    while (!f.in_done()) {
      Segment &s = f.in[f.in_i];
      ssize_t n = ::recv(sockets_[p].get(), s.data + f.in_off, std::min(s.bytes - f.in_off, kIoPieceBytes), 0);
      if (n == 0) return closed(p, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        if (errno == ECONNRESET) return closed(p, errno);
        return Error(DSRT_ERR_COMM, "recv from rank %d failed: %s", p, errno_text(errno).c_str());
      }
      f.in_off += static_cast<size_t>(n);
      if (f.in_off < s.bytes) continue;
      if (s.data == f.header_in) DSRT_RETURN_IF_ERROR(check_header(p, f));
      ++f.in_i;
      f.in_off = 0;
    }
    return Status::Ok();
  }

  Status check_header(int p, const Flow &f) {
    uint64_t tag = get_u64(f.header_in), bytes = get_u64(f.header_in + 8);
    if ((tag >> 32) != kOpMagic)
      return Error(DSRT_ERR_COMM, "rank %d sent bytes that are not a collective's header: the stream is out of "
                   "step (a bug, or ranks issued collectives of different sizes)", p);
    if ((tag & 0xffffffffu) != (sequence_ & 0xffffffffu) || bytes != f.expect_in)
      return Error(DSRT_ERR_COMM, "rank %d sent %llu bytes as its collective #%llu where this rank expects %llu bytes "
                   "for its collective #%llu: the ranks issued different collectives, in another order or with "
                   "other sizes", p, static_cast<unsigned long long>(bytes),
                   static_cast<unsigned long long>(tag & 0xffffffffu), static_cast<unsigned long long>(f.expect_in),
                   static_cast<unsigned long long>(sequence_ & 0xffffffffu));
    return Status::Ok();
  }

  Status pump_out(int p, Flow &f) {
    while (!f.out_done()) {
      Segment &s = f.out[f.out_i];
      ssize_t n = ::send(sockets_[p].get(), s.data + f.out_off, std::min(s.bytes - f.out_off, kIoPieceBytes),
                         MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        if (errno == EPIPE || errno == ECONNRESET) return closed(p, errno);
        return Error(DSRT_ERR_COMM, "send to rank %d failed: %s", p, errno_text(errno).c_str());
      }
      f.out_off += static_cast<size_t>(n);
      if (f.out_off < s.bytes) continue;
      ++f.out_i;
      f.out_off = 0;
    }
    return Status::Ok();
  }

  // recv = op over ranks of block rank_ of send, combined as the MPI exchange does: this rank's
  // own block, then the blocks of ranks rank_-1, rank_-2, ... (mod size), in fp32, rounded once.
  Status reduce_scatter_blocks(const void *send, void *recv, const BlockLayout &layout, dsrt_dtype dtype, ReduceOp op) {
    const size_t element = dtype_size(dtype), own_count = layout.count[rank_];
    const char *source = static_cast<const char *>(send);
    const char *own = source + layout.offset[rank_] * element;
    char *dest = static_cast<char *>(recv);
    std::vector<Flow> flows(size_);
    scratch_.resize(std::max<size_t>(1, static_cast<size_t>(size_) * own_count * element));
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      flows[p].out.push_back({const_cast<char *>(source) + layout.offset[p] * element, layout.count[p] * element});
      flows[p].in.push_back({scratch_.data() + static_cast<size_t>(p) * own_count * element, own_count * element});
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    if (own_count == 0) return Status::Ok();
    float *acc;
    if (dtype == DSRT_F32) {
      if (dest != own) std::memmove(dest, own, own_count * element);
      acc = reinterpret_cast<float *>(dest);
    } else {
      accumulator_.resize(own_count);
      acc = accumulator_.data();
      load_to_f32(acc, own, dtype, own_count);
    }
    for (int k = 1; k < size_; ++k) {
      int p = (rank_ - k + size_) % size_;
      accumulate_f32(acc, scratch_.data() + static_cast<size_t>(p) * own_count * element, dtype, op, own_count);
    }
    if (dtype != DSRT_F32) store_from_f32(dest, acc, dtype, own_count);
    return Status::Ok();
  }

  Status all_gather_blocks(const void *send, void *recv, const BlockLayout &layout, dsrt_dtype dtype) {
    const size_t element = dtype_size(dtype);
    char *dest = static_cast<char *>(recv);
    char *own_dest = dest + layout.offset[rank_] * element;
    const char *own = static_cast<const char *>(send);
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      flows[p].out.push_back({const_cast<char *>(own), layout.count[rank_] * element});
      flows[p].in.push_back({dest + layout.offset[p] * element, layout.count[p] * element});
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    if (own != own_dest && layout.count[rank_] > 0) std::memmove(own_dest, own, layout.count[rank_] * element);
    return Status::Ok();
  }

  Status broadcast_raw(void *data, size_t bytes, int root) {
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (rank_ == root) flows[p].out.push_back({static_cast<char *>(data), bytes});
      if (p == root) flows[p].in.push_back({static_cast<char *>(data), bytes});
    }
    return exchange(flows);
  }

  // Every rank gathers every rank's values and combines them in rank order, so all hold the same
  // bits. Max and min propagate NaN.
  template <typename T>
  Status control_reduce(T *values, size_t count, ReduceOp op) {
    std::vector<T> all(count * static_cast<size_t>(size_));
    std::vector<Flow> flows(size_);
    const size_t bytes = count * sizeof(T);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      flows[p].out.push_back({reinterpret_cast<char *>(values), bytes});
      flows[p].in.push_back({reinterpret_cast<char *>(all.data() + static_cast<size_t>(p) * count), bytes});
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    if (count > 0) std::memcpy(all.data() + static_cast<size_t>(rank_) * count, values, bytes);
    for (size_t i = 0; i < count; ++i) {
      T acc = all[i];
      for (int r = 1; r < size_; ++r) {
        T x = all[static_cast<size_t>(r) * count + i];
        if (op == ReduceOp::Sum) acc = acc + x;
        else if (is_nan(acc) || is_nan(x)) acc = is_nan(acc) ? acc : x;
        else acc = op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x);
      }
      values[i] = acc;
    }
    return Status::Ok();
  }
  static bool is_nan(double x) { return std::isnan(x); }
  static bool is_nan(uint64_t) { return false; }

  // ---- the queue -----------------------------------------------------------------------------

  Status broken_error(const std::string &what) {
    std::lock_guard<std::mutex> guard(broken_mutex_);
    return Error(DSRT_ERR_COMM,
                 "%s on rank %d: this communicator is unusable after an earlier failure (%s); the ranks are no "
                 "longer in step, so restart the job (or create a new communicator on every rank)",
                 what.c_str(), rank_, broken_reason_.c_str());
  }

  Status submit(std::string what, CommHandle *handle, Body body) {
    *handle = nullptr;
    if (broken_) return broken_error(what);
    auto state = std::make_shared<OpState>();
    if (size_ == 1) {
      // Nothing to exchange: run at once (copies only).
      QueuedOp op{std::move(what), step(), std::move(body), state};
      state->finish(execute(op));
    } else {
      {
        std::lock_guard<std::mutex> guard(queue_mutex_);
        queue_.push_back({std::move(what), step(), std::move(body), state});
      }
      queue_cv_.notify_one();
    }
    *handle = std::make_unique<TcpRequest>(std::move(state));
    return Status::Ok();
  }

  Status run_blocking(std::string what, Body body) {
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(submit(std::move(what), &handle, std::move(body)));
    return handle->wait();
  }

  Status execute(QueuedOp &op) {
    if (broken_) return broken_error(op.description);
    timed_out_ = false;
    peer_closed_ = false;
    const double timeout_s = comm_timeout_seconds(timeout_s_);  // the config key may set it after creation
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    Status status;
    try {
      status = op.body(*this);
    } catch (const std::bad_alloc &) {
      status = Error(DSRT_ERR_OUT_OF_MEMORY, "host memory exhausted");
    } catch (const std::exception &e) {
      status = Error(DSRT_ERR_INTERNAL, "unexpected exception: %s", e.what());
    }
    if (status.ok()) return status;
    if (timed_out_) {
      status = Error(DSRT_ERR_COMM,
                     "%s did not complete within %g s on rank %d of %d at step %lld: another rank skipped or "
                     "reordered this collective, is still busy, or hangs (%s); the communicator is now unusable. "
                     "Raise \"comm_timeout\" in the config (or DSRT_COMM_TIMEOUT_S) if the step is legitimately slower",
                     op.description.c_str(), timeout_s, rank_, size_, static_cast<long long>(op.step),
                     status.message().c_str());
    } else {
      status = status.with_context(Format("%s on rank %d of %d at step %lld (tcp)", op.description.c_str(), rank_,
                                          size_, static_cast<long long>(op.step)));
    }
    {
      std::lock_guard<std::mutex> guard(broken_mutex_);
      broken_reason_ = status.message();
    }
    broken_ = true;
    logf(DSRT_LOG_ERROR, "%s", status.message().c_str());
    // Peers may be blocked on this rank in this or a later collective: closing the sockets makes
    // them fail at once instead of at their timeout. A peer that closed is seen by every rank
    // directly (full mesh), so that case keeps the sockets and each rank names the rank that left.
    if (!peer_closed_)
      for (Fd &socket : sockets_)
        if (socket.get() >= 0) (void)::shutdown(socket.get(), SHUT_RDWR);
    return status;
  }

  void worker_loop() {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    for (;;) {
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every issued op has run
      QueuedOp op = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      op.state->finish(execute(op));
      lock.lock();
    }
  }

  const int rank_, size_;
  const double timeout_s_;
  std::vector<Fd> sockets_;  // sockets_[r]: to rank r
  // Used only by the op being executed.
  uint64_t sequence_ = 0;
  Clock::time_point deadline_;
  bool timed_out_ = false;
  bool peer_closed_ = false;  // the op failed because a peer closed its socket
  std::vector<char> scratch_;      // the blocks peers send for this rank's reduction
  std::vector<float> accumulator_;  // fp32 image of a 16-bit block

  std::atomic<bool> broken_{false};
  std::mutex broken_mutex_;
  std::string broken_reason_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<QueuedOp> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: started after everything it reads is constructed
};

// "dsrt-tcp1 <token> <host or -> <port>"
constexpr const char *kPayloadTag = "dsrt-tcp1";

}  // namespace

Status tcp_comm_create(const RendezvousOptions &rendezvous, int rank, int world, std::shared_ptr<Comm> *out,
                       const TcpCommOptions &options) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_comm_create: out is NULL");
  if (world < 1 || rank < 0 || rank >= world)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "tcp_comm_create: rank %d is not in 0..%d", rank, world - 1);
  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : comm_timeout_seconds_from_env();
  if (world == 1) {
    *out = std::make_shared<TcpComm>(0, 1, std::vector<Fd>(1), timeout_s);
    return Status::Ok();
  }
  Fd listener;
  int port = 0;
  DSRT_RETURN_IF_ERROR(tcp_listen_ephemeral(&listener, &port));
  // Rank 0 is reached at the rendezvous host itself, which every rank can resolve by definition.
  std::string host = "-";
  if (rank != 0 || std::getenv("DSRT_TCP_ADDR") != nullptr)
    DSRT_RETURN_IF_ERROR(tcp_local_address(rendezvous.host, &host));
  uint64_t token = 0;
  if (rank == 0) {
    std::random_device device;
    token = (uint64_t{device()} << 32) ^ device() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  if (options.on_listening) options.on_listening(port);
  std::string mine = Format("%s %llx %s %d", kPayloadTag, static_cast<unsigned long long>(token), host.c_str(), port);
  std::vector<std::string> all;
  DSRT_RETURN_IF_ERROR(tcp_rendezvous_all_gather(rendezvous, rank, world, mine, &all)
                           .with_context("exchanging the addresses of the tcp communicator"));
  std::vector<MeshPeer> peers(world);
  for (int r = 0; r < world; ++r) {
    std::istringstream in(all[r]);
    std::string tag, token_text;
    in >> tag >> token_text >> peers[r].host >> peers[r].port;
    if (tag != kPayloadTag || !in)
      return Error(DSRT_ERR_COMM, "rank %d joined the rendezvous with something other than a tcp communicator's "
                   "address (it chose NCCL, probably because it sees a GPU and this rank does not): give every rank a "
                   "GPU or none, or set DSRT_COMM=tcp on every rank", r);
    if (r == 0) token = std::strtoull(token_text.c_str(), nullptr, 16);
    if (peers[r].host == "-") peers[r].host = rendezvous.host;
  }
  std::vector<Fd> sockets;
  DSRT_RETURN_IF_ERROR(tcp_build_mesh(std::move(listener), rank, world, token, peers, rendezvous.timeout_s, &sockets)
                           .with_context(Format("building the tcp mesh as rank %d of %d", rank, world)));
  log_set_rank(rank);
  *out = std::make_shared<TcpComm>(rank, world, std::move(sockets), timeout_s);
  return Status::Ok();
}

}  // namespace dsrt
