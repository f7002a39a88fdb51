// defines: QueuedComm (the issue-order queue, the worker thread, helping waiters, the per-op
// deadline and the broken state shared by the MPI and Gloo communicators).
#include "comm/queued_comm.h"

#include <exception>
#include <new>

#include "comm/comm_checks.h"
#include "util/log.h"

namespace dsrt {

struct QueuedOpState {
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
    // A short yielding spin first: most waits end within microseconds of the op's last poll, and
    // a sleeping waiter costs a scheduler wake-up per collective.
    for (int i = 0; i < 200 && !done.load(std::memory_order_acquire); ++i) std::this_thread::yield();
    std::unique_lock<std::mutex> guard(mutex);
    done_cv.wait(guard, [&] { return done.load(); });
    return status;
  }
};

namespace {

class QueuedRequest final : public CommRequest {
 public:
  QueuedRequest(std::weak_ptr<QueuedComm> comm, std::shared_ptr<QueuedOpState> state)
      : comm_(std::move(comm)), state_(std::move(state)) {}
  Status wait() override {
    if (!state_->done) {
      if (auto comm = comm_.lock()) comm->help_until(*state_);
    }
    return state_->wait();
  }

 private:
  std::weak_ptr<QueuedComm> comm_;
  std::shared_ptr<QueuedOpState> state_;
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

}  // namespace

QueuedComm::QueuedComm(int rank, int size, double timeout_s, Wording wording)
    : rank_(rank), size_(size), timeout_s_(timeout_s), wording_(wording) {}

QueuedComm::~QueuedComm() { stop_worker(); }

void QueuedComm::start_worker() { worker_ = std::thread([this] { worker_loop(); }); }

void QueuedComm::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> guard(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
}

Status QueuedComm::all_reduce_sync(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) {
  CallerWaits waits;
  return Comm::all_reduce_sync(buffer, count, dtype, op);
}
Status QueuedComm::reduce_scatter_sync(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype,
                                       ReduceOp op) {
  CallerWaits waits;
  return Comm::reduce_scatter_sync(send, recv, recv_count, dtype, op);
}
Status QueuedComm::all_gather_sync(const void *send, void *recv, size_t count, dsrt_dtype dtype) {
  CallerWaits waits;
  return Comm::all_gather_sync(send, recv, count, dtype);
}
Status QueuedComm::broadcast_sync(void *buffer, size_t count, dsrt_dtype dtype, int root) {
  CallerWaits waits;
  return Comm::broadcast_sync(buffer, count, dtype, root);
}

Status QueuedComm::broken_error(const std::string &what) {
  std::lock_guard<std::mutex> guard(broken_mutex_);
  return Error(DSRT_ERR_COMM,
               "%s on rank %d: this communicator is unusable after an earlier failure (%s); the ranks are no "
               "longer in step, so restart the job (or create a new communicator on every rank)",
               what.c_str(), rank_, broken_reason_.c_str());
}

Status QueuedComm::submit(std::string what, CommHandle *handle, Body body) {
  *handle = nullptr;
  if (broken_) return broken_error(what);
  auto state = std::make_shared<QueuedOpState>();
  Queued op{std::move(what), step(), std::move(body), state};
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
  *handle = std::make_unique<QueuedRequest>(weak_from_this(), std::move(state));
  return Status::Ok();
}

bool QueuedComm::run_on_caller_if_idle(Queued &op) {
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

Status QueuedComm::run_blocking(std::string what, Body body) {
  CallerWaits waits;
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(submit(std::move(what), &handle, std::move(body)));
  return handle->wait();
}

// Runs one op under the deadline; any failure leaves the ranks out of step, so it breaks the
// communicator and later ops fail at once.
Status QueuedComm::execute(Queued &op) {
  if (broken_) return broken_error(op.description);
  const double timeout_s = comm_timeout_seconds(timeout_s_);  // the config key may set it after creation
  begin_op(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  Status status;
  try {
    status = op.body();
  } catch (const std::bad_alloc &) {
    status = Error(DSRT_ERR_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception &e) {
    status = Error(DSRT_ERR_INTERNAL, "unexpected exception: %s", e.what());
  }
  if (status.ok()) return status;
  if (op_timed_out()) {
    status = Error(DSRT_ERR_COMM,
                   "%s did not complete within %g s on rank %d of %d at step %lld: another rank skipped or "
                   "reordered this collective, is still busy, or %s (%s); the communicator is now unusable. "
                   "Raise \"comm_timeout\" in the config (or DSRT_COMM_TIMEOUT_S) if the step is legitimately slower",
                   op.description.c_str(), timeout_s, rank_, size_, static_cast<long long>(op.step),
                   wording_.hang_word, status.message().c_str());
  } else {
    status = status.with_context(Format("%s on rank %d of %d at step %lld%s", op.description.c_str(), rank_, size_,
                                        static_cast<long long>(op.step), wording_.context_suffix));
  }
  {
    std::lock_guard<std::mutex> guard(broken_mutex_);
    broken_reason_ = status.message();
  }
  broken_ = true;
  logf(DSRT_LOG_ERROR, "%s", status.message().c_str());
  on_broken(status);
  return status;
}

// Runs the front op with the queue unlocked; executing_ keeps ops one at a time, in issue order.
void QueuedComm::run_front(std::unique_lock<std::mutex> &queue_lock) {
  Queued op = std::move(queue_.front());
  queue_.pop_front();
  executing_ = true;
  queue_lock.unlock();
  op.state->finish(execute(op));
  queue_lock.lock();
  executing_ = false;
}

void QueuedComm::worker_loop() {
  std::unique_lock<std::mutex> queue_lock(queue_mutex_);
  for (;;) {
    queue_cv_.wait(queue_lock, [&] { return !executing_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and every issued op has run
    run_front(queue_lock);
  }
}

// If the worker is busy, it goes on to this op by itself and the waiter just waits.
void QueuedComm::help_until(const QueuedOpState &state) {
  std::unique_lock<std::mutex> queue_lock(queue_mutex_);
  while (!state.done && !executing_ && !queue_.empty()) run_front(queue_lock);
  bool more = !executing_ && !queue_.empty();
  queue_lock.unlock();
  if (more) queue_cv_.notify_one();  // ops issued after ours go back to the worker
}

}  // namespace dsrt
