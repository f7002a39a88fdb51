// defines: the parameter-group, host-driven hyperparameter and accumulation-boundary entry points
// (dsrt_engine_add_group ... dsrt_engine_set_scale_wrt_gas).
#include "capi/guard.h"
#include "capi/handles.h"
#include "engine/engine.h"

using dsrt::Engine;
using dsrt::guarded;
using dsrt::Status;

namespace {

Status engine_arg(const dsrt_engine *handle, Engine **out) {
  if (handle == nullptr || !handle->impl)
    return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the engine handle is NULL", dsrt::current_api_function());
  *out = handle->impl.get();
  return Status::Ok();
}

Status tensor_arg(const dsrt_tensor *handle) {
  if (handle == nullptr || handle->engine == nullptr)
    return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the tensor handle is NULL", dsrt::current_api_function());
  return Status::Ok();
}

}  // namespace

extern "C" {

DSRT_API dsrt_status dsrt_engine_add_group(dsrt_engine *engine, int32_t *out) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    return e->add_group(out);
  });
}

DSRT_API int32_t dsrt_engine_num_groups(const dsrt_engine *engine) {
  if (engine == nullptr || !engine->impl) return -1;
  return static_cast<int32_t>(engine->impl->num_groups());
}

DSRT_API dsrt_status dsrt_tensor_set_group(dsrt_tensor *tensor, int32_t group) {
  return guarded(__func__, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(tensor_arg(tensor));
    if (tensor->frozen) return tensor->engine->frozen_refuse(tensor->index, "set_group");
    return tensor->engine->set_tensor_group(tensor->index, group);
  });
}

DSRT_API int32_t dsrt_tensor_group(const dsrt_tensor *tensor) {
  if (tensor == nullptr || tensor->engine == nullptr) return -1;
  if (tensor->frozen) return -1;
  return tensor->engine->tensor_group(tensor->index);
}

DSRT_API dsrt_status dsrt_engine_set_group_hyper(dsrt_engine *engine, int32_t group, const char *name, double value) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    DSRT_REQUIRE_ARG(name);
    return e->set_group_hyper(group, name, value);
  });
}

DSRT_API dsrt_status dsrt_engine_get_group_hyper(const dsrt_engine *engine, int32_t group, const char *name,
                                                 double *out) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    DSRT_REQUIRE_ARG(name);
    DSRT_REQUIRE_ARG(out);
    return e->get_group_hyper(group, name, out);
  });
}

DSRT_API dsrt_status dsrt_engine_group_lr(const dsrt_engine *engine, int32_t group, double *out) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    DSRT_REQUIRE_ARG(out);
    return e->group_lr_used(group, out);
  });
}

DSRT_API dsrt_status dsrt_engine_set_accumulation_boundary(dsrt_engine *engine, int32_t is_boundary) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    return e->set_accumulation_boundary(is_boundary);
  });
}

DSRT_API dsrt_status dsrt_engine_set_scale_wrt_gas(dsrt_engine *engine, int32_t enabled) {
  return guarded(__func__, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(engine_arg(engine, &e));
    if (enabled != 0 && enabled != 1)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "dsrt_engine_set_scale_wrt_gas: enabled is %d; use 0 or 1", enabled);
    return e->set_scale_wrt_gas(enabled != 0);
  });
}

}  // extern "C"
