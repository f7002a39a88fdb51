// defines: the CPU kernels' helper threads (work_pool.h): sleeping helpers, items handed out by
// an atomic counter, and a finish that waits only for the items helpers took.
#include "optim/work_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <memory>
#include <thread>

#include <unistd.h>

namespace dsrt {
namespace optim_kernels {
namespace {

thread_local bool t_in_pool = false;

// More helpers than this are never started, whatever a caller asks for.
constexpr int kMaxHelpers = 255;

// Never destroyed (see pool()): its helpers are detached and sleep in it until the process ends.
class WorkPool {
 public:
  WorkPool() = default;
  WorkPool(const WorkPool &) = delete;
  WorkPool &operator=(const WorkPool &) = delete;

  const pid_t owner = getpid();  // a forked child has none of the helpers: it runs alone

  void run(size_t count, int threads, const std::function<void(size_t)> &body) {
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    const int wanted = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::min(threads - 1, kMaxHelpers)),
                                                         count > 0 ? count - 1 : 0));
    if (!busy.owns_lock() || wanted <= 0 || !start_helpers(wanted)) {
      for (size_t i = 0; i < count; ++i) body(i);
      return;
    }
    Job job;
    job.body = &body;
    job.count = count;
    job.slots = wanted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    // Clears the job and waits for the helpers inside it, also if body throws on this thread.
    struct Finish {
      WorkPool &pool;
      ~Finish() {
        std::unique_lock<std::mutex> lock(pool.mutex_);
        pool.job_ = nullptr;
        pool.done_.wait(lock, [this] { return pool.active_ == 0; });
      }
    } finish{*this};
    take(job);
  }

 private:
  struct Job {
    const std::function<void(size_t)> *body = nullptr;
    size_t count = 0;
    std::atomic<size_t> next{0};
    int slots = 0;  // helpers that may still join (guarded by mutex_)
  };

  static void take(Job &job) {
    for (size_t i = job.next.fetch_add(1, std::memory_order_relaxed); i < job.count;
         i = job.next.fetch_add(1, std::memory_order_relaxed))
      (*job.body)(i);
  }

  // Starts helpers until there are at least n; false when none could be started.
  bool start_helpers(int n) {
    while (helpers_ < n) {
      try {
        std::thread([this] { helper(); }).detach();
      } catch (...) {
        break;  // no more threads: run with the helpers there are
      }
      ++helpers_;
    }
    return helpers_ > 0;
  }

  void helper() {
    t_in_pool = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      Job *job = job_;
      if (job == nullptr || job->slots <= 0) continue;
      --job->slots;
      ++active_;
      lock.unlock();
      take(*job);
      lock.lock();
      if (--active_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mutex_;  // one job at a time
  std::mutex mutex_;      // guards everything below
  std::condition_variable wake_, done_;
  int helpers_ = 0;  // started (only run, under run_mutex_, changes it)
  Job *job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;
};

// Deliberately never destroyed: helpers may still be asleep in it while the process exits, and a
// static destructor would tear its mutex and condition variables down under them.
WorkPool &pool() {
  static WorkPool *const instance = std::make_unique<WorkPool>().release();
  return *instance;
}

}  // namespace

bool in_work_pool() { return t_in_pool; }

void work_pool_run(size_t count, int threads, const std::function<void(size_t)> &body) {
  if (count == 0) return;
  if (threads <= 1 || count == 1 || t_in_pool || pool().owner != getpid()) {
    for (size_t i = 0; i < count; ++i) body(i);
    return;
  }
  pool().run(count, threads, body);
}

}  // namespace optim_kernels
}  // namespace dsrt
