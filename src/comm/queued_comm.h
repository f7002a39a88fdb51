// queued_comm.h -- the skeleton every host communicator shares (MPI, Gloo): collectives run one at
// a time in issue order, on a worker thread or on a waiting caller; each runs under the timeout
// (DSRT_COMM_TIMEOUT_S); the first failure breaks the communicator, and every later call fails at
// once naming that failure, since the ranks are no longer in step.
//
// A backend derives from QueuedComm, issues its collectives with submit() or run_blocking() (a
// body that moves the bytes and returns a Status), and reports through begin_op()/op_timed_out()
// whether a failure was a timeout. It calls start_worker() at the end of its constructor and
// stop_worker() first in its destructor (so no op runs on a half-destroyed backend).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/comm.h"

namespace dsrt {

struct QueuedOpState;

class QueuedComm : public Comm, public std::enable_shared_from_this<QueuedComm> {
 public:
  using Clock = std::chrono::steady_clock;
  using Body = std::function<Status()>;

  ~QueuedComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Blocking forms: an idle communicator runs the op on the caller's thread (no hand-off).
  Status all_reduce_sync(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) override;
  Status reduce_scatter_sync(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op) override;
  Status all_gather_sync(const void *send, void *recv, size_t count, dsrt_dtype dtype) override;
  Status broadcast_sync(void *buffer, size_t count, dsrt_dtype dtype, int root) override;

  // A waiter whose op has not started while nothing runs executes the queue up to its op itself.
  void help_until(const QueuedOpState &state);

 protected:
  struct Wording {
    const char *hang_word;       // "died", "hangs": what the timeout message says a peer may do
    const char *context_suffix;  // appended to "op on rank r of n at step s" ("" or " (tcp)")
  };
  QueuedComm(int rank, int size, double timeout_s, Wording wording);

  void start_worker();  // end of the backend's constructor; without it ops run on the caller
  void stop_worker();   // first in the backend's destructor: runs what was issued, then joins

  // Issues an op described by what ("reduce_scatter (bf16, 1000 elements per rank, sum)").
  Status submit(std::string what, CommHandle *handle, Body body);
  Status run_blocking(std::string what, Body body);

  // Called on the executing thread before each op's body with the op's deadline.
  virtual void begin_op(Clock::time_point deadline) = 0;
  // True when the op that just failed ran out of time (rather than failing otherwise).
  virtual bool op_timed_out() const = 0;
  // Called once when an op fails and breaks the communicator (e.g. to wake blocked peers).
  virtual void on_broken(const Status &) {}

  bool broken() const { return broken_; }
  double timeout_s() const { return timeout_s_; }

  const int rank_, size_;

 private:
  struct Queued {
    std::string description;
    int64_t step = 0;
    Body body;
    std::shared_ptr<QueuedOpState> state;
  };
  Status broken_error(const std::string &what);
  Status execute(Queued &op);
  bool run_on_caller_if_idle(Queued &op);
  void run_front(std::unique_lock<std::mutex> &queue_lock);
  void worker_loop();

  const double timeout_s_;
  const Wording wording_;

  std::atomic<bool> broken_{false};
  std::mutex broken_mutex_;
  std::string broken_reason_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
  bool executing_ = false;  // an op is running (on the worker or a helping waiter)
  std::thread worker_;
};

}  // namespace dsrt
