#pragma once
namespace dsrt {
bool device_has_cuda();     // built with CUDA and at least one GPU is visible
int device_cuda_count();    // visible GPUs (0 without CUDA or when the runtime reports none)
}  // namespace dsrt
