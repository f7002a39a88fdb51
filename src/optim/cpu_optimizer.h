// cpu_optimizer.h -- the CPU optimizer kernels (AVX-512 / AVX2 chosen at run time, scalar
// fallback, the work pool over large ranges). Each is one fused pass over a contiguous range: read the
// gradient (any dtype) times grad_scale, update the fp32 master and the states, and write the
// working copy (fp32/fp16/bf16) when one is given.
//
// grad_scale folds everything the engine applies to a raw accumulated gradient: 1/loss_scale,
// 1/(ranks * accumulation steps) or the predivide factor, and the clipping coefficient.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config/train_config.h"
#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

struct OptimizerHyper {
  OptimizerType type = OptimizerType::AdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adam_w_mode = true;
  bool bias_correction = true;
  float momentum = 0.0f;  // SGD
  float dampening = 0.0f;
  bool nesterov = false;
  float max_coeff = 10.0f;  // Lamb
  float min_coeff = 0.01f;
  int64_t step = 1;  // 1-based count of updates applied so far, including this one
};

// Build the hyper-parameters of step `step` with learning rate lr (and, for OneCycle, beta1 as
// momentum) from the config.
OptimizerHyper make_optimizer_hyper(const OptimizerConfig &config, double lr, int64_t step);

// How many fp32 state arrays of the parameter's size the optimizer keeps (Adam/Lamb: m, v = 2;
// SGD with momentum, Adagrad, Lion: 1; plain SGD: 0).
int optimizer_state_count(const OptimizerConfig &config);

struct OptimizerSlice {
  float *master = nullptr;          // fp32 master weights, n elements
  const void *grad = nullptr;       // accumulated gradient, n elements of grad_dtype
  dsrt_dtype grad_dtype = DSRT_F32;
  float *state0 = nullptr;          // m / momentum buffer / Adagrad sum / Lion m
  float *state1 = nullptr;          // v (Adam, Lamb)
  void *working = nullptr;          // optional: written with cast(master) after the update
  dsrt_dtype working_dtype = DSRT_F32;
  size_t n = 0;
  // bf16 storage (DeepSpeed's bf16.bf16_master_weights_and_grads / bf16_optimizer_states): when
  // set, the array is kept in bf16 instead of the fp32 pointer above (which must then be NULL).
  // The arithmetic is the fp32 kernel's, on values widened from bf16; each result is rounded to
  // the nearest bf16 (ties to even) when stored, as DeepSpeed's CPU Adam and FusedAdam store it.
  uint16_t *master_bf16 = nullptr;
  uint16_t *state0_bf16 = nullptr;
  uint16_t *state1_bf16 = nullptr;
};

// Adam/AdamW, SGD, Adagrad and Lion in one pass. Lamb needs whole-tensor norms: use the two
// phases below. INVALID_ARGUMENT for a missing state array or a Lamb request.
Status cpu_optimizer_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale);

// Lamb, phase 1: writes the Adam-style update (with weight decay) into update[0..n) (which may be
// the working buffer's memory only if it is fp32) and adds this slice's sum of squares of master
// and update to *param_sq and *update_sq (the engine all-reduces them per tensor).
Status cpu_lamb_phase1(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale, float *update,
                       double *param_sq, double *update_sq);
// Lamb, phase 2: master -= step_size * trust_ratio * update, trust_ratio = clamp(|p|/|u|, min, max)
// (1 when either norm is 0), then the working copy. As DeepSpeed's FusedLamb, the update of
// phase 1 is m / (sqrt(v) + eps) + weight_decay * p without bias correction, and step_size is
// lr * sqrt(1 - beta2^t) / (1 - beta1^t) (lr when bias_correction is false).
Status cpu_lamb_phase2(const OptimizerHyper &hyper, const OptimizerSlice &slice, const float *update,
                       double param_norm, double update_norm);

// The same over count slices in one parallel pass (one set of hyper-parameters): small slices
// such as biases share the threads instead of each running alone on one. Every slice is checked
// before any is updated; an error names the slice. For Lamb, slice i writes updates[i] and adds
// its sums to param_sq[i] and update_sq[i]; phase 2 takes slice i's tensor norms.
Status cpu_optimizer_step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                               float grad_scale);
Status cpu_lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count, float grad_scale,
                            float *const *updates, double *param_sq, double *update_sq);
Status cpu_lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                            const float *const *updates, const double *param_norms, const double *update_norms);

// Sum of squares of data*scale in double precision, and whether any element is inf or nan
// (one pass: the overflow check and the norm together).
double cpu_sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, bool *nonfinite);

// dst[i] = cast(src[i]) between any two dtypes (vectorized, round-to-nearest-even).
void cpu_convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n);

// dst[i] += src[i] * scale, dst fp32 (gradient accumulation from a 16-bit micro-step buffer).
void cpu_accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale);

// Which instruction set the kernels chose: "avx512", "avx2" or "scalar" (DSRT_CPU_ISA may force
// a lower one for testing).
const char *cpu_optimizer_isa();

// Whether this CPU can run the kernels built for isa ("avx512", "avx2", "scalar").
bool cpu_optimizer_isa_available(const char *isa);
// Switch every later kernel call in the process to isa (tests and benchmarks compare ISAs this
// way). INVALID_ARGUMENT for an unknown name, UNSUPPORTED when the CPU lacks it.
Status cpu_optimizer_set_isa(const char *isa);

// The value state array state_index starts at (Adagrad's sum: initial_accumulator_value; all
// others 0).
float optimizer_state_initial_value(const OptimizerConfig &config, int state_index);

}  // namespace dsrt
