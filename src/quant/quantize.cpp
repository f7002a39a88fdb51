// quantize.cpp -- see quantize.h: argument checks, the instruction-set table, OpenMP over groups.
#include "quant/quantize.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "optim/cpu_optimizer.h"
#include "quant/quant_table.h"

namespace dsrt {
namespace {

using quant_kernels::QuantKernelTable;

// The table named like the optimizer kernels' active one (the optimizer layer owns the CPU check
// and DSRT_CPU_ISA); a name with no quantization build falls back to scalar.
const QuantKernelTable &active_table() {
  const char *isa = cpu_optimizer_isa();
  for (const QuantKernelTable *t : {&quant_kernels::kQuantAvx512, &quant_kernels::kQuantAvx2}) {
    if (t->name != nullptr && isa != nullptr && std::strcmp(t->name, isa) == 0) return *t;
  }
  return quant_kernels::kQuantScalar;
}

// Below this many elements the groups run on the calling thread (a parallel region costs more).
constexpr size_t kParallelMinElements = 1 << 15;

template <class Fn>
void for_groups(size_t n, size_t groups, size_t group, Fn &&fn) {
  if (n < kParallelMinElements || omp_in_parallel() || omp_get_max_threads() <= 1) {
    fn(0, groups);
    return;
  }
  // Units of whole groups of about 16k elements, taken dynamically.
  const size_t per_unit = std::max<size_t>(1, (size_t{1} << 14) / group);
  const long long units = static_cast<long long>((groups + per_unit - 1) / per_unit);
#pragma omp parallel for schedule(dynamic, 1)
  for (long long u = 0; u < units; ++u) {
    const size_t begin = static_cast<size_t>(u) * per_unit;
    fn(begin, std::min(groups, begin + per_unit));
  }
}

bool float_dtype(dsrt_dtype d) { return d == DSRT_F32 || d == DSRT_F16 || d == DSRT_BF16; }

}  // namespace

size_t quant_value_bytes(size_t n, int bits) { return bits == 4 ? (n + 1) / 2 : n; }

size_t quant_groups(size_t n, size_t group) { return group == 0 ? 0 : (n + group - 1) / group; }

Status quant_check_format(const QuantFormat &format) {
  if (format.bits != 8 && format.bits != 4)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "quantization: %d bits is not supported; use 8 or 4", format.bits);
  if (format.group == 0) return Error(DSRT_ERR_INVALID_ARGUMENT, "quantization: the group size is 0; use at least 1");
  if (format.bits == 4 && format.group % 2 != 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "quantization: a 4-bit group size must be even (two values per byte), got %zu", format.group);
  return Status::Ok();
}

Status quantize_blocks(const void *src, dsrt_dtype dtype, size_t n, const QuantFormat &format, uint8_t *q,
                       float *scales) {
  DSRT_RETURN_IF_ERROR(quant_check_format(format));
  if (!float_dtype(dtype))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "quantize: dtype %d is not fp32, fp16 or bf16", static_cast<int>(dtype));
  if (n == 0) return Status::Ok();
  if (src == nullptr || q == nullptr || scales == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "quantize: NULL buffer for %zu elements", n);
  quant_kernels::QuantizeArgs args;
  args.src = src;
  args.src_dtype = dtype;
  args.n = n;
  args.group = format.group;
  args.bits = format.bits;
  args.q = q;
  args.scales = scales;
  const QuantKernelTable &table = active_table();
  for_groups(n, quant_groups(n, format.group), format.group,
             [&](size_t b, size_t e) { table.quantize(args, b, e); });
  return Status::Ok();
}

namespace {
Status dequantize_common(const uint8_t *q, const float *scales, size_t n, const QuantFormat &format, void *dst,
                         dsrt_dtype dtype, bool accumulate) {
  DSRT_RETURN_IF_ERROR(quant_check_format(format));
  if (!float_dtype(dtype))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "dequantize: dtype %d is not fp32, fp16 or bf16", static_cast<int>(dtype));
  if (n == 0) return Status::Ok();
  if (q == nullptr || scales == nullptr || dst == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "dequantize: NULL buffer for %zu elements", n);
  quant_kernels::DequantizeArgs args;
  args.q = q;
  args.scales = scales;
  args.n = n;
  args.group = format.group;
  args.bits = format.bits;
  args.dst = dst;
  args.dst_dtype = dtype;
  args.accumulate = accumulate;
  const QuantKernelTable &table = active_table();
  for_groups(n, quant_groups(n, format.group), format.group,
             [&](size_t b, size_t e) { table.dequantize(args, b, e); });
  return Status::Ok();
}
}  // namespace

Status dequantize_blocks(const uint8_t *q, const float *scales, size_t n, const QuantFormat &format, void *dst,
                         dsrt_dtype dtype) {
  return dequantize_common(q, scales, n, format, dst, dtype, false);
}

Status dequantize_add_blocks(const uint8_t *q, const float *scales, size_t n, const QuantFormat &format, float *dst) {
  return dequantize_common(q, scales, n, format, dst, DSRT_F32, true);
}

size_t qwz_group_size(size_t n) {
  constexpr size_t kTarget = 8000;
  if (n == 0) return 1;
  if (n % 8 != 0) return std::min<size_t>(n, 4096);
  size_t groups = (n + kTarget - 1) / kTarget;
  while (groups < n && n % (8 * groups) != 0) ++groups;
  while (n % (16 * groups) == 0 && n / groups > kTarget) groups *= 2;
  if (n % (8 * groups) != 0) return std::min<size_t>(n, 4096);
  return n / groups;
}

const char *quant_kernels_isa() { return active_table().name; }

}  // namespace dsrt
