// defines: the io_uring worker -- one thread owning one ring with up to queue_depth pieces in flight.
// The ring is created on the worker thread so it can be single-issuer with deferred task running
// (completions are processed only when this thread waits for them: fewer interrupts and wake-ups).
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <sys/uio.h>

#include "aio/aio_internal.h"
#include "util/log.h"

#ifdef DSRT_HAVE_URING
#include <liburing.h>
#endif

namespace dsrt::aio_detail {

#ifdef DSRT_HAVE_URING
namespace {

// Takes one from a test hook's countdown; false when it is spent.
bool take_one(std::atomic<int> &countdown) {
  int left = countdown.load();
  while (left > 0)
    if (countdown.compare_exchange_weak(left, left - 1)) return true;
  return false;
}

class UringWorker final : public Worker {
 public:
  using Worker::Worker;
  ~UringWorker() override { stop_and_join(); }

  Status start() override {
    std::promise<Status> ready;
    std::future<Status> started = ready.get_future();
    thread_ = std::thread([this, &ready] { run(&ready); });
    Status status = started.get();
    if (!status.ok()) thread_.join();
    return status;
  }

  bool fell_back_to_blocking() const override { return blocking_.load(); }

  // Runs on the worker thread with nothing in flight (a control task).
  void register_regions(const RegionSet &regions, Status *status) {
    if (registered_count_ > 0) {
      int rc = io_uring_unregister_buffers(&ring_);
      if (rc < 0) logf(DSRT_LOG_WARN, "aio: io_uring_unregister_buffers: %s", std::strerror(-rc));
      registered_count_ = 0;
    }
    regions_ = regions;
    if (regions.regions.empty() || blocking_.load()) return;
    int rc = register_current_regions();
    if (rc < 0) {
      *status = Error(DSRT_ERR_IO, "io_uring_register_buffers(%zu buffers): %s", regions.regions.size(),
                      std::strerror(-rc));
      regions_.regions.clear();
    }
  }

 private:
  static int setup_ring(struct io_uring *ring, unsigned entries) {
    // Newest flags first; older kernels reject them with EINVAL.
    const unsigned flag_sets[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                  IORING_SETUP_COOP_TASKRUN, 0};
    int rc = -EINVAL;
    for (unsigned flags : flag_sets) {
      rc = io_uring_queue_init(entries, ring, flags);
      if (rc != -EINVAL) return rc;
    }
    return rc;
  }

  int register_current_regions() {
    std::vector<iovec> vectors;
    for (const AioEngine::Region &region : regions_.regions) vectors.push_back({region.data, region.bytes});
    int rc = io_uring_register_buffers(&ring_, vectors.data(), static_cast<unsigned>(vectors.size()));
    registered_count_ = rc < 0 ? 0 : vectors.size();
    return rc;
  }

  void run(std::promise<Status> *ready) {
    depth_ = static_cast<unsigned>(config_.queue_depth);
    int rc = setup_ring(&ring_, depth_);
    if (rc < 0) {
      ready->set_value(Error(DSRT_ERR_UNSUPPORTED, "io_uring_queue_init(%u): %s", depth_, std::strerror(-rc)));
      return;
    }
    ring_alive_ = true;
    ready->set_value(Status::Ok());
    loop();
    if (ring_alive_) io_uring_queue_exit(&ring_);
  }

  void loop() {
    PieceCursor cursor(static_cast<uint64_t>(config_.block_size));
    slots_.resize(depth_);
    for (uint64_t i = depth_; i-- > 0;) free_slots_.push_back(i);
    std::deque<Task> tasks;

    for (;;) {
      bool idle = in_flight_ == 0 && resubmit_.empty() && cursor.empty() && tasks.empty();
      if (!take_tasks(&tasks, idle)) break;
      // Chunks go to the cursor; a control task waits until nothing is in flight.
      while (!tasks.empty()) {
        Task &task = tasks.front();
        if (task.control) {
          if (in_flight_ > 0 || !resubmit_.empty() || !cursor.empty()) break;
          task.control();
        } else {
          cursor.add(std::move(task.chunk));
        }
        tasks.pop_front();
      }
      if (blocking_.load()) {
        run_pieces_blocking(cursor);
        continue;
      }
      if (!fill(cursor) || in_flight_ == 0) continue;

      // overlap_events (DeepSpeed's meaning): refill as soon as one piece completes; otherwise wait
      // for the whole batch before the next is prepared and submitted.
      unsigned wait_for = config_.overlap_events ? 1 : in_flight_;
      int rc = enter(wait_for);
      if (rc < 0) {
        recover(rc);
        continue;
      }
      reap();
    }
  }

  // Prepares pieces (retries first) until queue_depth are in flight. False when a submission of
  // single_submit failed; the ring has then been recovered and the caller starts over.
  bool fill(PieceCursor &cursor) {
    // Without overlap_events a batch is never topped up: even when a signal cut a wait short, the
    // next pieces wait until the whole batch has completed.
    if (!config_.overlap_events && in_flight_ > 0) return true;
    bool refill = in_flight_ > 0;
    unsigned prepared = 0;
    while (in_flight_ < depth_) {
      uint64_t slot;
      if (!resubmit_.empty()) {
        slot = resubmit_.front();
        resubmit_.pop_front();
        if (slots_[slot].request->failed.load()) {  // another piece failed it meanwhile: stop here
          slots_[slot].request->piece_done();
          release(slot);
          continue;
        }
      } else {
        if (free_slots_.empty()) break;
        Piece piece;
        if (!cursor.next(&piece)) break;
        if (!piece_begin(piece)) continue;
        counters_.pieces++;
        pieces_handled_++;
        slot = free_slots_.back();
        free_slots_.pop_back();
        slots_[slot] = std::move(piece);
      }
      if (!prepare(slot)) {
        // Cannot happen (the ring has queue_depth entries and at most queue_depth pieces are in
        // flight), but never drop a piece silently.
        fail_slot(slot, EBUSY);
        break;
      }
      unsubmitted_.push_back(slot);
      ++in_flight_;
      ++prepared;
      note_in_flight(in_flight_);
      if (config_.single_submit) {
        int rc = enter(0);
        if (rc < 0) {
          recover(rc);
          return false;
        }
      }
    }
    if (prepared > 0 && refill) counters_.overlapped_refills++;
    return true;
  }

  // Fills one SQE for the piece in `slot`; false when the submission queue is full.
  bool prepare(uint64_t slot) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    Piece &piece = slots_[slot];
    if (piece.inject_errno != 0) {
      // Test hook: the injected failure travels through the ring and comes back as a completion,
      // like a real one, without touching the file.
      io_uring_prep_nop(sqe);
    } else {
      Transfer transfer = piece_next_transfer(piece);
      unsigned length = static_cast<unsigned>(transfer.length);
      int fixed = registered_count_ > 0 ? regions_.find(transfer.data, transfer.length) : -1;
      if (fixed >= 0) {
        counters_.fixed_buffer_pieces++;
        if (piece.request->op == AioOp::Read)
          io_uring_prep_read_fixed(sqe, transfer.fd, transfer.data, length, transfer.at, fixed);
        else
          io_uring_prep_write_fixed(sqe, transfer.fd, transfer.data, length, transfer.at, fixed);
      } else if (piece.request->op == AioOp::Read) {
        io_uring_prep_read(sqe, transfer.fd, transfer.data, length, transfer.at);
      } else {
        io_uring_prep_write(sqe, transfer.fd, transfer.data, length, transfer.at);
      }
    }
    io_uring_sqe_set_data64(sqe, slot);
    return true;
  }

  // Submits what is prepared and waits for at least `wait_for` completions; retries EINTR, EAGAIN
  // and EBUSY. The kernel consumes submission entries in order, so the first rc of unsubmitted_
  // are now in flight and the rest stay queued for the next call.
  int enter(unsigned wait_for) {
    unsigned to_submit = io_uring_sq_ready(&ring_);
    if (to_submit > 0 && faults_.enter_failures.load() > 0 && !take_one(faults_.enter_skip) &&
        take_one(faults_.enter_failures))
      return -faults_.enter_errno.load();
    for (;;) {
      int rc = wait_for > 0 ? io_uring_submit_and_wait(&ring_, wait_for) : io_uring_submit(&ring_);
      if (rc >= 0) {
        if (to_submit > 0) counters_.submit_calls++;
        for (int i = 0; i < rc && !unsubmitted_.empty(); ++i) unsubmitted_.pop_front();
        consecutive_enter_failures_ = 0;
        return rc;
      }
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
        counters_.retries++;
        if (rc != -EINTR) std::this_thread::yield();
        continue;
      }
      return rc;
    }
  }

  // Applies every completion that has arrived; returns how many.
  unsigned reap() {
    struct io_uring_cqe *cqe = nullptr;
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      uint64_t slot = io_uring_cqe_get_data64(cqe);
      --in_flight_;
      Piece &piece = slots_[slot];
      if (piece_complete(piece, piece_result(piece, cqe->res), counters_))
        resubmit_.push_back(slot);
      else
        release(slot);
    }
    io_uring_cq_advance(&ring_, seen);
    return seen;
  }

  void release(uint64_t slot) {
    slots_[slot].request.reset();
    free_slots_.push_back(slot);
  }

  // Fails the request of the piece in `slot` at the bytes it has not moved yet, and frees the slot.
  void fail_slot(uint64_t slot, int error) {
    Piece &piece = slots_[slot];
    piece.request->fail(error, piece.offset + piece.done, piece.bytes - piece.done);
    piece.request->piece_done();
    release(slot);
  }

  // io_uring_enter failed as a whole (ENOMEM under memory pressure, say), not one transfer. Such a
  // failure is usually transient, so the worker does not give up: it waits for what the kernel had
  // already taken, replaces the ring with a fresh one and issues the refused pieces again there.
  // If the fresh ring refuses them too, their requests fail (with this errno) rather than loop; the
  // next request gets another fresh ring. If no ring can be created any more, this worker goes on
  // with pread/pwrite, so the engine stays usable either way.
  void recover(int rc) {
    const int error = -rc;
    counters_.ring_restarts++;
    bool give_up = ++consecutive_enter_failures_ >= 2;
    logf(DSRT_LOG_WARN, "aio: io_uring_enter failed: %s; re-creating this worker's ring and %s", std::strerror(error),
         give_up ? "failing the requests whose pieces it refused twice" : "issuing the refused pieces again");
    drain_consumed();

    // The kernel never saw the refused entries; once the ring is gone nobody will.
    std::vector<uint64_t> refused(unsubmitted_.begin(), unsubmitted_.end());
    unsubmitted_.clear();
    in_flight_ -= static_cast<unsigned>(refused.size());
    io_uring_queue_exit(&ring_);
    ring_alive_ = false;
    for (auto slot = refused.rbegin(); slot != refused.rend(); ++slot) {
      if (give_up) {
        fail_slot(*slot, error);
      } else {
        resubmit_.push_front(*slot);
      }
    }

    int setup = take_one(faults_.setup_failures) ? -ENOMEM : setup_ring(&ring_, depth_);
    if (setup < 0) {
      logf(DSRT_LOG_WARN, "aio: cannot re-create the io_uring ring (%s); this worker goes on with pread/pwrite",
           std::strerror(-setup));
      blocking_.store(true);
      registered_count_ = 0;
      while (!resubmit_.empty()) {
        uint64_t slot = resubmit_.front();
        resubmit_.pop_front();
        run_piece_blocking(slots_[slot], counters_);
        release(slot);
      }
      return;
    }
    ring_alive_ = true;
    if (registered_count_ > 0) {
      int registered = register_current_regions();
      if (registered < 0)
        logf(DSRT_LOG_WARN, "aio: io_uring_register_buffers on the re-created ring: %s; going on without them",
             std::strerror(-registered));
    }
  }

  // Waits for the completions of the entries the kernel has consumed: until they arrive, those
  // transfers may still be moving bytes into or out of the caller's buffers.
  void drain_consumed() {
    int transient = 0;
    while (in_flight_ > unsubmitted_.size()) {
      struct io_uring_cqe *cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);  // submits nothing: the refused entries stay unseen
      if (rc == 0) {
        reap();
        continue;
      }
      if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY || rc == -ENOMEM) && ++transient < 1000) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      // The kernel will not even let this thread wait on its own ring. Closing the ring (next)
      // makes the kernel cancel what is left; all that can be done is to report those pieces.
      logf(DSRT_LOG_ERROR, "aio: cannot wait for the io_uring completions in flight: %s", std::strerror(-rc));
      std::vector<char> queued(slots_.size(), 0);
      for (uint64_t slot : free_slots_) queued[slot] = 1;
      for (uint64_t slot : unsubmitted_) queued[slot] = 1;
      for (uint64_t slot : resubmit_) queued[slot] = 1;
      for (uint64_t slot = 0; slot < slots_.size(); ++slot) {
        if (queued[slot]) continue;
        fail_slot(slot, -rc);
        --in_flight_;
      }
      return;
    }
  }

  struct io_uring ring_ {};
  bool ring_alive_ = false;
  std::atomic<bool> blocking_{false};  // no ring could be re-created: pieces go through pread/pwrite
  unsigned depth_ = 0;
  unsigned in_flight_ = 0;  // slots whose piece is prepared, submitted or running in the kernel
  int consecutive_enter_failures_ = 0;
  RegionSet regions_;
  size_t registered_count_ = 0;
  std::vector<Piece> slots_;
  std::vector<uint64_t> free_slots_;
  std::deque<uint64_t> resubmit_;     // slots whose piece needs another transfer
  std::deque<uint64_t> unsubmitted_;  // prepared slots the kernel has not consumed yet, in queue order
};

}  // namespace

std::unique_ptr<Worker> make_uring_worker(const AioConfig &config, Counters &counters, FaultPlan &faults) {
  return std::make_unique<UringWorker>(config, counters, faults);
}

void uring_worker_register(Worker &worker, const RegionSet &regions, Status *status) {
  auto &uring = static_cast<UringWorker &>(worker);
  std::promise<void> done;
  Task task;
  task.control = [&] {
    uring.register_regions(regions, status);
    done.set_value();
  };
  worker.post(std::move(task));
  done.get_future().wait();
}

#else

std::unique_ptr<Worker> make_uring_worker(const AioConfig &, Counters &, FaultPlan &) { return nullptr; }
void uring_worker_register(Worker &, const RegionSet &, Status *status) {
  *status = Error(DSRT_ERR_UNSUPPORTED, "this build has no io_uring (liburing was not found)");
}

#endif

}  // namespace dsrt::aio_detail
