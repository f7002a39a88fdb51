// defines: the engine's 1-bit LAMB step on a CUDA device -- the sequence of
// engine_onebit_lamb.cpp with the kernels of optim/onebit_lamb_device.h, the per-tensor scalars in
// device memory (copied back to the host after each step for the engine's accessors), and the
// copies of the device state that checkpoints read and write.
#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "optim/onebit_lamb_device.h"
#include "util/log.h"

namespace dsrt {
namespace {

constexpr size_t kScalarDoubles = 6;  // per tensor: the state (3 doubles), then the sums (3 doubles)

}  // namespace

Status Engine::onebit_lamb_build_device(size_t total) {
  OneBitLambEngineState &st = onebit_lamb_;
  const size_t count = std::max<size_t>(st.tensors.size(), 1);
  DSRT_RETURN_IF_ERROR(device_->allocate(std::max<size_t>(total, 1) * sizeof(float), &st.d_fresh));
  DSRT_RETURN_IF_ERROR(device_->allocate(std::max<size_t>(total, 1) * sizeof(float), &st.d_last));
  DSRT_RETURN_IF_ERROR(device_->allocate(count * (kScalarDoubles * sizeof(double) + sizeof(float)), &st.d_scalars));
  return onebit_lamb_push_device();
}

// The device scalars' layout: [states: 3T doubles][sums: 3T doubles][steps: T floats].
Status Engine::onebit_lamb_push_device() {
  const OneBitLambEngineState &st = onebit_lamb_;
  if (st.tensors.empty()) return Status::Ok();
  DSRT_RETURN_IF_ERROR(device_->copy(st.d_scalars.data(), st.tensors.data(), st.tensors.size() * sizeof(OneBitLambTensorState),
                                     nullptr));
  return device_->synchronize(nullptr);
}

Status Engine::onebit_lamb_pull_device(OneBitLambEngineState *host, std::vector<float> *fresh) const {
  const OneBitLambEngineState &st = onebit_lamb_;
  if (!host->tensors.empty())
    DSRT_RETURN_IF_ERROR(device_->copy(host->tensors.data(), st.d_scalars.data(),
                                       host->tensors.size() * sizeof(OneBitLambTensorState), nullptr));
  if (fresh != nullptr) {
    fresh->assign(onebit_.empty() ? 0 : onebit_[0].reduce.size(), 0.0f);
    if (!fresh->empty())
      DSRT_RETURN_IF_ERROR(device_->copy(fresh->data(), st.d_fresh.data(), fresh->size() * sizeof(float), nullptr));
  }
  return device_->synchronize(nullptr);
}

Status Engine::onebit_lamb_update_device(const std::vector<OptimizerSlice> &slices,
                                         const std::vector<std::vector<size_t>> &by_group, float grad_scale) {
  const std::vector<OwnedSegment> segments = part_.owned_segments(part_rank());
  const OptimizerConfig &o = config_.optimizer;
  const OneBitLambParams params{o.coeff_beta, o.factor_max, o.factor_min, o.factor_threshold};
  OneBitLambEngineState &st = onebit_lamb_;
  const size_t count = st.tensors.size();
  auto *states = st.d_scalars.as<double>();
  double *sums = states + 3 * count;
  auto *steps = reinterpret_cast<float *>(sums + 3 * count);
  auto scalars_of = [&](size_t t) { return OneBitLambDeviceScalars{states + 3 * t, sums + 3 * t, steps + t}; };
  const int64_t step = counters_.applied_steps + 1;
  DSRT_RETURN_IF_ERROR(device_->memset(sums, 0, 3 * count * sizeof(double), nullptr));
  float *fresh = st.d_fresh.as<float>(), *last = st.d_last.as<float>();

  if (!onebit_compressing()) {
    const bool capture = step == o.freeze_step;
    size_t at = 0;
    for (size_t g = 0; g < by_group.size(); ++g) {
      const OptimizerHyper hyper = group_hyper(g);
      for (size_t i : by_group[g]) {
        DSRT_RETURN_IF_ERROR(onebit_lamb_warmup_device(hyper, params, slices[i], grad_scale, capture ? fresh + at : nullptr,
                                                       scalars_of(segments[i].tensor), nullptr)
                                 .with_context(Format("OneBitLamb warm-up step on the device (group %zu)", g)));
        at += slices[i].n;
      }
    }
    return onebit_lamb_pull_device(&st, nullptr);
  }

  if (!st.scaled) {  // as on the host: the scaling coefficients from each tensor's momentum
    for (const auto &group : by_group)
      for (size_t i : group)
        DSRT_RETURN_IF_ERROR(onebit_lamb_momentum_sum_device(slices[i].state0, slices[i].n, sums + 3 * segments[i].tensor, nullptr));
    std::vector<double> host_sums(3 * count);
    DSRT_RETURN_IF_ERROR(device_->copy(host_sums.data(), sums, host_sums.size() * sizeof(double), nullptr));
    DSRT_RETURN_IF_ERROR(onebit_lamb_pull_device(&st, nullptr));
    std::vector<double> scales;
    double total = 0.0;
    for (const auto &group : by_group)
      for (size_t i : group) {
        const double n = static_cast<double>(slices[i].n);
        scales.push_back(n > 0 ? std::sqrt(host_sums[3 * segments[i].tensor]) / std::sqrt(n) : 0.0);
        total += scales.back();
      }
    const double united = scales.empty() ? 0.0 : total / static_cast<double>(scales.size());
    size_t k = 0;
    for (const auto &group : by_group)
      for (size_t i : group) {
        const double scale = scales[k++];
        st.tensors[segments[i].tensor].scaling_coeff = scale > 0.0 && united > 0.0 ? united / scale : 1.0;
      }
    st.scaled = true;
    DSRT_RETURN_IF_ERROR(onebit_lamb_push_device());
    DSRT_RETURN_IF_ERROR(device_->memset(sums, 0, 3 * count * sizeof(double), nullptr));
    if (rank() == 0)
      log_progress(Format("OneBitLamb: compressed communication starts at step %lld", static_cast<long long>(step)));
  }
  OneBitGroup &flat = onebit_[0];
  float *momentum = flat.momentum_ptr();
  size_t at = 0;
  for (size_t g = 0; g < by_group.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    for (size_t i : by_group[g]) {
      DSRT_RETURN_IF_ERROR(onebit_lamb_momentum_device(hyper, slices[i], grad_scale, last + at,
                                                       states + 3 * segments[i].tensor, nullptr));
      if (slices[i].n > 0)
        DSRT_RETURN_IF_ERROR(device_->copy(momentum + at, slices[i].state0, slices[i].n * sizeof(float), nullptr));
      at += slices[i].n;
    }
  }
  DSRT_RETURN_IF_ERROR(flat.reduce.run(momentum).with_context("OneBitLamb: the compressed momentum all-reduce"));
  at = 0;
  for (size_t g = 0; g < by_group.size(); ++g) {
    const OptimizerHyper hyper = group_hyper(g);
    for (size_t i : by_group[g]) {
      if (slices[i].n > 0)
        DSRT_RETURN_IF_ERROR(device_->copy(slices[i].state0, momentum + at, slices[i].n * sizeof(float), nullptr));
      DSRT_RETURN_IF_ERROR(onebit_lamb_apply_device(hyper, params, slices[i], last + at, fresh + at,
                                                    scalars_of(segments[i].tensor), nullptr)
                               .with_context(Format("OneBitLamb compressed step on the device (group %zu)", g)));
      at += slices[i].n;
    }
  }
  return onebit_lamb_pull_device(&st, nullptr);
}

}  // namespace dsrt
