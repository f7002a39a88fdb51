// quant_avx512.cpp -- the block quantization kernels for AVX-512 (F, BW, VL) CPUs. Everything after the
// target switch has internal linkage; only the constant table is exported (see optim's
// kernels_avx512.cpp for the same pattern).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "quant/quant_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif

namespace dsrt {
namespace quant_kernels {
namespace {

#include "optim/simd_avx512.inl"
#include "quant/quant_simd_avx512.inl"
#include "quant/quant_body.inl"

}  // namespace

extern const QuantKernelTable kQuantAvx512 = DSRT_QUANT_KERNEL_TABLE("avx512");

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
extern const QuantKernelTable kQuantAvx512 = {nullptr, nullptr, nullptr};
}  // namespace quant_kernels
}  // namespace dsrt
#endif
