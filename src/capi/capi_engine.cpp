// defines: the dsrt_engine_* and dsrt_tensor_* entry points (checkpoint calls live elsewhere).
#include <algorithm>
#include <cstring>
#include <string>

#include "capi/guard.h"
#include "capi/handles.h"
#include "capi/struct_copy.h"
#include "comm/comm.h"
#include "config/config.h"
#include "engine/engine.h"

namespace dsrt {
namespace {

Status engine_of(const dsrt_engine *handle, const char *function, Engine **out) {
  if (handle == nullptr || !handle->impl)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the engine handle is NULL", function);
  *out = handle->impl.get();
  return Status::Ok();
}

Status tensor_of(const dsrt_tensor *handle, const char *function) {
  if (handle == nullptr || handle->engine == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the tensor handle is NULL", function);
  return Status::Ok();
}

}  // namespace

dsrt_tensor *tensor_handle(dsrt_engine *engine, size_t index, bool frozen) {
  std::deque<dsrt_tensor> &handles = frozen ? engine->frozen : engine->tensors;
  while (handles.size() <= index) handles.push_back(dsrt_tensor{engine->impl.get(), handles.size(), frozen});
  return &handles[index];
}

}  // namespace dsrt

using dsrt::Engine;
using dsrt::guarded;
using dsrt::Status;

// Names the C function (not the lambda running it) when a required argument is NULL.
#define REQUIRE_ARG(ptr)                                                                         \
  do {                                                                                          \
    if ((ptr) == nullptr)                                                                       \
      return ::dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' is NULL", fn, #ptr);    \
  } while (0)

extern "C" {

DSRT_API dsrt_status dsrt_engine_create(const dsrt_config *config, dsrt_comm *comm, dsrt_engine **out) {
  return dsrt_engine_create_with_options(config, comm, nullptr, out);
}

DSRT_API dsrt_status dsrt_engine_create_with_options(const dsrt_config *config, dsrt_comm *comm,
                                                     const dsrt_engine_options *options, dsrt_engine **out) {
  const char *fn = __func__;
  if (out != nullptr) *out = nullptr;
  return guarded(fn, [&]() -> Status {
    REQUIRE_ARG(config);
    REQUIRE_ARG(out);
    // The options the caller's struct holds; the rest keep their defaults.
    dsrt_engine_options opts;
    std::memset(&opts, 0, sizeof opts);
    opts.device_type = DSRT_DEVICE_DEFAULT;
    opts.device_index = -1;
    if (options != nullptr) {
      DSRT_RETURN_IF_ERROR(dsrt::check_struct_size(*options, (std::string(fn) + ": options").c_str(),
                                                   "dsrt_engine_options"));
      dsrt::copy_in(*options, &opts);
    }
    std::string device_spec;
    if (opts.device_type == DSRT_DEVICE_CPU) {
      device_spec = "cpu";
    } else if (opts.device_type == DSRT_DEVICE_CUDA) {
      if (opts.device_index < -1)
        return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: options->device_index is %d; use a CUDA ordinal or -1",
                           fn, opts.device_index);
      device_spec = opts.device_index < 0 ? "cuda" : "cuda:" + std::to_string(opts.device_index);
    } else if (opts.device_type != DSRT_DEVICE_DEFAULT) {
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT,
                         "%s: options->device_type is %d; use DSRT_DEVICE_DEFAULT (-1), DSRT_DEVICE_CPU (0) or "
                         "DSRT_DEVICE_CUDA (1)",
                         fn, opts.device_type);
    }
    std::shared_ptr<dsrt::Comm> communicator;
    if (comm != nullptr) {
      communicator = dsrt::comm_from_handle(comm);
      if (!communicator) return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the comm handle is invalid", fn);
    } else {
      DSRT_RETURN_IF_ERROR(dsrt::comm_create_local(&communicator));
    }
    const dsrt::Config *parsed = dsrt::config_from_handle(config);
    if (parsed == nullptr) return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the config handle is invalid", fn);
    dsrt::TrainConfig train;
    DSRT_RETURN_IF_ERROR(parsed->resolve(communicator->size(), &train));
    auto handle = std::make_unique<dsrt_engine>();
    DSRT_RETURN_IF_ERROR(Engine::create(train, std::move(communicator), &handle->impl,
                                        device_spec.empty() ? nullptr : device_spec.c_str(),
                                        "the engine option device"));
    *out = handle.release();
    return Status::Ok();
  });
}

DSRT_API void dsrt_engine_destroy(dsrt_engine *engine) {
  (void)guarded(__func__, [&]() -> Status {
    std::unique_ptr<dsrt_engine> owned(engine);
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_add_param(dsrt_engine *engine, const char *name, const int64_t *shape, int32_t ndim,
                                           const float *init, dsrt_tensor **out) {
  const char *fn = __func__;
  if (out != nullptr) *out = nullptr;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(name);
    size_t index = 0;
    DSRT_RETURN_IF_ERROR(e->add_param(name, shape, ndim, init, &index));
    dsrt_tensor *handle = dsrt::tensor_handle(engine, index, false);
    if (out != nullptr) *out = handle;
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_add_frozen_param(dsrt_engine *engine, const char *name, const int64_t *shape,
                                                  int32_t ndim, const float *init, dsrt_tensor **out) {
  const char *fn = __func__;
  if (out != nullptr) *out = nullptr;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(name);
    size_t index = 0;
    DSRT_RETURN_IF_ERROR(e->add_frozen_param(name, shape, ndim, init, &index));
    dsrt_tensor *handle = dsrt::tensor_handle(engine, index, true);
    if (out != nullptr) *out = handle;
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_build(dsrt_engine *engine) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    return e->build();
  });
}

DSRT_API dsrt_status dsrt_engine_set_stream(dsrt_engine *engine, void *cuda_stream) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    if (e->built())
      return dsrt::Error(DSRT_ERR_STATE, "%s: call it before dsrt_engine_build", fn);
    return e->set_stream(cuda_stream);  // stored; a CPU engine has nothing to order against
  });
}

DSRT_API dsrt_status dsrt_engine_device(const dsrt_engine *engine, int32_t *device_type, int32_t *device_index) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(device_type);
    REQUIRE_ARG(device_index);
    *device_type = e->device().type();
    *device_index = e->device().index();
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_tensor_acquire(dsrt_tensor *tensor, void **data, dsrt_dtype *dtype) {
  const char *fn = __func__;
  if (data != nullptr) *data = nullptr;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    REQUIRE_ARG(data);
    if (tensor->frozen) return tensor->engine->frozen_acquire(tensor->index, data, dtype);
    return tensor->engine->acquire(tensor->index, data, dtype);
  });
}

DSRT_API dsrt_status dsrt_tensor_release(dsrt_tensor *tensor) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    if (tensor->frozen) return tensor->engine->frozen_release(tensor->index);
    return tensor->engine->release(tensor->index);
  });
}

DSRT_API dsrt_status dsrt_tensor_grad(dsrt_tensor *tensor, void **grad, dsrt_dtype *dtype) {
  const char *fn = __func__;
  if (grad != nullptr) *grad = nullptr;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    REQUIRE_ARG(grad);
    if (tensor->frozen) return tensor->engine->frozen_refuse(tensor->index, "grad");
    return tensor->engine->grad(tensor->index, grad, dtype);
  });
}

DSRT_API dsrt_status dsrt_tensor_grad_ready(dsrt_tensor *tensor) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    if (tensor->frozen) return tensor->engine->frozen_refuse(tensor->index, "grad_ready");
    return tensor->engine->grad_ready(tensor->index);
  });
}

DSRT_API dsrt_status dsrt_engine_loss_scale(const dsrt_engine *engine, double *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(out);
    *out = e->loss_scale();
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_step(dsrt_engine *engine, dsrt_step_result *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    if (out != nullptr) DSRT_RETURN_IF_ERROR(dsrt::check_struct_size(*out, "step: out", "dsrt_step_result"));
    // The engine fills a whole struct; the caller's gets its struct_size bytes. struct_size 0 marks
    // "not written", since a step that fails after the boundary still reports its result.
    dsrt_step_result full;
    std::memset(&full, 0, sizeof full);
    Status status = e->step(out != nullptr ? &full : nullptr);
    if (out != nullptr && full.struct_size != 0) dsrt::copy_out(full, out);
    return status;
  });
}

DSRT_API dsrt_status dsrt_engine_end_backward(dsrt_engine *engine) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    return e->end_backward();
  });
}

DSRT_API dsrt_status dsrt_engine_global_step(const dsrt_engine *engine, int64_t *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(out);
    *out = e->counters().global_step;
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_get_lr(const dsrt_engine *engine, double *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(out);
    *out = e->current_lr();
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_tensor_read_fp32(dsrt_tensor *tensor, float *out, uint64_t count) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    REQUIRE_ARG(out);
    if (tensor->frozen) return tensor->engine->frozen_read_fp32(tensor->index, out, count);
    return tensor->engine->read_fp32(tensor->index, out, count);
  });
}

DSRT_API dsrt_status dsrt_tensor_write_fp32(dsrt_tensor *tensor, const float *src, uint64_t count) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    REQUIRE_ARG(src);
    if (tensor->frozen) return tensor->engine->frozen_write_fp32(tensor->index, src, count);
    return tensor->engine->write_fp32(tensor->index, src, count);
  });
}

DSRT_API const char *dsrt_tensor_name(const dsrt_tensor *tensor) {
  if (tensor == nullptr || tensor->engine == nullptr) return nullptr;
  if (tensor->frozen) return tensor->engine->frozen().tensor(tensor->index).name.c_str();
  return tensor->engine->tensor_name(tensor->index).c_str();
}

DSRT_API int32_t dsrt_tensor_ndim(const dsrt_tensor *tensor) {
  if (tensor == nullptr || tensor->engine == nullptr) return -1;
  if (tensor->frozen) return static_cast<int32_t>(tensor->engine->frozen().tensor(tensor->index).shape.size());
  return static_cast<int32_t>(tensor->engine->tensor_shape(tensor->index).size());
}

DSRT_API dsrt_status dsrt_tensor_shape(const dsrt_tensor *tensor, int64_t *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    DSRT_RETURN_IF_ERROR(dsrt::tensor_of(tensor, fn));
    const std::vector<int64_t> &shape = tensor->frozen ? tensor->engine->frozen().tensor(tensor->index).shape
                                                       : tensor->engine->tensor_shape(tensor->index);
    if (!shape.empty()) {
      REQUIRE_ARG(out);
      std::memcpy(out, shape.data(), shape.size() * sizeof(int64_t));
    }
    return Status::Ok();
  });
}

DSRT_API int64_t dsrt_tensor_numel(const dsrt_tensor *tensor) {
  if (tensor == nullptr || tensor->engine == nullptr) return -1;
  if (tensor->frozen) return tensor->engine->frozen().tensor(tensor->index).numel;
  return tensor->engine->tensor_numel(tensor->index);
}

DSRT_API int64_t dsrt_engine_num_tensors(const dsrt_engine *engine) {
  if (engine == nullptr || !engine->impl) return -1;
  return static_cast<int64_t>(engine->impl->num_tensors());
}

DSRT_API dsrt_tensor *dsrt_engine_tensor(dsrt_engine *engine, int64_t index) {
  if (engine == nullptr || !engine->impl || index < 0 ||
      static_cast<uint64_t>(index) >= engine->impl->num_tensors())
    return nullptr;
  return dsrt::tensor_handle(engine, static_cast<size_t>(index), false);
}

DSRT_API dsrt_status dsrt_engine_memory(const dsrt_engine *engine, dsrt_memory_stats *out) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(out);
    DSRT_RETURN_IF_ERROR(dsrt::check_struct_size(*out, "engine_memory: out", "dsrt_memory_stats"));
    dsrt_memory_stats full;
    DSRT_RETURN_IF_ERROR(e->memory(&full));
    dsrt::copy_out(full, out);
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_set_client_state(dsrt_engine *engine, const void *data, uint64_t size) {
  const char *fn = __func__;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    if (size > 0 && data == nullptr)
      return dsrt::Error(DSRT_ERR_INVALID_ARGUMENT, "%s: data is NULL with size %llu", fn,
                         static_cast<unsigned long long>(size));
    e->set_client_state(data, size);
    return Status::Ok();
  });
}

DSRT_API dsrt_status dsrt_engine_client_state(const dsrt_engine *engine, const void **data, uint64_t *size) {
  const char *fn = __func__;
  if (data != nullptr) *data = nullptr;
  return guarded(fn, [&]() -> Status {
    Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::engine_of(engine, fn, &e));
    REQUIRE_ARG(data);
    REQUIRE_ARG(size);
    const std::vector<uint8_t> &state = e->client_state();
    *data = state.empty() ? nullptr : state.data();
    *size = state.size();
    return Status::Ok();
  });
}

}  // extern "C"
