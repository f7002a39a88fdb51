// defines: save_frozen, check_frozen, stage_frozen, commit_frozen -- frozen tensors in checkpoints.
#include "ckpt/ckpt_frozen.h"

#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"

namespace dsrt {
namespace {

std::string shape_text(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(static_cast<long long>(shape[i]));
  return s + "]";
}

}  // namespace

Status save_frozen(Engine &engine, const std::string &dir, bool write_here, std::vector<ManifestFrozen> *out) {
  out->clear();
  FrozenParams &frozen = engine.mutable_frozen();
  if (frozen.size() == 0) return Status::Ok();
  File file;
  Status local;
  if (write_here) local = File::create(join_file_path(dir, kFrozenFile), &file);
  uint64_t offset = 0;
  std::vector<float> values;
  for (size_t i = 0; i < frozen.size(); ++i) {
    const FrozenParams::Tensor &t = frozen.tensor(i);
    values.assign(static_cast<size_t>(t.numel), 0.0f);
    DSRT_RETURN_IF_ERROR(frozen.read_fp32(i, values.data()).with_context("saving frozen tensor '" + t.name + "'"));
    const size_t bytes = values.size() * sizeof(float);
    out->push_back({t.name, t.shape, t.numel, offset, crc32c(0, values.data(), bytes)});
    offset += bytes;
    if (write_here && local.ok()) local = file.write_all(values.data(), bytes);
  }
  if (write_here && local.ok()) local = file.sync();
  if (write_here && local.ok()) local = file.close();
  return local;
}

Status check_frozen(const Engine &engine, const Manifest &m, const std::string &path) {
  for (size_t t = 0; t < engine.num_tensors(); ++t)
    if (m.frozen_index(engine.tensor_name(t)) >= 0)
      return Error(DSRT_ERR_CHECKPOINT,
                   "'%s': tensor '%s' is frozen in the checkpoint but trainable in this engine; register it with "
                   "dsrt_engine_add_frozen_param (or load a checkpoint that trained it)",
                   path.c_str(), engine.tensor_name(t).c_str());
  const FrozenParams &frozen = engine.frozen();
  for (size_t i = 0; i < frozen.size(); ++i)
    if (m.tensor_index(frozen.tensor(i).name) >= 0)
      return Error(DSRT_ERR_CHECKPOINT,
                   "'%s': tensor '%s' is trainable in the checkpoint but frozen in this engine; register it with "
                   "dsrt_engine_add_param",
                   path.c_str(), frozen.tensor(i).name.c_str());
  // A checkpoint holding no frozen tensor at all (saved before they existed, or by a host that kept
  // them itself) leaves the engine's frozen tensors as they are.
  if (m.frozen.empty()) return Status::Ok();
  if (m.frozen.size() != frozen.size())
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: it holds %zu frozen tensors, the engine has %zu",
                 path.c_str(), m.frozen.size(), frozen.size());
  for (size_t i = 0; i < frozen.size(); ++i)
    if (m.frozen[i].name != frozen.tensor(i).name || m.frozen[i].shape != frozen.tensor(i).shape)
      return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: frozen tensor %zu is '%s' %s there but '%s' %s here",
                   path.c_str(), i, m.frozen[i].name.c_str(), shape_text(m.frozen[i].shape).c_str(),
                   frozen.tensor(i).name.c_str(), shape_text(frozen.tensor(i).shape).c_str());
  return Status::Ok();
}

Status stage_frozen(const Engine &engine, const Manifest &m, const std::string &tag_dir,
                    std::vector<std::vector<float>> *out) {
  out->clear();
  if (m.frozen.empty()) return Status::Ok();
  const std::string path = join_file_path(tag_dir, kFrozenFile);
  File file;
  DSRT_RETURN_IF_ERROR(File::open_read(path, &file));
  const FrozenParams &frozen = engine.frozen();
  std::vector<float> values;
  for (size_t i = 0; i < m.frozen.size(); ++i) {
    const ManifestFrozen &f = m.frozen[i];
    values.resize(static_cast<size_t>(f.numel));
    DSRT_RETURN_IF_ERROR(file.read_exact(f.offset, values.data(), values.size() * sizeof(float)));
    if (crc32c(0, values.data(), values.size() * sizeof(float)) != f.crc)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch in frozen tensor '%s' (the file is damaged)",
                   path.c_str(), f.name.c_str());
    const ElemRange mine = frozen.owned(i);
    out->emplace_back(values.begin() + mine.begin, values.begin() + mine.end);
  }
  return Status::Ok();
}

Status commit_frozen(Engine &engine, const std::vector<std::vector<float>> &staged) {
  FrozenParams &frozen = engine.mutable_frozen();
  for (size_t i = 0; i < staged.size(); ++i)
    DSRT_RETURN_IF_ERROR(frozen.write_owned_fp32(i, staged[i].data())
                             .with_context("restoring frozen tensor '" + frozen.tensor(i).name + "'"));
  return Status::Ok();
}

}  // namespace dsrt
