// quantize.h -- block-wise symmetric int8 / int4 quantization on the CPU (ZeRO++ qwZ and qgZ).
//
// An array of n elements is cut into groups of `group` elements (the last may be shorter); each
// group stores one fp32 scale and its elements as signed integers of `bits` bits: q =
// round-to-nearest-even(x * 2^(bits-1) / max|x|) clamped to [-2^(bits-1), 2^(bits-1) - 1], read
// back as q * scale with scale = max|x| / 2^(bits-1) (DeepSpeed's symmetric quantizer,
// ops/csrc/includes/quantization_utils.h). The error of an element read back is at most scale / 2,
// except for the positive extreme of a group, which the clamp moves by up to one scale.
//
// 4-bit values are packed two per byte, element 2j in the high nibble (DeepSpeed's PackedInt4);
// a 4-bit group size must be even so every group starts on a byte. A group holding inf or NaN
// reads back as NaN (its scale is NaN), so an overflow check after dequantization still sees it.
//
// The kernels are AVX-512 / AVX2 / scalar builds of one body (quant_body.inl) producing identical
// bytes; the one that runs follows the optimizer kernels' choice (DSRT_CPU_ISA,
// cpu_optimizer_set_isa). Large arrays are split by groups over OpenMP threads. All functions
// may be called from any thread; they return DSRT_ERR_INVALID_ARGUMENT for a bad format, dtype
// or a null buffer, and never allocate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

struct QuantFormat {
  int bits = 8;        // 8 or 4
  size_t group = 2048;  // elements per group (even for 4 bits)
};

// Bytes of the quantized values of n elements, and the number of scales.
size_t quant_value_bytes(size_t n, int bits);
size_t quant_groups(size_t n, size_t group);
Status quant_check_format(const QuantFormat &format);

// src: n elements of dtype (fp32, fp16, bf16); q: quant_value_bytes(n) bytes; scales:
// quant_groups(n) floats.
Status quantize_blocks(const void *src, dsrt_dtype dtype, size_t n, const QuantFormat &format, uint8_t *q,
                       float *scales);
// dst: n elements of dtype, each q * scale rounded once to dtype.
Status dequantize_blocks(const uint8_t *q, const float *scales, size_t n, const QuantFormat &format, void *dst,
                         dsrt_dtype dtype);
// dst[i] += q[i] * scale in fp32 (the reduction of qgZ).
Status dequantize_add_blocks(const uint8_t *q, const float *scales, size_t n, const QuantFormat &format, float *dst);

// The group size DeepSpeed's quantized all-gather (qwZ, partition_parameters.py CUDAQuantizer)
// picks for a buffer of n elements: the group count starts at ceil(n / 8000), grows until 8 *
// groups divides n, then doubles while 16 * groups divides n and groups hold more than 8000.
// DeepSpeed refuses an n that is not a multiple of 8; dsrt then uses groups of 4096 (its
// "optimal 4k") with a shorter last group. Returns n / groups (at least 1).
size_t qwz_group_size(size_t n);

// The instruction set the kernels run with ("avx512", "avx2", "scalar").
const char *quant_kernels_isa();

}  // namespace dsrt
