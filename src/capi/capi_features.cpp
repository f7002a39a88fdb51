// defines: has_feature (what dsrt_has_feature answers, asking each layer) and the CPU feature
// probes; dup_for_caller.
#include "capi/features.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "comm/comm_features.h"
#include "device/device_features.h"
#include "aio/aio_features.h"

namespace dsrt {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool has_feature(const std::string &name) {
  if (name == "avx512") return cpu_has_avx512();
  if (name == "avx2") return cpu_has_avx2();
  if (name == "mpi") return comm_has_mpi();
  if (name == "nccl") return comm_has_nccl();
  if (name == "tcp") return comm_has_tcp();
  if (name == "cuda") return device_has_cuda();
  if (name == "io_uring") return aio_has_io_uring();
  return false;
}

char *dup_for_caller(const std::string &text) {
  char *out = static_cast<char *>(std::malloc(text.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

}  // namespace dsrt
