#include "device/device_features.h"

#ifdef DSRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dsrt {
int device_cuda_count() {
#ifdef DSRT_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

bool device_has_cuda() { return device_cuda_count() > 0; }
}  // namespace dsrt
