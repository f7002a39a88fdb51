// fused_optimizers.cu -- the optimizer step kernels over chunk lists (see fused_optimizers.h for
// the meaning; the math mirrors src/optim/kernels_body.inl operation for operation) and their
// launchers.
#include <atomic>
#include <cmath>
#include <vector>

#include "cuda/fused_optimizers.h"
#include "cuda/multi_tensor.cuh"
#include "optim/step_constants.h"

namespace dsrt {
namespace cuda_kernels {
namespace {

enum Op : int { kAdam, kSgd, kAdagrad, kLion, kLambPhase1, kLambPhase2 };

// Per-step constants, folded on the host in double and rounded to float once (as the CPU does).
struct StepConsts {
  float grad_scale, lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float l2_decay, decoupled_decay, keep_factor, step_size, inv_sqrt_bc2;
  float momentum, one_minus_dampening;
  int nesterov, first_step;
  double lamb_step_size, max_coeff, min_coeff;  // phase 2: step size before the trust ratio
  const double *param_norms, *update_norms;     // phase 2, per global tensor index
  double *partials_p, *partials_u;              // phase 1, per chunk
};

template <int OP>
__device__ inline bool uses_state0(const StepConsts &c) {
  if (OP == kSgd) return c.momentum != 0.0f;
  return OP != kLambPhase2;
}

// One element: returns the new master; s0, s1 and u are read and written as the op needs.
template <int OP>
__device__ inline float update_one(const StepConsts &c, float lamb_step, float g, float p, float &s0, float &s1,
                                   float &u, double &p_sq, double &u_sq) {
  if (OP == kAdam) {
    g = g * c.grad_scale;
    g = fmaf(p, c.l2_decay, g);
    s0 = fmaf(s0, c.beta1, g * c.one_minus_beta1);
    s1 = fmaf(s1, c.beta2, (g * g) * c.one_minus_beta2);
    const float denom = fmaf(sqrtf(s1), c.inv_sqrt_bc2, c.eps);
    return fmaf(s0 / denom, -c.step_size, p * c.keep_factor);
  } else if (OP == kSgd) {
    g = g * c.grad_scale;
    g = fmaf(p, c.l2_decay, g);
    if (c.momentum != 0.0f) {
      s0 = c.first_step ? g : fmaf(s0, c.momentum, g * c.one_minus_dampening);
      g = c.nesterov ? fmaf(s0, c.momentum, g) : s0;
    }
    return fmaf(g, -c.lr, p);
  } else if (OP == kAdagrad) {
    g = g * c.grad_scale;
    g = fmaf(p, c.l2_decay, g);
    s0 = fmaf(g, g, s0);
    const float denom = sqrtf(s0) + c.eps;
    return fmaf(g / denom, -c.lr, p);
  } else if (OP == kLion) {
    g = g * c.grad_scale;
    const float mix = fmaf(s0, c.beta1, g * c.one_minus_beta1);
    const float sign = mix > 0.0f ? 1.0f : (mix < 0.0f ? -1.0f : mix);  // torch.sign; nan stays nan
    p = fmaf(sign, -c.lr, p * c.keep_factor);
    s0 = fmaf(s0, c.beta2, g * c.one_minus_beta2);
    return p;
  } else if (OP == kLambPhase1) {
    g = g * c.grad_scale;
    s0 = fmaf(s0, c.beta1, g * c.one_minus_beta1);
    s1 = fmaf(s1, c.beta2, (g * g) * c.one_minus_beta2);
    u = fmaf(p, c.decoupled_decay, s0 / (sqrtf(s1) + c.eps));
    p_sq = fma(static_cast<double>(p), static_cast<double>(p), p_sq);  // in double, as the CPU (norms.cu)
    u_sq = fma(static_cast<double>(u), static_cast<double>(u), u_sq);
    return p;
  } else {
    return fmaf(u, -lamb_step, p);
  }
}

// W consecutive elements from i: W = kVec with 16-byte accesses, or W = 1.
template <int OP, int W>
__device__ inline void process(const TensorEntry &e, const StepConsts &c, size_t i, float lamb_step, double &p_sq,
                               double &u_sq) {
  float g[W], p[W], s0[W], s1[W], u[W];
  auto load = [&](const void *base, int dtype, float *out) {
    if constexpr (W == kVec) load8(base, dtype, i, out);
    else out[0] = load_one(base, dtype, i);
  };
  auto store = [&](void *base, int dtype, const float *x) {
    if constexpr (W == kVec) store8(base, dtype, i, x);
    else store_one(base, dtype, i, x[0]);
  };
  const bool read_s0 = uses_state0<OP>(c) && !(OP == kSgd && c.first_step);
  load(e.master, e.master_dtype, p);
  if (OP != kLambPhase2) load(e.grad, e.grad_dtype, g);
  if (read_s0) load(e.state0, e.state_dtype, s0);
  if (OP == kAdam || OP == kLambPhase1) load(e.state1, e.state_dtype, s1);
  if (OP == kLambPhase2) load(e.update, DSRT_F32, u);
#pragma unroll
  for (int k = 0; k < W; ++k) {
    if constexpr (OP == kLambPhase2) g[k] = 0.0f;
    if (!read_s0) s0[k] = 0.0f;
    p[k] = update_one<OP>(c, lamb_step, g[k], p[k], s0[k], s1[k], u[k], p_sq, u_sq);
  }
  if (uses_state0<OP>(c)) store(e.state0, e.state_dtype, s0);
  if (OP == kAdam || OP == kLambPhase1) store(e.state1, e.state_dtype, s1);
  if (OP == kLambPhase1) {
    store(e.update, DSRT_F32, u);
  } else {
    store(e.master, e.master_dtype, p);
    if (e.working_dtype >= 0) store(e.working, e.working_dtype, p);
  }
}

template <int OP>
__global__ void __launch_bounds__(kThreads) step_kernel(const ChunkList list, const StepConsts c) {
  size_t chunk = 0;
  const TensorEntry &e = block_entry(list, &chunk);
  const size_t begin = chunk * kChunk;
  const size_t end = begin + kChunk < e.n ? begin + kChunk : e.n;
  float lamb_step = 0.0f;
  if (OP == kLambPhase2) {
    const double pn = c.param_norms[e.global_index], un = c.update_norms[e.global_index];
    double trust = 1.0;
    if (pn != 0.0 && un != 0.0) {  // the CPU's comparisons, so a nan norm behaves the same
      trust = pn / un;
      if (trust > c.max_coeff) trust = c.max_coeff;
      if (trust < c.min_coeff) trust = c.min_coeff;
    }
    lamb_step = static_cast<float>(c.lamb_step_size * trust);
  }
  double p_sq = 0.0, u_sq = 0.0;
  size_t scalar_from = begin;
  if (e.vector_ok) {
    const size_t vec_end = begin + (end - begin) / kVec * kVec;
    for (size_t i = begin + threadIdx.x * kVec; i < vec_end; i += kThreads * kVec) {
      process<OP, kVec>(e, c, i, lamb_step, p_sq, u_sq);
    }
    scalar_from = vec_end;
  }
  for (size_t i = scalar_from + threadIdx.x; i < end; i += kThreads) process<OP, 1>(e, c, i, lamb_step, p_sq, u_sq);
  if (OP == kLambPhase1) {
    const double total_p = block_sum_f64(p_sq);
    const double total_u = block_sum_f64(u_sq);
    if (threadIdx.x == 0) {
      c.partials_p[e.partial_base + chunk] = total_p;
      c.partials_u[e.partial_base + chunk] = total_u;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

bool valid_dtype(int dtype) { return dtype == DSRT_F32 || dtype == DSRT_F16 || dtype == DSRT_BF16; }

const char *op_name(int op) {
  static const char *const names[] = {"Adam", "SGD", "Adagrad", "Lion", "Lamb phase 1", "Lamb phase 2"};
  return names[op];
}

Status check_common(const char *what, const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                    float grad_scale, bool needs_grad) {
  if (count > 0 && slices == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slices is NULL", what);
  if (hyper.step < 1) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: step is %lld; it counts updates including this one, so it starts at 1",
                 what, static_cast<long long>(hyper.step));
  }
  if (!std::isfinite(hyper.lr)) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the learning rate is not finite", what);
  if (needs_grad && !std::isfinite(grad_scale)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: grad_scale is %g; skip the step on overflow instead", what,
                 static_cast<double>(grad_scale));
  }
  for (size_t i = 0; i < count; ++i) {
    const OptimizerSlice &s = slices[i];
    if (s.n == 0) continue;
    if ((s.master == nullptr) == (s.master_bf16 == nullptr))
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: give exactly one master pointer (fp32 or bf16); %s", what, i,
                   s.master ? "both are set" : "both are NULL");
    if ((s.state0 && s.state0_bf16) || (s.state1 && s.state1_bf16) || (s.state0 && s.state1_bf16) ||
        (s.state0_bf16 && s.state1))
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: the state arrays must all be fp32 or all be bf16", what, i);
    if (needs_grad && s.grad == nullptr) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: the gradient pointer is NULL", what, i);
    }
    if (needs_grad && !valid_dtype(s.grad_dtype)) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: gradient dtype %d is not fp32, fp16 or bf16", what, i,
                   static_cast<int>(s.grad_dtype));
    }
    if (s.working != nullptr && !valid_dtype(s.working_dtype)) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: working-copy dtype %d is not fp32, fp16 or bf16", what, i,
                   static_cast<int>(s.working_dtype));
    }
  }
  return Status::Ok();
}

Status require_states(const char *what, const OptimizerSlice *slices, size_t count, int states) {
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n == 0) continue;
    const bool has0 = slices[i].state0 || slices[i].state0_bf16, has1 = slices[i].state1 || slices[i].state1_bf16;
    if ((states >= 1 && !has0) || (states >= 2 && !has1)) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: needs %d state array%s and %s is NULL", what, i,
                   states, states > 1 ? "s" : "", !has0 ? "state0" : "state1");
    }
  }
  return Status::Ok();
}

// Table entries for the slices; update[i] is the Lamb buffer (or null).
std::vector<TensorEntry> make_entries(const OptimizerSlice *slices, size_t count, const float *const *updates,
                                      bool with_working) {
  std::vector<TensorEntry> entries(count);
  for (size_t i = 0; i < count; ++i) {
    const OptimizerSlice &s = slices[i];
    TensorEntry &e = entries[i];
    e = TensorEntry{};
    e.master = s.master_bf16 ? static_cast<void *>(s.master_bf16) : static_cast<void *>(s.master);
    e.master_dtype = static_cast<int8_t>(s.master_bf16 ? DSRT_BF16 : DSRT_F32);
    e.grad = s.grad;
    const bool bf16_states = s.state0_bf16 || s.state1_bf16;
    e.state0 = bf16_states ? static_cast<void *>(s.state0_bf16) : static_cast<void *>(s.state0);
    e.state1 = bf16_states ? static_cast<void *>(s.state1_bf16) : static_cast<void *>(s.state1);
    e.state_dtype = static_cast<int8_t>(bf16_states ? DSRT_BF16 : DSRT_F32);
    e.working = with_working ? s.working : nullptr;
    e.update = updates ? const_cast<float *>(updates[i]) : nullptr;
    e.n = s.n;
    e.grad_dtype = static_cast<int8_t>(s.grad ? s.grad_dtype : DSRT_F32);
    e.working_dtype = static_cast<int8_t>(e.working ? static_cast<int>(s.working_dtype) : -1);
    const void *arrays[] = {e.master, e.grad, e.state0, e.state1, e.working, e.update};
    bool ok = true;
    for (const void *a : arrays) ok = ok && (a == nullptr || aligned16(a));
    e.vector_ok = ok ? 1 : 0;
  }
  return entries;
}

template <int OP>
Status launch_lists(const std::vector<TensorEntry> &entries, const StepConsts &c, cudaStream_t stream) {
  return for_each_chunk_list(entries.data(), entries.size(), [&](const ChunkList &list, int blocks) {
    step_kernel<OP><<<blocks, kThreads, 0, stream>>>(list, c);
    DSRT_CUDA_CHECK_LAUNCH(op_name(OP));
    return Status::Ok();
  });
}

std::atomic<int> g_tensor_limit{kMaxTensors};
std::atomic<int> g_block_limit{kMaxBlocks};

}  // namespace

int launch_tensor_limit() { return g_tensor_limit.load(std::memory_order_relaxed); }
int launch_block_limit() { return g_block_limit.load(std::memory_order_relaxed); }

}  // namespace cuda_kernels

using namespace cuda_kernels;

Status cuda_set_launch_limits(int max_tensors, int max_blocks) {
  if (max_tensors < 1 || max_tensors > kMaxTensors || max_blocks < 1 || max_blocks > kMaxBlocks) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_set_launch_limits: %d tensors and %d blocks; the limits are 1..%d and 1..%d",
                 max_tensors, max_blocks, kMaxTensors, kMaxBlocks);
  }
  g_tensor_limit.store(max_tensors);
  g_block_limit.store(max_blocks);
  return Status::Ok();
}

// The shared per-step constants (src/optim/step_constants.h) in the kernels' argument struct.
static StepConsts consts_from(const StepConstants &f) {
  StepConsts c{};
  c.grad_scale = f.grad_scale;
  c.lr = f.lr;
  c.beta1 = f.beta1;
  c.beta2 = f.beta2;
  c.one_minus_beta1 = f.one_minus_beta1;
  c.one_minus_beta2 = f.one_minus_beta2;
  c.eps = f.eps;
  c.l2_decay = f.l2_decay;
  c.decoupled_decay = f.decoupled_decay;
  c.keep_factor = f.keep_factor;
  c.step_size = f.step_size;
  c.inv_sqrt_bc2 = f.inv_sqrt_bc2;
  c.momentum = f.momentum;
  c.one_minus_dampening = f.one_minus_dampening;
  c.nesterov = f.nesterov ? 1 : 0;
  c.first_step = f.first_step ? 1 : 0;
  return c;
}

Status cuda_optimizer_step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                                float grad_scale, void *stream) {
  const char *what = "CUDA optimizer step";
  DSRT_RETURN_IF_ERROR(check_common(what, hyper, slices, count, grad_scale, true));
  if (hyper.type == OptimizerType::Lamb)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "Lamb needs whole-tensor norms: call cuda_lamb_phase1_many, all-reduce the sums, then "
                 "cuda_lamb_phase2_many");
  StepConstants folded;
  DSRT_RETURN_IF_ERROR(fold_step_constants(what, hyper, grad_scale, &folded));
  DSRT_RETURN_IF_ERROR(require_states(optimizer_type_name(hyper.type), slices, count, folded.states));
  const StepConsts c = consts_from(folded);
  if (count == 0) return Status::Ok();
  const std::vector<TensorEntry> entries = make_entries(slices, count, nullptr, true);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (hyper.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: return launch_lists<kAdam>(entries, c, s);
    case OptimizerType::SGD: return launch_lists<kSgd>(entries, c, s);
    case OptimizerType::Adagrad: return launch_lists<kAdagrad>(entries, c, s);
    default: return launch_lists<kLion>(entries, c, s);
  }
}

size_t cuda_reduction_workspace_bytes(const size_t *sizes, size_t count) {
  size_t slots = 0;
  for (size_t i = 0; i < count; ++i) slots += chunks_of(sizes[i]);
  return slots * 2 * sizeof(double);  // two sums per chunk (Lamb); the norms use the first half
}

Status cuda_lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                             float grad_scale, float *const *updates, double *param_sq, double *update_sq,
                             void *workspace, size_t workspace_bytes, void *stream) {
  const char *what = "Lamb phase 1";
  DSRT_RETURN_IF_ERROR(check_common(what, hyper, slices, count, grad_scale, true));
  DSRT_RETURN_IF_ERROR(require_states(what, slices, count, 2));
  if (count == 0) return Status::Ok();
  if (updates == nullptr || param_sq == nullptr || update_sq == nullptr) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: updates, param_sq and update_sq must not be NULL", what);
  }
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n == 0) continue;
    if (updates[i] == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: the update buffer is NULL", what, i);
    if (slices[i].working != nullptr && updates[i] == slices[i].working && slices[i].working_dtype != DSRT_F32) {
      return Error(DSRT_ERR_INVALID_ARGUMENT,
                   "%s: slice %zu: the update buffer may share the working copy's memory only when that copy is fp32",
                   what, i);
    }
  }
  std::vector<TensorEntry> entries = make_entries(slices, count, updates, false);
  const size_t slots = assign_partials(entries.data(), count);
  if (workspace == nullptr || workspace_bytes < slots * 2 * sizeof(double)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the workspace holds %zu bytes; %zu are needed (cuda_reduction_workspace_bytes)",
                 what, workspace ? workspace_bytes : 0, slots * 2 * sizeof(double));
  }
  StepConstants folded;
  DSRT_RETURN_IF_ERROR(fold_lamb_phase1_constants(what, hyper, grad_scale, &folded));
  StepConsts c = consts_from(folded);
  c.partials_p = static_cast<double *>(workspace);
  c.partials_u = c.partials_p + slots;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  DSRT_RETURN_IF_ERROR(launch_lists<kLambPhase1>(entries, c, s));
  return reduce_partials(c.partials_p, c.partials_u, entries.data(), count, param_sq, update_sq, true, s);
}

Status cuda_lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                             const float *const *updates, const double *param_norms, const double *update_norms,
                             void *stream) {
  const char *what = "Lamb phase 2";
  DSRT_RETURN_IF_ERROR(check_common(what, hyper, slices, count, 1.0f, false));
  if (count == 0) return Status::Ok();
  if (updates == nullptr || param_norms == nullptr || update_norms == nullptr) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: updates, param_norms and update_norms must not be NULL", what);
  }
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n > 0 && updates[i] == nullptr) {
      return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slice %zu: the update buffer is NULL", what, i);
    }
  }
  std::vector<TensorEntry> entries = make_entries(slices, count, updates, true);
  for (TensorEntry &e : entries) {  // phase 2 reads only the master and the update
    e.grad = nullptr;
    e.state0 = nullptr;
    e.state1 = nullptr;
  }
  StepConsts c{};
  c.lr = hyper.lr;
  c.lamb_step_size = lamb_step_size(hyper);
  c.max_coeff = hyper.max_coeff;
  c.min_coeff = hyper.min_coeff;
  c.param_norms = param_norms;
  c.update_norms = update_norms;
  return launch_lists<kLambPhase2>(entries, c, static_cast<cudaStream_t>(stream));
}

}  // namespace dsrt
