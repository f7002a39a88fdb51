#include "comm/comm_features.h"

#include "device/device_features.h"

namespace dsrt {
bool comm_has_mpi() {
#ifdef DSRT_HAVE_MPI
  return true;
#else
  return false;
#endif
}
bool comm_has_tcp() {
#ifdef DSRT_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool comm_has_nccl() {
#ifdef DSRT_HAVE_NCCL
  return device_has_cuda();
#else
  return false;
#endif
}
}  // namespace dsrt
