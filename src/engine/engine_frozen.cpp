// defines: the Engine's frozen-tensor calls -- registration, rank agreement, acquire/release,
// fp32 read/write, and the refusal of gradient calls (frozen_params.h holds the storage).
#include <cmath>

#include "engine/engine.h"

namespace dsrt {
namespace {

uint64_t fnv1a(const void *data, size_t bytes, uint64_t hash) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace

Status Engine::add_frozen_param(const std::string &name, const int64_t *shape, int ndim, const float *init,
                                size_t *index) {
  DSRT_RETURN_IF_ERROR(require_usable("add_frozen_param"));
  std::vector<int64_t> dims;
  int64_t numel = 0;
  std::vector<float> values;
  DSRT_RETURN_IF_ERROR(check_new_param("add_frozen_param", name, shape, ndim, init, &dims, &numel, &values));
  frozen_.add(name, std::move(dims), numel, std::move(values));
  if (index != nullptr) *index = frozen_.size() - 1;
  return Status::Ok();
}

Status Engine::check_frozen_agreement() {
  if (comm_->size() == 1) return Status::Ok();
  uint64_t h = 1469598103934665603ull;
  const uint64_t count = frozen_.size();
  h = fnv1a(&count, sizeof count, h);
  for (size_t i = 0; i < frozen_.size(); ++i) {
    const FrozenParams::Tensor &t = frozen_.tensor(i);
    h = fnv1a(t.name.data(), t.name.size() + 1, h);
    h = fnv1a(t.shape.data(), t.shape.size() * sizeof(int64_t), h);
  }
  uint64_t hashes[2] = {h, ~h};
  DSRT_RETURN_IF_ERROR(comm_->all_reduce_u64(hashes, 2, ReduceOp::Max).with_context("build: comparing frozen tensors"));
  if (hashes[0] != ~hashes[1])
    return Error(DSRT_ERR_COMM,
                 "build: ranks registered different frozen tensors (rank %d has %zu%s%s); every rank must add the "
                 "same frozen tensors with the same shapes in the same order",
                 rank(), frozen_.size(), frozen_.size() ? ", the first '" : "",
                 frozen_.size() ? (frozen_.tensor(0).name + "'").c_str() : "");
  return Status::Ok();
}

Status Engine::frozen_refuse(size_t i, const char *what) const {
  return Error(DSRT_ERR_STATE,
               "%s('%s'): the tensor is frozen (registered with dsrt_engine_add_frozen_param): it has no gradient, "
               "master or optimizer state; compute no gradient for it, or register it with dsrt_engine_add_param "
               "to train it",
               what, frozen_.tensor(i).name.c_str());
}

Status Engine::frozen_acquire(size_t i, void **data, dsrt_dtype *dtype) {
  DSRT_RETURN_IF_ERROR(require_built("acquire"));
  void *ptr = nullptr;
  DSRT_RETURN_IF_ERROR(
      track(frozen_.acquire(i, &ptr)).with_context(Format("acquire('%s')", frozen_.tensor(i).name.c_str())));
  DSRT_RETURN_IF_ERROR(order_host_after_engine());
  if (data != nullptr) *data = ptr;
  if (dtype != nullptr) *dtype = working_dtype();
  return Status::Ok();
}

Status Engine::frozen_release(size_t i) {
  DSRT_RETURN_IF_ERROR(require_built("release"));
  return frozen_.release(i);
}

Status Engine::frozen_read_fp32(size_t i, float *out, uint64_t count) {
  DSRT_RETURN_IF_ERROR(require_built("read_fp32"));
  const FrozenParams::Tensor &t = frozen_.tensor(i);
  if (count != static_cast<uint64_t>(t.numel))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "read_fp32('%s'): count is %llu but the tensor has %lld elements",
                 t.name.c_str(), static_cast<unsigned long long>(count), static_cast<long long>(t.numel));
  return track(frozen_.read_fp32(i, out)).with_context(Format("read_fp32('%s')", t.name.c_str()));
}

Status Engine::frozen_write_fp32(size_t i, const float *src, uint64_t count) {
  DSRT_RETURN_IF_ERROR(require_built("write_fp32"));
  const FrozenParams::Tensor &t = frozen_.tensor(i);
  if (count != static_cast<uint64_t>(t.numel))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "write_fp32('%s'): count is %llu but the tensor has %lld elements",
                 t.name.c_str(), static_cast<unsigned long long>(count), static_cast<long long>(t.numel));
  for (int64_t k = 0; k < t.numel; ++k)
    if (!std::isfinite(src[k]))
      return Error(DSRT_ERR_INVALID_ARGUMENT, "write_fp32('%s'): src[%lld] is not finite", t.name.c_str(),
                   static_cast<long long>(k));
  return frozen_.write_fp32(i, src).with_context(Format("write_fp32('%s')", t.name.c_str()));
}

}  // namespace dsrt
