// defines: MpiComm (worker thread, ordered op queue, timeouts, broken state) and
// mpi_comm_create_world.
#include "comm/mpi_comm.h"

#ifdef DSRT_HAVE_MPI
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/mpi_exchange.h"
#include "comm/mpi_runtime.h"
#include "comm/reduce_kernels.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

// Below this many fp32 bytes an all-reduce uses MPI's latency-optimized algorithms (on an fp32
// image of 16-bit data); above it, dsrt's reduce-scatter + all-gather.
constexpr size_t kSmallAllReduceBytes = 64 << 10;
constexpr size_t kBroadcastPieceBytes = size_t{1} << 30;

struct OpState {
  std::mutex mutex;
  std::condition_variable done_cv;
  std::atomic<bool> done{false};
  Status status;

  void finish(Status result) {
    std::lock_guard<std::mutex> guard(mutex);
    status = std::move(result);
    done = true;
    done_cv.notify_all();
  }
  Status wait() {
    // A short yielding spin first: most waits end within microseconds of the last MPI test, and
    // a sleeping waiter costs a scheduler wake-up per collective.
    for (int i = 0; i < 200 && !done.load(std::memory_order_acquire); ++i) std::this_thread::yield();
    std::unique_lock<std::mutex> guard(mutex);
    done_cv.wait(guard, [&] { return done.load(); });
    return status;
  }
};

class MpiComm;
// Runs queued ops on the waiting thread until state is done (defined after MpiComm).
void help_until_done(MpiComm &comm, const OpState &state);

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(std::weak_ptr<MpiComm> comm, std::shared_ptr<OpState> state)
      : comm_(std::move(comm)), state_(std::move(state)) {}
  Status wait() override {
    if (!state_->done) {
      if (auto comm = comm_.lock()) help_until_done(*comm, *state_);
    }
    return state_->wait();
  }

 private:
  std::weak_ptr<MpiComm> comm_;
  std::shared_ptr<OpState> state_;
};

// Set while a blocking form issues its op: the caller waits at once, so an idle communicator runs
// the op on the caller's thread and never wakes its worker.
thread_local bool t_caller_waits = false;
class CallerWaits {
 public:
  CallerWaits() { t_caller_waits = true; }
  ~CallerWaits() { t_caller_waits = false; }
  CallerWaits(const CallerWaits &) = delete;
  CallerWaits &operator=(const CallerWaits &) = delete;
};

struct QueuedOp {
  std::string description;  // "reduce_scatter (bf16, 1000 elements per rank, sum)"
  int64_t step = 0;
  std::function<Status(ExchangeContext &)> body;
  std::shared_ptr<OpState> state;
};

class MpiComm final : public Comm, public std::enable_shared_from_this<MpiComm> {
 public:
  MpiComm(const MpiRuntime *runtime, MPI_Comm comm, int rank, int size)
      : runtime_(runtime), rank_(rank), size_(size), timeout_s_(comm_timeout_seconds_from_env()) {
    ctx_.comm = comm;
    ctx_.rank = rank;
    ctx_.size = size;
    if (const char *chunk = std::getenv("DSRT_COMM_CHUNK_BYTES")) {
      long long value = std::atoll(chunk);
      if (value >= 4096 && value <= (1LL << 24)) {
        ctx_.chunk_bytes = static_cast<size_t>(value);
      } else {
        log_warn_once("DSRT_COMM_CHUNK_BYTES", Format("DSRT_COMM_CHUNK_BYTES='%s' is not in 4096..16777216; using "
                                                      "%zu", chunk, ctx_.chunk_bytes));
      }
    }
    if (runtime_->worker_threads) worker_ = std::thread([this] { worker_loop(); });
  }

  ~MpiComm() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> guard(queue_mutex_);
        stopping_ = true;
      }
      queue_cv_.notify_all();
      worker_.join();
    }
    // A broken communicator may still have collectives inside MPI; it is left to MPI_Finalize.
    if (!broken_ && !mpi_runtime_finalized()) {
      MpiCallLock lock;
      MPI_Comm_free(&ctx_.comm);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backend() const override { return "mpi"; }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    std::string what = Format("all_reduce (%s, %zu elements, %s)", dtype_name(dtype), count, reduce_op_name(op));
    return submit(std::move(what), handle, [this, buffer, count, dtype, op](ExchangeContext &ctx) {
      if (count * sizeof(float) <= kSmallAllReduceBytes) return small_all_reduce(ctx, buffer, count, dtype, op);
      BlockLayout layout = split_blocks(count, size_);
      char *own = static_cast<char *>(buffer) + layout.offset[rank_] * dtype_size(dtype);
      DSRT_RETURN_IF_ERROR(exchange_reduce_scatter(ctx, buffer, own, layout, dtype, op));
      return exchange_all_gather(ctx, own, buffer, layout, dtype);
    });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    std::string what = Format("reduce_scatter (%s, %zu elements per rank, %s)", dtype_name(dtype), recv_count,
                              reduce_op_name(op));
    return submit(std::move(what), handle, [this, send, recv, recv_count, dtype, op](ExchangeContext &ctx) {
      return exchange_reduce_scatter(ctx, send, recv, equal_blocks(recv_count, size_), dtype, op);
    });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, size_);
    std::string what = Format("reduce_scatter_v (%s, %zu elements in all, %zu here, %s)", dtype_name(dtype),
                              layout.total, layout.count[rank_], reduce_op_name(op));
    return submit(std::move(what), handle, [send, recv, layout, dtype, op](ExchangeContext &ctx) {
      return exchange_reduce_scatter(ctx, send, recv, layout, dtype, op);
    });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, size_);
    std::string what = Format("all_gather_v (%s, %zu elements in all, %zu here)", dtype_name(dtype), layout.total,
                              layout.count[rank_]);
    return submit(std::move(what), handle, [send, recv, layout, dtype](ExchangeContext &ctx) {
      return exchange_all_gather(ctx, send, recv, layout, dtype);
    });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    std::string what = Format("all_gather (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle, [this, send, recv, count, dtype](ExchangeContext &ctx) {
      return exchange_all_gather(ctx, send, recv, equal_blocks(count, size_), dtype);
    });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    std::string what = Format("broadcast (%s, %zu elements, root %d)", dtype_name(dtype), count, root);
    size_t bytes = count * dtype_size(dtype);
    return submit(std::move(what), handle,
                  [buffer, bytes, root](ExchangeContext &ctx) { return broadcast_pieces(ctx, buffer, bytes, root); });
  }

  Status all_reduce_sync(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) override {
    CallerWaits waits;
    return Comm::all_reduce_sync(buffer, count, dtype, op);
  }
  Status reduce_scatter_sync(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype,
                             ReduceOp op) override {
    CallerWaits waits;
    return Comm::reduce_scatter_sync(send, recv, recv_count, dtype, op);
  }
  Status all_gather_sync(const void *send, void *recv, size_t count, dsrt_dtype dtype) override {
    CallerWaits waits;
    return Comm::all_gather_sync(send, recv, count, dtype);
  }
  Status broadcast_sync(void *buffer, size_t count, dsrt_dtype dtype, int root) override {
    CallerWaits waits;
    return Comm::broadcast_sync(buffer, count, dtype, root);
  }

  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_f64", values, count, op));
    std::string what = Format("all_reduce_f64 (%zu values, %s)", count, reduce_op_name(op));
    return run_blocking(std::move(what), [this, values, count, op](ExchangeContext &ctx) {
      return mpi_all_reduce(ctx, values, count, MPI_DOUBLE, float_op(op), "MPI_Iallreduce (f64)");
    });
  }

  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_u64", values, count, op));
    std::string what = Format("all_reduce_u64 (%zu values, %s)", count, reduce_op_name(op));
    MPI_Op mpi_op = op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
    return run_blocking(std::move(what), [values, count, mpi_op](ExchangeContext &ctx) {
      return mpi_all_reduce(ctx, values, count, MPI_UINT64_T, mpi_op, "MPI_Iallreduce (u64)");
    });
  }

  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_bytes_args(*this, data, bytes, root));
    std::string what = Format("broadcast_bytes (%zu bytes, root %d)", bytes, root);
    return run_blocking(std::move(what),
                        [data, bytes, root](ExchangeContext &ctx) { return broadcast_pieces(ctx, data, bytes, root); });
  }

  Status barrier() override {
    return run_blocking("barrier", [](ExchangeContext &ctx) {
      MPI_Request request = MPI_REQUEST_NULL;
      {
        MpiCallLock lock;
        DSRT_RETURN_IF_ERROR(mpi_check(MPI_Ibarrier(ctx.comm, &request), "MPI_Ibarrier"));
      }
      return poll_request(ctx, &request, "MPI_Ibarrier");
    });
  }

 private:
  using Body = std::function<Status(ExchangeContext &)>;

  MPI_Op float_op(ReduceOp op) const {
    return op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? runtime_->max_nan : runtime_->min_nan;
  }

  static Status mpi_all_reduce(ExchangeContext &ctx, void *values, size_t count, MPI_Datatype type, MPI_Op op,
                               const char *call) {
    if (count == 0) return Status::Ok();
    MPI_Request request = MPI_REQUEST_NULL;
    {
      MpiCallLock lock;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count), type, op, ctx.comm, &request);
      DSRT_RETURN_IF_ERROR(mpi_check(rc, call));
    }
    return poll_request(ctx, &request, call);
  }

  // 16-bit data is widened to fp32, reduced by MPI in fp32 and rounded once.
  Status small_all_reduce(ExchangeContext &ctx, void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) {
    if (dtype == DSRT_F32) return mpi_all_reduce(ctx, buffer, count, MPI_FLOAT, float_op(op), "MPI_Iallreduce");
    small_scratch_.resize(count);
    load_to_f32(small_scratch_.data(), buffer, dtype, count);
    DSRT_RETURN_IF_ERROR(mpi_all_reduce(ctx, small_scratch_.data(), count, MPI_FLOAT, float_op(op), "MPI_Iallreduce"));
    store_from_f32(buffer, small_scratch_.data(), dtype, count);
    return Status::Ok();
  }

  static Status broadcast_pieces(ExchangeContext &ctx, void *data, size_t bytes, int root) {
    for (size_t done = 0; done < bytes; done += kBroadcastPieceBytes) {
      size_t piece = std::min(kBroadcastPieceBytes, bytes - done);
      MPI_Request request = MPI_REQUEST_NULL;
      {
        MpiCallLock lock;
        int rc = MPI_Ibcast(static_cast<char *>(data) + done, static_cast<int>(piece), MPI_BYTE, root, ctx.comm,
                            &request);
        DSRT_RETURN_IF_ERROR(mpi_check(rc, "MPI_Ibcast"));
      }
      DSRT_RETURN_IF_ERROR(poll_request(ctx, &request, "MPI_Ibcast"));
    }
    return Status::Ok();
  }

  Status broken_error(const std::string &what) {
    std::lock_guard<std::mutex> guard(broken_mutex_);
    return Error(DSRT_ERR_COMM,
                 "%s on rank %d: this communicator is unusable after an earlier failure (%s); the ranks are no "
                 "longer in step, so restart the job (or create a new communicator on every rank)",
                 what.c_str(), rank_, broken_reason_.c_str());
  }

  // Issues an op: queued for the worker, or run here when MPI does not allow a worker thread.
  Status submit(std::string what, CommHandle *handle, Body body) {
    *handle = nullptr;
    if (broken_) return broken_error(what);
    auto state = std::make_shared<OpState>();
    QueuedOp op{std::move(what), step(), std::move(body), state};
    if (!worker_.joinable()) {
      state->finish(execute(op));
    } else if (t_caller_waits && run_on_caller_if_idle(op)) {
      // done on this thread
    } else {
      {
        std::lock_guard<std::mutex> guard(queue_mutex_);
        queue_.push_back(std::move(op));
      }
      queue_cv_.notify_one();
    }
    *handle = std::make_unique<MpiRequest>(weak_from_this(), std::move(state));
    return Status::Ok();
  }

  // Runs op here when no op is queued or running; false (op untouched) otherwise.
  bool run_on_caller_if_idle(QueuedOp &op) {
    std::unique_lock<std::mutex> queue_lock(queue_mutex_);
    if (executing_ || !queue_.empty()) return false;
    executing_ = true;
    queue_lock.unlock();
    op.state->finish(execute(op));
    queue_lock.lock();
    executing_ = false;
    bool more = !queue_.empty();
    queue_lock.unlock();
    if (more) queue_cv_.notify_one();
    return true;
  }

  Status run_blocking(std::string what, Body body) {
    CallerWaits waits;
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(submit(std::move(what), &handle, std::move(body)));
    return handle->wait();
  }

  // Runs one op under the deadline; any failure leaves the ranks out of step, so it breaks the
  // communicator and later ops fail at once.
  Status execute(QueuedOp &op) {
    if (broken_) return broken_error(op.description);
    ctx_.timed_out = false;
    const double timeout_s = comm_timeout_seconds(timeout_s_);  // the config key may set it after creation
    ctx_.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(timeout_s));
    Status status;
    try {
      status = op.body(ctx_);
    } catch (const std::bad_alloc &) {
      status = Error(DSRT_ERR_OUT_OF_MEMORY, "host memory exhausted");
    } catch (const std::exception &e) {
      status = Error(DSRT_ERR_INTERNAL, "unexpected exception: %s", e.what());
    }
    if (status.ok()) return status;
    if (ctx_.timed_out) {
      status = Error(DSRT_ERR_COMM,
                     "%s did not complete within %g s on rank %d of %d at step %lld: another rank skipped or "
                     "reordered this collective, is still busy, or died (%s); the communicator is now unusable. "
                     "Raise \"comm_timeout\" in the config (or DSRT_COMM_TIMEOUT_S) if the step is legitimately slower",
                     op.description.c_str(), timeout_s, rank_, size_, static_cast<long long>(op.step),
                     status.message().c_str());
    } else {
      status = status.with_context(Format("%s on rank %d of %d at step %lld", op.description.c_str(), rank_, size_,
                                          static_cast<long long>(op.step)));
    }
    {
      std::lock_guard<std::mutex> guard(broken_mutex_);
      broken_reason_ = status.message();
    }
    broken_ = true;
    mpi_runtime_mark_broken();
    logf(DSRT_LOG_ERROR, "%s", status.message().c_str());
    return status;
  }

  // Runs the front op with the queue unlocked; executing_ keeps ops one at a time, in issue order.
  void run_front(std::unique_lock<std::mutex> &queue_lock) {
    QueuedOp op = std::move(queue_.front());
    queue_.pop_front();
    executing_ = true;
    queue_lock.unlock();
    op.state->finish(execute(op));
    queue_lock.lock();
    executing_ = false;
  }

  void worker_loop() {
    std::unique_lock<std::mutex> queue_lock(queue_mutex_);
    for (;;) {
      queue_cv_.wait(queue_lock, [&] { return !executing_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, and every issued op has run
      run_front(queue_lock);
    }
  }

 public:
  // A waiter whose op has not started while the worker is idle runs it (and any before it)
  // itself: a blocking collective then costs no thread hand-off. If the worker is busy, it goes
  // on to this op by itself and the waiter just waits.
  void help_until(const OpState &state) {
    std::unique_lock<std::mutex> queue_lock(queue_mutex_);
    while (!state.done && !executing_ && !queue_.empty()) run_front(queue_lock);
    bool more = !executing_ && !queue_.empty();
    queue_lock.unlock();
    if (more) queue_cv_.notify_one();  // ops issued after ours go back to the worker
  }

 private:
  const MpiRuntime *runtime_;
  const int rank_, size_;
  const double timeout_s_;           // DSRT_COMM_TIMEOUT_S at creation (comm_timeout_seconds)
  ExchangeContext ctx_;              // used only by the op being executed
  std::vector<float> small_scratch_;  // fp32 image for small 16-bit all-reduces

  std::atomic<bool> broken_{false};
  std::mutex broken_mutex_;
  std::string broken_reason_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<QueuedOp> queue_;
  bool stopping_ = false;
  bool executing_ = false;  // an op is running (on the worker or a helping waiter)
  std::thread worker_;  // last: started after everything it reads is constructed
};

void help_until_done(MpiComm &comm, const OpState &state) { comm.help_until(state); }

}  // namespace

bool mpi_already_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0 && !mpi_runtime_finalized();
}

Status mpi_comm_create_world(int expected_rank, int expected_size, const char *launcher, std::shared_ptr<Comm> *out) {
  const MpiRuntime *runtime = nullptr;
  DSRT_RETURN_IF_ERROR(mpi_runtime_start(&runtime));
  int rank = 0, size = 0;
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  }
  if ((expected_size >= 0 && expected_size != size) || (expected_rank >= 0 && expected_rank != rank))
    return Error(DSRT_ERR_COMM,
                 "%s says this is rank %d of %d but MPI reports rank %d of %d: the program was probably started by a "
                 "launcher of a different MPI than the one dsrt was built with (Open MPI), or the environment was "
                 "copied between processes",
                 launcher, expected_rank, expected_size, rank, size);
  // Each dsrt communicator gets its own MPI communicator so engines never match each other's
  // messages; the duplication is itself polled so a rank that never arrives cannot hang us.
  ExchangeContext ctx;
  ctx.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(comm_timeout_seconds(comm_timeout_seconds_from_env())));
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &request), "MPI_Comm_idup"));
  }
  Status dup_status = poll_request(ctx, &request, "MPI_Comm_idup");
  if (!dup_status.ok()) mpi_runtime_mark_broken();
  if (!dup_status.ok())
    return dup_status.with_context(Format("creating a communicator on rank %d of %d (every rank must create it)",
                                          rank, size));
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  }
  log_set_rank(rank);
  *out = std::make_shared<MpiComm>(runtime, dup, rank, size);
  return Status::Ok();
}

}  // namespace dsrt

#else  // no MPI in this build

namespace dsrt {
bool mpi_already_initialized() { return false; }
Status mpi_comm_create_world(int, int expected_size, const char *launcher, std::shared_ptr<Comm> *) {
  return Error(DSRT_ERR_UNSUPPORTED,
               "launched by %s with %d ranks, but this build of dsrt has no MPI: rebuild with -DDSRT_MPI=ON and "
               "Open MPI installed",
               launcher, expected_size);
}
}  // namespace dsrt
#endif
