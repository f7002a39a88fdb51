// kernel_table.h -- what each instruction-set build of the optimizer kernels exports: one table of
// range functions. cpu_optimizer.cpp picks a table at run time and splits ranges over the work
// pool's threads (work_pool.h); the kernels themselves never start threads.
//
// This header holds only plain structs (no inline functions) because the per-ISA translation units
// include it before switching the compiler's target: nothing here may be compiled for AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"

namespace dsrt {
namespace optim_kernels {

// The working copy written after the update: none, or one of the dtypes.
enum WorkingKind : int { kWorkNone = -1, kWorkF32 = DSRT_F32, kWorkF16 = DSRT_F16, kWorkBF16 = DSRT_BF16 };

// Everything one step kernel reads: pointers, dtypes, and per-step constants already folded in
// double precision and rounded to float once, so every ISA computes from the same numbers.
struct StepArgs {
  float *master = nullptr;
  const void *grad = nullptr;
  int grad_dtype = DSRT_F32;
  float *state0 = nullptr;
  float *state1 = nullptr;
  void *working = nullptr;
  int working_kind = kWorkNone;
  float *update_out = nullptr;       // Lamb phase 1
  const float *update_in = nullptr;  // Lamb phase 2

  float grad_scale = 1.0f;
  float lr = 0.0f;
  float beta1 = 0.0f, beta2 = 0.0f;
  float one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f;
  float eps = 0.0f;
  float l2_decay = 0.0f;         // added to the gradient as l2_decay * p (Adam L2 mode, SGD, Adagrad)
  float decoupled_decay = 0.0f;  // AdamW / Lion / Lamb: see each kernel
  float keep_factor = 1.0f;      // AdamW / Lion: p *= keep_factor (1 - lr * wd) before the update
  float step_size = 0.0f;        // Adam: lr / bc1; Lamb phase 2: step size times trust ratio
  float inv_sqrt_bc2 = 1.0f;     // Adam: 1 / sqrt(1 - beta2^t)
  float momentum = 0.0f;         // SGD
  float one_minus_dampening = 1.0f;
  bool nesterov = false;
  bool first_step = false;  // SGD: the momentum buffer starts as a copy of the gradient
};

// [begin, end) of a step; sums (Lamb phase 1 only) receives the sum of p^2 and of update^2.
using StepFn = void (*)(const StepArgs &args, size_t begin, size_t end, double *sums);

struct KernelTable {
  const char *name;
  StepFn adam;
  StepFn sgd;
  StepFn adagrad;
  StepFn lion;
  StepFn lamb_phase1;
  StepFn lamb_phase2;
  // Sum of x^2 in double over [begin, end); inf or nan anywhere make the result non-finite.
  double (*sum_squares)(const void *data, int dtype, size_t begin, size_t end);
  void (*convert)(const void *src, int src_dtype, void *dst, int dst_dtype, size_t begin, size_t end);
  void (*accumulate)(float *dst, const void *src, int src_dtype, size_t begin, size_t end, float scale);
  // sum_squares over one fp32 chunk, resumable (optim/sum_squares_fold.h): state
  // (kSumSquaresStateDoubles, zeroed to start) takes the squares of positions [begin, end) of the
  // chunk (length elements from chunk) into the accumulator lanes sum_squares gives them. When
  // ranges are added in increasing position order and every nonzero element is among them,
  // sum_squares_total(state) is sum_squares(chunk, DSRT_F32, 0, length) bit for bit.
  void (*sum_squares_part)(double *state, const float *chunk, size_t length, size_t begin, size_t end);
  double (*sum_squares_total)(const double *state);
};

// The doubles a sum_squares_part state holds (two accumulators of 16 lanes on AVX-512).
constexpr size_t kSumSquaresStateDoubles = 32;

// Constant-initialized tables (no code runs to build them, so merely linking the AVX-512 table is
// safe on any CPU; only calling through it requires the instruction set).
extern const KernelTable kScalarKernels;
extern const KernelTable kAvx2Kernels;
extern const KernelTable kAvx512Kernels;

}  // namespace optim_kernels
}  // namespace dsrt
