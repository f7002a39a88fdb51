// defines: the engine's 1-bit LAMB step -- DeepSpeed's OnebitLamb on the stage-0 flat buffers:
// an initialization step, the warm-up stage (plain LAMB on all-reduced gradients, collecting the
// running average of each tensor's trust ratio), then the compression stage (gradients kept local,
// every tensor's momentum scaled and all-reduced in one 1-bit compressed vector with error
// feedback, the variance frozen, the trust ratio rebuilt from the frozen average and a factor
// from the fresh variance); and the serialization of its state for checkpoints.
#include <cstring>

#include "engine/engine.h"
#include "optim/onebit_lamb.h"
#include "optim/step_constants.h"
#include "util/log.h"

namespace dsrt {
namespace {

constexpr uint64_t kLambMagic = 0x424c314254525344ull;  // "DSRT1BLB" little-endian
constexpr uint32_t kLambVersion = 1;

struct LambHeader {
  uint64_t magic = kLambMagic;
  uint32_t version = kLambVersion;
  uint32_t world = 0, rank = 0, scaled = 0;
  uint64_t tensors = 0, elems = 0, worker_elems = 0, server_elems = 0;
};

void append(std::vector<uint8_t> *out, const void *data, size_t bytes) {
  const auto *p = static_cast<const uint8_t *>(data);
  out->insert(out->end(), p, p + bytes);
}

}  // namespace

Status Engine::onebit_lamb_update(const std::vector<OptimizerSlice> &slices,
                                  const std::vector<std::vector<size_t>> &by_group, float grad_scale) {
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  if (segments.size() != slices.size() || onebit_.size() != 1)
    return Error(DSRT_ERR_INTERNAL, "OneBitLamb: %zu slices for %zu segments, %zu fused momenta (1 expected)",
                 slices.size(), segments.size(), onebit_.size());
  if (onebit_on_device()) return onebit_lamb_update_device(slices, by_group, grad_scale);
  const OptimizerConfig &o = config_.optimizer;
  const OneBitLambParams params{o.coeff_beta, o.factor_max, o.factor_min, o.factor_threshold};
  OneBitLambEngineState &st = onebit_lamb_;
  const int64_t step = counters_.applied_steps + 1;  // DeepSpeed's state['step']

  if (!onebit_compressing()) {
    const bool capture = step == o.freeze_step;  // DeepSpeed copies v into exp_avg_sq_fresh then
    size_t at = 0;
    for (size_t g = 0; g < by_group.size(); ++g) {
      const OptimizerHyper hyper = group_hyper(g);
      for (size_t i : by_group[g]) {
        DSRT_RETURN_IF_ERROR(onebit_lamb_warmup_step(hyper, params, slices[i], grad_scale, st.fresh.data() + at, capture,
                                                     &st.tensors[segments[i].tensor], nullptr)
                                 .with_context(Format("OneBitLamb warm-up step (group %zu)", g)));
        at += slices[i].n;
      }
    }
    return Status::Ok();
  }

  if (!st.scaled) {
    // The first compression step fixes each tensor's scaling coefficient from its momentum.
    std::vector<double> scales;
    double sum = 0.0;
    for (const auto &group : by_group)
      for (size_t i : group) {
        scales.push_back(onebit_lamb_momentum_scale(slices[i].state0, slices[i].n));
        sum += scales.back();
      }
    const double united = scales.empty() ? 0.0 : sum / static_cast<double>(scales.size());
    size_t k = 0;
    for (const auto &group : by_group)
      for (size_t i : group) {
        const double scale = scales[k++];
        // A tensor whose momentum is exactly zero would get an infinite coefficient in DeepSpeed.
        st.tensors[segments[i].tensor].scaling_coeff = scale > 0.0 && united > 0.0 ? united / scale : 1.0;
      }
    st.scaled = true;
    if (rank() == 0)
      log_progress(Format("OneBitLamb: compressed communication starts at step %lld", static_cast<long long>(step)));
  }
  OneBitGroup &flat = onebit_[0];
  size_t at = 0;
  for (size_t g = 0; g < by_group.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    for (size_t i : by_group[g]) {
      const float scaling = static_cast<float>(st.tensors[segments[i].tensor].scaling_coeff);
      DSRT_RETURN_IF_ERROR(onebit_lamb_momentum(hyper, slices[i], grad_scale, scaling, st.last.data() + at));
      if (slices[i].n > 0) std::memcpy(flat.momentum.data() + at, slices[i].state0, slices[i].n * sizeof(float));
      at += slices[i].n;
    }
  }
  DSRT_RETURN_IF_ERROR(flat.reduce.run(flat.momentum.data()).with_context("OneBitLamb: the compressed momentum all-reduce"));
  at = 0;
  for (size_t g = 0; g < by_group.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    for (size_t i : by_group[g]) {
      if (slices[i].n > 0) std::memcpy(slices[i].state0, flat.momentum.data() + at, slices[i].n * sizeof(float));
      DSRT_RETURN_IF_ERROR(onebit_lamb_apply(hyper, params, slices[i], st.last.data() + at, st.fresh.data() + at,
                                             &st.tensors[segments[i].tensor], nullptr)
                               .with_context(Format("OneBitLamb compressed step (group %zu)", g)));
      at += slices[i].n;
    }
  }
  return Status::Ok();
}

Status Engine::onebit_lamb_serialize(std::vector<uint8_t> *out) const {
  out->clear();
  OneBitLambEngineState device_copy;
  if (onebit_on_device()) {  // the device state, copied to the host
    device_copy.tensors = onebit_lamb_.tensors;
    device_copy.scaled = onebit_lamb_.scaled;
    DSRT_RETURN_IF_ERROR(onebit_lamb_pull_device(&device_copy, &device_copy.fresh));
  }
  const OneBitLambEngineState &st = onebit_on_device() ? device_copy : onebit_lamb_;
  LambHeader h;
  h.world = static_cast<uint32_t>(comm_->size());
  h.rank = static_cast<uint32_t>(comm_->rank());
  h.scaled = st.scaled ? 1 : 0;
  h.tensors = st.tensors.size();
  h.elems = st.fresh.size();
  const CompressedAllReduce *reduce = onebit_reduce(0);
  const bool errors = reduce != nullptr && comm_->size() > 1;
  h.worker_elems = errors ? reduce->padded_size() : 0;
  h.server_elems = errors ? reduce->chunk_size() : 0;
  append(out, &h, sizeof h);
  for (const OneBitLambTensorState &t : st.tensors) {
    const double v[3] = {t.coeff_freeze, t.last_factor, t.scaling_coeff};
    append(out, v, sizeof v);
  }
  append(out, st.fresh.data(), st.fresh.size() * sizeof(float));
  if (errors) {
    std::vector<float> worker, server;
    DSRT_RETURN_IF_ERROR(reduce->errors_to_host(&worker, &server));
    append(out, worker.data(), h.worker_elems * sizeof(float));
    append(out, server.data(), h.server_elems * sizeof(float));
  }
  return Status::Ok();
}

Status Engine::onebit_lamb_restore(const std::vector<uint8_t> &bytes) {
  if (config_.optimizer.type != OptimizerType::OneBitLamb)
    return Error(DSRT_ERR_STATE, "OneBitLamb state given to an engine running %s", optimizer_type_name(config_.optimizer.type));
  LambHeader h;
  if (bytes.size() < sizeof h) return Error(DSRT_ERR_IO, "OneBitLamb state: %zu bytes, shorter than its header", bytes.size());
  std::memcpy(&h, bytes.data(), sizeof h);
  OneBitLambEngineState &st = onebit_lamb_;
  const size_t elems = onebit_.empty() ? 0 : onebit_[0].reduce.size();
  if (h.magic != kLambMagic || h.version != kLambVersion)
    return Error(DSRT_ERR_IO, "OneBitLamb state: not a version-%u OneBitLamb state file", kLambVersion);
  if (h.tensors != st.tensors.size() || h.elems != elems)
    return Error(DSRT_ERR_CONFIG, "OneBitLamb state: saved for %llu tensors of %llu elements, this engine has %zu of %zu",
                 static_cast<unsigned long long>(h.tensors), static_cast<unsigned long long>(h.elems), st.tensors.size(),
                 elems);
  const uint64_t expected = sizeof h + h.tensors * 3 * sizeof(double) + (h.elems + h.worker_elems + h.server_elems) * sizeof(float);
  if (bytes.size() != expected)
    return Error(DSRT_ERR_IO, "OneBitLamb state: %zu bytes, %llu expected from its header", bytes.size(),
                 static_cast<unsigned long long>(expected));
  const uint8_t *p = bytes.data() + sizeof h;
  for (OneBitLambTensorState &t : st.tensors) {
    double v[3];
    std::memcpy(v, p, sizeof v);
    p += sizeof v;
    t.coeff_freeze = v[0];
    t.last_factor = v[1];
    t.scaling_coeff = v[2];
  }
  st.scaled = h.scaled != 0;
  const auto *fresh = reinterpret_cast<const float *>(p);
  if (onebit_on_device()) {
    if (elems > 0) DSRT_RETURN_IF_ERROR(device_->copy(st.d_fresh.data(), fresh, elems * sizeof(float), nullptr));
    DSRT_RETURN_IF_ERROR(onebit_lamb_push_device());
  } else {
    std::memcpy(st.fresh.data(), fresh, elems * sizeof(float));
  }
  p += elems * sizeof(float);
  // The errors are this rank's: they come back only at the world size, and from the rank, that saved them.
  CompressedAllReduce &reduce = onebit_[0].reduce;
  if (comm_->size() > 1 && h.world == static_cast<uint32_t>(comm_->size()) && h.rank == static_cast<uint32_t>(comm_->rank()) &&
      h.worker_elems == reduce.padded_size() && h.server_elems == reduce.chunk_size()) {
    std::vector<float> worker(h.worker_elems), server(h.server_elems);
    std::memcpy(worker.data(), p, h.worker_elems * sizeof(float));
    std::memcpy(server.data(), p + h.worker_elems * sizeof(float), h.server_elems * sizeof(float));
    DSRT_RETURN_IF_ERROR(reduce.errors_from_host(worker, server));
  } else {
    reduce.reset_errors();
  }
  return Status::Ok();
}

}  // namespace dsrt
