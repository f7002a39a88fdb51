// libFuzzer target for the offline checkpoint reader (what `dsrt zero-to-fp32` and
// dsrt_checkpoint_open use). An input is a one-rank checkpoint: a 4-byte little-endian manifest
// length, manifest.json, then the shard file. The harness writes them into a folder with a correct
// manifest.crc32c, and, so that mutations reach past the checksums, recomputes the shard's header
// CRC, its block CRCs and table CRC, and replaces "@TABLE@" / "@BYTES@" in the manifest with the
// table's CRC and the shard's size. Opening, reading every tensor and exporting must either work
// or fail with a message; nothing may crash, overflow, leak or leave a temporary file.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"
#include "ckpt/shard_file.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
// The export's dtype conversion without the optimizer's threaded SIMD kernels (not under test
// here, and not built into this target): element by element through util/half.h.
void cpu_convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n) {
  for (size_t i = 0; i < n; ++i) from_float(dst, dst_dtype, i, to_float(src, src_dtype, i));
}
}  // namespace dsrt

namespace {

void quiet(int32_t, const char *, void *) {}

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n%s\n", what, detail.c_str());
  std::abort();
}

uint32_t get32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint64_t get64(const uint8_t *p) { return get32(p) | static_cast<uint64_t>(get32(p + 4)) << 32; }
void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Makes the shard's checksums right where its header describes a layout that fits the bytes.
uint32_t fix_checksums(std::string *shard) {
  auto *p = reinterpret_cast<uint8_t *>(&(*shard)[0]);
  const uint64_t size = shard->size();
  if (size < dsrt::kShardHeaderBytes + 4) return 0;
  put32(p + 64, dsrt::crc32c(0, p, 64));
  const uint64_t streams = get32(p + 24), elems = get64(p + 32), block = get64(p + 40);
  if (block == 0 || streams == 0 || elems > (uint64_t{1} << 40) || streams > 64) return 0;
  const uint64_t data = elems * streams * 4;
  const uint64_t blocks = (data + block - 1) / block;
  if (dsrt::kShardHeaderBytes + data + 4 * blocks + 4 != size) return 0;
  uint8_t *table = p + dsrt::kShardHeaderBytes + data;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t begin = b * block, n = std::min(block, data - begin);
    put32(table + 4 * b, dsrt::crc32c(0, p + dsrt::kShardHeaderBytes + begin, n));
  }
  const uint32_t crc = dsrt::crc32c(0, table, 4 * blocks);
  put32(table + 4 * blocks, crc);
  return crc;
}

void replace_all(std::string *text, const std::string &from, const std::string &to) {
  for (size_t at = text->find(from); at != std::string::npos; at = text->find(from, at + to.size()))
    text->replace(at, from.size(), to);
}

// Without fsync (thousands of inputs a second; the reader is under test, not durability).
void write_file(const std::string &path, const std::string &bytes) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) fail("cannot write", path);
  std::fclose(f);
}

// The scratch folder of this process (a plain array: the exit handler that removes it runs after
// static objects are destroyed).
char g_folder[] = "/tmp/dsrt_fuzz_ckpt_XXXXXX";

std::string folder() {
  static const bool made = [] {
    if (::mkdtemp(g_folder) == nullptr) fail("cannot create a folder", g_folder);
    std::atexit([] { (void)dsrt::remove_tree(g_folder); });
    return true;
  }();
  (void)made;
  return g_folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool initialized = [] {
    dsrt::log_set_callback(quiet, nullptr);
    return true;
  }();
  (void)initialized;
  if (size < 4) return 0;
  const uint32_t manifest_bytes = get32(data);
  if (manifest_bytes > size - 4) return 0;
  std::string manifest(reinterpret_cast<const char *>(data + 4), manifest_bytes);
  std::string shard(reinterpret_cast<const char *>(data + 4 + manifest_bytes), size - 4 - manifest_bytes);
  const uint32_t table_crc = fix_checksums(&shard);
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016x", table_crc);
  replace_all(&manifest, "@TABLE@", hex);
  replace_all(&manifest, "@BYTES@", std::to_string(shard.size()));

  const std::string dir = folder(), tag_dir = dir + "/t";
  (void)dsrt::remove_tree(tag_dir);
  if (!dsrt::make_directories(tag_dir).ok()) fail("cannot create", tag_dir);
  write_file(tag_dir + "/manifest.json", manifest);
  char crc_text[64];
  std::snprintf(crc_text, sizeof crc_text, "crc32c %08x bytes %zu\n", dsrt::crc32c(0, manifest.data(), manifest.size()),
                manifest.size());
  write_file(tag_dir + "/manifest.crc32c", crc_text);
  write_file(tag_dir + "/zero_rank_00000.shard", shard);

  std::unique_ptr<dsrt::CheckpointReader> reader;
  dsrt::Status status = dsrt::CheckpointReader::open(dir, "t", &reader);
  if (!status.ok()) {
    if (status.message().empty() || reader) fail("open failed without a message", "");
    return 0;
  }
  std::vector<float> values;
  for (size_t t = 0; t < reader->manifest().tensors.size(); ++t) {
    const int64_t numel = reader->manifest().tensors[t].numel;
    if (numel > (int64_t{1} << 22)) continue;  // a valid but huge tensor: its bytes are not in the input
    values.assign(static_cast<size_t>(numel), 0.0f);
    status = reader->read_range(t, 0, numel, values.data());
    if (!status.ok() && status.message().empty()) fail("read failed without a message", "");
  }
  const std::string out = dir + "/out.safetensors";
  status = reader->export_safetensors(out, DSRT_BF16);
  if (!status.ok() && status.message().empty()) fail("export failed without a message", "");
  struct stat st;
  if (::stat((out + ".tmp").c_str(), &st) == 0) fail("a failed export left its temporary file", status.message());
  ::unlink(out.c_str());
  return 0;
}
