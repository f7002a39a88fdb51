// aio_internal.h -- the engine's moving parts, shared by aio_engine.cpp and the two worker kinds
// (aio_worker_uring.cpp, aio_worker_threads.cpp). Not part of any interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aio/aio_engine.h"

namespace dsrt::aio_detail {

constexpr uint64_t kDirectAlignment = 4096;

struct FileState {
  std::string path;
  int direct_fd = -1;    // O_DIRECT, or -1 where the file system refuses it
  int buffered_fd = -1;  // always open
  ~FileState();
};

struct Counters {
  std::atomic<uint64_t> requests{0}, pieces{0}, bytes_read{0}, bytes_written{0}, retries{0}, failed_requests{0},
      fixed_buffer_pieces{0}, submit_calls{0}, overlapped_refills{0}, ring_restarts{0};
};

// The test hooks of aio_testing.h, read by the engine and its workers.
struct FaultPlan {
  std::atomic<uint64_t> fail_at{0};  // request number (1-based) whose first piece fails, 0: none
  std::atomic<int> fail_errno{0};
  std::atomic<bool> short_transfers{false};  // every piece's first transfer reports about half its bytes
  std::atomic<int> enter_skip{0};            // io_uring_enter calls that submit to let through first
  std::atomic<int> enter_failures{0};        // then this many to refuse, with enter_errno
  std::atomic<int> enter_errno{0};
  std::atomic<int> setup_failures{0};        // ring re-creations to refuse
  std::atomic<bool> refuse_direct{false};    // open() acts as if the file system refused O_DIRECT
};

struct Request {
  AioOp op = AioOp::Read;
  std::shared_ptr<FileState> file;
  char *buffer = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;
  Counters *counters = nullptr;

  std::atomic<int64_t> pending_pieces{0};
  std::atomic<bool> failed{false};
  int inject_errno = 0;  // test hook: the first piece fails with this errno without touching the file
  std::atomic<bool> inject_fired{false};
  bool inject_short = false;  // test hook: every piece's first transfer reports about half its bytes

  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  bool waited = false;  // someone has seen the status
  Status status;

  // Records the first failure; later pieces of this request are dropped.
  void fail(int error, uint64_t piece_offset, uint64_t piece_bytes);
  void fail_eof(uint64_t piece_offset);
  // One piece has finished (transferred, failed or dropped).
  void piece_done();
  Status wait();
  bool is_done();
};

// A contiguous part of one request given to one worker, cut into block_size pieces there.
struct Chunk {
  std::shared_ptr<Request> request;
  bool direct = false;  // use the O_DIRECT descriptor (offset, buffer and length are 4096-aligned)
  char *buffer = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Task {
  Chunk chunk;
  std::function<void()> control;  // runs on the worker thread when nothing is in flight
};

// One piece in flight.
struct Piece {
  std::shared_ptr<Request> request;
  bool direct = false;  // offset, buffer and bytes are 4096-aligned and the file has an O_DIRECT descriptor
  char *buffer = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t done = 0;
  // Test hooks armed for the next transfer only (see piece_result).
  int inject_errno = 0;
  bool inject_short = false;
};

// The next system call for a piece: where its remaining bytes go, through which descriptor.
struct Transfer {
  int fd = -1;
  char *data = nullptr;
  uint64_t length = 0;
  uint64_t at = 0;
};
Transfer piece_next_transfer(const Piece &piece);

// Called once before a piece's first transfer. False when its request has already failed: the
// piece is then dropped (and counted done). Arms the test hooks the request carries.
bool piece_begin(Piece &piece);

// The result the piece's transfer reports: the kernel's, or the one a test hook replaces it with.
// With piece.inject_errno set no transfer is made at all (the result passed in is ignored).
int64_t piece_result(Piece &piece, int64_t kernel_result);

// Applies a transfer result to a piece: >0 bytes moved, 0 (EOF), or -errno. Returns true when the
// piece needs another transfer (short transfer, EINTR, EAGAIN); otherwise the piece is finished
// and its request has been told.
bool piece_complete(Piece &piece, int64_t result, Counters &counters);

// Transfers a begun piece with pread/pwrite until it is finished (thread workers, and io_uring
// workers whose ring could not be re-created).
void run_piece_blocking(Piece &piece, Counters &counters);

class PieceCursor;

class Worker {
 public:
  Worker(const AioConfig &config, Counters &counters, FaultPlan &faults)
      : config_(config), counters_(counters), faults_(faults) {}
  virtual ~Worker() = default;
  // Starts the thread; for io_uring, waits for the ring to exist and returns its setup status.
  virtual Status start() = 0;
  void post(Task task);
  void stop_and_join();

  uint64_t pieces_handled() const { return pieces_handled_.load(); }
  uint64_t peak_in_flight() const { return peak_in_flight_.load(); }
  virtual bool fell_back_to_blocking() const { return false; }

 protected:
  // Pops everything queued; blocks while nothing is queued and idle is true. False once stopped and drained.
  bool take_tasks(std::deque<Task> *into, bool idle);
  void note_in_flight(uint64_t count) {
    if (count > peak_in_flight_.load(std::memory_order_relaxed)) peak_in_flight_.store(count);
  }
  // Every piece the cursor yields, one at a time with pread/pwrite (thread workers, and io_uring
  // workers without a ring).
  void run_pieces_blocking(PieceCursor &cursor);

  AioConfig config_;
  Counters &counters_;
  FaultPlan &faults_;
  std::thread thread_;
  std::atomic<uint64_t> pieces_handled_{0};  // pieces begun on this worker (not dropped)
  std::atomic<uint64_t> peak_in_flight_{0};  // most pieces this worker had issued at once

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
};

// Cuts chunks into block_size pieces, in order.
class PieceCursor {
 public:
  explicit PieceCursor(uint64_t block_size) : block_size_(block_size) {}
  void add(Chunk chunk) { chunks_.push_back(std::move(chunk)); }
  bool empty() const { return chunks_.empty(); }
  bool next(Piece *piece);

 private:
  uint64_t block_size_;
  std::deque<Chunk> chunks_;
  uint64_t position_ = 0;  // within chunks_.front()
};

// null without liburing
std::unique_ptr<Worker> make_uring_worker(const AioConfig &config, Counters &counters, FaultPlan &faults);
std::unique_ptr<Worker> make_thread_worker(const AioConfig &config, Counters &counters, FaultPlan &faults);

// Registered regions, as the workers see them.
struct RegionSet {
  std::vector<AioEngine::Region> regions;
  int find(const char *data, uint64_t bytes) const;  // index of the region holding [data, data+bytes), or -1
};

// io_uring workers take the registration on their own thread (rings are single-issuer).
void uring_worker_register(Worker &worker, const RegionSet &regions, Status *status);

class Engine {
 public:
  AioConfig config;
  AioOptions options;
  bool uring = false;
  Counters counters;
  FaultPlan faults;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::shared_ptr<Request>> outstanding;
  RegionSet registered;
  size_t next_tail_worker = 0;

  std::atomic<uint64_t> submitted{0};

  ~Engine();
  void drain();
};

}  // namespace dsrt::aio_detail
