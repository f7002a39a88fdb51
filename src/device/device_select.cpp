// defines: the engine's device choice (DSRT_DEVICE, the local rank, the visible GPUs).
#include "device/device_select.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "device/cuda_device.h"
#include "device/device_features.h"

namespace dsrt {

Status device_choose(const char *spec, int local_rank, int gpus, bool built_with_cuda, DeviceChoice *out,
                     const char *origin) {
  DeviceChoice c;
  const std::string s = spec ? spec : "";
  if (s.empty()) {
    if (built_with_cuda && gpus > 0) {
      c.type = DSRT_DEVICE_CUDA;
      c.index = (local_rank < 0 ? 0 : local_rank) % gpus;
      c.reason = Format("CUDA device %d of %d visible (local rank %d)", c.index, gpus, local_rank);
    } else {
      c.reason = built_with_cuda ? "no CUDA device visible" : "built without CUDA";
    }
    *out = c;
    return Status::Ok();
  }
  if (s == "cpu") {
    c.reason = std::string(origin) + "=cpu";
    *out = c;
    return Status::Ok();
  }
  int index = -1;
  if (s == "cuda") {
    if (gpus > 0) index = (local_rank < 0 ? 0 : local_rank) % gpus;
  } else if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
             s.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::atoi(s.c_str() + 5);
  } else {
    return Error(DSRT_ERR_CONFIG, "%s is '%s'; use cpu, cuda (GPU local_rank %% visible GPUs) or cuda:N", origin,
                 s.c_str());
  }
  if (!built_with_cuda)
    return Error(DSRT_ERR_UNSUPPORTED,
                 "%s is '%s' but this dsrt was built without CUDA; rebuild with -DDSRT_CUDA=ON or use the CPU (cpu)",
                 origin, s.c_str());
  if (gpus <= 0)
    return Error(DSRT_ERR_DEVICE, "%s is '%s' but no CUDA device is visible (check CUDA_VISIBLE_DEVICES)", origin,
                 s.c_str());
  if (index < 0 || index >= gpus)
    return Error(DSRT_ERR_DEVICE, "%s is '%s' but only %d CUDA device(s) are visible (0..%d)", origin, s.c_str(),
                 gpus, gpus - 1);
  c.type = DSRT_DEVICE_CUDA;
  c.index = index;
  c.reason = std::string(origin) + "=" + s;
  *out = c;
  return Status::Ok();
}

int device_local_rank(int fallback) {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                           "MV2_COMM_WORLD_LOCAL_RANK"}) {
    const char *value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    errno = 0;
    char *end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (errno == 0 && end != value && *end == '\0' && v >= 0 && v < (1L << 20)) return static_cast<int>(v);
  }
  return fallback;
}

Status device_select(int local_rank, std::shared_ptr<Device> *out, DeviceChoice *choice) {
  return device_select_spec(nullptr, nullptr, local_rank, out, choice);
}

Status device_select_spec(const char *spec, const char *origin, int local_rank, std::shared_ptr<Device> *out,
                          DeviceChoice *choice) {
#ifdef DSRT_HAVE_CUDA
  const bool built_with_cuda = true;
#else
  const bool built_with_cuda = false;
#endif
  if (spec == nullptr) {
    spec = std::getenv("DSRT_DEVICE");
    origin = "DSRT_DEVICE";
  }
  DeviceChoice c;
  DSRT_RETURN_IF_ERROR(device_choose(spec, local_rank, device_cuda_count(), built_with_cuda, &c,
                                     origin != nullptr ? origin : "DSRT_DEVICE"));
  if (c.type == DSRT_DEVICE_CPU) {
    *out = device_create_cpu();
  } else {
    std::unique_ptr<Device> device;
    DSRT_RETURN_IF_ERROR(device_create_cuda(c.index, &device).with_context(c.reason));
    *out = std::move(device);
  }
  if (choice != nullptr) *choice = c;
  return Status::Ok();
}

}  // namespace dsrt
