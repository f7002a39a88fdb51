// defines: File and the folder operations of file_io.h over POSIX calls.
#include "ckpt/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsrt {
namespace {

Status io_error(const char *what, const std::string &path, int err) {
  return Error(DSRT_ERR_IO, "%s '%s': %s", what, path.c_str(), std::strerror(err));
}

std::string parent_of(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

File &File::operator=(File &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

Status File::create(const std::string &path, File *out) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path, errno);
  *out = File();
  out->fd_ = fd;
  out->path_ = path;
  return Status::Ok();
}

Status File::open_read(const std::string &path, File *out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error(DSRT_ERR_CHECKPOINT, "'%s' is missing", path.c_str());
    return io_error("cannot open", path, errno);
  }
  *out = File();
  out->fd_ = fd;
  out->path_ = path;
  return Status::Ok();
}

Status File::write_all(const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write", path_, errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status File::read_exact(uint64_t offset, void *data, size_t bytes) const {
  char *p = static_cast<char *>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read", path_, errno);
    }
    if (n == 0)
      return Error(DSRT_ERR_CHECKPOINT, "'%s' is truncated: it ends before byte %llu", path_.c_str(),
                   static_cast<unsigned long long>(offset + bytes));
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status File::sync() {
  if (::fsync(fd_) != 0) return io_error("cannot fsync", path_, errno);
  return Status::Ok();
}

Status File::size(uint64_t *out) const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return io_error("cannot stat", path_, errno);
  *out = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Status File::close() {
  if (fd_ < 0) return Status::Ok();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error("cannot close", path_, errno);
  return Status::Ok();
}

std::string join_file_path(const std::string &dir, const std::string &name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool path_exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status make_directories(const std::string &path) {
  if (path.empty() || is_directory(path)) return Status::Ok();
  const std::string parent = parent_of(path);
  if (parent != path) DSRT_RETURN_IF_ERROR(make_directories(parent));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return io_error("cannot create folder", path, errno);
  return Status::Ok();
}

Status sync_directory(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open folder", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot fsync a folder; their renames are already durable or not at all.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) return io_error("cannot fsync folder", path, err);
  return Status::Ok();
}

Status list_directory(const std::string &path, std::vector<std::string> *names) {
  names->clear();
  DIR *d = ::opendir(path.c_str());
  if (d == nullptr) return io_error("cannot list", path, errno);
  while (struct dirent *e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names->emplace_back(e->d_name);
  }
  ::closedir(d);
  return Status::Ok();
}

Status remove_tree(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return io_error("cannot stat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    DSRT_RETURN_IF_ERROR(list_directory(path, &names));
    for (const std::string &name : names) DSRT_RETURN_IF_ERROR(remove_tree(join_file_path(path, name)));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return io_error("cannot remove folder", path, errno);
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_error("cannot remove", path, errno);
  }
  return Status::Ok();
}

Status read_whole_file(const std::string &path, size_t max_bytes, std::string *out) {
  File file;
  DSRT_RETURN_IF_ERROR(File::open_read(path, &file));
  uint64_t size = 0;
  DSRT_RETURN_IF_ERROR(file.size(&size));
  if (size > max_bytes)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is %llu bytes, more than the %zu expected of it", path.c_str(),
                 static_cast<unsigned long long>(size), max_bytes);
  out->assign(static_cast<size_t>(size), '\0');
  if (size > 0) DSRT_RETURN_IF_ERROR(file.read_exact(0, &(*out)[0], static_cast<size_t>(size)));
  return Status::Ok();
}

Status write_file_synced(const std::string &path, const void *data, size_t bytes) {
  Status status;
  {
    File file;
    status = File::create(path, &file);
    if (!status.ok()) return status;  // nothing was created (or path is not ours to remove)
    status = file.write_all(data, bytes);
    if (status.ok()) status = file.sync();
    if (status.ok()) status = file.close();
  }
  if (!status.ok()) ::unlink(path.c_str());
  return status;
}

Status write_file_durably(const std::string &path, const void *data, size_t bytes) {
  const std::string temp = path + ".tmp";
  DSRT_RETURN_IF_ERROR(write_file_synced(temp, data, bytes));
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return io_error("cannot rename into place", path, err);
  }
  return sync_directory(parent_of(path));
}

namespace {
long exchange_paths(const std::string &a, const std::string &b) {
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
}
}  // namespace

Status DirectorySwap::swap(const std::string &from, const std::string &to, const std::string &displaced) {
  from_ = from;
  to_ = to;
  displaced_ = displaced;
  if (!path_exists(to)) {
    if (::rename(from.c_str(), to.c_str()) != 0) return io_error("cannot rename folder into place", to, errno);
    state_ = kRenamed;
  } else if (exchange_paths(from, to) == 0) {
    state_ = kExchanged;
  } else {
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      return io_error("cannot swap folder into place", to, errno);
    if (::rename(to.c_str(), displaced.c_str()) != 0) return io_error("cannot move the old folder aside", to, errno);
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int err = errno;
      (void)::rename(displaced.c_str(), to.c_str());
      return io_error("cannot rename folder into place", to, err);
    }
    state_ = kDisplaced;
  }
  Status synced = sync_directory(parent_of(to));
  if (!synced.ok()) (void)undo();
  return synced;
}

Status DirectorySwap::undo() {
  int rc = 0;
  switch (state_) {
    case kIdle: return Status::Ok();
    case kRenamed: rc = ::rename(to_.c_str(), from_.c_str()); break;
    case kExchanged: rc = static_cast<int>(exchange_paths(from_, to_)); break;
    case kDisplaced:
      rc = ::rename(to_.c_str(), from_.c_str());
      if (rc == 0) rc = ::rename(displaced_.c_str(), to_.c_str());
      break;
  }
  state_ = kIdle;
  if (rc != 0) return io_error("cannot put the previous folder back at", to_, errno);
  return sync_directory(parent_of(to_));
}

Status DirectorySwap::commit() {
  const State state = state_;
  state_ = kIdle;
  if (state == kExchanged) return remove_tree(from_);
  if (state == kDisplaced) return remove_tree(displaced_);
  return Status::Ok();
}

}  // namespace dsrt
