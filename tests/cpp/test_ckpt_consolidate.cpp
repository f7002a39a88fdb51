// Consolidation: `dsrt zero-to-fp32` on a synthetic 4-rank stage-3 checkpoint of 128 MiB streams
// it (peak RSS of the command far below the checkpoint size), with every value in place; the
// 16-bit model written into the tag folder at save time matches the working weights.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_cache.h"
#include "ckpt/shard_file.h"
#include "ckpt_test_util.h"

namespace dsrt {
namespace {

using namespace ckpt_test;

float value_at(size_t t, int64_t i) { return static_cast<float>(std::sin(0.001 * static_cast<double>(i) + t)) * (1 + t); }

// A stage-3 checkpoint of `world` ranks with of `tensors` tensors of `numel` elements (fp32 master only),
// written shard by shard without ever holding a tensor in memory.
void write_synthetic(const std::string &tag_dir, size_t tensors, int64_t numel, int world = 4) {
  ASSERT_TRUE(make_directories(tag_dir).ok());
  Manifest m;
  m.tag = "synthetic";
  m.save_id = 0x1234;
  m.world_size = world;
  m.zero_stage = 3;
  m.optimizer = "AdamW";
  m.block_bytes = kDefaultBlockBytes;
  m.config_json = "{}";
  for (size_t t = 0; t < tensors; ++t) m.tensors.push_back({"block." + std::to_string(t), {numel / 64, 64}, numel});
  const int64_t shard = (numel + world - 1) / world;
  std::vector<float> chunk(1 << 16);
  for (int r = 0; r < world; ++r) {
    ManifestShard s;
    s.rank = r;
    s.file = shard_file_name(r);
    for (size_t t = 0; t < tensors; ++t)
      s.segments.push_back({static_cast<int64_t>(t), r * shard, std::min(numel, (r + 1) * shard) - r * shard});
    ShardHeader h;
    h.rank = r;
    h.world_size = world;
    h.num_streams = 1;
    h.elems_per_stream = s.elems();
    h.block_bytes = m.block_bytes;
    h.save_id = m.save_id;
    ShardWriter w;
    ASSERT_TRUE(w.open(tag_dir + "/" + s.file, h).ok());
    const CopyToHost copy = [](void *dst, const void *src, size_t n) {
      std::memcpy(dst, src, n);
      return Status::Ok();
    };
    for (const ManifestSegment &g : s.segments) {
      for (int64_t at = 0; at < g.count; at += static_cast<int64_t>(chunk.size())) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), g.count - at);
        for (int64_t i = 0; i < n; ++i) chunk[static_cast<size_t>(i)] = value_at(static_cast<size_t>(g.tensor), g.begin + at + i);
        ASSERT_TRUE(w.append(chunk.data(), static_cast<size_t>(n) * 4, copy).ok());
      }
    }
    ASSERT_TRUE(w.finish(&s.bytes, &s.table_crc).ok());
    m.shards.push_back(std::move(s));
  }
  ASSERT_TRUE(write_manifest(tag_dir, m).ok());
  const std::string latest = "synthetic\n";
  ASSERT_TRUE(write_file_durably(tag_dir + "/../latest", latest.data(), latest.size()).ok());
}

// Runs program with args in a child and returns the child's peak RSS in MiB (-1 on failure).
double peak_rss_mib(const std::string &program, const std::vector<std::string> &args) {
  std::vector<char *> argv;
  argv.push_back(const_cast<char *>(program.c_str()));
  for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<double>(usage.ru_maxrss) / 1024;
}

TEST(Consolidate, CommandStreamsALargeCheckpointInLittleMemory) {
  const std::string dir = scratch_dir("consolidate");
  const size_t tensors = 8;
  const int64_t numel = 4 << 20;  // 16 MiB per tensor, 128 MiB in all
  write_synthetic(dir + "/synthetic", tensors, numel);
  const std::string out = dir + "/model.safetensors";
  const std::string cli = std::string(DSRT_BINARY_DIR) + "/bin/dsrt";
  ASSERT_EQ(::access(cli.c_str(), X_OK), 0) << cli;
  // The command's own footprint (libraries, sanitizer runtime) from a run that reads nothing.
  const double baseline_mib = peak_rss_mib(cli, {"zero-to-fp32", "--help"});
  const double peak_mib = peak_rss_mib(cli, {"zero-to-fp32", dir, out});
  ASSERT_GT(baseline_mib, 0);
  ASSERT_GT(peak_mib, 0);
  const double checkpoint_mib = static_cast<double>(tensors * numel * 4) / (1 << 20);
  std::printf("zero-to-fp32 on a %.0f MiB checkpoint (largest tensor %.0f MiB): peak RSS %.1f MiB, %.1f MiB above "
              "the command's baseline (%.3f of the checkpoint)\n",
              checkpoint_mib, static_cast<double>(numel * 4) / (1 << 20), peak_mib, peak_mib - baseline_mib,
              (peak_mib - baseline_mib) / checkpoint_mib);
  // Streaming: the export adds about a chunk and a block or two, less than one tensor.
  EXPECT_LT(peak_mib - baseline_mib, static_cast<double>(numel * 4) / (1 << 20));

  // Every tensor in place: check the header length and sample values across shard borders.
  File f;
  ASSERT_TRUE(File::open_read(out, &f).ok());
  uint64_t header_len = 0;
  ASSERT_TRUE(f.read_exact(0, &header_len, 8).ok());
  EXPECT_EQ(header_len % 8, 0u);
  uint64_t size = 0;
  ASSERT_TRUE(f.size(&size).ok());
  EXPECT_EQ(size, 8 + header_len + tensors * numel * 4);
  const int64_t shard = numel / 4;
  for (size_t t = 0; t < tensors; t += 5)
    for (int64_t i : {int64_t{0}, shard - 1, shard, 3 * shard + 7, numel - 1}) {
      float v = 0;
      ASSERT_TRUE(f.read_exact(8 + header_len + (t * numel + i) * 4, &v, 4).ok());
      EXPECT_EQ(v, value_at(t, i)) << "tensor " << t << " element " << i;
    }
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Consolidate, ManyShardsAreReadThroughABoundedSetOfOpenFiles) {
  const std::string dir = scratch_dir("many");
  const int world = 3 * static_cast<int>(kMaxOpenShards) + 1;
  write_synthetic(dir + "/synthetic", 5, 64 * 37, world);
  std::unique_ptr<CheckpointReader> reader;
  ASSERT_TRUE(CheckpointReader::open(dir, "", &reader).ok());
  ASSERT_EQ(reader->manifest().shards.size(), static_cast<size_t>(world));
  for (int pass = 0; pass < 2; ++pass)
    for (size_t t = 0; t < 5; ++t) {
      std::vector<float> got(64 * 37);
      ASSERT_TRUE(reader->read_range(t, 0, static_cast<int64_t>(got.size()), got.data()).ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], value_at(t, static_cast<int64_t>(i))) << t << " " << i;
    }
  EXPECT_TRUE(remove_tree(dir).ok());
}

TEST(Consolidate, SixteenBitModelIsSavedWithTheCheckpoint) {
  const std::string dir = scratch_dir("model16");
  TrainConfig config = config_for(3, DSRT_BF16);
  config.zero.stage3_gather_16bit_weights_on_model_save = true;
  auto engine = make_engine(config);
  train(*engine, 2);
  ASSERT_TRUE(save_checkpoint(*engine, dir, "").ok());
  const std::string path = dir + "/global_step2/model_16bit.safetensors";
  ASSERT_TRUE(std::filesystem::exists(path));
  File f;
  ASSERT_TRUE(File::open_read(path, &f).ok());
  uint64_t header_len = 0;
  ASSERT_TRUE(f.read_exact(0, &header_len, 8).ok());
  std::string header(static_cast<size_t>(header_len), '\0');
  ASSERT_TRUE(f.read_exact(8, &header[0], header.size()).ok());
  EXPECT_NE(header.find("\"BF16\""), std::string::npos) << header;
  // The data section is the working copies, tensor after tensor.
  uint64_t at = 8 + header_len;
  for (size_t t = 0; t < engine->num_tensors(); ++t) {
    std::vector<uint8_t> working;
    dsrt_dtype dtype;
    ASSERT_TRUE(testing_util::read_working_values(*engine, t, &working, &dtype).ok());
    std::vector<uint16_t> file(static_cast<size_t>(engine->tensor_numel(t)));
    ASSERT_EQ(working.size(), file.size() * 2);
    ASSERT_TRUE(f.read_exact(at, file.data(), file.size() * 2).ok());
    EXPECT_EQ(0, std::memcmp(file.data(), working.data(), file.size() * 2)) << engine->tensor_name(t);
    at += file.size() * 2;
  }
  Manifest m;
  ASSERT_TRUE(read_manifest(dir + "/global_step2", &m).ok());
  EXPECT_EQ(m.model_16bit, "model_16bit.safetensors");
  EXPECT_TRUE(remove_tree(dir).ok());
}

}  // namespace
}  // namespace dsrt
