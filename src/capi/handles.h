// handles.h -- the C handles of engines and tensors, and how one capi file reaches the internals
// behind another module's opaque handle. Each function is defined next to the handle's struct,
// in that module's capi_*.cpp.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>

#include "dsrt.h"

namespace dsrt {
class Config;
class Comm;
class Engine;
}  // namespace dsrt

// A dsrt_tensor names a tensor of its engine by index; the engine handle owns it.
struct dsrt_tensor {
  dsrt::Engine *engine = nullptr;
  size_t index = 0;     // into the trainable registry, or into the frozen one when frozen
  bool frozen = false;  // dsrt_engine_add_frozen_param (engine/frozen_params.h)
};
// The engine and the handles of its tensors (deques: the addresses stay put as tensors are added).
struct dsrt_engine {
  std::unique_ptr<dsrt::Engine> impl;
  std::deque<dsrt_tensor> tensors;  // tensors[t] names trainable tensor t
  std::deque<dsrt_tensor> frozen;   // frozen[i] names frozen tensor i
};

namespace dsrt {

// The parsed configuration behind a dsrt_config (never NULL for a valid handle).
const Config *config_from_handle(const dsrt_config *handle);
// The communicator behind a dsrt_comm; engines keep the shared_ptr so destroy order is free.
std::shared_ptr<Comm> comm_from_handle(const dsrt_comm *handle);
// The handle of trainable tensor `index` of engine->impl (frozen: of frozen tensor `index`), made
// on first use (with those before it); valid until the engine handle is destroyed. The caller
// checks that the tensor exists. dsrt_engine_add_param makes each tensor's handle as it adds it.
dsrt_tensor *tensor_handle(dsrt_engine *engine, size_t index, bool frozen);
}  // namespace dsrt
