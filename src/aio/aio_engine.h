// aio_engine.h -- asynchronous file I/O for NVMe offload: io_uring rings (liburing) with O_DIRECT,
// or a pread/pwrite thread pool where io_uring is unavailable.
//
// Model (DeepSpeed's aio handle, same config keys):
//   * A request (read or write of `bytes` at `offset` from/to a caller buffer) is split into
//     block_size pieces. The block-aligned body is cut into intra_op_parallelism contiguous slices,
//     one per worker thread; each worker owns one ring and keeps up to queue_depth pieces in flight.
//   * single_submit: one io_uring_submit per piece instead of one per batch.
//   * overlap_events: refill the ring as each completion arrives (true) or wait for the whole batch
//     before submitting the next (false).
//   * Buffers handed to register_buffers are registered with every ring and used with the
//     READ_FIXED/WRITE_FIXED opcodes, which skip the per-I/O page pinning.
//
// O_DIRECT rules. Files are opened with O_DIRECT plus a second, buffered descriptor. The part of a
// request that is 4096-aligned (offset, buffer address, length) goes through O_DIRECT; the last
// partial block (bytes % 4096) goes through the buffered descriptor, so a file is never padded and a
// write never touches bytes outside [offset, offset+bytes). A request whose offset or buffer is not
// 4096-aligned goes entirely through the buffered descriptor. The kernel keeps the two coherent
// (direct I/O flushes and invalidates the page cache for its range). Where a file system refuses
// O_DIRECT (tmpfs), files are opened buffered only and this is logged once.
//
// Errors. ENOSPC, EIO, EFBIG, a missing file or folder, an unexpected end of file: the request's
// status is DSRT_ERR_IO naming the operation, the file, the offset of the failing piece and the
// errno text. Pieces of the failed request not yet submitted are dropped; the engine stays usable.
// Short transfers, EINTR and EAGAIN are retried transparently.
//
// Threads: one AioEngine is driven from one thread at a time (submit/wait); its workers are internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aio/aio_options.h"
#include "util/status.h"

namespace dsrt {

enum class AioBackend {
  Auto,     // io_uring when this build and the kernel allow it, else threads; DSRT_AIO_BACKEND overrides
  IoUring,  // io_uring or fail with DSRT_ERR_UNSUPPORTED
  Threads,  // pread/pwrite thread pool
};

enum class AioOp { Read, Write };

enum class AioOpenMode {
  Read,           // the file must exist
  Write,          // create if missing, keep existing contents
  WriteTruncate,  // create or truncate to 0
};

struct AioOptions {
  AioBackend backend = AioBackend::Auto;
  bool allow_direct = true;  // false: never use O_DIRECT (page-cache I/O), e.g. for benchmarking the cache
};

namespace aio_detail {
struct Request;
struct FileState;
class Engine;
}  // namespace aio_detail

// An open file (two descriptors: O_DIRECT and buffered). Shared by the requests that use it, so it
// may be released by the caller while I/O is still in flight.
class AioFile {
 public:
  const std::string &path() const;
  bool direct() const;  // O_DIRECT in use for aligned pieces
  int fd() const;       // the buffered descriptor (for fstat, ftruncate, fallocate)
  explicit AioFile(std::shared_ptr<aio_detail::FileState> state) : state_(std::move(state)) {}
  const std::shared_ptr<aio_detail::FileState> &state() const { return state_; }

 private:
  std::shared_ptr<aio_detail::FileState> state_;
};

// A submitted request. Waiting is done through the engine or the ticket; a ticket dropped without
// waiting is harmless (the engine still finishes the request before it is destroyed).
class AioTicket {
 public:
  AioTicket() = default;
  bool valid() const { return request_ != nullptr; }
  bool done() const;         // finished (successfully or not); never blocks
  Status wait();             // blocks until finished; the request's status (Ok for an invalid ticket)
  explicit AioTicket(std::shared_ptr<aio_detail::Request> request) : request_(std::move(request)) {}

 private:
  std::shared_ptr<aio_detail::Request> request_;
};

struct AioStats {
  uint64_t requests = 0;
  uint64_t pieces = 0;          // block_size pieces submitted
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t retries = 0;         // short transfers, EINTR, EAGAIN
  uint64_t failed_requests = 0;
  uint64_t fixed_buffer_pieces = 0;  // transfers that used a registered buffer
  // How the knobs acted. submit_calls: io_uring_enter calls that submitted (threads: pread/pwrite
  // calls); overlapped_refills: times a ring was topped up while earlier pieces were still in flight
  // (never without overlap_events); peak_in_flight: most pieces one ring (thread: 1) had issued at
  // once, at most queue_depth; worker_pieces: pieces each ring or thread handled, in worker order.
  uint64_t submit_calls = 0;
  uint64_t overlapped_refills = 0;
  uint64_t peak_in_flight = 0;
  std::vector<uint64_t> worker_pieces;
  uint64_t ring_restarts = 0;     // rings re-created after io_uring_enter failed
  uint64_t blocking_workers = 0;  // io_uring workers left on pread/pwrite because no ring could be re-created
};

class AioEngine {
 public:
  // Validates the config (block_size a positive multiple of 4096, queue_depth 1..4096,
  // intra_op_parallelism 1..256) and starts the workers.
  static Status create(const AioConfig &config, const AioOptions &options, std::unique_ptr<AioEngine> *out);
  ~AioEngine();  // waits for every request in flight
  AioEngine(const AioEngine &) = delete;
  AioEngine &operator=(const AioEngine &) = delete;

  const char *backend_name() const;  // "io_uring" or "threads"
  const AioConfig &config() const;

  Status open(const std::string &path, AioOpenMode mode, std::shared_ptr<AioFile> *out);

  // Queues a transfer. The buffer must stay valid and untouched until the ticket is waited on.
  Status submit(AioOp op, const std::shared_ptr<AioFile> &file, void *buffer, uint64_t bytes, uint64_t offset,
                AioTicket *out);
  Status submit_read(const std::shared_ptr<AioFile> &file, void *buffer, uint64_t bytes, uint64_t offset,
                     AioTicket *out) {
    return submit(AioOp::Read, file, buffer, bytes, offset, out);
  }
  Status submit_write(const std::shared_ptr<AioFile> &file, const void *buffer, uint64_t bytes, uint64_t offset,
                      AioTicket *out) {
    return submit(AioOp::Write, file, const_cast<void *>(buffer), bytes, offset, out);
  }

  // Blocks until every request submitted so far has finished; the first failure among them that no
  // AioTicket::wait has returned already.
  Status wait_all();

  // Synchronous helpers (submit + wait).
  Status read(const std::shared_ptr<AioFile> &file, void *buffer, uint64_t bytes, uint64_t offset);
  Status write(const std::shared_ptr<AioFile> &file, const void *buffer, uint64_t bytes, uint64_t offset);
  Status read_file(const std::string &path, void *buffer, uint64_t bytes, uint64_t offset = 0);
  Status write_file(const std::string &path, const void *buffer, uint64_t bytes);  // creates/truncates

  // Registers long-lived buffers (e.g. the pinned pool's) with every ring so pieces inside them use
  // fixed-buffer I/O. Replaces any earlier registration. Waits for requests in flight first. Where the
  // kernel refuses (memlock limit), I/O still works without them and this is logged once; the
  // returned status is then Ok. No effect on the threads backend.
  struct Region {
    void *data;
    uint64_t bytes;
  };
  Status register_buffers(const std::vector<Region> &regions);
  Status unregister_buffers();
  size_t registered_buffer_count() const;

  AioStats stats() const;

  aio_detail::Engine &impl() { return *impl_; }

 private:
  explicit AioEngine(std::unique_ptr<aio_detail::Engine> impl);
  std::unique_ptr<aio_detail::Engine> impl_;
};

// Parses "4096", "64K", "1M", "2G", "1.5G" (binary multiples); false on anything else.
bool parse_byte_size(const std::string &text, uint64_t *out);

}  // namespace dsrt
