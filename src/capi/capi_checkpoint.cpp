// defines: dsrt_engine_save_checkpoint, dsrt_engine_load_checkpoint, dsrt_engine_save_16bit_model
// and the offline dsrt_checkpoint_* entry points.
#include <cstring>
#include <memory>
#include <string>

#include "capi/guard.h"
#include "capi/handles.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/ckpt.h"
#include "engine/engine.h"

struct dsrt_checkpoint {
  std::unique_ptr<dsrt::CheckpointReader> impl;
};

namespace dsrt {
namespace {

Status engine_for(dsrt_engine *handle, const char *fn, Engine **out) {
  if (handle == nullptr || !handle->impl) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: engine is NULL", fn);
  *out = handle->impl.get();
  return Status::Ok();
}

Status checkpoint_for(const dsrt_checkpoint *handle, const char *fn, CheckpointReader **out) {
  if (handle == nullptr || !handle->impl) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: checkpoint is NULL", fn);
  *out = handle->impl.get();
  return Status::Ok();
}

Status tensor_named(CheckpointReader *reader, const char *fn, const char *name, size_t *out) {
  if (name == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: name is NULL", fn);
  const int t = reader->index_of(name);
  if (t < 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the checkpoint '%s' has no tensor named '%s'", fn,
                 reader->tag_dir().c_str(), name);
  *out = static_cast<size_t>(t);
  return Status::Ok();
}

}  // namespace
}  // namespace dsrt

using dsrt::guarded;
using dsrt::Status;

DSRT_API dsrt_status dsrt_engine_save_checkpoint(dsrt_engine *engine, const char *dir, const char *tag) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_for(engine, fn, &e));
    DSRT_REQUIRE_ARG(dir);
    return dsrt::save_checkpoint(*e, dir, tag ? tag : "");
  });
}

DSRT_API dsrt_status dsrt_engine_load_checkpoint(dsrt_engine *engine, const char *dir, const char *tag) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_for(engine, fn, &e));
    DSRT_REQUIRE_ARG(dir);
    return dsrt::load_checkpoint(*e, dir, tag ? tag : "");
  });
}

DSRT_API dsrt_status dsrt_engine_save_16bit_model(dsrt_engine *engine, const char *path) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_for(engine, fn, &e));
    DSRT_REQUIRE_ARG(path);
    return dsrt::save_16bit_model(*e, path, e->rank() == 0);
  });
}

DSRT_API dsrt_status dsrt_checkpoint_open(const char *dir, const char *tag, dsrt_checkpoint **out) {
  const char *fn = __func__;
  if (out != nullptr) *out = nullptr;
  return guarded(fn, [&]() -> Status {
    DSRT_REQUIRE_ARG(out);
    DSRT_REQUIRE_ARG(dir);
    auto handle = std::make_unique<dsrt_checkpoint>();
    DSRT_RETURN_IF_ERROR(dsrt::CheckpointReader::open(dir, tag ? tag : "", &handle->impl));
    *out = handle.release();
    return Status::Ok();
  });
}

DSRT_API int64_t dsrt_checkpoint_num_tensors(const dsrt_checkpoint *ckpt) {
  if (ckpt == nullptr || !ckpt->impl) return -1;
  return static_cast<int64_t>(ckpt->impl->num_tensors());
}

DSRT_API const char *dsrt_checkpoint_tensor_name(const dsrt_checkpoint *ckpt, int64_t index) {
  if (ckpt == nullptr || !ckpt->impl || index < 0 ||
      static_cast<uint64_t>(index) >= ckpt->impl->num_tensors())
    return nullptr;
  return ckpt->impl->name(static_cast<size_t>(index)).c_str();
}

DSRT_API dsrt_status dsrt_checkpoint_tensor_shape(const dsrt_checkpoint *ckpt, const char *name, int64_t *shape,
                                                  int32_t *ndim) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::CheckpointReader *reader = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::checkpoint_for(ckpt, fn, &reader));
    DSRT_REQUIRE_ARG(ndim);
    size_t t = 0;
    DSRT_RETURN_IF_ERROR(dsrt::tensor_named(reader, fn, name, &t));
    const std::vector<int64_t> &dims = reader->shape(t);
    *ndim = static_cast<int32_t>(dims.size());
    if (shape != nullptr)
      for (size_t i = 0; i < dims.size() && i < 8; ++i) shape[i] = dims[i];
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_checkpoint_read_tensor_fp32(dsrt_checkpoint *ckpt, const char *name, float *out,
                                                      uint64_t count) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::CheckpointReader *reader = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::checkpoint_for(ckpt, fn, &reader));
    size_t t = 0;
    DSRT_RETURN_IF_ERROR(dsrt::tensor_named(reader, fn, name, &t));
    const int64_t numel = reader->numel(t);
    if (count != static_cast<uint64_t>(numel))
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: count is %llu but tensor '%s' has %lld elements", fn,
                         static_cast<unsigned long long>(count), name, static_cast<long long>(numel));
    if (numel > 0) DSRT_REQUIRE_ARG(out);
    return reader->read_range(t, 0, numel, out);
  });
}

DSRT_API dsrt_status dsrt_checkpoint_export_safetensors(dsrt_checkpoint *ckpt, const char *path, dsrt_dtype dtype) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    dsrt::CheckpointReader *reader = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::checkpoint_for(ckpt, fn, &reader));
    DSRT_REQUIRE_ARG(path);
    const int64_t raw = dsrt::enum_argument(dtype);
    if (raw != DSRT_F32 && raw != DSRT_F16 && raw != DSRT_BF16)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: dtype %lld is not DSRT_F32, DSRT_F16 or DSRT_BF16", fn,
                         static_cast<long long>(raw));
    return reader->export_safetensors(path, static_cast<dsrt_dtype>(raw));
  });
}

DSRT_API void dsrt_checkpoint_close(dsrt_checkpoint *ckpt) { std::unique_ptr<dsrt_checkpoint> owned(ckpt); }
