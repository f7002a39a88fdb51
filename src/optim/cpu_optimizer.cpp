// cpu_optimizer.cpp -- the entry points of the CPU optimizer kernels: validate the request, fold
// the hyper-parameters of this step into per-step constants (in double, rounded to float once),
// and run the chosen ISA's kernel over chunks on the work pool (work_pool.h).
//
// Semantics (all checked against torch.optim or DeepSpeed in tests):
//   Adam/AdamW  DeepSpeed's cpu_adam: "Adam" runs AdamW unless adam_w_mode is false, in which case
//               weight decay is L2 (added to the gradient), as torch.optim.Adam.
//   SGD         torch.optim.SGD: the momentum buffer starts as a copy of the first gradient.
//   Adagrad     torch.optim.Adagrad (lr_decay 0): eps outside the square root, as DeepSpeed's
//               cpu_adagrad; the numerator includes weight decay (torch; DeepSpeed's omits it).
//   Lion        p = p*(1 - lr*wd) - lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g.
//   Lamb        DeepSpeed's FusedLamb: u = m/(sqrt(v)+eps) + wd*p, step size lr*sqrt(bc2)/bc1,
//               trust ratio clamp(|p|/|u|, min_coeff, max_coeff), 1 when either norm is 0.
#include <cmath>
#include <vector>

#include "optim/cpu_dispatch.h"
#include "optim/cpu_optimizer.h"
#include "optim/step_constants.h"

namespace dsrt {

using optim_kernels::KernelTable;
using optim_kernels::StepArgs;
using optim_kernels::StepFn;

OptimizerHyper make_optimizer_hyper(const OptimizerConfig &config, double lr, int64_t step) {
  OptimizerHyper h;
  h.type = config.type;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(config.beta1);
  h.beta2 = static_cast<float>(config.beta2);
  h.eps = static_cast<float>(config.eps);
  h.weight_decay = static_cast<float>(config.weight_decay);
  // DeepSpeed: type "AdamW" always decouples; "Adam" does unless adam_w_mode is false.
  h.adam_w_mode = config.type == OptimizerType::AdamW ? true : config.adam_w_mode;
  h.bias_correction = config.bias_correction;
  h.momentum = static_cast<float>(config.momentum);
  h.dampening = static_cast<float>(config.dampening);
  h.nesterov = config.nesterov;
  h.max_coeff = static_cast<float>(config.max_coeff);
  h.min_coeff = static_cast<float>(config.min_coeff);
  h.step = step;
  return h;
}

int optimizer_state_count(const OptimizerConfig &config) {
  switch (config.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW:
    case OptimizerType::Lamb:
    case OptimizerType::OneBitAdam:
    case OptimizerType::ZeroOneAdam:
    case OptimizerType::OneBitLamb: return 2;
    case OptimizerType::SGD: return config.momentum != 0.0 ? 1 : 0;
    case OptimizerType::Adagrad:
    case OptimizerType::Lion: return 1;
  }
  return 0;
}

float optimizer_state_initial_value(const OptimizerConfig &config, int state_index) {
  if (config.type == OptimizerType::Adagrad && state_index == 0) {
    return static_cast<float>(config.initial_accumulator_value);
  }
  return 0.0f;
}

namespace {

const char *type_name(OptimizerType type) { return optimizer_type_name(type); }

bool valid_dtype(dsrt_dtype dtype) { return dtype == DSRT_F32 || dtype == DSRT_F16 || dtype == DSRT_BF16; }

// Checks shared by every step entry point; fills the pointer and dtype part of args.
Status check_slice(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice, bool needs_grad,
                   StepArgs *args) {
  if ((slice.master == nullptr) == (slice.master_bf16 == nullptr))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: give exactly one master pointer (fp32 master or master_bf16); %s", what,
                 slice.master ? "both are set" : "both are NULL");
  if ((slice.state0 && slice.state0_bf16) || (slice.state1 && slice.state1_bf16))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: a state array is given both in fp32 and in bf16; give one", what);
  if (needs_grad && slice.grad == nullptr) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the gradient pointer is NULL", what);
  }
  if (needs_grad && !valid_dtype(slice.grad_dtype)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: gradient dtype %d is not fp32, fp16 or bf16", what,
                 static_cast<int>(slice.grad_dtype));
  }
  if (slice.working != nullptr && !valid_dtype(slice.working_dtype)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: working-copy dtype %d is not fp32, fp16 or bf16", what,
                 static_cast<int>(slice.working_dtype));
  }
  if (hyper.step < 1) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: step is %lld; it counts updates including this one, so it starts at 1",
                 what, static_cast<long long>(hyper.step));
  }
  if (!std::isfinite(hyper.lr)) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the learning rate is not finite", what);
  args->master = slice.master;
  args->grad = slice.grad;
  args->grad_dtype = slice.grad_dtype;
  args->state0 = slice.state0;
  args->state1 = slice.state1;
  args->working = slice.working;
  args->working_kind = slice.working ? static_cast<int>(slice.working_dtype) : optim_kernels::kWorkNone;
  args->lr = hyper.lr;
  return Status::Ok();
}

Status require_states(const OptimizerHyper &hyper, const OptimizerSlice &slice, int count) {
  const bool has0 = slice.state0 || slice.state0_bf16, has1 = slice.state1 || slice.state1_bf16;
  if ((count >= 1 && !has0) || (count >= 2 && !has1)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s needs %d state array%s (state0%s) and %s is NULL",
                 type_name(hyper.type), count, count > 1 ? "s" : "", count > 1 ? ", state1" : "",
                 !has0 ? "state0" : "state1");
  }
  return Status::Ok();
}

Status check_grad_scale(const char *what, float grad_scale) {
  if (!std::isfinite(grad_scale)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: grad_scale is %g; skip the step on overflow instead", what,
                 static_cast<double>(grad_scale));
  }
  return Status::Ok();
}

// The bf16-stored arrays of one slice (OptimizerSlice's master_bf16 / state0_bf16 / state1_bf16).
struct Bf16Storage {
  uint16_t *master = nullptr, *state0 = nullptr, *state1 = nullptr;
  bool any() const { return master || state0 || state1; }
};

Bf16Storage bf16_storage(const OptimizerSlice &slice, bool with_states) {
  Bf16Storage b;
  b.master = slice.master_bf16;
  if (with_states) {
    b.state0 = slice.state0_bf16;
    b.state1 = slice.state1_bf16;
  }
  return b;
}

// [begin, end) of a slice whose master or states are bf16: block by block, the bf16 arrays are
// widened into fp32 stack buffers, the fp32 kernel runs on them (the other arrays at their own
// addresses), and the results are rounded back to bf16 (nearest, ties to even). The working copy
// the kernel writes is cast from the same fp32 value, so it equals the rounded master.
void run_piece_bf16(StepFn fn, const StepArgs &args, const Bf16Storage &st, size_t begin, size_t end, double *sums) {
  constexpr size_t kBlock = 256;
  alignas(64) float p[kBlock], s0[kBlock], s1[kBlock];
  const KernelTable &k = optim_kernels::active_kernels();
  const size_t grad_size = args.grad_dtype == DSRT_F32 ? 4 : 2;
  const size_t work_size = args.working_kind == DSRT_F32 ? 4 : 2;
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t len = end - b < kBlock ? end - b : kBlock;
    StepArgs a = args;
    auto widen = [&](uint16_t *src, float *buf, float *fp32_base) -> float * {
      if (src == nullptr) return fp32_base ? fp32_base + b : nullptr;
      k.convert(src + b, DSRT_BF16, buf, DSRT_F32, 0, len);
      return buf;
    };
    a.master = widen(st.master, p, args.master);
    a.state0 = widen(st.state0, s0, args.state0);
    a.state1 = widen(st.state1, s1, args.state1);
    if (args.grad) a.grad = static_cast<const char *>(args.grad) + b * grad_size;
    if (args.working) a.working = static_cast<char *>(args.working) + b * work_size;
    if (args.update_out) a.update_out = args.update_out + b;
    if (args.update_in) a.update_in = args.update_in + b;
    fn(a, 0, len, sums);
    if (st.master) k.convert(p, DSRT_F32, st.master + b, DSRT_BF16, 0, len);
    if (st.state0) k.convert(s0, DSRT_F32, st.state0 + b, DSRT_BF16, 0, len);
    if (st.state1) k.convert(s1, DSRT_F32, st.state1 + b, DSRT_BF16, 0, len);
  }
}

// Runs fn over every slice in one batch; sums (2 per slice, or null) receive Lamb's partial sums
// added in piece order, so the result does not depend on which thread ran what. storage (or null):
// per slice, its bf16-stored arrays.
void run_batch(StepFn fn, const std::vector<StepArgs> &args, const std::vector<size_t> &sizes, double *sums,
               const std::vector<Bf16Storage> *storage = nullptr) {
  const optim_kernels::BatchPlan plan = optim_kernels::plan_batch(sizes);
  std::vector<double> partial(plan.pieces.size() * 2, 0.0);
  optim_kernels::for_each_piece(plan, [&](const optim_kernels::Piece &piece, size_t index) {
    if (storage && (*storage)[piece.slice].any())
      run_piece_bf16(fn, args[piece.slice], (*storage)[piece.slice], piece.begin, piece.end, &partial[index * 2]);
    else
      fn(args[piece.slice], piece.begin, piece.end, &partial[index * 2]);
  });
  if (sums) {
    for (size_t i = 0; i < plan.pieces.size(); ++i) {
      sums[plan.pieces[i].slice * 2] += partial[i * 2];
      sums[plan.pieces[i].slice * 2 + 1] += partial[i * 2 + 1];
    }
  }
}

// Copies the shared per-step constants (step_constants.h) into a kernel's arguments.
void apply_constants(const StepConstants &c, StepArgs *args) {
  args->grad_scale = c.grad_scale;
  args->beta1 = c.beta1;
  args->beta2 = c.beta2;
  args->one_minus_beta1 = c.one_minus_beta1;
  args->one_minus_beta2 = c.one_minus_beta2;
  args->eps = c.eps;
  args->l2_decay = c.l2_decay;
  args->decoupled_decay = c.decoupled_decay;
  args->keep_factor = c.keep_factor;
  args->step_size = c.step_size;
  args->inv_sqrt_bc2 = c.inv_sqrt_bc2;
  args->momentum = c.momentum;
  args->one_minus_dampening = c.one_minus_dampening;
  args->nesterov = c.nesterov;
  args->first_step = c.first_step;
}

// Validates one slice of an Adam/AdamW/SGD/Adagrad/Lion step and fills its kernel arguments.
Status prepare_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale, StepArgs *out,
                    StepFn *fn_out) {
  const char *what = type_name(hyper.type);
  StepArgs args;
  DSRT_RETURN_IF_ERROR(check_slice(what, hyper, slice, true, &args));
  DSRT_RETURN_IF_ERROR(check_grad_scale(what, grad_scale));
  if (hyper.type == OptimizerType::Lamb)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "Lamb needs whole-tensor norms: call cpu_lamb_phase1, all-reduce the norms, then cpu_lamb_phase2");
  StepConstants c;
  DSRT_RETURN_IF_ERROR(fold_step_constants(what, hyper, grad_scale, &c));
  DSRT_RETURN_IF_ERROR(require_states(hyper, slice, c.states));
  apply_constants(c, &args);
  const KernelTable &kernels = optim_kernels::active_kernels();
  StepFn fn = nullptr;
  switch (hyper.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: fn = kernels.adam; break;
    case OptimizerType::SGD: fn = kernels.sgd; break;
    case OptimizerType::Adagrad: fn = kernels.adagrad; break;
    case OptimizerType::Lion: fn = kernels.lion; break;
    default: break;
  }
  if (fn == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "unknown optimizer type %d", static_cast<int>(hyper.type));
  *out = args;
  *fn_out = fn;
  return Status::Ok();
}

Status prepare_lamb1(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale, float *update,
                     StepArgs *out) {
  StepArgs args;
  DSRT_RETURN_IF_ERROR(check_slice("Lamb phase 1", hyper, slice, true, &args));
  DSRT_RETURN_IF_ERROR(check_grad_scale("Lamb phase 1", grad_scale));
  OptimizerHyper lamb = hyper;
  lamb.type = OptimizerType::Lamb;
  DSRT_RETURN_IF_ERROR(require_states(lamb, slice, 2));
  if (update == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 1: the update buffer is NULL");
  if (slice.working != nullptr && update == slice.working && slice.working_dtype != DSRT_F32) {
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "Lamb phase 1: the update buffer may share the working copy's memory only when that copy is fp32");
  }
  StepConstants c;
  DSRT_RETURN_IF_ERROR(fold_lamb_phase1_constants("Lamb phase 1", hyper, grad_scale, &c));
  apply_constants(c, &args);
  args.working = nullptr;
  args.working_kind = optim_kernels::kWorkNone;
  args.update_out = update;
  *out = args;
  return Status::Ok();
}

Status prepare_lamb2(const OptimizerHyper &hyper, const OptimizerSlice &slice, const float *update, double param_norm,
                     double update_norm, StepArgs *out) {
  StepArgs args;
  DSRT_RETURN_IF_ERROR(check_slice("Lamb phase 2", hyper, slice, false, &args));
  if (update == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 2: the update buffer is NULL");
  if (!(param_norm >= 0.0) || !(update_norm >= 0.0)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 2: norms must be >= 0 (got %g and %g)", param_norm,
                 update_norm);
  }
  args.grad = nullptr;
  args.update_in = update;
  args.state0 = nullptr;  // phase 2 reads only the master and the update
  args.state1 = nullptr;
  args.step_size = static_cast<float>(lamb_step_size(hyper) * lamb_trust_ratio(hyper, param_norm, update_norm));
  *out = args;
  return Status::Ok();
}

Status check_batch(const char *what, const void *slices, size_t count) {
  if (count > 0 && slices == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: slices is NULL", what);
  return Status::Ok();
}

Status in_slice(size_t i, size_t count, Status status) {
  if (status.ok() || count == 1) return status;
  return status.with_context(Format("slice %zu", i));
}

}  // namespace

Status cpu_optimizer_step(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale) {
  return cpu_optimizer_step_many(hyper, &slice, 1, grad_scale);
}

Status cpu_optimizer_step_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                               float grad_scale) {
  DSRT_RETURN_IF_ERROR(check_batch(type_name(hyper.type), slices, count));
  std::vector<StepArgs> args;
  std::vector<size_t> sizes;
  std::vector<Bf16Storage> storage;
  StepFn fn = nullptr;
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n == 0) continue;
    StepArgs a;
    DSRT_RETURN_IF_ERROR(in_slice(i, count, prepare_step(hyper, slices[i], grad_scale, &a, &fn)));
    args.push_back(a);
    sizes.push_back(slices[i].n);
    storage.push_back(bf16_storage(slices[i], true));
  }
  if (!args.empty()) run_batch(fn, args, sizes, nullptr, &storage);
  return Status::Ok();
}

Status cpu_lamb_phase1(const OptimizerHyper &hyper, const OptimizerSlice &slice, float grad_scale, float *update,
                       double *param_sq, double *update_sq) {
  return cpu_lamb_phase1_many(hyper, &slice, 1, grad_scale, &update, param_sq, update_sq);
}

Status cpu_lamb_phase1_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count, float grad_scale,
                            float *const *updates, double *param_sq, double *update_sq) {
  DSRT_RETURN_IF_ERROR(check_batch("Lamb phase 1", slices, count));
  if (count > 0 && (updates == nullptr || param_sq == nullptr || update_sq == nullptr)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 1: the update buffers and both norm outputs are required");
  }
  std::vector<StepArgs> args;
  std::vector<size_t> sizes, index;
  std::vector<Bf16Storage> storage;
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n == 0) continue;
    StepArgs a;
    DSRT_RETURN_IF_ERROR(in_slice(i, count, prepare_lamb1(hyper, slices[i], grad_scale, updates[i], &a)));
    args.push_back(a);
    sizes.push_back(slices[i].n);
    index.push_back(i);
    // Phase 1 reads the master without changing it: its bf16 round trip is exact.
    storage.push_back(bf16_storage(slices[i], true));
  }
  if (args.empty()) return Status::Ok();
  std::vector<double> sums(args.size() * 2, 0.0);
  run_batch(optim_kernels::active_kernels().lamb_phase1, args, sizes, sums.data(), &storage);
  for (size_t k = 0; k < index.size(); ++k) {
    param_sq[index[k]] += sums[k * 2];
    update_sq[index[k]] += sums[k * 2 + 1];
  }
  return Status::Ok();
}

Status cpu_lamb_phase2(const OptimizerHyper &hyper, const OptimizerSlice &slice, const float *update,
                       double param_norm, double update_norm) {
  return cpu_lamb_phase2_many(hyper, &slice, 1, &update, &param_norm, &update_norm);
}

Status cpu_lamb_phase2_many(const OptimizerHyper &hyper, const OptimizerSlice *slices, size_t count,
                            const float *const *updates, const double *param_norms, const double *update_norms) {
  DSRT_RETURN_IF_ERROR(check_batch("Lamb phase 2", slices, count));
  if (count > 0 && (updates == nullptr || param_norms == nullptr || update_norms == nullptr)) {
    return Error(DSRT_ERR_INVALID_ARGUMENT, "Lamb phase 2: the update buffers and both norms are required");
  }
  std::vector<StepArgs> args;
  std::vector<size_t> sizes;
  std::vector<Bf16Storage> storage;
  for (size_t i = 0; i < count; ++i) {
    if (slices[i].n == 0) continue;
    StepArgs a;
    DSRT_RETURN_IF_ERROR(
        in_slice(i, count, prepare_lamb2(hyper, slices[i], updates[i], param_norms[i], update_norms[i], &a)));
    args.push_back(a);
    sizes.push_back(slices[i].n);
    storage.push_back(bf16_storage(slices[i], false));  // phase 2 reads only the master and the update
  }
  if (!args.empty()) run_batch(optim_kernels::active_kernels().lamb_phase2, args, sizes, nullptr, &storage);
  return Status::Ok();
}

double cpu_sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, bool *nonfinite) {
  if (n == 0 || data == nullptr || !valid_dtype(dtype)) {
    if (nonfinite) *nonfinite = false;
    return 0.0;
  }
  const KernelTable &kernels = optim_kernels::active_kernels();
  const optim_kernels::ChunkPlan plan = optim_kernels::plan_chunks(n);
  std::vector<double> partial(plan.count, 0.0);
  optim_kernels::for_each_chunk(n, plan, [&](size_t begin, size_t end, size_t chunk) {
    partial[chunk] = kernels.sum_squares(data, dtype, begin, end);
  });
  return optim_kernels::finish_sum_squares(partial, scale, nonfinite);
}

void cpu_convert(const void *src, dsrt_dtype src_dtype, void *dst, dsrt_dtype dst_dtype, size_t n) {
  if (n == 0 || src == nullptr || dst == nullptr || !valid_dtype(src_dtype) || !valid_dtype(dst_dtype)) return;
  const KernelTable &kernels = optim_kernels::active_kernels();
  optim_kernels::for_each_chunk(n, optim_kernels::plan_chunks(n), [&](size_t begin, size_t end, size_t) {
    kernels.convert(src, src_dtype, dst, dst_dtype, begin, end);
  });
}

void cpu_accumulate(float *dst, const void *src, dsrt_dtype src_dtype, size_t n, float scale) {
  if (n == 0 || src == nullptr || dst == nullptr || !valid_dtype(src_dtype)) return;
  const KernelTable &kernels = optim_kernels::active_kernels();
  optim_kernels::for_each_chunk(n, optim_kernels::plan_chunks(n), [&](size_t begin, size_t end, size_t) {
    kernels.accumulate(dst, src, src_dtype, begin, end, scale);
  });
}

}  // namespace dsrt
