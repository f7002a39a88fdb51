// checkpoint_reader.h -- offline access to a checkpoint without an engine, at any world size:
// tensors by name from the fp32 master stream, read range by range from whichever shards hold
// them, and consolidation into one safetensors file. Memory stays at a few blocks plus one
// chunk, whatever the model size (tensors are streamed in chunks, not held whole).
// Tensors are numbered trainable ones first (the manifest's "tensors"), then frozen ones
// ("frozen_tensors", read from the frozen-parameter file).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_cache.h"
#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

class CheckpointReader {
 public:
  // tag "" reads dir/latest.
  static Status open(const std::string &dir, const std::string &tag, std::unique_ptr<CheckpointReader> *out);

  const Manifest &manifest() const { return manifest_; }
  const std::string &tag_dir() const { return tag_dir_; }
  size_t num_tensors() const { return manifest_.tensors.size() + manifest_.frozen.size(); }
  bool frozen(size_t t) const { return t >= manifest_.tensors.size(); }
  const std::string &name(size_t t) const;
  const std::vector<int64_t> &shape(size_t t) const;
  int64_t numel(size_t t) const;
  int index_of(const std::string &name) const;  // -1 when absent
  // Elements [begin, begin + count) of tensor t's fp32 value (the master of a trainable tensor,
  // the stored value of a frozen one; a whole frozen tensor is checked against its CRC-32C).
  Status read_range(size_t t, int64_t begin, int64_t count, float *out);
  // Every tensor, converted to dtype, into one safetensors file at path.
  Status export_safetensors(const std::string &path, dsrt_dtype dtype);

 private:
  Manifest manifest_;
  std::string tag_dir_;
  std::unique_ptr<ShardCache> shards_;
  File frozen_file_;  // opened at the first frozen read
};

}  // namespace dsrt
