// manifest.h -- what a checkpoint tag holds, as manifest.json: format version, save id, world
// size, ZeRO stage, dtypes, every tensor's name and shape, every shard's file, size, table
// checksum and segment list (the partition layout), step counters, loss-scaler and scheduler
// state, the client blob's size and checksum, and the effective config. manifest.crc32c beside
// it holds the CRC-32C and length of manifest.json, so a damaged manifest is never trusted.
//
// locate() answers the resharding question: which saved shards hold which part of a tensor
// range, and where in their streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zero/step_counters.h"
#include "util/status.h"

namespace dsrt {

constexpr int kCheckpointFormatVersion = 1;
constexpr const char *kManifestFile = "manifest.json";
constexpr const char *kManifestCrcFile = "manifest.crc32c";
constexpr const char *kClientStateFile = "client_state.bin";
constexpr const char *kModel16File = "model_16bit.safetensors";
constexpr const char *kLatestFile = "latest";
constexpr const char *kFrozenFile = "frozen_params.bin";

// What a manifest may claim; anything beyond is refused on load (a crafted or damaged file), so
// that every size computed from it fits in 64 bits.
constexpr int64_t kMaxManifestWorldSize = 1 << 24;
constexpr size_t kMaxManifestStates = 8;             // optimizer-state streams after the fp32 master
constexpr int64_t kMaxManifestBlockBytes = 1 << 30;
constexpr size_t kMaxManifestDims = 8;
constexpr int64_t kMaxManifestElems = 1LL << 48;     // per tensor and per shard stream

struct ManifestSegment {
  int64_t tensor = 0;
  int64_t begin = 0;  // first element in the tensor's row-major order
  int64_t count = 0;
};

struct ManifestShard {
  int rank = 0;
  std::string file;
  uint64_t bytes = 0;
  uint32_t table_crc = 0;
  std::vector<ManifestSegment> segments;  // in stream order
  uint64_t elems() const;
};

struct ManifestTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int32_t group = 0;  // parameter group ("group", absent in checkpoints saved before groups: 0)
};

// A frozen tensor (manifest "frozen_tensors", each marked "frozen": true): its full fp32 value is
// stored whole in kFrozenFile at byte offset, numel * 4 bytes, with its CRC-32C.
struct ManifestFrozen {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t offset = 0;
  uint32_t crc = 0;
};

// One parameter group's hyperparameters, by name (param_groups.h's names).
struct ManifestGroup {
  std::vector<std::pair<std::string, double>> values;
};

// A piece of a tensor inside one saved shard.
struct SavedPiece {
  int shard = 0;              // index into Manifest::shards
  int64_t tensor_begin = 0;
  int64_t count = 0;
  uint64_t stream_elem = 0;  // element offset inside each stream of that shard
};

struct Manifest {
  int format_version = kCheckpointFormatVersion;
  std::string tag;
  uint64_t save_id = 0;
  int world_size = 1;
  int zero_stage = 0;
  std::string working_dtype = "fp32";  // dtype_name(): fp32, fp16 or bf16
  std::string optimizer;
  std::vector<std::string> state_names;  // streams after the fp32 master
  uint64_t block_bytes = 0;
  bool node_local = false;

  EngineCounters counters;
  LossScalerState scaler;
  bool scaler_dynamic = false;
  int64_t scheduler_iteration = 0;
  uint64_t client_state_bytes = 0;
  uint32_t client_state_crc = 0;
  std::string model_16bit;  // file name in the tag folder, or ""
  std::string config_json;  // effective config (JSON text)

  std::vector<ManifestTensor> tensors;
  std::vector<ManifestShard> shards;
  // Parameter groups ("param_groups"); empty for checkpoints saved before groups existed.
  std::vector<ManifestGroup> groups;
  // Frozen tensors; empty for checkpoints without any (and those saved before they existed).
  std::vector<ManifestFrozen> frozen;
  int frozen_index(const std::string &name) const;

  uint32_t num_streams() const { return 1 + static_cast<uint32_t>(state_names.size()); }
  std::string to_json() const;
  // Parses and checks the layout (every tensor covered exactly once). path names the file in errors.
  static Status parse(const std::string &text, const std::string &path, Manifest *out);
  // Pieces of tensor t overlapping [begin, end), clipped to it, in tensor order.
  std::vector<SavedPiece> locate(size_t t, int64_t begin, int64_t end) const;
  int tensor_index(const std::string &name) const;

  std::vector<std::vector<SavedPiece>> pieces;  // per tensor, sorted by tensor_begin (from parse/index)
  Status index(const std::string &path);
};

// Reads tag_dir/manifest.json and checks it against manifest.crc32c.
Status read_manifest(const std::string &tag_dir, Manifest *out);
// Writes manifest.json and manifest.crc32c into tag_dir (fsynced).
Status write_manifest(const std::string &tag_dir, const Manifest &manifest);

std::string shard_file_name(int rank);

}  // namespace dsrt
