// quantize.h -- the CUDA block quantization kernels (ZeRO++ qwZ / qgZ): the GPU form of
// src/quant/quantize.h, same format and the same float operations, so the bytes written agree
// with the CPU kernels. No config: plain sizes, pointers in device memory, a stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

// src: n elements of dtype; q: (bits == 4 ? (n + 1) / 2 : n) bytes; scales: ceil(n / group)
// floats. bits 8 or 4 (4: group even). Enqueued on stream (a cudaStream_t). Returns
// DSRT_ERR_INVALID_ARGUMENT for a bad format, dtype or null buffer, DSRT_ERR_DEVICE when the
// launch fails.
Status cuda_quantize_blocks(const void *src, dsrt_dtype dtype, size_t n, int bits, size_t group, uint8_t *q,
                            float *scales, void *stream);
// dst: n elements of dtype, q * scale rounded once; with accumulate, dst is fp32 and gets dst +
// q * scale.
Status cuda_dequantize_blocks(const uint8_t *q, const float *scales, size_t n, int bits, size_t group, void *dst,
                              dsrt_dtype dtype, bool accumulate, void *stream);

}  // namespace dsrt
