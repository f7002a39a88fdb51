// cuda_norm_order.h -- a host model of the exact summation order of cuda_sum_squares_many
// (cuda/norms.cu): per 65536-element chunk, 256 threads each add the squares of their elements in
// double with fused multiply-adds (8 consecutive elements per step with a stride of 2048 on the
// 16-byte path, then single elements with a stride of 256), the block adds the 256 thread sums
// in the fixed shuffle tree of block_sum_f64, and one block per tensor adds the chunk sums in
// fixed strides and a fixed shared-memory tree; the result is multiplied by scale twice.
// Double arithmetic is IEEE on both sides, so a GPU must give these bits exactly
// (test_cuda_kernels checks it); the CPU test test_cuda_norm_order checks that the order makes the
// norm of a partition cut anywhere agree with the whole to double rounding.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsrt.h"
#include "util/half.h"

namespace dsrt {
namespace cuda_norm_order {

constexpr size_t kChunk = 65536;  // cuda/multi_tensor.cuh
constexpr int kThreads = 256;     // cuda/cuda_common.cuh
constexpr int kVec = 8;

inline double element(const void *data, dsrt_dtype dtype, size_t i) {
  switch (dtype) {
    case DSRT_F16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const unsigned char *>(data) + i * 2, 2);
      return fp16_to_float(h);
    }
    case DSRT_BF16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const unsigned char *>(data) + i * 2, 2);
      return bf16_to_float(h);
    }
    default: {
      float f;
      std::memcpy(&f, static_cast<const unsigned char *>(data) + i * 4, 4);
      return f;
    }
  }
}

// The shuffle tree of 32 lanes (x += shfl_xor(x, offset) for offset 16, 8, 4, 2, 1): lane 0's value.
inline double warp_tree(double lanes[32]) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    double next[32];
    for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
    std::memcpy(lanes, next, sizeof next);
  }
  return lanes[0];
}

// block_sum_f64 over kThreads thread values.
inline double block_tree(const double *thread_values) {
  constexpr int warps = kThreads / 32;
  double warp_sums[warps];
  for (int w = 0; w < warps; ++w) {
    double lanes[32];
    std::memcpy(lanes, thread_values + w * 32, sizeof lanes);
    warp_sums[w] = warp_tree(lanes);
  }
  double lanes[32];
  for (int l = 0; l < 32; ++l) lanes[l] = l < warps ? warp_sums[l] : 0.0;
  return warp_tree(lanes);
}

// One chunk [begin, end) of a tensor; vector_path: the tensor's pointer is 16-byte aligned.
inline double chunk_sum(const void *data, dsrt_dtype dtype, size_t begin, size_t end, bool vector_path) {
  double acc[kThreads] = {};
  size_t scalar_from = begin;
  if (vector_path) {
    const size_t vec_end = begin + (end - begin) / kVec * kVec;
    for (int t = 0; t < kThreads; ++t) {
      for (size_t i = begin + static_cast<size_t>(t) * kVec; i < vec_end; i += static_cast<size_t>(kThreads) * kVec) {
        for (int k = 0; k < kVec; ++k) {
          const double y = element(data, dtype, i + k);
          acc[t] = std::fma(y, y, acc[t]);
        }
      }
    }
    scalar_from = vec_end;
  }
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = scalar_from + t; i < end; i += kThreads) {
      const double y = element(data, dtype, i);
      acc[t] = std::fma(y, y, acc[t]);
    }
  }
  return block_tree(acc);
}

// The reduction of one tensor's chunk sums (reduce_kernel).
inline double reduce_chunks(const std::vector<double> &partials) {
  double s[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    double a = 0.0;
    for (size_t k = t; k < partials.size(); k += kThreads) a += partials[k];
    s[t] = a;
  }
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    for (int t = 0; t < half; ++t) s[t] += s[t + half];
  }
  return s[0];
}

// What cuda_sum_squares_many writes for one tensor of n elements (vector_path: 16-byte aligned).
inline double sum_squares(const void *data, dsrt_dtype dtype, size_t n, float scale, bool vector_path) {
  if (n == 0) return 0.0;
  std::vector<double> partials;
  for (size_t begin = 0; begin < n; begin += kChunk) {
    partials.push_back(chunk_sum(data, dtype, begin, begin + kChunk < n ? begin + kChunk : n, vector_path));
  }
  const double s = static_cast<double>(scale);
  return reduce_chunks(partials) * s * s;
}

}  // namespace cuda_norm_order
}  // namespace dsrt
