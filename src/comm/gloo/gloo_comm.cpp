// defines: GlooComm (collectives as header-checked exchanges over Gloo's unbound buffers, on the
// shared queue; split into a fresh mesh per color) behind gloo_comm_make (gloo_comm_make.h).
#include "comm/gloo/gloo_comm_make.h"

#ifdef DSRT_HAVE_GLOO
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/comm_split.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/gloo/gloo_split.h"
#include "comm/gloo/gloo_store.h"
#include "comm/queued_comm.h"
#include "comm/reduce_kernels.h"
#include "comm/tcp_socket.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;

constexpr uint32_t kOpMagic = 0x4453544f;  // "DSTO"
constexpr size_t kHeaderBytes = 16;

void put_u64(char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (56 - 8 * i));
}
uint64_t get_u64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// What one op moves between this rank and one peer (either side may be empty).
struct Flow {
  const char *out = nullptr;
  size_t out_bytes = 0;
  char *in = nullptr;
  size_t in_bytes = 0;
};

class GlooComm final : public QueuedComm {
 public:
  GlooComm(int rank, int size, std::shared_ptr<gloo::Context> context, double timeout_s, std::string host)
      : QueuedComm(rank, size, timeout_s, Wording{"hangs", " (tcp)"}),
        context_(std::move(context)),
        host_(std::move(host)) {
    if (size > 1) start_worker();
  }
  ~GlooComm() override { stop_worker(); }

  const char *backend() const override { return "tcp"; }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    count_all_reduce(count * dtype_size(dtype));
    std::string what = Format("all_reduce (%s, %zu elements, %s)", dtype_name(dtype), count, reduce_op_name(op));
    return submit(std::move(what), handle, [this, buffer, count, dtype, op] {
      BlockLayout layout = split_blocks(count, size_);
      char *own = static_cast<char *>(buffer) + layout.offset[rank_] * dtype_size(dtype);
      DSRT_RETURN_IF_ERROR(reduce_scatter_blocks(buffer, own, layout, dtype, op));
      return all_gather_blocks(own, buffer, layout, dtype_size(dtype));
    });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    count_reduce_scatter(recv_count * dtype_size(dtype) * size(), recv_count * dtype_size(dtype));
    std::string what = Format("reduce_scatter (%s, %zu elements per rank, %s)", dtype_name(dtype), recv_count,
                              reduce_op_name(op));
    return submit(std::move(what), handle, [this, send, recv, recv_count, dtype, op] {
      return reduce_scatter_blocks(send, recv, equal_blocks(recv_count, size_), dtype, op);
    });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, size_);
    count_reduce_scatter(layout.total * dtype_size(dtype), layout.count[rank_] * dtype_size(dtype));
    std::string what = Format("reduce_scatter_v (%s, %zu elements in all, %zu here, %s)", dtype_name(dtype),
                              layout.total, layout.count[rank_], reduce_op_name(op));
    return submit(std::move(what), handle, [this, send, recv, layout, dtype, op] {
      return reduce_scatter_blocks(send, recv, layout, dtype, op);
    });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    count_all_gather(count * dtype_size(dtype));
    std::string what = Format("all_gather (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle, [this, send, recv, count, dtype] {
      return all_gather_blocks(send, recv, equal_blocks(count, size_), dtype_size(dtype));
    });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, size_);
    count_all_gather(layout.count[rank_] * dtype_size(dtype));
    std::string what = Format("all_gather_v (%s, %zu elements in all, %zu here)", dtype_name(dtype), layout.total,
                              layout.count[rank_]);
    return submit(std::move(what), handle,
                  [this, send, recv, layout, dtype] { return all_gather_blocks(send, recv, layout, dtype_size(dtype)); });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    count_broadcast(count * dtype_size(dtype), root);
    std::string what = Format("broadcast (%s, %zu elements, root %d)", dtype_name(dtype), count, root);
    size_t bytes = count * dtype_size(dtype);
    return submit(std::move(what), handle, [this, buffer, bytes, root] { return broadcast_raw(buffer, bytes, root); });
  }

  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_gather(bytes_per_rank);
    std::string what = Format("all_gather_bytes (%zu bytes per rank)", bytes_per_rank);
    return submit(std::move(what), handle, [this, send, recv, bytes_per_rank] {
      return all_gather_blocks(send, recv, equal_blocks(bytes_per_rank, size_), 1);
    });
  }

  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_to_all(bytes_per_rank);
    std::string what = Format("all_to_all_bytes (%zu bytes per rank)", bytes_per_rank);
    return submit(std::move(what), handle,
                  [this, send, recv, bytes_per_rank] { return all_to_all_blocks(send, recv, bytes_per_rank); });
  }

  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_args(*this, send, recv, count, dtype, handle));
    const size_t block = count * dtype_size(dtype);
    count_all_to_all(block);
    std::string what = Format("all_to_all (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle, [this, send, recv, block] { return all_to_all_blocks(send, recv, block); });
  }

  // A new Gloo context among the ranks of this color (gloo_split.h), its pairs checked with a token
  // every rank agrees on, and the outcome agreed over this communicator.
  Status split(int color, int key, std::shared_ptr<Comm> *out) override {
    DSRT_RETURN_IF_ERROR(check_split_args(color, out));
    *out = nullptr;
    SplitPlan plan;
    DSRT_RETURN_IF_ERROR(comm_split_plan(*this, color, key, &plan));
    uint64_t token = 0;
    if (size_ > 1) {
      std::random_device device;
      token = (uint64_t{device()} << 32) ^ device();
      DSRT_RETURN_IF_ERROR(all_reduce_u64(&token, 1, ReduceOp::Max));
    }
    const double timeout = comm_timeout_seconds(timeout_s());
    std::shared_ptr<gloo::Context> context;
    Status status = size_ > 1 ? gloo_split_mesh(*this, host_, plan, Format("split%llu/%d/",
                                                static_cast<unsigned long long>(splits_), color), timeout, &context)
                              : Status::Ok();
    ++splits_;
    std::shared_ptr<GlooComm> comm;
    if (status.ok()) {
      try {
        comm = std::make_shared<GlooComm>(plan.rank, plan.size(), context, timeout_s(), host_);
        if (plan.size() > 1) status = comm->check_pairs(token, timeout);
      } catch (const std::exception &e) {
        status = Error(DSRT_ERR_COMM, "split: %s", e.what());
      }
    }
    uint64_t failed = status.ok() ? 0 : 1;
    DSRT_RETURN_IF_ERROR(all_reduce_u64(&failed, 1, ReduceOp::Max));
    if (!status.ok()) return status.with_context(Format("split (color %d) on rank %d", color, rank_));
    if (failed != 0)
      return Error(DSRT_ERR_COMM, "split (color %d): another rank could not join its new communicator; see its own "
                   "error", color);
    comm->set_step(step());
    *out = std::move(comm);
    return Status::Ok();
  }

  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_f64", values, count, op));
    count_all_reduce(count * sizeof(double));
    return run_blocking(Format("all_reduce_f64 (%zu values, %s)", count, reduce_op_name(op)),
                        [this, values, count, op] { return control_reduce(values, count, op); });
  }
  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_u64", values, count, op));
    count_all_reduce(count * sizeof(uint64_t));
    return run_blocking(Format("all_reduce_u64 (%zu values, %s)", count, reduce_op_name(op)),
                        [this, values, count, op] { return control_reduce(values, count, op); });
  }
  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_bytes_args(*this, data, bytes, root));
    count_broadcast(bytes, root);
    return run_blocking(Format("broadcast_bytes (%zu bytes, root %d)", bytes, root),
                        [this, data, bytes, root] { return broadcast_raw(data, bytes, root); });
  }
  Status barrier() override {
    return run_blocking("barrier", [this] {
      std::vector<Flow> flows(size_);
      return exchange(flows);
    });
  }

  // Before the first collective: every pair carries rank 0's job token both ways, so a stranger
  // that took a pair's place in Gloo's listener is found now instead of corrupting a collective.
  Status check_pairs(uint64_t token, double timeout_s) {
    begin_op(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
    std::vector<std::array<char, 8>> mine(size_), theirs(size_);
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      put_u64(mine[p].data(), token);
      flows[p] = Flow{mine[p].data(), 8, theirs[p].data(), 8};
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && get_u64(theirs[p].data()) != token)
        return Error(DSRT_ERR_COMM, "the connection Gloo made to rank %d does not carry this job's token: another "
                     "program connected to this rank's port while the mesh formed; restart the job", p);
    return Status::Ok();
  }

 private:
  void begin_op(Clock::time_point deadline) override {
    deadline_ = deadline;
    timed_out_ = false;
    peer_closed_ = false;
  }
  bool op_timed_out() const override { return timed_out_; }
  // Peers may be blocked on this rank in this or a later collective: closing the connections makes
  // them fail at once instead of at their timeout. A peer that closed is seen by every rank
  // directly (full mesh), so that case keeps the connections and each rank names the rank that left.
  void on_broken(const Status &) override {
    if (peer_closed_ || !context_) return;
    try {
      context_->closeConnections();
    } catch (const std::exception &e) {
      logf(DSRT_LOG_WARN, "closing the Gloo connections after a failure: %s", e.what());
    }
  }

  std::unique_ptr<UnboundBuffer> buffer(const void *data, size_t bytes) {
    return context_->createUnboundBuffer(const_cast<void *>(data), bytes);
  }

  // Waits for one posted send or recv with peer, within the op's deadline.
  Status wait_on(UnboundBuffer &buffer, bool receiving, int peer) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    const char *doing = receiving ? "receiving from it" : "sending to it";
    if (left.count() <= 0) {
      timed_out_ = true;
      return Error(DSRT_ERR_COMM, "still waiting for rank %d (%s)", peer, doing);
    }
    try {
      if (receiving) buffer.waitRecv(nullptr, left);
      else buffer.waitSend(nullptr, left);
      return Status::Ok();
    } catch (const gloo::IoException &e) {
      if (std::strstr(e.what(), "Timed out") != nullptr || Clock::now() >= deadline_) {
        timed_out_ = true;
        return Error(DSRT_ERR_COMM, "still waiting for rank %d (%s)", peer, doing);
      }
      peer_closed_ = true;
      return Error(DSRT_ERR_COMM, "rank %d closed its connection (%s): it exited, crashed or failed; see its own "
                   "error", peer, e.what());
    }
  }

  // Posts a send or recv with peer; Gloo throws at once when the pair already failed.
  Status post(int peer, const std::function<void()> &call) {
    try {
      call();
      return Status::Ok();
    } catch (const gloo::IoException &e) {
      if (std::strstr(e.what(), "imeout") != nullptr) {
        timed_out_ = true;
        return Error(DSRT_ERR_COMM, "still waiting for rank %d (%s)", peer, e.what());
      }
      peer_closed_ = true;
      return Error(DSRT_ERR_COMM, "rank %d closed its connection (%s): it exited, crashed or failed; see its own "
                   "error", peer, e.what());
    } catch (const gloo::Exception &e) {
      return Error(DSRT_ERR_COMM, "Gloo refused a transfer with rank %d: %s", peer, e.what());
    }
  }

  // Moves every flow at once (flows[rank_] is ignored): a header to and from every peer, checked,
  // then the payloads. A failure returns with transfers still posted; destroying their buffers
  // withdraws them from Gloo before the memory is released.
  Status exchange(std::vector<Flow> &flows) {
    if (size_ == 1) return Status::Ok();
    ++sequence_;
    const uint64_t header_slot = sequence_ << 1, payload_slot = header_slot | 1;
    std::vector<std::array<char, kHeaderBytes>> header_out(size_), header_in(size_);
    std::vector<std::unique_ptr<UnboundBuffer>> sends(size_), recvs(size_), payload_sends(size_),
        payload_recvs(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      put_u64(header_out[p].data(), (uint64_t{kOpMagic} << 32) | (sequence_ & 0xffffffffu));
      put_u64(header_out[p].data() + 8, flows[p].out_bytes);
      recvs[p] = buffer(header_in[p].data(), kHeaderBytes);
      sends[p] = buffer(header_out[p].data(), kHeaderBytes);
      DSRT_RETURN_IF_ERROR(post(p, [&] {
        recvs[p]->recv(p, header_slot);
        sends[p]->send(p, header_slot);
      }));
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      DSRT_RETURN_IF_ERROR(wait_on(*recvs[p], true, p));
      DSRT_RETURN_IF_ERROR(check_header(p, header_in[p].data(), flows[p].in_bytes));
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (flows[p].in_bytes > 0) {
        payload_recvs[p] = buffer(flows[p].in, flows[p].in_bytes);
        DSRT_RETURN_IF_ERROR(post(p, [&] { payload_recvs[p]->recv(p, payload_slot); }));
      }
      if (flows[p].out_bytes > 0) {
        payload_sends[p] = buffer(flows[p].out, flows[p].out_bytes);
        DSRT_RETURN_IF_ERROR(post(p, [&] { payload_sends[p]->send(p, payload_slot); }));
      }
    }
    for (int p = 0; p < size_; ++p)
      if (payload_recvs[p]) DSRT_RETURN_IF_ERROR(wait_on(*payload_recvs[p], true, p));
    for (int p = 0; p < size_; ++p) {
      if (payload_sends[p]) DSRT_RETURN_IF_ERROR(wait_on(*payload_sends[p], false, p));
      if (sends[p]) DSRT_RETURN_IF_ERROR(wait_on(*sends[p], false, p));
    }
    return Status::Ok();
  }

  Status check_header(int p, const char *header, uint64_t expect) {
    uint64_t tag = get_u64(header), bytes = get_u64(header + 8);
    if ((tag >> 32) != kOpMagic)
      return Error(DSRT_ERR_COMM, "rank %d sent bytes that are not a collective's header: the stream is out of "
                   "step (a bug, or ranks issued collectives of different sizes)", p);
    if ((tag & 0xffffffffu) != (sequence_ & 0xffffffffu) || bytes != expect)
      return Error(DSRT_ERR_COMM, "rank %d sent %llu bytes as its collective #%llu where this rank expects %llu bytes "
                   "for its collective #%llu: the ranks issued different collectives, in another order or with "
                   "other sizes", p, static_cast<unsigned long long>(bytes),
                   static_cast<unsigned long long>(tag & 0xffffffffu), static_cast<unsigned long long>(expect),
                   static_cast<unsigned long long>(sequence_ & 0xffffffffu));
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
      flows[p] = Flow{source + layout.offset[p] * element, layout.count[p] * element,
                      scratch_.data() + static_cast<size_t>(p) * own_count * element, own_count * element};
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

  Status all_gather_blocks(const void *send, void *recv, const BlockLayout &layout, size_t element) {
    char *dest = static_cast<char *>(recv);
    char *own_dest = dest + layout.offset[rank_] * element;
    const char *own = static_cast<const char *>(send);
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      flows[p] = Flow{own, layout.count[rank_] * element, dest + layout.offset[p] * element,
                      layout.count[p] * element};
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    if (own != own_dest && layout.count[rank_] > 0) std::memmove(own_dest, own, layout.count[rank_] * element);
    return Status::Ok();
  }

  // Block p of send to rank p, block p of recv from rank p, all at once.
  Status all_to_all_blocks(const void *send, void *recv, size_t block) {
    const char *source = static_cast<const char *>(send);
    char *dest = static_cast<char *>(recv);
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const size_t at = static_cast<size_t>(p) * block;
      flows[p] = Flow{source + at, block, dest + at, block};
    }
    DSRT_RETURN_IF_ERROR(exchange(flows));
    const size_t own = static_cast<size_t>(rank_) * block;
    if (block > 0) std::memcpy(dest + own, source + own, block);
    return Status::Ok();
  }

  Status broadcast_raw(void *data, size_t bytes, int root) {
    std::vector<Flow> flows(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (rank_ == root) flows[p].out = static_cast<const char *>(data), flows[p].out_bytes = bytes;
      if (p == root) flows[p].in = static_cast<char *>(data), flows[p].in_bytes = bytes;
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
      flows[p] = Flow{reinterpret_cast<const char *>(values), bytes,
                      reinterpret_cast<char *>(all.data() + static_cast<size_t>(p) * count), bytes};
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

  std::shared_ptr<gloo::Context> context_;  // null in a world of one
  const std::string host_;                   // the address peers reach this rank at (for split)
  uint64_t splits_ = 0;                      // splits made so far (fresh store keys for each)
  // Used only by the op being executed.
  uint64_t sequence_ = 0;
  Clock::time_point deadline_;
  bool timed_out_ = false;
  bool peer_closed_ = false;        // the op failed because a peer closed its connection
  std::vector<char> scratch_;       // the blocks peers send for this rank's reduction
  std::vector<float> accumulator_;  // fp32 image of a 16-bit block
};

}  // namespace

std::shared_ptr<Comm> gloo_comm_make(int rank, int size, std::shared_ptr<gloo::Context> context, double timeout_s,
                                     std::string host) {
  return std::make_shared<GlooComm>(rank, size, std::move(context), timeout_s, std::move(host));
}

Status gloo_comm_check_pairs(Comm &comm, uint64_t token, double timeout_s) {
  return static_cast<GlooComm &>(comm).check_pairs(token, timeout_s);
}

}  // namespace dsrt

#endif  // DSRT_HAVE_GLOO
