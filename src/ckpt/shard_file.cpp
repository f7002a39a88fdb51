// defines: the shard header encoding, ShardWriter and ShardReader.
#include "ckpt/shard_file.h"

#include <algorithm>
#include <cstring>

#include "ckpt/crc32c.h"

namespace dsrt {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'R', 'T', 'S', 'H', 'R', 'D'};
constexpr size_t kHeaderFieldBytes = 64;

void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void encode_header(const ShardHeader &h, uint8_t *out) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kMagic, 8);
  put32(out + 8, kShardFormatVersion);
  put32(out + 12, static_cast<uint32_t>(kShardHeaderBytes));
  put32(out + 16, static_cast<uint32_t>(h.rank));
  put32(out + 20, static_cast<uint32_t>(h.world_size));
  put32(out + 24, h.num_streams);
  put64(out + 32, h.elems_per_stream);
  put64(out + 40, h.block_bytes);
  put64(out + 48, h.num_blocks());
  put64(out + 56, h.save_id);
  put32(out + kHeaderFieldBytes, crc32c(0, out, kHeaderFieldBytes));
}

// Table entries as little-endian bytes, so the file is the same on any host.
std::vector<uint8_t> encode_table(const std::vector<uint32_t> &table) {
  std::vector<uint8_t> bytes(table.size() * 4 + 4);
  for (size_t i = 0; i < table.size(); ++i) put32(&bytes[i * 4], table[i]);
  put32(&bytes[table.size() * 4], crc32c(0, bytes.data(), table.size() * 4));
  return bytes;
}

}  // namespace

CheckpointTestHooks &checkpoint_test_hooks() {
  static CheckpointTestHooks hooks;
  return hooks;
}

void checkpoint_hook(const char *phase, uint64_t index) {
  const CheckpointTestHooks &hooks = checkpoint_test_hooks();
  if (hooks.at) hooks.at(phase, index);
}

Status ShardWriter::open(const std::string &path, const ShardHeader &header) {
  header_ = header;
  if (header_.block_bytes == 0 || header_.block_bytes % 4 != 0)
    return Error(DSRT_ERR_INTERNAL, "shard block size %llu is not a positive multiple of 4",
                 static_cast<unsigned long long>(header_.block_bytes));
  if (!block_.allocate(static_cast<size_t>(std::max<uint64_t>(header_.block_bytes, kShardHeaderBytes))))
    return Error(DSRT_ERR_OUT_OF_MEMORY, "checkpoint writer: cannot allocate a %llu-byte block",
                 static_cast<unsigned long long>(header_.block_bytes));
  DSRT_RETURN_IF_ERROR(File::create(path, &file_));
  encode_header(header_, block_.as<uint8_t>());
  DSRT_RETURN_IF_ERROR(file_.write_all(block_.data(), kShardHeaderBytes));
  filled_ = 0;
  written_ = 0;
  table_.clear();
  table_.reserve(static_cast<size_t>(header_.num_blocks()));
  return Status::Ok();
}

Status ShardWriter::flush_block() {
  if (filled_ == 0) return Status::Ok();
  table_.push_back(crc32c(0, block_.data(), filled_));
  DSRT_RETURN_IF_ERROR(file_.write_all(block_.data(), filled_));
  written_ += filled_;
  filled_ = 0;
  checkpoint_hook("block", table_.size() - 1);
  return Status::Ok();
}

Status ShardWriter::append(const void *src, size_t bytes, const CopyToHost &copy) {
  const char *p = static_cast<const char *>(src);
  while (bytes > 0) {
    const size_t take = std::min<size_t>(bytes, static_cast<size_t>(header_.block_bytes) - filled_);
    DSRT_RETURN_IF_ERROR(copy(block_.as<char>() + filled_, p, take));
    filled_ += take;
    p += take;
    bytes -= take;
    if (filled_ == header_.block_bytes) DSRT_RETURN_IF_ERROR(flush_block());
  }
  return Status::Ok();
}

Status ShardWriter::finish(uint64_t *file_bytes, uint32_t *table_crc) {
  DSRT_RETURN_IF_ERROR(flush_block());
  if (written_ != header_.data_bytes() || table_.size() != header_.num_blocks())
    return Error(DSRT_ERR_INTERNAL, "shard '%s': wrote %llu data bytes in %zu blocks, expected %llu in %llu",
                 file_.path().c_str(), static_cast<unsigned long long>(written_), table_.size(),
                 static_cast<unsigned long long>(header_.data_bytes()),
                 static_cast<unsigned long long>(header_.num_blocks()));
  const std::vector<uint8_t> table = encode_table(table_);
  DSRT_RETURN_IF_ERROR(file_.write_all(table.data(), table.size()));
  DSRT_RETURN_IF_ERROR(file_.sync());
  DSRT_RETURN_IF_ERROR(file_.close());
  *file_bytes = header_.file_bytes();
  *table_crc = get32(&table[table.size() - 4]);
  return Status::Ok();
}

Status ShardReader::open(const std::string &path, const ShardHeader &expect, uint64_t file_bytes, uint32_t table_crc) {
  DSRT_RETURN_IF_ERROR(File::open_read(path, &file_));
  uint64_t size = 0;
  DSRT_RETURN_IF_ERROR(file_.size(&size));
  const char *p = path.c_str();
  if (size != file_bytes)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is %llu bytes but the manifest says %llu (%s)", p,
                 static_cast<unsigned long long>(size), static_cast<unsigned long long>(file_bytes),
                 size < file_bytes ? "truncated" : "extra bytes");
  if (size < kShardHeaderBytes + 4)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is %llu bytes, too small for a shard (truncated)", p,
                 static_cast<unsigned long long>(size));
  uint8_t raw[kShardHeaderBytes];
  DSRT_RETURN_IF_ERROR(file_.read_exact(0, raw, sizeof raw));
  if (std::memcmp(raw, kMagic, 8) != 0)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is not a dsrt shard (bad magic)", p);
  if (get32(raw + 8) != kShardFormatVersion)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' has shard format version %u; this dsrt reads version %u", p, get32(raw + 8),
                 kShardFormatVersion);
  if (get32(raw + kHeaderFieldBytes) != crc32c(0, raw, kHeaderFieldBytes))
    return Error(DSRT_ERR_CHECKPOINT, "'%s': header checksum mismatch (the header is damaged)", p);
  // The writer zeroes the rest of the header: any other byte there is damage.
  for (size_t i = kHeaderFieldBytes + 4; i < sizeof raw; ++i)
    if (raw[i] != 0)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': header byte %zu is not zero (the header is damaged)", p, i);
  if (get32(raw + 12) != kShardHeaderBytes)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': header size %u is not %llu", p, get32(raw + 12),
                 static_cast<unsigned long long>(kShardHeaderBytes));
  ShardHeader h;
  h.rank = static_cast<int32_t>(get32(raw + 16));
  h.world_size = static_cast<int32_t>(get32(raw + 20));
  h.num_streams = get32(raw + 24);
  h.elems_per_stream = get64(raw + 32);
  h.block_bytes = get64(raw + 40);
  h.save_id = get64(raw + 56);
  if (h.rank != expect.rank || h.world_size != expect.world_size)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is rank %d of %d but the manifest expects rank %d of %d", p, h.rank,
                 h.world_size, expect.rank, expect.world_size);
  if (h.save_id != expect.save_id)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' belongs to another save (id %016llx, manifest %016llx)", p,
                 static_cast<unsigned long long>(h.save_id), static_cast<unsigned long long>(expect.save_id));
  if (h.num_streams != expect.num_streams || h.elems_per_stream != expect.elems_per_stream)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' holds %u streams of %llu elements; the manifest expects %u of %llu", p,
                 h.num_streams, static_cast<unsigned long long>(h.elems_per_stream), expect.num_streams,
                 static_cast<unsigned long long>(expect.elems_per_stream));
  if (h.block_bytes != expect.block_bytes)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' has %llu-byte blocks; the manifest says %llu", p,
                 static_cast<unsigned long long>(h.block_bytes), static_cast<unsigned long long>(expect.block_bytes));
  // Every size below is computed with overflow checks and compared with the file's real size
  // before anything is allocated or read from it.
  uint64_t data_bytes = 0, blocks = 0, table_bytes = 0, total = 0;
  if (h.block_bytes == 0 || h.block_bytes % 4 != 0 || h.num_streams == 0 ||
      __builtin_mul_overflow(h.elems_per_stream, static_cast<uint64_t>(h.num_streams), &data_bytes) ||
      __builtin_mul_overflow(data_bytes, static_cast<uint64_t>(sizeof(float)), &data_bytes))
    return Error(DSRT_ERR_CHECKPOINT, "'%s': the header's sizes (%u streams of %llu elements, %llu-byte blocks) are "
                 "impossible", p, h.num_streams, static_cast<unsigned long long>(h.elems_per_stream),
                 static_cast<unsigned long long>(h.block_bytes));
  blocks = data_bytes / h.block_bytes + (data_bytes % h.block_bytes != 0 ? 1 : 0);
  if (__builtin_mul_overflow(blocks, uint64_t{4}, &table_bytes) ||
      __builtin_add_overflow(table_bytes, uint64_t{4} + kShardHeaderBytes, &total) ||
      __builtin_add_overflow(total, data_bytes, &total) || get64(raw + 48) != blocks || total != size)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': inconsistent block layout in the header (it describes a file other than "
                 "its %llu bytes)", p, static_cast<unsigned long long>(size));
  header_ = h;
  std::vector<uint8_t> table(static_cast<size_t>(h.num_blocks()) * 4 + 4);
  DSRT_RETURN_IF_ERROR(file_.read_exact(kShardHeaderBytes + h.data_bytes(), table.data(), table.size()));
  const uint32_t stored = get32(&table[table.size() - 4]);
  if (stored != crc32c(0, table.data(), table.size() - 4))
    return Error(DSRT_ERR_CHECKPOINT, "'%s': the block checksum table is damaged", p);
  if (stored != table_crc)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': its checksum table does not match the manifest's (a shard from another save?)", p);
  table_.resize(static_cast<size_t>(h.num_blocks()));
  for (size_t i = 0; i < table_.size(); ++i) table_[i] = get32(&table[i * 4]);
  // A block never holds more than the data (a small shard with a large block size).
  if (!block_.allocate(static_cast<size_t>(std::max<uint64_t>(4, std::min(h.block_bytes, data_bytes))), false))
    return Error(DSRT_ERR_OUT_OF_MEMORY, "checkpoint reader: cannot allocate a %llu-byte block",
                 static_cast<unsigned long long>(h.block_bytes));
  cached_ = UINT64_MAX;
  return Status::Ok();
}

Status ShardReader::load_block(uint64_t index) {
  if (index == cached_) return Status::Ok();
  cached_ = UINT64_MAX;
  const uint64_t begin = index * header_.block_bytes;
  const size_t bytes = static_cast<size_t>(std::min(header_.block_bytes, header_.data_bytes() - begin));
  DSRT_RETURN_IF_ERROR(file_.read_exact(kShardHeaderBytes + begin, block_.data(), bytes));
  if (crc32c(0, block_.data(), bytes) != table_[index])
    return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch in block %llu (data bytes %llu..%llu are damaged)",
                 file_.path().c_str(), static_cast<unsigned long long>(index), static_cast<unsigned long long>(begin),
                 static_cast<unsigned long long>(begin + bytes));
  cached_ = index;
  return Status::Ok();
}

Status ShardReader::read(uint32_t stream, uint64_t elem, uint64_t count, float *out) {
  if (stream >= header_.num_streams || elem > header_.elems_per_stream || count > header_.elems_per_stream - elem)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': request for elements %llu..%llu of stream %u is outside the shard",
                 file_.path().c_str(), static_cast<unsigned long long>(elem),
                 static_cast<unsigned long long>(elem + count), stream);
  uint64_t pos = (stream * header_.elems_per_stream + elem) * sizeof(float);
  uint64_t left = count * sizeof(float);
  char *dst = reinterpret_cast<char *>(out);
  while (left > 0) {
    const uint64_t index = pos / header_.block_bytes;
    const uint64_t within = pos - index * header_.block_bytes;
    const uint64_t block_begin = index * header_.block_bytes;
    const uint64_t block_len = std::min(header_.block_bytes, header_.data_bytes() - block_begin);
    if (within == 0 && left >= block_len && index != cached_) {
      // A whole block wanted: read and verify it in place, skipping the block buffer.
      DSRT_RETURN_IF_ERROR(file_.read_exact(kShardHeaderBytes + block_begin, dst, static_cast<size_t>(block_len)));
      if (crc32c(0, dst, static_cast<size_t>(block_len)) != table_[index])
        return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch in block %llu (data bytes %llu..%llu are damaged)",
                     file_.path().c_str(), static_cast<unsigned long long>(index),
                     static_cast<unsigned long long>(block_begin), static_cast<unsigned long long>(block_begin + block_len));
      dst += block_len;
      pos += block_len;
      left -= block_len;
      continue;
    }
    DSRT_RETURN_IF_ERROR(load_block(index));
    const uint64_t take = std::min(left, header_.block_bytes - within);
    std::memcpy(dst, block_.as<char>() + within, static_cast<size_t>(take));
    dst += take;
    pos += take;
    left -= take;
  }
  return Status::Ok();
}

Status ShardReader::verify_all() {
  for (uint64_t i = 0; i < header_.num_blocks(); ++i) DSRT_RETURN_IF_ERROR(load_block(i));
  return Status::Ok();
}

}  // namespace dsrt
