// defines: the request/piece bookkeeping shared by both worker kinds (errors, retries, completion).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unistd.h>

#include "aio/aio_internal.h"

namespace dsrt::aio_detail {

FileState::~FileState() {
  if (direct_fd >= 0) ::close(direct_fd);
  if (buffered_fd >= 0) ::close(buffered_fd);
}

static const char *op_name(AioOp op) { return op == AioOp::Read ? "read" : "write"; }

void Request::fail(int error, uint64_t piece_offset, uint64_t piece_bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (failed.exchange(true)) return;
  std::string hint;
  if (error == ENOSPC || error == EFBIG || error == EDQUOT)
    hint = " (the swap folder's file system is full or the file size limit was reached: free space or point "
           "nvme_path elsewhere)";
  status = Error(DSRT_ERR_IO, "%s of '%s' failed at offset %llu (%llu bytes): %s%s", op_name(op),
                 file->path.c_str(), static_cast<unsigned long long>(piece_offset),
                 static_cast<unsigned long long>(piece_bytes), std::strerror(error), hint.c_str());
}

void Request::fail_eof(uint64_t piece_offset) {
  std::lock_guard<std::mutex> lock(mutex);
  if (failed.exchange(true)) return;
  status = Error(DSRT_ERR_IO,
                 "read of '%s' failed at offset %llu: unexpected end of file (the request covers [%llu, %llu) but "
                 "the file is shorter; was it truncated or replaced?)",
                 file->path.c_str(), static_cast<unsigned long long>(piece_offset),
                 static_cast<unsigned long long>(offset), static_cast<unsigned long long>(offset + bytes));
}

void Request::piece_done() {
  if (pending_pieces.fetch_sub(1) != 1) return;
  if (failed.load() && counters != nullptr) counters->failed_requests++;
  std::lock_guard<std::mutex> lock(mutex);
  file.reset();  // close the descriptors now if the caller has let go (space on a full disk comes back)
  finished = true;
  cv.notify_all();
}

Status Request::wait() {
  std::unique_lock<std::mutex> lock(mutex);
  cv.wait(lock, [&] { return finished; });
  waited = true;
  return status;
}

bool Request::is_done() {
  std::lock_guard<std::mutex> lock(mutex);
  return finished;
}

Transfer piece_next_transfer(const Piece &piece) {
  const FileState &file = *piece.request->file;
  Transfer transfer;
  transfer.data = piece.buffer + piece.done;
  transfer.length = piece.bytes - piece.done;
  transfer.at = piece.offset + piece.done;
  transfer.fd = file.buffered_fd;
  if (!piece.direct) return transfer;
  // A direct piece starts with offset, address and length 4096-aligned, so after `done` bytes all
  // three are aligned again exactly when `done` is. O_DIRECT devices can stop short at any logical
  // block (512 bytes on most drives), and at the end of a file at any byte; the rest is then not
  // aligned and O_DIRECT would refuse it with EINVAL. Redoing the whole aligned block through
  // O_DIRECT would loop forever at the end of a file (the same short count comes back every time),
  // so the bytes up to the next 4096 boundary go through the buffered descriptor (the kernel keeps
  // it coherent with direct I/O: a direct transfer writes back and drops cached pages of its range)
  // and the piece then continues through O_DIRECT. At the end of a file the buffered read returns 0
  // and the request reports the end of file where it really is.
  uint64_t misalignment = transfer.at % kDirectAlignment;
  if (misalignment == 0) {
    transfer.fd = file.direct_fd;
    return transfer;
  }
  transfer.length = std::min<uint64_t>(transfer.length, kDirectAlignment - misalignment);
  return transfer;
}

bool piece_begin(Piece &piece) {
  Request &request = *piece.request;
  if (request.failed.load()) {
    request.piece_done();
    return false;
  }
  if (request.inject_errno != 0 && piece.offset == request.offset && !request.inject_fired.exchange(true))
    piece.inject_errno = request.inject_errno;
  piece.inject_short = request.inject_short;
  return true;
}

namespace {
// About half the bytes, made to end off any 512-byte sector boundary, so an O_DIRECT piece has to go
// on from a position that no device accepts for direct I/O (as at the end of a file); a position
// on a 512-byte boundary would slip through on drives with 512-byte logical blocks.
int64_t short_count(uint64_t length) {
  uint64_t half = (length + 1) / 2;
  if (half % 512 == 0 && half > 100) half -= 100;
  return static_cast<int64_t>(half);
}
}  // namespace

int64_t piece_result(Piece &piece, int64_t kernel_result) {
  if (piece.inject_errno != 0) {
    int64_t injected = -static_cast<int64_t>(piece.inject_errno);
    piece.inject_errno = 0;
    return injected;
  }
  if (piece.inject_short) {
    piece.inject_short = false;
    // Reporting fewer bytes than were moved is a faithful short transfer: the bytes past the count
    // are transferred again from the same (unchanged) buffer or into it.
    if (kernel_result > 1) return std::min(kernel_result, short_count(piece.bytes - piece.done));
  }
  return kernel_result;
}

void run_piece_blocking(Piece &piece, Counters &counters) {
  for (;;) {
    int64_t result = 0;
    if (piece.inject_errno == 0) {
      Transfer transfer = piece_next_transfer(piece);
      counters.submit_calls++;
      off_t at = static_cast<off_t>(transfer.at);
      ssize_t moved = piece.request->op == AioOp::Read ? ::pread(transfer.fd, transfer.data, transfer.length, at)
                                                      : ::pwrite(transfer.fd, transfer.data, transfer.length, at);
      result = moved < 0 ? -static_cast<int64_t>(errno) : moved;
    }
    result = piece_result(piece, result);
    if (!piece_complete(piece, result, counters)) return;
    if (result == -EAGAIN) std::this_thread::yield();  // let whatever holds the resource make progress
  }
}

bool piece_complete(Piece &piece, int64_t result, Counters &counters) {
  Request &request = *piece.request;
  if (result == -EINTR || result == -EAGAIN) {
    if (!request.failed.load()) {
      counters.retries++;
      return true;
    }
    request.piece_done();
    return false;
  }
  if (result < 0) {
    request.fail(static_cast<int>(-result), piece.offset + piece.done, piece.bytes - piece.done);
    request.piece_done();
    return false;
  }
  if (result == 0) {
    if (request.op == AioOp::Read)
      request.fail_eof(piece.offset + piece.done);
    else
      request.fail(EIO, piece.offset + piece.done, piece.bytes - piece.done);
    request.piece_done();
    return false;
  }
  piece.done += static_cast<uint64_t>(result);
  (request.op == AioOp::Read ? counters.bytes_read : counters.bytes_written) += static_cast<uint64_t>(result);
  if (piece.done < piece.bytes && !request.failed.load()) {
    counters.retries++;
    return true;
  }
  request.piece_done();
  return false;
}

// ---------------------------------------------------------------------------------------------
// Worker queue and piece cursor

void Worker::run_pieces_blocking(PieceCursor &cursor) {
  Piece piece;
  while (cursor.next(&piece)) {
    if (!piece_begin(piece)) continue;
    counters_.pieces++;
    pieces_handled_++;
    note_in_flight(1);
    run_piece_blocking(piece, counters_);
    piece.request.reset();
  }
}

void Worker::post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

bool Worker::take_tasks(std::deque<Task> *into, bool idle) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (idle) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return !(stopping_ && idle);
  while (!queue_.empty()) {
    into->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return true;
}

void Worker::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PieceCursor::next(Piece *piece) {
  while (!chunks_.empty()) {
    Chunk &chunk = chunks_.front();
    if (position_ >= chunk.bytes) {
      chunks_.pop_front();
      position_ = 0;
      continue;
    }
    uint64_t length = std::min<uint64_t>(block_size_, chunk.bytes - position_);
    piece->request = chunk.request;
    piece->direct = chunk.direct;
    piece->buffer = chunk.buffer + position_;
    piece->offset = chunk.offset + position_;
    piece->bytes = length;
    piece->done = 0;
    position_ += length;
    return true;
  }
  return false;
}

int RegionSet::find(const char *data, uint64_t bytes) const {
  for (size_t i = 0; i < regions.size(); ++i) {
    const char *begin = static_cast<const char *>(regions[i].data);
    if (data >= begin && data + bytes <= begin + regions[i].bytes) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace dsrt::aio_detail
