// quant_device.h -- the block quantization of quantize.h on the memory of a device: the CPU
// kernels (quantize.h) for the CPU device, the CUDA launchers (cuda/quantize.h, cuda_convert,
// cuda_accumulate) enqueued on stream for a CUDA device. One place chooses the kernels by the
// device, so the qwZ / qgZ code above is the same for both. Every pointer is in the device's
// memory. On the CPU device the work is done on return; on a CUDA device it is enqueued on stream
// (synchronize the stream before the host or another stream reads the result). UNSUPPORTED for a
// CUDA device in a build without CUDA; the argument checks of quantize.h otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "dsrt.h"
#include "quant/quantize.h"
#include "util/status.h"

namespace dsrt {

Status device_quantize_blocks(Device &device, DeviceStream stream, const void *src, dsrt_dtype dtype, size_t n,
                              const QuantFormat &format, uint8_t *q, float *scales);
// dst: n elements of dtype, each q * scale rounded once.
Status device_dequantize_blocks(Device &device, DeviceStream stream, const uint8_t *q, const float *scales, size_t n,
                                const QuantFormat &format, void *dst, dsrt_dtype dtype);
// dst[i] += q[i] * scale in fp32.
Status device_dequantize_add_blocks(Device &device, DeviceStream stream, const uint8_t *q, const float *scales,
                                    size_t n, const QuantFormat &format, float *dst);
// dst[i] = src[i] as fp32 (src of dtype fp32, fp16 or bf16).
Status device_to_f32(Device &device, DeviceStream stream, const void *src, dsrt_dtype dtype, size_t n, float *dst);
// dst[i] += src[i] in fp32.
Status device_add_f32(Device &device, DeviceStream stream, const float *src, size_t n, float *dst);

}  // namespace dsrt
