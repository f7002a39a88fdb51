// device_select.h -- which device an engine runs on. DSRT_DEVICE overrides the choice:
//   "cpu"      the host as the device;
//   "cuda"     GPU local_rank % (visible GPUs);
//   "cuda:N"   GPU N.
// Unset or empty: CUDA (as "cuda") when the build has CUDA and a GPU is visible, else the CPU.
#pragma once

#include <memory>
#include <string>

#include "device/device.h"
#include "util/status.h"

namespace dsrt {

struct DeviceChoice {
  dsrt_device_type type = DSRT_DEVICE_CPU;
  int index = 0;
  std::string reason;  // for the log: "DSRT_DEVICE=cuda:1", "no CUDA device visible", ...
};

// Resolves the choice without creating anything. spec is DSRT_DEVICE's value (nullptr: unset),
// gpus the number of visible GPUs. CONFIG for a malformed value; DEVICE for "cuda" with no GPU
// or an index out of range; UNSUPPORTED for "cuda" in a build without CUDA.
// origin names where spec came from in messages ("DSRT_DEVICE", or an engine option).
Status device_choose(const char *spec, int local_rank, int gpus, bool built_with_cuda, DeviceChoice *out,
                     const char *origin = "DSRT_DEVICE");

// This process's local rank among the ranks on its host, from the launcher's environment
// (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, MV2_COMM_WORLD_LOCAL_RANK),
// else fallback.
int device_local_rank(int fallback);

// device_choose with the environment, then the device itself.
Status device_select(int local_rank, std::shared_ptr<Device> *out, DeviceChoice *choice);
// The same with the host's choice spec ("cpu", "cuda", "cuda:N") named by origin instead of the
// environment; spec nullptr falls back to DSRT_DEVICE.
Status device_select_spec(const char *spec, const char *origin, int local_rank, std::shared_ptr<Device> *out,
                          DeviceChoice *choice);

}  // namespace dsrt
