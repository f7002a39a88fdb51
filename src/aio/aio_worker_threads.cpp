// defines: the fallback worker -- a thread that runs its pieces with pread/pwrite, one at a time.
// The engine starts intra_op_parallelism * min(queue_depth, 8) of them so that several pieces are in
// flight at once, as with a ring.
#include "aio/aio_internal.h"

namespace dsrt::aio_detail {
namespace {

class ThreadWorker final : public Worker {
 public:
  using Worker::Worker;
  ~ThreadWorker() override { stop_and_join(); }

  Status start() override {
    thread_ = std::thread([this] { run(); });
    return Status::Ok();
  }

 private:
  void run() {
    PieceCursor cursor(static_cast<uint64_t>(config_.block_size));
    std::deque<Task> tasks;
    while (take_tasks(&tasks, /*idle=*/true)) {
      for (Task &task : tasks) {
        if (task.control) {
          task.control();
          continue;
        }
        cursor.add(std::move(task.chunk));
        run_pieces_blocking(cursor);
      }
      tasks.clear();
    }
  }
};

}  // namespace

std::unique_ptr<Worker> make_thread_worker(const AioConfig &config, Counters &counters, FaultPlan &faults) {
  return std::make_unique<ThreadWorker>(config, counters, faults);
}

}  // namespace dsrt::aio_detail
