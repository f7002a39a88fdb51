// quant_avx2.cpp -- the block quantization kernels for AVX2 + FMA + F16C CPUs. Everything after the
// target switch has internal linkage; only the constant table is exported (see optim's
// kernels_avx2.cpp for the same pattern).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "quant/quant_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c")
#endif

namespace dsrt {
namespace quant_kernels {
namespace {

#include "optim/simd_avx2.inl"
#include "quant/quant_simd_avx2.inl"
#include "quant/quant_body.inl"

}  // namespace

extern const QuantKernelTable kQuantAvx2 = DSRT_QUANT_KERNEL_TABLE("avx2");

}  // namespace quant_kernels
}  // namespace dsrt

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#else
namespace dsrt {
namespace quant_kernels {
// Not an x86 build: the dispatcher never selects this table (its name is null).
extern const QuantKernelTable kQuantAvx2 = {nullptr, nullptr, nullptr};
}  // namespace quant_kernels
}  // namespace dsrt
#endif
