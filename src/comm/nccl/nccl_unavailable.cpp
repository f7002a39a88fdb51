// defines: the NCCL entry points of a build without NCCL (see nccl_comm.h); nccl_comm.cpp defines
// them when the build has NCCL.
#include "comm/nccl/nccl_comm.h"

#ifndef DSRT_HAVE_NCCL

namespace dsrt {

Status nccl_unique_id(void *) {
  return Error(DSRT_ERR_UNSUPPORTED,
               "NCCL communicator not available in this build: use dsrt_comm_create_from_env under mpirun/srun "
               "(MPI), or a build of dsrt with CUDA and NCCL (-DDSRT_CUDA=ON where nccl.h and libnccl are installed)");
}

Status nccl_comm_create(const void *, int, int, int, std::shared_ptr<Comm> *) {
  return Error(DSRT_ERR_UNSUPPORTED,
               "NCCL communicator not available in this build: use dsrt_comm_create_from_env under mpirun/srun "
               "(MPI), or a build of dsrt with CUDA and NCCL (-DDSRT_CUDA=ON where nccl.h and libnccl are installed)");
}

}  // namespace dsrt

#endif
