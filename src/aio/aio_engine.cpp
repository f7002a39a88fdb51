// defines: AioEngine -- backend choice, file opening (O_DIRECT with a buffered twin), request
// splitting across workers, waiting, buffer registration; and the byte-size parser.
#include "aio/aio_engine.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio/aio_features.h"
#include "aio/aio_internal.h"
#include "util/log.h"

namespace dsrt {

using aio_detail::kDirectAlignment;

// ---------------------------------------------------------------------------------------------
// Files and tickets

const std::string &AioFile::path() const { return state_->path; }
bool AioFile::direct() const { return state_->direct_fd >= 0; }
int AioFile::fd() const { return state_->buffered_fd; }

bool AioTicket::done() const { return request_ == nullptr || request_->is_done(); }
Status AioTicket::wait() { return request_ == nullptr ? Status::Ok() : request_->wait(); }

// ---------------------------------------------------------------------------------------------
// Engine internals

namespace aio_detail {

Engine::~Engine() {
  drain();
  for (auto &worker : workers) worker->stop_and_join();
}

void Engine::drain() {
  for (auto &request : outstanding) (void)request->wait();
}

}  // namespace aio_detail

namespace {

Status validate(const AioConfig &config) {
  if (config.block_size <= 0 || config.block_size % static_cast<int64_t>(kDirectAlignment) != 0 ||
      config.block_size > (int64_t{1} << 30))
    return Error(DSRT_ERR_CONFIG,
                 "aio.block_size = %lld: must be a positive multiple of 4096 up to 1 GiB (O_DIRECT transfers "
                 "whole 4 KiB blocks); DeepSpeed's default is 1048576",
                 static_cast<long long>(config.block_size));
  if (config.queue_depth < 1 || config.queue_depth > 4096)
    return Error(DSRT_ERR_CONFIG, "aio.queue_depth = %lld: must be between 1 and 4096 (default 8)",
                 static_cast<long long>(config.queue_depth));
  if (config.intra_op_parallelism < 1 || config.intra_op_parallelism > 256)
    return Error(DSRT_ERR_CONFIG,
                 "aio.intra_op_parallelism (thread_count) = %lld: must be between 1 and 256 (default 1)",
                 static_cast<long long>(config.intra_op_parallelism));
  return Status::Ok();
}

AioBackend backend_from_env() {
  const char *value = std::getenv("DSRT_AIO_BACKEND");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return AioBackend::Auto;
  if (std::strcmp(value, "threads") == 0) return AioBackend::Threads;
  if (std::strcmp(value, "io_uring") == 0) return AioBackend::IoUring;
  log_warn_once("aio-backend-env", Format("DSRT_AIO_BACKEND=%s is not one of auto, io_uring, threads; using auto",
                                          value));
  return AioBackend::Auto;
}

Status start_workers(aio_detail::Engine &engine, bool uring) {
  const AioConfig &config = engine.config;
  engine.workers.clear();
  int64_t count = uring ? config.intra_op_parallelism
                        : config.intra_op_parallelism * std::min<int64_t>(config.queue_depth, 8);
  for (int64_t i = 0; i < count; ++i) {
    std::unique_ptr<aio_detail::Worker> worker =
        uring ? aio_detail::make_uring_worker(config, engine.counters, engine.faults)
              : aio_detail::make_thread_worker(config, engine.counters, engine.faults);
    if (worker == nullptr)
      return Error(DSRT_ERR_UNSUPPORTED, "this build has no io_uring support (liburing was not found at build time)");
    Status status = worker->start();
    if (!status.ok()) {
      for (auto &started : engine.workers) started->stop_and_join();
      engine.workers.clear();
      return status;
    }
    engine.workers.push_back(std::move(worker));
  }
  engine.uring = uring;
  return Status::Ok();
}

}  // namespace

AioEngine::AioEngine(std::unique_ptr<aio_detail::Engine> impl) : impl_(std::move(impl)) {}
AioEngine::~AioEngine() = default;

Status AioEngine::create(const AioConfig &config, const AioOptions &options, std::unique_ptr<AioEngine> *out) {
  out->reset();
  DSRT_RETURN_IF_ERROR(validate(config));
  auto impl = std::make_unique<aio_detail::Engine>();
  impl->config = config;
  impl->options = options;
  AioBackend backend = options.backend == AioBackend::Auto ? backend_from_env() : options.backend;
  if (backend == AioBackend::Threads) {
    DSRT_RETURN_IF_ERROR(start_workers(*impl, false));
    logf(DSRT_LOG_INFO, "aio: using the pread/pwrite thread pool (requested)");
  } else {
    Status status = aio_has_io_uring() ? start_workers(*impl, true)
                                       : Error(DSRT_ERR_UNSUPPORTED, "io_uring is not available in this process "
                                                                     "(not built with liburing, an old kernel, "
                                                                     "or blocked by a seccomp policy)");
    if (!status.ok()) {
      if (backend == AioBackend::IoUring) return status;
      log_warn_once("aio-no-io_uring", "aio: " + status.message() +
                                           "; falling back to a pread/pwrite thread pool (slower NVMe offload)");
      DSRT_RETURN_IF_ERROR(start_workers(*impl, false));
    }
  }
  out->reset(new AioEngine(std::move(impl)));
  return Status::Ok();
}

const char *AioEngine::backend_name() const { return impl_->uring ? "io_uring" : "threads"; }
const AioConfig &AioEngine::config() const { return impl_->config; }

Status AioEngine::open(const std::string &path, AioOpenMode mode, std::shared_ptr<AioFile> *out) {
  out->reset();
  int flags = O_CLOEXEC;
  const char *purpose = "reading";
  switch (mode) {
    case AioOpenMode::Read: flags |= O_RDONLY; break;
    case AioOpenMode::Write: flags |= O_RDWR | O_CREAT; purpose = "writing"; break;
    case AioOpenMode::WriteTruncate: flags |= O_RDWR | O_CREAT | O_TRUNC; purpose = "writing"; break;
  }
  auto state = std::make_shared<aio_detail::FileState>();
  state->path = path;
  state->buffered_fd = ::open(path.c_str(), flags, 0600);
  if (state->buffered_fd < 0)
    return Error(DSRT_ERR_IO, "cannot open '%s' for %s: %s", path.c_str(), purpose, std::strerror(errno));
  if (impl_->options.allow_direct) {
    int direct_flags = (flags & ~(O_CREAT | O_TRUNC)) | O_DIRECT;
    bool refused_by_test_hook = impl_->faults.refuse_direct.load();
    state->direct_fd = refused_by_test_hook ? -1 : ::open(path.c_str(), direct_flags);
    if (state->direct_fd < 0) {
      int error = refused_by_test_hook ? EINVAL : errno;
      if (error != EINVAL)
        return Error(DSRT_ERR_IO, "cannot open '%s' for %s with O_DIRECT: %s", path.c_str(), purpose,
                     std::strerror(error));
      // EINVAL: the file system does not do direct I/O (tmpfs, some FUSE and network file systems).
      log_warn_once("aio-no-odirect", Format("aio: the file system of '%s' refuses O_DIRECT; using buffered I/O "
                                             "through the page cache for it (slower, uses host memory)",
                                             path.c_str()));
    }
  }
  *out = std::make_shared<AioFile>(std::move(state));
  return Status::Ok();
}

Status AioEngine::submit(AioOp op, const std::shared_ptr<AioFile> &file, void *buffer, uint64_t bytes,
                         uint64_t offset, AioTicket *out) {
  if (out != nullptr) *out = AioTicket();
  if (file == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "aio submit: no file (open it with AioEngine::open)");
  if (buffer == nullptr && bytes > 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "aio %s of '%s': NULL buffer for %llu bytes",
                 op == AioOp::Read ? "read" : "write", file->path().c_str(), static_cast<unsigned long long>(bytes));
  if (offset > static_cast<uint64_t>(INT64_MAX) - bytes)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "aio request on '%s': offset %llu + %llu bytes overflows a file offset",
                 file->path().c_str(), static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(bytes));
  aio_detail::Engine &engine = *impl_;
  auto request = std::make_shared<aio_detail::Request>();
  request->op = op;
  request->file = file->state();
  request->buffer = static_cast<char *>(buffer);
  request->bytes = bytes;
  request->offset = offset;
  request->counters = &engine.counters;
  uint64_t number = ++engine.submitted;
  if (engine.faults.fail_at.load() == number) request->inject_errno = engine.faults.fail_errno.load();
  request->inject_short = engine.faults.short_transfers.load();
  engine.counters.requests++;

  // The aligned body through O_DIRECT, sliced across workers on block boundaries; the rest buffered.
  const uint64_t block = static_cast<uint64_t>(engine.config.block_size);
  bool aligned = file->direct() && offset % kDirectAlignment == 0 &&
                 reinterpret_cast<uintptr_t>(buffer) % kDirectAlignment == 0;
  uint64_t body = aligned ? bytes / kDirectAlignment * kDirectAlignment : 0;
  std::vector<std::pair<size_t, aio_detail::Chunk>> chunks;
  auto add_slices = [&](bool direct, uint64_t start, uint64_t length) {
    if (length == 0) return;
    uint64_t blocks = (length + block - 1) / block;
    size_t worker_count = std::min<uint64_t>(engine.workers.size(), blocks);
    uint64_t blocks_per_worker = (blocks + worker_count - 1) / worker_count;
    for (size_t w = 0; w < worker_count; ++w) {
      uint64_t first = start + w * blocks_per_worker * block;
      uint64_t end = std::min(start + length, first + blocks_per_worker * block);
      if (first >= end) break;
      aio_detail::Chunk chunk;
      chunk.request = request;
      chunk.direct = direct;
      chunk.buffer = request->buffer + first;
      chunk.offset = offset + first;
      chunk.bytes = end - first;
      chunks.emplace_back((engine.next_tail_worker + w) % engine.workers.size(), std::move(chunk));
    }
  };
  add_slices(true, 0, body);
  add_slices(false, body, bytes - body);
  engine.next_tail_worker = (engine.next_tail_worker + 1) % engine.workers.size();

  int64_t pieces = 0;
  for (auto &entry : chunks) pieces += static_cast<int64_t>((entry.second.bytes + block - 1) / block);
  request->pending_pieces.store(pieces);
  if (pieces == 0) {
    std::lock_guard<std::mutex> lock(request->mutex);
    request->finished = true;
  }
  for (auto &entry : chunks) {
    aio_detail::Task task;
    task.chunk = std::move(entry.second);
    engine.workers[entry.first]->post(std::move(task));
  }
  if (engine.outstanding.size() >= 64) {
    // Forget requests that are finished and either succeeded or had their failure seen by a waiter;
    // unseen failures stay for wait_all.
    auto &list = engine.outstanding;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const std::shared_ptr<aio_detail::Request> &r) {
                                std::lock_guard<std::mutex> lock(r->mutex);
                                return r->finished && (r->status.ok() || r->waited);
                              }),
               list.end());
  }
  engine.outstanding.push_back(request);
  if (out != nullptr) *out = AioTicket(request);
  return Status::Ok();
}

Status AioEngine::wait_all() {
  Status first;
  for (auto &request : impl_->outstanding) {
    bool seen;
    {
      std::lock_guard<std::mutex> lock(request->mutex);
      seen = request->waited;
    }
    Status status = request->wait();
    if (first.ok() && !status.ok() && !seen) first = status;  // a failure a ticket already returned is not news
  }
  impl_->outstanding.clear();
  return first;
}

Status AioEngine::read(const std::shared_ptr<AioFile> &file, void *buffer, uint64_t bytes, uint64_t offset) {
  AioTicket ticket;
  DSRT_RETURN_IF_ERROR(submit_read(file, buffer, bytes, offset, &ticket));
  return ticket.wait();
}

Status AioEngine::write(const std::shared_ptr<AioFile> &file, const void *buffer, uint64_t bytes, uint64_t offset) {
  AioTicket ticket;
  DSRT_RETURN_IF_ERROR(submit_write(file, buffer, bytes, offset, &ticket));
  return ticket.wait();
}

Status AioEngine::read_file(const std::string &path, void *buffer, uint64_t bytes, uint64_t offset) {
  std::shared_ptr<AioFile> file;
  DSRT_RETURN_IF_ERROR(open(path, AioOpenMode::Read, &file));
  return read(file, buffer, bytes, offset);
}

Status AioEngine::write_file(const std::string &path, const void *buffer, uint64_t bytes) {
  std::shared_ptr<AioFile> file;
  DSRT_RETURN_IF_ERROR(open(path, AioOpenMode::WriteTruncate, &file));
  return write(file, buffer, bytes, 0);
}

Status AioEngine::register_buffers(const std::vector<Region> &regions) {
  aio_detail::Engine &engine = *impl_;
  for (const Region &region : regions)
    if (region.data == nullptr || region.bytes == 0 || region.bytes > (uint64_t{1} << 30))
      return Error(DSRT_ERR_INVALID_ARGUMENT,
                   "aio register_buffers: each buffer must be non-NULL and 1 byte to 1 GiB long (got %llu bytes)",
                   static_cast<unsigned long long>(region.bytes));
  if (!engine.uring) return Status::Ok();
  engine.drain();
  aio_detail::RegionSet set;
  set.regions = regions;
  Status first;
  for (auto &worker : engine.workers) {
    Status status;
    aio_detail::uring_worker_register(*worker, set, &status);
    if (first.ok() && !status.ok()) first = status;
  }
  if (!first.ok()) {
    // Registration is an optimization: undo it everywhere and go on with plain reads and writes.
    log_warn_once("aio-register-buffers", "aio: " + first.message() +
                                              "; continuing without registered buffers (raise the memlock limit, "
                                              "ulimit -l, to enable them)");
    aio_detail::RegionSet none;
    for (auto &worker : engine.workers) {
      Status ignored;
      aio_detail::uring_worker_register(*worker, none, &ignored);
    }
    engine.registered = none;
    return Status::Ok();
  }
  engine.registered = set;
  return Status::Ok();
}

Status AioEngine::unregister_buffers() {
  aio_detail::Engine &engine = *impl_;
  if (!engine.uring || engine.registered.regions.empty()) return Status::Ok();
  engine.drain();
  aio_detail::RegionSet none;
  for (auto &worker : engine.workers) {
    Status ignored;
    aio_detail::uring_worker_register(*worker, none, &ignored);
  }
  engine.registered = none;
  return Status::Ok();
}

size_t AioEngine::registered_buffer_count() const { return impl_->registered.regions.size(); }

AioStats AioEngine::stats() const {
  const aio_detail::Counters &c = impl_->counters;
  AioStats stats;
  stats.requests = c.requests.load();
  stats.pieces = c.pieces.load();
  stats.bytes_read = c.bytes_read.load();
  stats.bytes_written = c.bytes_written.load();
  stats.retries = c.retries.load();
  stats.failed_requests = c.failed_requests.load();
  stats.fixed_buffer_pieces = c.fixed_buffer_pieces.load();
  stats.submit_calls = c.submit_calls.load();
  stats.overlapped_refills = c.overlapped_refills.load();
  stats.ring_restarts = c.ring_restarts.load();
  for (const auto &worker : impl_->workers) {
    stats.peak_in_flight = std::max(stats.peak_in_flight, worker->peak_in_flight());
    stats.worker_pieces.push_back(worker->pieces_handled());
    if (worker->fell_back_to_blocking()) stats.blocking_workers++;
  }
  return stats;
}

// ---------------------------------------------------------------------------------------------

bool parse_byte_size(const std::string &text, uint64_t *out) {
  if (text.empty()) return false;
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !(value >= 0) || !std::isfinite(value)) return false;
  std::string suffix(end);
  double multiple = 1;
  if (suffix.empty() || suffix == "B" || suffix == "b") multiple = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KB" || suffix == "KiB") multiple = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MB" || suffix == "MiB") multiple = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GB" || suffix == "GiB") multiple = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t" || suffix == "TB" || suffix == "TiB") multiple = 1024.0 * 1024 * 1024 * 1024;
  else return false;
  double bytes = value * multiple;
  if (bytes > 9.0e18 || bytes != std::floor(bytes)) return false;
  *out = static_cast<uint64_t>(bytes);
  return true;
}

}  // namespace dsrt
