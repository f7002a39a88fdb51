// defines: CheckpointReader (offline tensor reads and safetensors export, streaming by chunks).
#include "ckpt/checkpoint_reader.h"

#include <algorithm>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/crc32c.h"
#include "ckpt/safetensors_writer.h"
#include "optim/cpu_optimizer.h"
#include "util/half.h"

namespace dsrt {
namespace {
constexpr int64_t kChunkElems = 1 << 18;  // 1 MiB of fp32 per conversion chunk
}

Status CheckpointReader::open(const std::string &dir, const std::string &tag, std::unique_ptr<CheckpointReader> *out) {
  auto reader = std::unique_ptr<CheckpointReader>(new CheckpointReader());
  std::string resolved;
  DSRT_RETURN_IF_ERROR(resolve_tag_dir(dir, tag, &resolved, &reader->tag_dir_));
  DSRT_RETURN_IF_ERROR(read_manifest(reader->tag_dir_, &reader->manifest_));
  reader->shards_ = std::make_unique<ShardCache>(reader->manifest_, reader->tag_dir_);
  *out = std::move(reader);
  return Status::Ok();
}

const std::string &CheckpointReader::name(size_t t) const {
  return frozen(t) ? manifest_.frozen[t - manifest_.tensors.size()].name : manifest_.tensors[t].name;
}

const std::vector<int64_t> &CheckpointReader::shape(size_t t) const {
  return frozen(t) ? manifest_.frozen[t - manifest_.tensors.size()].shape : manifest_.tensors[t].shape;
}

int64_t CheckpointReader::numel(size_t t) const {
  return frozen(t) ? manifest_.frozen[t - manifest_.tensors.size()].numel : manifest_.tensors[t].numel;
}

int CheckpointReader::index_of(const std::string &name) const {
  const int t = manifest_.tensor_index(name);
  if (t >= 0) return t;
  const int f = manifest_.frozen_index(name);
  return f < 0 ? -1 : static_cast<int>(manifest_.tensors.size()) + f;
}

Status CheckpointReader::read_range(size_t t, int64_t begin, int64_t count, float *out) {
  if (t >= num_tensors() || begin < 0 || count < 0 || begin > numel(t) || count > numel(t) - begin)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "checkpoint read: range outside the tensor");
  if (frozen(t)) {
    const ManifestFrozen &f = manifest_.frozen[t - manifest_.tensors.size()];
    const std::string path = join_file_path(tag_dir_, kFrozenFile);
    if (!frozen_file_.is_open()) DSRT_RETURN_IF_ERROR(File::open_read(path, &frozen_file_));
    DSRT_RETURN_IF_ERROR(frozen_file_.read_exact(f.offset + static_cast<uint64_t>(begin) * sizeof(float), out,
                                                 static_cast<size_t>(count) * sizeof(float)));
    if (begin == 0 && count == f.numel && crc32c(0, out, static_cast<size_t>(count) * sizeof(float)) != f.crc)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch in frozen tensor '%s' (the file is damaged)",
                   path.c_str(), f.name.c_str());
    return Status::Ok();
  }
  for (const SavedPiece &p : manifest_.locate(t, begin, begin + count)) {
    ShardReader *reader = nullptr;
    DSRT_RETURN_IF_ERROR(shards_->get(p.shard, &reader));
    DSRT_RETURN_IF_ERROR(reader->read(0, p.stream_elem, static_cast<uint64_t>(p.count), out + (p.tensor_begin - begin)));
  }
  return Status::Ok();
}

Status CheckpointReader::export_safetensors(const std::string &path, dsrt_dtype dtype) {
  if (dtype != DSRT_F32 && dtype != DSRT_F16 && dtype != DSRT_BF16)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "export_safetensors: dtype %d is not f32, f16 or bf16", static_cast<int>(dtype));
  std::vector<SafetensorsEntry> entries;
  for (size_t t = 0; t < num_tensors(); ++t) entries.push_back({name(t), shape(t), dtype});
  SafetensorsWriter writer;
  DSRT_RETURN_IF_ERROR(writer.open(path, entries,
                                   {{"format", "pt"},
                                    {"producer", "dsrt zero-to-fp32"},
                                    {"tag", manifest_.tag},
                                    {"global_step", std::to_string(static_cast<long long>(manifest_.counters.global_step))}}));
  std::vector<float> chunk(static_cast<size_t>(kChunkElems));
  std::vector<uint8_t> converted(dtype == DSRT_F32 ? 0 : static_cast<size_t>(kChunkElems) * 2);
  for (size_t t = 0; t < num_tensors(); ++t) {
    const int64_t numel = this->numel(t);
    for (int64_t at = 0; at < numel; at += kChunkElems) {
      const int64_t n = std::min(kChunkElems, numel - at);
      DSRT_RETURN_IF_ERROR(read_range(t, at, n, chunk.data())
                               .with_context("exporting '" + name(t) + "'"));
      if (dtype == DSRT_F32) {
        DSRT_RETURN_IF_ERROR(writer.append(chunk.data(), static_cast<size_t>(n) * sizeof(float)));
      } else {
        cpu_convert(chunk.data(), DSRT_F32, converted.data(), dtype, static_cast<size_t>(n));
        DSRT_RETURN_IF_ERROR(writer.append(converted.data(), static_cast<size_t>(n) * 2));
      }
    }
  }
  return writer.finish();
}

}  // namespace dsrt
