// quant_scalar.cpp -- the block quantization kernels one element at a time: the fallback and the
// reference the vector builds must match byte for byte.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "quant/quant_table.h"
#include "util/half.h"

namespace dsrt {
namespace quant_kernels {
namespace {

#include "optim/simd_scalar.inl"
#include "quant/quant_simd_scalar.inl"
#include "quant/quant_body.inl"

}  // namespace

extern const QuantKernelTable kQuantScalar = DSRT_QUANT_KERNEL_TABLE("scalar");

}  // namespace quant_kernels
}  // namespace dsrt
