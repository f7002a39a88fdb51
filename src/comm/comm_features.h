#pragma once
namespace dsrt {
bool comm_has_mpi();   // built with MPI
bool comm_has_nccl();  // built with NCCL and a GPU is visible
bool comm_has_tcp();   // built with Gloo (the tcp communicator)
}  // namespace dsrt
