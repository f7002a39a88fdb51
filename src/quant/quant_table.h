// quant_table.h -- what each instruction-set build of the block quantization kernels exports: one
// table of group-range functions. quantize.cpp picks the table whose name matches the optimizer
// kernels' active one (DSRT_CPU_ISA and cpu_optimizer_set_isa switch both) and splits the groups
// over OpenMP threads; the kernels never start threads.
//
// Plain structs only: the per-ISA translation units include this before switching the target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"

namespace dsrt {
namespace quant_kernels {

// One call covers groups [g_begin, g_end) of an array of n elements cut into groups of `group`
// elements (the last group may be shorter). q holds the quantized array: one byte per element
// for 8 bits, or two elements per byte for 4 bits (element 2j in the high nibble, 2j + 1 in the
// low one, DeepSpeed's PackedInt4 order); scales holds one fp32 per group.
struct QuantizeArgs {
  const void *src = nullptr;
  int src_dtype = 0;
  size_t n = 0;
  size_t group = 0;
  int bits = 8;
  uint8_t *q = nullptr;
  float *scales = nullptr;
};
struct DequantizeArgs {
  const uint8_t *q = nullptr;
  const float *scales = nullptr;
  size_t n = 0;
  size_t group = 0;
  int bits = 8;
  void *dst = nullptr;
  int dst_dtype = 0;
  bool accumulate = false;  // dst is fp32 and receives dst + value instead of value
};

using QuantizeFn = void (*)(const QuantizeArgs &args, size_t g_begin, size_t g_end);
using DequantizeFn = void (*)(const DequantizeArgs &args, size_t g_begin, size_t g_end);

struct QuantKernelTable {
  const char *name;
  QuantizeFn quantize;
  DequantizeFn dequantize;
};

extern const QuantKernelTable kQuantScalar;
extern const QuantKernelTable kQuantAvx2;
extern const QuantKernelTable kQuantAvx512;

}  // namespace quant_kernels
}  // namespace dsrt
