// kernels_avx2.cpp -- the optimizer kernels for AVX2 + FMA + F16C CPUs. Everything after the
// target switch has internal linkage, so no AVX2 code can be merged into functions other files
// call on CPUs without it; only the constant table is exported.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "optim/kernel_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
// GCC 12 reports the intrinsics' deliberately undefined pass-through operands.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c")
#endif

namespace dsrt {
namespace optim_kernels {
namespace {

#include "optim/simd_avx2.inl"
#include "optim/kernels_body.inl"

}  // namespace

extern const KernelTable kAvx2Kernels = DSRT_OPTIM_KERNEL_TABLE("avx2");

}  // namespace optim_kernels
}  // namespace dsrt

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#else
namespace dsrt {
namespace optim_kernels {
// Not an x86 build: the dispatcher never selects this table (its name is null).
extern const KernelTable kAvx2Kernels = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
}  // namespace optim_kernels
}  // namespace dsrt
#endif
