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

// One element at i (the element-wise path: arrays off 16-byte alignment, and the tail of a
// part that is not a multiple of 8 elements).
template <int OP>
__device__ inline void process_one(const TensorEntry &e, const StepConsts &c, size_t i, float lamb_step, double &p_sq,
                                   double &u_sq) {
  const bool read_s0 = uses_state0<OP>(c) && !(OP == kSgd && c.first_step);
  float p = load_one(e.master, e.master_dtype, i);
  float g = OP != kLambPhase2 ? load_one(e.grad, e.grad_dtype, i) : 0.0f;
  float s0 = read_s0 ? load_one(e.state0, e.state_dtype, i) : 0.0f;
  float s1 = 0.0f, u = 0.0f;
  if (OP == kAdam || OP == kLambPhase1) s1 = load_one(e.state1, e.state_dtype, i);
  if (OP == kLambPhase2) u = load_one(e.update, DSRT_F32, i);
  p = update_one<OP>(c, lamb_step, g, p, s0, s1, u, p_sq, u_sq);
  if (uses_state0<OP>(c)) store_one(e.state0, e.state_dtype, i, s0);
  if (OP == kAdam || OP == kLambPhase1) store_one(e.state1, e.state_dtype, i, s1);
  if (OP == kLambPhase1) {
    store_one(e.update, DSRT_F32, i, u);
  } else {
    store_one(e.master, e.master_dtype, i, p);
    if (e.working_dtype >= 0) store_one(e.working, e.working_dtype, i, p);
  }
}

// U groups of 8 consecutive elements at i, i + stride, ..., those below vec_end (the first always
// is): the loads of every array of every group are issued before any is used, then the math, then
// the stores. The elements of each thread are visited in the order of U = 1 (the Lamb partial
// sums do not change with U).
template <int OP, int U, bool STREAM>
__device__ inline void process_vec(const TensorEntry &e, const StepConsts &c, size_t i, size_t stride, size_t vec_end,
                                   float lamb_step, double &p_sq, double &u_sq) {
  const bool read_s0 = uses_state0<OP>(c) && !(OP == kSgd && c.first_step);
  Raw8 rp[U], rg[U], r0[U], r1[U], ru[U];
  bool live[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const size_t at = i + k * stride;
    live[k] = k == 0 || at < vec_end;
    if (!live[k]) continue;
    load_raw8<STREAM>(e.master, e.master_dtype, at, rp[k]);
    if (OP != kLambPhase2) load_raw8<STREAM>(e.grad, e.grad_dtype, at, rg[k]);
    if (read_s0) load_raw8<STREAM>(e.state0, e.state_dtype, at, r0[k]);
    if (OP == kAdam || OP == kLambPhase1) load_raw8<STREAM>(e.state1, e.state_dtype, at, r1[k]);
    if (OP == kLambPhase2) load_raw8<STREAM>(e.update, DSRT_F32, at, ru[k]);
  }
#pragma unroll
  for (int k = 0; k < U; ++k) {
    if (!live[k]) continue;
    const size_t at = i + k * stride;
    float g[kVec], p[kVec], s0[kVec], s1[kVec], u[kVec];
    unpack8(rp[k], e.master_dtype, p);
    if (OP != kLambPhase2) unpack8(rg[k], e.grad_dtype, g);
    if (read_s0) unpack8(r0[k], e.state_dtype, s0);
    if (OP == kAdam || OP == kLambPhase1) unpack8(r1[k], e.state_dtype, s1);
    if (OP == kLambPhase2) unpack8(ru[k], DSRT_F32, u);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if constexpr (OP == kLambPhase2) g[j] = 0.0f;
      if (!read_s0) s0[j] = 0.0f;
      p[j] = update_one<OP>(c, lamb_step, g[j], p[j], s0[j], s1[j], u[j], p_sq, u_sq);
    }
    if (uses_state0<OP>(c)) store8_hinted<STREAM>(e.state0, e.state_dtype, at, s0);
    if (OP == kAdam || OP == kLambPhase1) store8_hinted<STREAM>(e.state1, e.state_dtype, at, s1);
    if (OP == kLambPhase1) {
      store8_hinted<STREAM>(e.update, DSRT_F32, at, u);
    } else {
      store8_hinted<STREAM>(e.master, e.master_dtype, at, p);
      if (e.working_dtype >= 0) store8_hinted<STREAM>(e.working, e.working_dtype, at, p);
    }
  }
}

// Block b takes part b & (2^part_shift - 1) of the chunk list's block b >> part_shift
// (chunk_part_range). Lamb phase 1 launches with part_shift 0: its partial sums are per chunk.
template <int OP, int U, bool STREAM>
__global__ void __launch_bounds__(kThreads) step_kernel(const ChunkList list, const StepConsts c, int part_shift) {
  const int block = static_cast<int>(blockIdx.x >> part_shift);
  const int slot = chunk_slot(list, block);
  const size_t chunk = chunk_of_block(list, slot, block);
  const TensorEntry &e = list.tensors[slot];
  size_t begin = 0, end = 0;
  chunk_part_range(chunk, static_cast<int>(blockIdx.x & ((1u << part_shift) - 1u)), part_shift, e.n, &begin, &end);
  if (begin == end) return;  // a part past the end of a short last chunk (every thread leaves)
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
  // Vector accesses where the arrays allow: from element 0 when all are 16-byte aligned (Lamb phase
  // 1 takes only that case, so its per-thread sums keep their order), else from the elements
  // where all are (vector_head), with the few elements before and after one at a time.
  const int head = OP == kLambPhase1 ? (e.vector_ok ? 0 : -1) : e.vector_head;
  size_t vec_begin = begin, vec_end = begin;  // none: every element one at a time
  if (head >= 0) part_vector_range(begin, end, head, &vec_begin, &vec_end);
  if (begin + threadIdx.x < vec_begin) process_one<OP>(e, c, begin + threadIdx.x, lamb_step, p_sq, u_sq);
  constexpr size_t stride = static_cast<size_t>(kThreads) * kVec;
  for (size_t i = vec_begin + threadIdx.x * kVec; i < vec_end; i += U * stride) {
    process_vec<OP, U, STREAM>(e, c, i, stride, vec_end, lamb_step, p_sq, u_sq);
  }
  for (size_t i = vec_end + threadIdx.x; i < end; i += kThreads) process_one<OP>(e, c, i, lamb_step, p_sq, u_sq);
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

int element_bytes(int dtype) { return dtype == DSRT_F32 ? 4 : 2; }

// vector_ok (every array 16-byte aligned) and vector_head (the elements where all are) of an entry
// from its arrays in use.
void set_vector_access(TensorEntry &e) {
  const void *arrays[] = {e.master, e.grad, e.state0, e.state1, e.working, e.update};
  const int bytes[] = {element_bytes(e.master_dtype), element_bytes(e.grad_dtype), element_bytes(e.state_dtype),
                       element_bytes(e.state_dtype), e.working ? element_bytes(e.working_dtype) : 2, 4};
  bool ok = true;
  for (const void *a : arrays) ok = ok && (a == nullptr || aligned16(a));
  e.vector_ok = ok ? 1 : 0;
  e.vector_head = static_cast<int8_t>(vector_head(arrays, bytes, 6));
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
    set_vector_access(e);
  }
  return entries;
}

// The step launch in force (cuda_set_step_launch; the defaults were chosen by measurement, see
// docs/cuda.md).
constexpr int kDefaultPartShift = 3;  // 8 blocks per chunk
constexpr int kDefaultUnroll = 2;
constexpr bool kDefaultStreaming = false;
std::atomic<int> g_part_shift{kDefaultPartShift};
std::atomic<int> g_unroll{kDefaultUnroll};
std::atomic<bool> g_streaming{kDefaultStreaming};

template <int OP, int U, bool STREAM>
Status launch_variant(const std::vector<TensorEntry> &entries, const StepConsts &c, cudaStream_t stream) {
  const int shift = OP == kLambPhase1 ? 0 : g_part_shift.load(std::memory_order_relaxed);
  return for_each_chunk_list(entries.data(), entries.size(), [&](const ChunkList &list, int blocks) {
    step_kernel<OP, U, STREAM><<<static_cast<unsigned>(blocks) << shift, kThreads, 0, stream>>>(list, c, shift);
    DSRT_CUDA_CHECK_LAUNCH(op_name(OP));
    return Status::Ok();
  });
}

// Adam takes every variant of cuda_set_step_launch (the benchmark measures them); SGD, Adagrad,
// Lion and Lamb phase 2 are built with the default unroll and cache hints and take the parts per
// chunk; Lamb phase 1 keeps its launch of before (one block per chunk, unroll 1, plain accesses).
template <int OP>
Status launch_lists(const std::vector<TensorEntry> &entries, const StepConsts &c, cudaStream_t stream) {
  if constexpr (OP == kAdam) {
    const int unroll = g_unroll.load(std::memory_order_relaxed);
    const bool streaming = g_streaming.load(std::memory_order_relaxed);
    if (unroll == 2) {
      return streaming ? launch_variant<OP, 2, true>(entries, c, stream) : launch_variant<OP, 2, false>(entries, c, stream);
    }
    return streaming ? launch_variant<OP, 1, true>(entries, c, stream) : launch_variant<OP, 1, false>(entries, c, stream);
  } else if constexpr (OP == kLambPhase1) {
    return launch_variant<OP, 1, false>(entries, c, stream);  // as measured before; its one block per chunk needs occupancy
  } else {
    return launch_variant<OP, kDefaultUnroll, kDefaultStreaming>(entries, c, stream);
  }
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

CudaStepLaunch cuda_step_launch_default() {
  return CudaStepLaunch{1 << kDefaultPartShift, kDefaultUnroll, kDefaultStreaming};
}

CudaStepLaunch cuda_step_launch() {
  return CudaStepLaunch{1 << g_part_shift.load(), g_unroll.load(), g_streaming.load()};
}

Status cuda_set_step_launch(const CudaStepLaunch &launch) {
  int shift = 0;
  while (shift <= kMaxPartShift && (1 << shift) != launch.blocks_per_chunk) ++shift;
  if (shift > kMaxPartShift) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_set_step_launch: %d blocks per chunk; give a power of two from 1 to %d",
                 launch.blocks_per_chunk, 1 << kMaxPartShift);
  }
  if (launch.unroll != 1 && launch.unroll != 2) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "cuda_set_step_launch: unroll %d; give 1 or 2", launch.unroll);
  }
  g_part_shift.store(shift);
  g_unroll.store(launch.unroll);
  g_streaming.store(launch.streaming_hints);
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
    set_vector_access(e);
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
