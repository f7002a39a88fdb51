// quant_device.cpp -- see quant_device.h.
#include "quant/quant_device.h"

#include "util/half.h"

#ifdef DSRT_HAVE_CUDA
#include "cuda/fused_optimizers.h"
#include "cuda/quantize.h"
#endif

namespace dsrt {
namespace {

// OK when the CPU kernels apply; an error for a device this build cannot run kernels on.
Status check_device(const Device &device, const char *what, bool *cuda) {
  *cuda = false;
  if (device.type() == DSRT_DEVICE_CPU) return Status::Ok();
#ifdef DSRT_HAVE_CUDA
  if (device.type() == DSRT_DEVICE_CUDA) {
    *cuda = true;
    return Status::Ok();
  }
#endif
  return Error(DSRT_ERR_UNSUPPORTED, "%s: no quantization kernels for device %s in this build (built without CUDA)",
               what, device.name());
}

}  // namespace

Status device_quantize_blocks(Device &device, DeviceStream stream, const void *src, dsrt_dtype dtype, size_t n,
                              const QuantFormat &format, uint8_t *q, float *scales) {
  bool cuda = false;
  DSRT_RETURN_IF_ERROR(check_device(device, "device_quantize_blocks", &cuda));
#ifdef DSRT_HAVE_CUDA
  if (cuda) return cuda_quantize_blocks(src, dtype, n, format.bits, format.group, q, scales, stream);
#endif
  (void)stream;
  return quantize_blocks(src, dtype, n, format, q, scales);
}

Status device_dequantize_blocks(Device &device, DeviceStream stream, const uint8_t *q, const float *scales, size_t n,
                                const QuantFormat &format, void *dst, dsrt_dtype dtype) {
  bool cuda = false;
  DSRT_RETURN_IF_ERROR(check_device(device, "device_dequantize_blocks", &cuda));
#ifdef DSRT_HAVE_CUDA
  if (cuda) return cuda_dequantize_blocks(q, scales, n, format.bits, format.group, dst, dtype, false, stream);
#endif
  (void)stream;
  return dequantize_blocks(q, scales, n, format, dst, dtype);
}

Status device_dequantize_add_blocks(Device &device, DeviceStream stream, const uint8_t *q, const float *scales,
                                    size_t n, const QuantFormat &format, float *dst) {
  bool cuda = false;
  DSRT_RETURN_IF_ERROR(check_device(device, "device_dequantize_add_blocks", &cuda));
#ifdef DSRT_HAVE_CUDA
  if (cuda) return cuda_dequantize_blocks(q, scales, n, format.bits, format.group, dst, DSRT_F32, true, stream);
#endif
  (void)stream;
  return dequantize_add_blocks(q, scales, n, format, dst);
}

Status device_to_f32(Device &device, DeviceStream stream, const void *src, dsrt_dtype dtype, size_t n, float *dst) {
  bool cuda = false;
  DSRT_RETURN_IF_ERROR(check_device(device, "device_to_f32", &cuda));
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "device_to_f32: NULL buffer for %zu elements", n);
#ifdef DSRT_HAVE_CUDA
  if (cuda) return cuda_convert(src, dtype, dst, DSRT_F32, n, stream);
#endif
  (void)stream;
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src, dtype, i);
  return Status::Ok();
}

Status device_add_f32(Device &device, DeviceStream stream, const float *src, size_t n, float *dst) {
  bool cuda = false;
  DSRT_RETURN_IF_ERROR(check_device(device, "device_add_f32", &cuda));
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "device_add_f32: NULL buffer for %zu elements", n);
#ifdef DSRT_HAVE_CUDA
  if (cuda) return cuda_accumulate(dst, src, DSRT_F32, n, 1.0f, stream);
#endif
  (void)stream;
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  return Status::Ok();
}

}  // namespace dsrt
