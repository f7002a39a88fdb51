// defines: SwapStore -- the private swap folder (creation, locking, stale cleanup, removal) and
// named arrays written to a new file and renamed into place on success.
#include "offload/swap_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "util/log.h"

namespace dsrt {
namespace {

constexpr char kPrefix[] = "dsrt-swap-";
constexpr char kLockName[] = "owner.lock";
constexpr char kCreatingSuffix[] = ".creating";
// A hidden ".creating" folder without a lock file this old was abandoned mid-creation.
constexpr time_t kAbandonedCreationSeconds = 60;

bool all_of_class(const std::string &text, size_t begin, size_t end, bool (*ok)(char)) {
  if (begin >= end) return false;
  for (size_t i = begin; i < end; ++i)
    if (!ok(text[i])) return false;
  return true;
}

// "dsrt-swap-<16 lowercase hex>-rank<digits>", optionally hidden (".") with ".creating" appended.
bool is_store_folder_name(const std::string &name) {
  std::string core = name;
  if (!core.empty() && core[0] == '.') {
    size_t suffix = std::strlen(kCreatingSuffix);
    if (core.size() <= suffix || core.compare(core.size() - suffix, suffix, kCreatingSuffix) != 0) return false;
    core = core.substr(1, core.size() - 1 - suffix);
  }
  size_t prefix = std::strlen(kPrefix);
  if (core.compare(0, prefix, kPrefix) != 0) return false;
  size_t hex_end = prefix + 16;
  if (core.size() < hex_end + 6) return false;
  if (!all_of_class(core, prefix, hex_end, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    return false;
  if (core.compare(hex_end, 5, "-rank") != 0) return false;
  return all_of_class(core, hex_end + 5, core.size(), [](char c) { return c >= '0' && c <= '9'; });
}

bool ends_with(const std::string &text, const char *suffix) {
  size_t n = std::strlen(suffix);
  return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

bool is_store_file_name(const std::string &name) {
  return name == kLockName || ends_with(name, ".swp");
}

std::vector<std::string> list_names(const std::string &folder) {
  std::vector<std::string> names;
  if (DIR *dir = opendir(folder.c_str())) {
    while (struct dirent *entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

// Removes a store folder whose owner is gone; false (and a warning) if it holds anything foreign.
bool remove_dead_folder(const std::string &folder) {
  std::vector<std::string> names = list_names(folder);
  for (const std::string &name : names) {
    struct stat info;
    std::string path = folder + "/" + name;
    if (!is_store_file_name(name) || lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      log_warn_once("swap-foreign:" + folder,
                    Format("swap: '%s' was left by a process that is gone, but it holds '%s', which dsrt did not "
                           "make; leaving the folder in place (remove it by hand)",
                           folder.c_str(), name.c_str()));
      return false;
    }
  }
  for (const std::string &name : names) unlink((folder + "/" + name).c_str());
  return rmdir(folder.c_str()) == 0;
}

std::string random_id() {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string sanitize(const std::string &name) {
  std::string out;
  for (char c : name.substr(0, 64)) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                 c == '-';
    out.push_back(plain ? c : '_');
  }
  return out;
}

}  // namespace

int SwapStore::remove_stale_folders(const std::string &nvme_path) {
  int removed = 0;
  for (const std::string &name : list_names(nvme_path)) {
    if (!is_store_folder_name(name)) continue;
    std::string folder = nvme_path + "/" + name;
    struct stat info;
    if (lstat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) continue;
    // A hidden ".creating" folder is being made right now, or its creation was cut short. Its lock
    // file exists a moment before its creator flock()s it, so an unlocked lock proves nothing there:
    // only age does (another rank's store creation in the same nvme_path must not remove it).
    const bool creating = name[0] == '.';
    int fd = creating ? -1 : ::open((folder + "/" + kLockName).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      const bool abandoned = creating && time(nullptr) - info.st_mtime > kAbandonedCreationSeconds;
      if (abandoned && remove_dead_folder(folder)) {
        ++removed;
        logf(DSRT_LOG_INFO, "swap: removed '%s', whose creation was cut short", folder.c_str());
      }
      continue;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // The owner's lock died with it.
      if (remove_dead_folder(folder)) {
        ++removed;
        logf(DSRT_LOG_INFO, "swap: removed '%s', left by a process that is gone", folder.c_str());
      }
    }
    ::close(fd);
  }
  return removed;
}

Status SwapStore::create(AioEngine *engine, const SwapStoreOptions &options, std::unique_ptr<SwapStore> *out) {
  out->reset();
  if (engine == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "swap store: no aio engine");
  if (options.rank < 0) return Error(DSRT_ERR_INVALID_ARGUMENT, "swap store: rank %d < 0", options.rank);
  struct stat info;
  if (options.nvme_path.empty() || stat(options.nvme_path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return Error(DSRT_ERR_IO,
                 "nvme_path '%s' is not an existing folder (%s): create it, or set offload_optimizer.nvme_path / "
                 "offload_param.nvme_path to a folder on a local NVMe drive",
                 options.nvme_path.c_str(), options.nvme_path.empty() ? "empty" : std::strerror(errno));
  if (options.remove_stale) remove_stale_folders(options.nvme_path);

  std::unique_ptr<SwapStore> store(new SwapStore());
  store->engine_ = engine;
  std::string base = Format("%s%s-rank%d", kPrefix, random_id().c_str(), options.rank);
  std::string creating = options.nvme_path + "/." + base + kCreatingSuffix;
  std::string final_path = options.nvme_path + "/" + base;
  if (mkdir(creating.c_str(), 0700) != 0)
    return Error(DSRT_ERR_IO, "cannot make the swap folder '%s': %s", creating.c_str(), std::strerror(errno));
  std::string lock_path = creating + "/" + kLockName;
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    if (fd >= 0) ::close(fd);
    unlink(lock_path.c_str());
    rmdir(creating.c_str());
    return Error(DSRT_ERR_IO, "cannot create and lock '%s': %s", lock_path.c_str(), std::strerror(error));
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string owner = Format("dsrt swap folder: pid %d host %s rank %d\n", static_cast<int>(getpid()), host,
                             options.rank);
  if (::write(fd, owner.data(), owner.size()) < 0) { /* the text is for people; the lock is what counts */ }
  if (rename(creating.c_str(), final_path.c_str()) != 0) {
    int error = errno;
    ::close(fd);
    unlink(lock_path.c_str());
    rmdir(creating.c_str());
    return Error(DSRT_ERR_IO, "cannot rename '%s' to '%s': %s", creating.c_str(), final_path.c_str(),
                 std::strerror(error));
  }
  store->lock_fd_ = fd;
  store->folder_ = final_path;
  *out = std::move(store);
  return Status::Ok();
}

SwapStore::~SwapStore() {
  Status status = wait_all();
  if (!status.ok()) logf(DSRT_LOG_WARN, "swap: while closing '%s': %s", folder_.c_str(), status.message().c_str());
  if (folder_.empty()) return;
  for (const std::string &name : list_names(folder_))
    if (is_store_file_name(name) && name != kLockName) unlink((folder_ + "/" + name).c_str());
  unlink((folder_ + "/" + kLockName).c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (rmdir(folder_.c_str()) != 0)
    logf(DSRT_LOG_WARN, "swap: cannot remove '%s': %s (something else put files there)", folder_.c_str(),
         std::strerror(errno));
}

std::string SwapStore::slot_path(const Entry &entry, int slot) {
  return entry.base + (slot == 0 ? ".0.swp" : ".1.swp");
}

Status SwapStore::finish_name(const std::string &name) {
  std::vector<uint64_t> ids;
  for (const auto &op : pending_)
    if (op.second.name == name) ids.push_back(op.first);
  Status first;
  for (uint64_t id : ids) {
    Status status = finish(id);
    if (first.ok() && !status.ok()) first = status;
  }
  return first;
}

Status SwapStore::swap_out(const std::string &name, const void *buffer, uint64_t bytes, SwapTicket *out) {
  if (out != nullptr) *out = SwapTicket();
  if (name.empty()) return Error(DSRT_ERR_INVALID_ARGUMENT, "swap_out: empty name");
  if (buffer == nullptr && bytes > 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "swap_out of '%s': NULL buffer", name.c_str());
  // Earlier operations on this name may use the slot about to be written: finish them first.
  DSRT_RETURN_IF_ERROR(finish_name(name).with_context(Format("before swapping out '%s' again", name.c_str())));

  auto found = entries_.find(name);
  if (found == entries_.end()) {
    Entry entry;
    entry.base = Format("%s/%06llu-%s", folder_.c_str(), static_cast<unsigned long long>(next_file_++),
                        sanitize(name).c_str());
    found = entries_.emplace(name, std::move(entry)).first;
  }
  Entry &entry = found->second;
  Operation op;
  op.name = name;
  op.is_write = true;
  op.slot = entry.current == 0 ? 1 : 0;  // never the slot holding the committed copy
  op.bytes = bytes;
  std::string path = slot_path(entry, op.slot);
  auto give_up = [&](Status status) {
    op.file.reset();
    if (entry.current < 0) {
      unlink(path.c_str());
      entries_.erase(found);
    }
    return status.with_context(Format("swap-out of '%s' (the data is still in memory)", name.c_str()));
  };
  Status status = engine_->open(path, AioOpenMode::Write, &op.file);
  if (!status.ok()) return give_up(status);
  // Size the slot: an equal size is a pure overwrite of allocated blocks (the fast path for O_DIRECT);
  // a larger one reserves its space up front, so a full disk fails here, before any I/O.
  struct stat info;
  if (fstat(op.file->fd(), &info) != 0)
    return give_up(Error(DSRT_ERR_IO, "fstat '%s': %s", path.c_str(), std::strerror(errno)));
  uint64_t have = static_cast<uint64_t>(info.st_size);
  if (have > bytes && ftruncate(op.file->fd(), static_cast<off_t>(bytes)) != 0)
    return give_up(Error(DSRT_ERR_IO, "cannot shrink '%s' to %llu bytes: %s", path.c_str(),
                         static_cast<unsigned long long>(bytes), std::strerror(errno)));
  if (have < bytes) {
    // fallocate(2), not posix_fallocate: where the file system cannot reserve, go on without.
    int rc = fallocate(op.file->fd(), 0, 0, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
    if (rc != 0 && rc != EOPNOTSUPP && rc != ENOSYS && rc != EINVAL)
      return give_up(Error(DSRT_ERR_IO, "cannot reserve %llu bytes for '%s': %s (free space on the nvme_path drive)",
                           static_cast<unsigned long long>(bytes), path.c_str(), std::strerror(rc)));
  }
  status = engine_->submit_write(op.file, buffer, bytes, 0, &op.ticket);
  if (!status.ok()) return give_up(status);
  op.file.reset();  // the request holds the file until it finishes
  uint64_t id = next_id_++;
  pending_.emplace(id, std::move(op));
  if (out != nullptr) *out = SwapTicket(id);
  return Status::Ok();
}

Status SwapStore::swap_in(const std::string &name, void *buffer, uint64_t bytes, uint64_t offset, SwapTicket *out) {
  if (out != nullptr) *out = SwapTicket();
  for (const auto &op : pending_)
    if (op.second.name == name && op.second.is_write) {
      DSRT_RETURN_IF_ERROR(finish_name(name).with_context(Format("swap-in of '%s'", name.c_str())));
      break;
    }
  auto found = entries_.find(name);
  if (found == entries_.end() || found->second.current < 0)
    return Error(DSRT_ERR_STATE, "swap-in of '%s': nothing has been swapped out under that name", name.c_str());
  const Entry &entry = found->second;
  if (offset > entry.bytes || bytes > entry.bytes - offset)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "swap-in of '%s': bytes [%llu, %llu) asked, but %llu are stored",
                 name.c_str(), static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(offset + bytes), static_cast<unsigned long long>(entry.bytes));
  if (buffer == nullptr && bytes > 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "swap-in of '%s': NULL buffer", name.c_str());
  Operation op;
  op.name = name;
  op.bytes = bytes;
  std::shared_ptr<AioFile> file;
  DSRT_RETURN_IF_ERROR(engine_->open(slot_path(entry, entry.current), AioOpenMode::Read, &file)
                           .with_context(Format("swap-in of '%s' (was the swap folder cleaned by someone else?)",
                                                name.c_str())));
  DSRT_RETURN_IF_ERROR(engine_->submit_read(file, buffer, bytes, offset, &op.ticket)
                           .with_context(Format("swap-in of '%s'", name.c_str())));
  uint64_t id = next_id_++;
  pending_.emplace(id, std::move(op));
  if (out != nullptr) *out = SwapTicket(id);
  return Status::Ok();
}

Status SwapStore::settle(Operation &op, Status status) {
  if (!op.is_write) return status.with_context(Format("swap-in of '%s'", op.name.c_str()));
  auto entry = entries_.find(op.name);
  if (entry == entries_.end()) return status;
  if (status.ok()) {
    entry->second.current = op.slot;  // the switch: from now on reads see the new copy
    entry->second.bytes = op.bytes;
    return Status::Ok();
  }
  bool had_copy = entry->second.current >= 0;
  if (!had_copy) {
    unlink(slot_path(entry->second, op.slot).c_str());
    entries_.erase(entry);
  }
  return status.with_context(Format("swap-out of '%s' (the data is still in memory%s)", op.name.c_str(),
                                    had_copy ? "; the previous copy on disk is intact" : ""));
}

Status SwapStore::finish(uint64_t id) {
  auto found = pending_.find(id);
  if (found == pending_.end()) return Status::Ok();
  Operation op = std::move(found->second);
  pending_.erase(found);
  Status status = op.ticket.wait();
  return settle(op, status);
}

Status SwapStore::wait_group(const std::vector<SwapTicket> &tickets, bool commit) {
  std::vector<Operation> ops;
  std::vector<Status> results;
  Status first;
  for (SwapTicket ticket : tickets) {
    auto found = pending_.find(ticket.id());
    if (!ticket.valid() || found == pending_.end()) {
      if (first.ok())
        first = Error(DSRT_ERR_STATE, "swap ticket %llu is unknown or was already waited for",
                      static_cast<unsigned long long>(ticket.id()));
      continue;
    }
    ops.push_back(std::move(found->second));
    pending_.erase(found);
    results.push_back(ops.back().ticket.wait());
    if (first.ok() && !results.back().ok()) first = results.back();
  }
  // All or nothing: one failed write keeps every array of the group at its previous copy.
  for (size_t i = 0; i < ops.size(); ++i) {
    Status outcome = results[i];
    if (outcome.ok() && !commit && ops[i].is_write)
      outcome = Error(DSRT_ERR_IO, "not committed: the caller abandoned the group");
    else if (outcome.ok() && !first.ok())
      outcome = Error(DSRT_ERR_IO, "not committed because another array of its group failed");
    Status settled = settle(ops[i], outcome);
    if (first.ok() && !settled.ok()) first = settled;
  }
  return first;
}

Status SwapStore::wait(SwapTicket ticket) {
  if (!ticket.valid()) return Status::Ok();
  if (pending_.count(ticket.id()) == 0)
    return Error(DSRT_ERR_STATE, "swap ticket %llu is unknown or was already waited for",
                 static_cast<unsigned long long>(ticket.id()));
  return finish(ticket.id());
}

Status SwapStore::wait_all() {
  Status first;
  while (!pending_.empty()) {
    Status status = finish(pending_.begin()->first);
    if (first.ok() && !status.ok()) first = status;
  }
  return first;
}

Status SwapStore::write(const std::string &name, const void *buffer, uint64_t bytes) {
  SwapTicket ticket;
  DSRT_RETURN_IF_ERROR(swap_out(name, buffer, bytes, &ticket));
  return wait(ticket);
}

Status SwapStore::read(const std::string &name, void *buffer, uint64_t bytes, uint64_t offset) {
  SwapTicket ticket;
  DSRT_RETURN_IF_ERROR(swap_in(name, buffer, bytes, offset, &ticket));
  return wait(ticket);
}

Status SwapStore::remove(const std::string &name) {
  Status status = finish_name(name);
  auto found = entries_.find(name);
  if (found == entries_.end())
    return status.ok() ? Error(DSRT_ERR_INVALID_ARGUMENT, "swap remove: no array named '%s'", name.c_str()) : status;
  unlink(slot_path(found->second, 0).c_str());
  unlink(slot_path(found->second, 1).c_str());
  entries_.erase(found);
  return Status::Ok();
}

uint64_t SwapStore::stored_bytes(const std::string &name) const {
  auto found = entries_.find(name);
  return found == entries_.end() || found->second.current < 0 ? 0 : found->second.bytes;
}

uint64_t SwapStore::bytes_on_disk() const {
  uint64_t total = 0;
  for (const auto &entry : entries_)
    if (entry.second.current >= 0) total += entry.second.bytes;
  return total;
}

}  // namespace dsrt
