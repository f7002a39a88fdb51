// file_io.h -- the POSIX file operations checkpoints are built from, each returning a Status that
// names the path and errno: whole writes and reads, fsync of files and folders, durable small
// files (temp + fsync + rename + folder fsync), atomic folder replacement, recursive removal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace dsrt {

class File {
 public:
  File() = default;
  File(const File &) = delete;
  File &operator=(const File &) = delete;
  File(File &&other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  File &operator=(File &&other) noexcept;
  ~File();

  // Creates (or truncates) path for writing.
  static Status create(const std::string &path, File *out);
  static Status open_read(const std::string &path, File *out);

  Status write_all(const void *data, size_t bytes);
  // Reads exactly bytes at offset; a file that ends early is a CHECKPOINT error ("truncated").
  Status read_exact(uint64_t offset, void *data, size_t bytes) const;
  Status sync();
  Status size(uint64_t *out) const;
  Status close();
  const std::string &path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
};

std::string join_file_path(const std::string &dir, const std::string &name);
bool path_exists(const std::string &path);
bool is_directory(const std::string &path);
// mkdir -p.
Status make_directories(const std::string &path);
Status sync_directory(const std::string &path);
// rm -rf; a missing path is not an error.
Status remove_tree(const std::string &path);
// Names in a folder (without . and ..).
Status list_directory(const std::string &path, std::vector<std::string> *names);
// Whole small file; CHECKPOINT error if it is larger than max_bytes.
Status read_whole_file(const std::string &path, size_t max_bytes, std::string *out);
// Creates path, writes, fsyncs and closes it; on failure the half-written file is removed.
Status write_file_synced(const std::string &path, const void *data, size_t bytes);
// Writes path so that a crash leaves either the old content or the new, never a mix (path.tmp,
// fsync, rename, folder fsync); on failure path is untouched and path.tmp removed.
Status write_file_durably(const std::string &path, const void *data, size_t bytes);

// Puts folder `from` at `to` in one step, keeping the folder it replaces until commit(). When `to`
// exists it is swapped out atomically (renameat2 RENAME_EXCHANGE: the old folder then sits at
// `from`); filesystems without the exchange move the old one to `displaced` first (readers look
// there when `to` is missing). swap() fails with nothing changed. undo() puts the previous state
// back (the new folder returns to `from`); commit() removes the old folder, and its failure only
// leaves a leftover (the next save removes it). The destructor undoes a swap never committed.
class DirectorySwap {
 public:
  DirectorySwap() = default;
  DirectorySwap(const DirectorySwap &) = delete;
  DirectorySwap &operator=(const DirectorySwap &) = delete;
  ~DirectorySwap() { (void)undo(); }
  Status swap(const std::string &from, const std::string &to, const std::string &displaced);
  Status undo();
  Status commit();

 private:
  enum State { kIdle, kRenamed, kExchanged, kDisplaced };
  State state_ = kIdle;
  std::string from_, to_, displaced_;
};

}  // namespace dsrt
