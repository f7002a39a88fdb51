// Crafted checkpoints (tests/ckpt/crafted/, written by tests/ckpt/craft_checkpoints.py): every
// checksum is right, but sizes overflow 64-bit arithmetic (a tensor of shape [2^31, 2^31], a shard
// header claiming 2^62 elements), values are impossible (a negative global step, a loss scale of 0,
// a scheduler iteration of 1e15), blocks disagree with the shard, JSON is followed by garbage, the
// header padding is not zero. The offline reader, `dsrt zero-to-fp32`'s C call and an engine load
// must refuse each with DSRT_ERR_CHECKPOINT and a message naming what is wrong, never crash, and
// leave no half-written output. Also: publication of a save is one step, and reserved tags.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/crc32c.h"
#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "ckpt/shard_file.h"
#include "ckpt_test_util.h"
#include "dsrt.h"

extern "C" dsrt_status export_safetensors_with_raw_dtype(dsrt_checkpoint *ckpt, const char *path, int raw_dtype);

namespace dsrt {
namespace {

using namespace ckpt_test;
namespace fs = std::filesystem;

const std::string kCrafted = std::string(DSRT_SOURCE_DIR) + "/tests/ckpt/crafted";

std::string expected_text(const std::string &dir) {
  std::ifstream in(dir + "/expect");
  std::string line;
  std::getline(in, line);
  return line;
}

// Every tensor read and the export, through CheckpointReader; the first failure.
Status read_everything(const std::string &dir, const std::string &out) {
  std::unique_ptr<CheckpointReader> reader;
  DSRT_RETURN_IF_ERROR(CheckpointReader::open(dir, "", &reader));
  std::vector<float> chunk(1 << 16);  // a crafted numel may be huge: read in chunks
  for (size_t t = 0; t < reader->manifest().tensors.size(); ++t) {
    const int64_t numel = reader->manifest().tensors[t].numel;
    for (int64_t at = 0; at < numel; at += static_cast<int64_t>(chunk.size()))
      DSRT_RETURN_IF_ERROR(
          reader->read_range(t, at, std::min<int64_t>(numel - at, static_cast<int64_t>(chunk.size())), chunk.data()));
  }
  return reader->export_safetensors(out, DSRT_BF16);
}

class Crafted : public ::testing::Test {
 protected:
  void SetUp() override { scratch_ = scratch_dir("crafted"); }
  void TearDown() override { EXPECT_TRUE(remove_tree(scratch_).ok()); }

  // A copy of fixture `name` as a checkpoint folder with latest naming it.
  std::string place(const std::string &name) {
    const std::string dir = scratch_ + "/" + name;
    EXPECT_TRUE(make_directories(dir).ok());
    fs::copy(kCrafted + "/" + name, dir + "/t", fs::copy_options::recursive);
    const std::string latest = "t\n";
    EXPECT_TRUE(write_file_durably(dir + "/latest", latest.data(), latest.size()).ok());
    return dir;
  }
  std::string scratch_;
};

TEST_F(Crafted, TheGoodFixtureReadsBack) {
  const std::string dir = place("ok");
  std::unique_ptr<CheckpointReader> reader;
  ASSERT_TRUE(CheckpointReader::open(dir, "", &reader).ok());
  std::vector<float> w(15);
  ASSERT_TRUE(reader->read_range(0, 0, 15, w.data()).ok());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w[static_cast<size_t>(i)], 0.5f * static_cast<float>(i) - 3.0f);
  EXPECT_TRUE(reader->export_safetensors(scratch_ + "/ok.safetensors", DSRT_F32).ok());
}

TEST_F(Crafted, EveryCraftedCheckpointIsRefusedByTheReaderAndTheCApi) {
  int cases = 0;
  for (const auto &entry : fs::directory_iterator(kCrafted)) {
    const std::string name = entry.path().filename();
    if (name == "ok") continue;
    SCOPED_TRACE(name);
    ++cases;
    const std::string dir = place(name);
    const std::string expect = expected_text(entry.path());
    ASSERT_FALSE(expect.empty());
    const std::string out = scratch_ + "/" + name + ".safetensors";
    Status s = read_everything(dir, out);
    EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT) << s.message();
    EXPECT_NE(s.message().find(expect), std::string::npos) << s.message();
    EXPECT_FALSE(path_exists(out));
    EXPECT_FALSE(path_exists(out + ".tmp"));

    // What `dsrt zero-to-fp32` calls.
    dsrt_checkpoint *ckpt = nullptr;
    dsrt_status status = dsrt_checkpoint_open(dir.c_str(), nullptr, &ckpt);
    if (status == DSRT_OK) status = dsrt_checkpoint_export_safetensors(ckpt, out.c_str(), DSRT_F32);
    dsrt_checkpoint_close(ckpt);
    EXPECT_EQ(status, DSRT_ERR_CHECKPOINT) << dsrt_last_error_message();
    EXPECT_FALSE(path_exists(out + ".tmp"));
  }
  EXPECT_GE(cases, 15);
}

// An export that fails half-way (a damaged block found while streaming) removes its .tmp file.
TEST_F(Crafted, AFailedExportLeavesNoTemporaryFile) {
  const std::string dir = place("ok");
  const std::string shard = dir + "/t/zero_rank_00000.shard";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kShardHeaderBytes + 40));
    f.put('\x7f');
  }
  const std::string out = scratch_ + "/half.safetensors";
  dsrt_checkpoint *ckpt = nullptr;
  ASSERT_EQ(dsrt_checkpoint_open(dir.c_str(), nullptr, &ckpt), DSRT_OK);
  EXPECT_EQ(dsrt_checkpoint_export_safetensors(ckpt, out.c_str(), DSRT_F32), DSRT_ERR_CHECKPOINT);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("checksum mismatch in block"), std::string::npos);
  dsrt_checkpoint_close(ckpt);
  EXPECT_FALSE(path_exists(out));
  EXPECT_FALSE(path_exists(out + ".tmp"));
}

// A dtype outside the enum, as a C caller may pass it: refused, no undefined behaviour (UBSan).
TEST_F(Crafted, OutOfRangeDtypeIsRefused) {
  const std::string dir = place("ok");
  dsrt_checkpoint *ckpt = nullptr;
  ASSERT_EQ(dsrt_checkpoint_open(dir.c_str(), nullptr, &ckpt), DSRT_OK);
  for (int raw : {3, 7, -1, 1 << 30}) {
    EXPECT_EQ(export_safetensors_with_raw_dtype(ckpt, (scratch_ + "/x.safetensors").c_str(), raw),
              DSRT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(dsrt_last_error_message()).find("is not DSRT_F32"), std::string::npos);
  }
  dsrt_checkpoint_close(ckpt);
  EXPECT_FALSE(path_exists(scratch_ + "/x.safetensors.tmp"));
}

// An engine load of a crafted checkpoint is refused too, and changes nothing.
TEST_F(Crafted, EngineLoadRefusesImpossibleValues) {
  const std::string dir = scratch_ + "/engine";
  auto a = make_engine(config_for(1));
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "t").ok());
  const std::string manifest = dir + "/t/manifest.json";
  std::string text;
  ASSERT_TRUE(read_whole_file(manifest, 1 << 24, &text).ok());
  // Each edit replaces the number after "key": in the manifest; the refusal must say `expect`.
  struct Edit {
    std::string key, value, expect;
  };
  const std::vector<Edit> edits = {{"global_step", "-5", "global_step"},
                                   {"cur_scale", "0", "cur_scale"},
                                   {"cur_scale", "-1", "cur_scale"},
                                   {"cur_scale", "1e999", "cur_scale"},
                                   {"last_batch_iteration", "-100", "last_batch_iteration"},
                                   {"last_batch_iteration", "1000000000000000", "last_batch_iteration"},
                                   {"block_bytes", "8192", "blocks; the manifest says 8192"}};
  for (const auto &[key, value, expect] : edits) {
    SCOPED_TRACE(key + " " + value);
    const size_t at = text.find("\"" + key + "\":");
    ASSERT_NE(at, std::string::npos) << text;
    const size_t begin = text.find_first_not_of(" \t", at + key.size() + 3);
    const size_t end = text.find_first_of(",\n}", begin);
    std::string edited = text;
    edited.replace(begin, end - begin, value);
    ASSERT_TRUE(write_file_durably(manifest, edited.data(), edited.size()).ok());
    char crc[64];
    const int n = std::snprintf(crc, sizeof crc, "crc32c %08x bytes %zu\n", crc32c(0, edited.data(), edited.size()),
                                edited.size());
    ASSERT_TRUE(write_file_durably(dir + "/t/manifest.crc32c", crc, static_cast<size_t>(n)).ok());
    auto b = make_engine(config_for(1), nullptr, shapes(), 77);
    const auto before = partition_bytes(*b);
    Status s = load_checkpoint(*b, dir, "");
    EXPECT_EQ(s.code(), DSRT_ERR_CHECKPOINT) << s.message();
    EXPECT_NE(s.message().find(expect), std::string::npos) << s.message();
    EXPECT_TRUE(bitwise_equal(before, partition_bytes(*b)));
    EXPECT_EQ(b->counters().global_step, 0);
  }
}

// Names the save machinery uses itself are not tags: a tag "latest.tmp" would block every later save.
TEST(Publication, ReservedTagsAreRefused) {
  const std::string dir = scratch_dir("reserved");
  auto a = make_engine(config_for(1));
  train(*a, 1);
  for (const char *tag : {"latest", "latest.tmp", "latest.old", ".tmp-x", ".old-x-1"}) {
    Status s = save_checkpoint(*a, dir, tag);
    EXPECT_EQ(s.code(), DSRT_ERR_INVALID_ARGUMENT) << tag << ": " << s.message();
    EXPECT_FALSE(path_exists(join_file_path(dir, tag))) << tag;
  }
  EXPECT_TRUE(save_checkpoint(*a, dir, "latest_run").ok());
  EXPECT_TRUE(save_checkpoint(*a, dir, "t").ok());
  EXPECT_TRUE(remove_tree(dir).ok());
}

// A save whose last step fails (here latest.tmp cannot become latest, as with a full disk when it
// is written) fails with the previous tag folder and latest as they were and nothing left behind;
// it never reports an error after publishing the new tag.
TEST(Publication, AFailedPublicationLeavesThePreviousStateAndNoLeftovers) {
  const std::string dir = scratch_dir("publication");
  auto a = make_engine(config_for(2));
  train(*a, 2);
  ASSERT_TRUE(save_checkpoint(*a, dir, "a").ok());
  const auto saved = partition_bytes(*a);
  train(*a, 2);
  const std::string latest_temp = join_file_path(dir, "latest.tmp");
  checkpoint_test_hooks().at = [&](const char *phase, uint64_t) {
    if (std::string(phase) != "manifest") return;
    // latest.tmp becomes a folder that no write or rename can replace.
    (void)remove_tree(latest_temp);
    ASSERT_TRUE(make_directories(latest_temp + "/blocker").ok());
  };
  for (const char *tag : {"b", "a"}) {
    SCOPED_TRACE(tag);
    Status s = save_checkpoint(*a, dir, tag);
    EXPECT_EQ(s.code(), DSRT_ERR_IO) << s.message();
    EXPECT_FALSE(path_exists(join_file_path(dir, "b")));
    std::string latest;
    ASSERT_TRUE(read_whole_file(join_file_path(dir, "latest"), 64, &latest).ok());
    EXPECT_EQ(latest, "a\n");
    auto b = make_engine(config_for(2), nullptr, shapes(), 99);
    ASSERT_TRUE(load_checkpoint(*b, dir, "").ok());
    EXPECT_TRUE(bitwise_equal(saved, partition_bytes(*b)));
    EXPECT_EQ(b->counters().global_step, 2);
    std::vector<std::string> names;
    ASSERT_TRUE(list_directory(dir, &names).ok());
    for (const std::string &n : names) EXPECT_TRUE(n == "a" || n == "latest" || n == "latest.tmp") << n;
  }
  checkpoint_test_hooks().at = nullptr;
  // The next save clears the leftover and publishes.
  ASSERT_TRUE(save_checkpoint(*a, dir, "b").ok());
  EXPECT_FALSE(path_exists(latest_temp));
  std::string latest;
  ASSERT_TRUE(read_whole_file(join_file_path(dir, "latest"), 64, &latest).ok());
  EXPECT_EQ(latest, "b\n");
  EXPECT_TRUE(remove_tree(dir).ok());
}

}  // namespace
}  // namespace dsrt
