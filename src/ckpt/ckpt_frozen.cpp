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

Status save_frozen(PartitionedState &engine, const std::string &dir, bool write_here, std::vector<ManifestFrozen> *out) {
  out->clear();
  if (engine.num_frozen() == 0) return Status::Ok();
  File file;
  Status local;
  if (write_here) local = File::create(join_file_path(dir, kFrozenFile), &file);
  uint64_t offset = 0;
  std::vector<float> values;
  for (size_t i = 0; i < engine.num_frozen(); ++i) {
    const std::string &name = engine.frozen_name(i);
    values.assign(static_cast<size_t>(engine.frozen_numel(i)), 0.0f);
    DSRT_RETURN_IF_ERROR(engine.read_frozen_fp32(i, values.data()).with_context("saving frozen tensor '" + name + "'"));
    const size_t bytes = values.size() * sizeof(float);
    out->push_back({name, engine.frozen_shape(i), engine.frozen_numel(i), offset, crc32c(0, values.data(), bytes)});
    offset += bytes;
    if (write_here && local.ok()) local = file.write_all(values.data(), bytes);
  }
  if (write_here && local.ok()) local = file.sync();
  if (write_here && local.ok()) local = file.close();
  return local;
}

Status check_frozen(const PartitionedState &engine, const Manifest &m, const std::string &path) {
  for (size_t t = 0; t < engine.num_tensors(); ++t)
    if (m.frozen_index(engine.tensor_name(t)) >= 0)
      return Error(DSRT_ERR_CHECKPOINT,
                   "'%s': tensor '%s' is frozen in the checkpoint but trainable in this engine; register it with "
                   "dsrt_engine_add_frozen_param (or load a checkpoint that trained it)",
                   path.c_str(), engine.tensor_name(t).c_str());
  const size_t frozen = engine.num_frozen();
  for (size_t i = 0; i < frozen; ++i)
    if (m.tensor_index(engine.frozen_name(i)) >= 0)
      return Error(DSRT_ERR_CHECKPOINT,
                   "'%s': tensor '%s' is trainable in the checkpoint but frozen in this engine; register it with "
                   "dsrt_engine_add_param",
                   path.c_str(), engine.frozen_name(i).c_str());
  // A checkpoint holding no frozen tensor at all (saved before they existed, or by a host that kept
  // them itself) leaves the engine's frozen tensors as they are.
  if (m.frozen.empty()) return Status::Ok();
  if (m.frozen.size() != frozen)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: it holds %zu frozen tensors, the engine has %zu",
                 path.c_str(), m.frozen.size(), frozen);
  for (size_t i = 0; i < frozen; ++i)
    if (m.frozen[i].name != engine.frozen_name(i) || m.frozen[i].shape != engine.frozen_shape(i))
      return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: frozen tensor %zu is '%s' %s there but '%s' %s here",
                   path.c_str(), i, m.frozen[i].name.c_str(), shape_text(m.frozen[i].shape).c_str(),
                   engine.frozen_name(i).c_str(), shape_text(engine.frozen_shape(i)).c_str());
  return Status::Ok();
}

Status stage_frozen(const PartitionedState &engine, const Manifest &m, const std::string &tag_dir,
                    std::vector<std::vector<float>> *out) {
  out->clear();
  if (m.frozen.empty()) return Status::Ok();
  const std::string path = join_file_path(tag_dir, kFrozenFile);
  File file;
  DSRT_RETURN_IF_ERROR(File::open_read(path, &file));
  std::vector<float> values;
  for (size_t i = 0; i < m.frozen.size(); ++i) {
    const ManifestFrozen &f = m.frozen[i];
    values.resize(static_cast<size_t>(f.numel));
    DSRT_RETURN_IF_ERROR(file.read_exact(f.offset, values.data(), values.size() * sizeof(float)));
    if (crc32c(0, values.data(), values.size() * sizeof(float)) != f.crc)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch in frozen tensor '%s' (the file is damaged)",
                   path.c_str(), f.name.c_str());
    const ElemRange mine = engine.frozen_owned(i);
    out->emplace_back(values.begin() + mine.begin, values.begin() + mine.end);
  }
  return Status::Ok();
}

Status commit_frozen(PartitionedState &engine, const std::vector<std::vector<float>> &staged) {
  for (size_t i = 0; i < staged.size(); ++i)
    DSRT_RETURN_IF_ERROR(engine.write_frozen_owned_fp32(i, staged[i].data())
                             .with_context("restoring frozen tensor '" + engine.frozen_name(i) + "'"));
  return Status::Ok();
}

}  // namespace dsrt
