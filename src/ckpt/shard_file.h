// shard_file.h -- one rank's shard of a checkpoint: a 4096-byte header, the data, a checksum table.
//
//   header   magic "DSRTSHRD", format version, header size, rank, world size, number of streams,
//            elements per stream, block size, number of blocks, the save id shared by every file
//            of one save, and a CRC-32C of those fields (all little-endian)
//   data     stream after stream (fp32 master, then each optimizer state), each stream the
//            concatenation of the rank's segments in manifest order, no padding
//   table    one CRC-32C per block of block_bytes data bytes, then a CRC-32C of the table
//
// The writer streams: it holds one block in memory, so a partition living on a device, in pinned
// memory or on NVMe is written piece by piece without a full copy. The reader checks the header,
// the size, the table against the manifest and each block's checksum before handing out bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/file_io.h"
#include "util/aligned_buffer.h"
#include "util/status.h"

namespace dsrt {

constexpr uint32_t kShardFormatVersion = 1;
constexpr uint64_t kShardHeaderBytes = 4096;
constexpr uint64_t kDefaultBlockBytes = 1 << 20;

struct ShardHeader {
  int32_t rank = 0;
  int32_t world_size = 1;
  uint32_t num_streams = 1;
  uint64_t elems_per_stream = 0;
  uint64_t block_bytes = kDefaultBlockBytes;
  uint64_t save_id = 0;

  uint64_t data_bytes() const { return elems_per_stream * num_streams * sizeof(float); }
  uint64_t num_blocks() const { return (data_bytes() + block_bytes - 1) / block_bytes; }
  uint64_t file_bytes() const { return kShardHeaderBytes + data_bytes() + 4 * num_blocks() + 4; }
};

// Copies bytes from wherever a partition lives (device, host) into host memory.
using CopyToHost = std::function<Status(void *dst, const void *src, size_t bytes)>;

class ShardWriter {
 public:
  Status open(const std::string &path, const ShardHeader &header);
  // Appends bytes of the current stream position; src is read through copy.
  Status append(const void *src, size_t bytes, const CopyToHost &copy);
  // Writes the last block and the table, fsyncs and closes. table_crc: the manifest's check.
  Status finish(uint64_t *file_bytes, uint32_t *table_crc);

 private:
  Status flush_block();
  File file_;
  ShardHeader header_;
  AlignedBuffer block_;
  size_t filled_ = 0;
  uint64_t written_ = 0;
  std::vector<uint32_t> table_;
};

class ShardReader {
 public:
  // Checks header fields against expect, the file size, and the table against table_crc.
  Status open(const std::string &path, const ShardHeader &expect, uint64_t file_bytes, uint32_t table_crc);
  // count floats of stream `stream` starting at element elem, each touched block verified.
  Status read(uint32_t stream, uint64_t elem, uint64_t count, float *out);
  // Reads and verifies every block.
  Status verify_all();
  const std::string &path() const { return file_.path(); }

 private:
  Status load_block(uint64_t index);
  File file_;
  ShardHeader header_;
  std::vector<uint32_t> table_;
  AlignedBuffer block_;
  uint64_t cached_ = UINT64_MAX;
};

// The test hook checkpoint code calls at each step of a save ("block", "shard-synced",
// "manifest", "published", "latest"); tests use it to kill a writer at a chosen moment.
struct CheckpointTestHooks {
  std::function<void(const char *phase, uint64_t index)> at;
  uint64_t block_bytes = 0;  // 0: kDefaultBlockBytes
  // Treat every state as lacking a host pointer, as when it lives in GPU memory, so that save and
  // load take the read_partition_state / write_partition_state path on the CPU device too.
  bool states_without_host_pointer = false;
};
CheckpointTestHooks &checkpoint_test_hooks();
void checkpoint_hook(const char *phase, uint64_t index);

}  // namespace dsrt
