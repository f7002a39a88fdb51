// mpi_scratch_dir.h -- one scratch folder that every rank of a multi-rank test sees (checkpoints):
// named after rank 0's pid under the build folder, made empty by rank 0.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "ckpt/file_io.h"
#include "comm/comm.h"

namespace dsrt {
namespace mpi_test {

inline std::string shared_dir(Comm &world, const std::string &name) {
  uint64_t pid = static_cast<uint64_t>(::getpid());
  EXPECT_TRUE(world.broadcast_bytes(&pid, sizeof pid, 0).ok());
  const std::string dir = std::string(DSRT_BINARY_DIR) + "/ckpt_scratch/mpi_" + name + "_" + std::to_string(pid);
  if (world.rank() == 0) {
    EXPECT_TRUE(remove_tree(dir).ok());
    EXPECT_TRUE(make_directories(dir).ok());
  }
  EXPECT_TRUE(world.barrier().ok());
  return dir;
}

// Removes it once every rank is done with it.
inline void remove_shared_dir(Comm &world, const std::string &dir) {
  EXPECT_TRUE(world.barrier().ok());
  if (world.rank() == 0) {
    EXPECT_TRUE(remove_tree(dir).ok());
  }
}

}  // namespace mpi_test
}  // namespace dsrt
