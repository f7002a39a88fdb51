// defines: CheckpointReader (offline tensor reads and safetensors export, streaming by chunks).
#include "ckpt/checkpoint_reader.h"

#include <algorithm>
#include <vector>

#include "ckpt/ckpt.h"
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

Status CheckpointReader::read_range(size_t t, int64_t begin, int64_t count, float *out) {
  if (t >= manifest_.tensors.size() || begin < 0 || count < 0 || begin > manifest_.tensors[t].numel ||
      count > manifest_.tensors[t].numel - begin)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "checkpoint read: range outside the tensor");
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
  for (const ManifestTensor &t : manifest_.tensors) entries.push_back({t.name, t.shape, dtype});
  SafetensorsWriter writer;
  DSRT_RETURN_IF_ERROR(writer.open(path, entries,
                                   {{"format", "pt"},
                                    {"producer", "dsrt zero-to-fp32"},
                                    {"tag", manifest_.tag},
                                    {"global_step", std::to_string(static_cast<long long>(manifest_.counters.global_step))}}));
  std::vector<float> chunk(static_cast<size_t>(kChunkElems));
  std::vector<uint8_t> converted(dtype == DSRT_F32 ? 0 : static_cast<size_t>(kChunkElems) * 2);
  for (size_t t = 0; t < manifest_.tensors.size(); ++t) {
    const int64_t numel = manifest_.tensors[t].numel;
    for (int64_t at = 0; at < numel; at += kChunkElems) {
      const int64_t n = std::min(kChunkElems, numel - at);
      DSRT_RETURN_IF_ERROR(read_range(t, at, n, chunk.data())
                               .with_context("exporting '" + manifest_.tensors[t].name + "'"));
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
