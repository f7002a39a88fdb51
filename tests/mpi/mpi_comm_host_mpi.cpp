// dsrt-mpi-ranks: 2
// A host that initializes MPI itself, at MPI_THREAD_FUNNELED: dsrt joins its world, runs each
// collective on the calling thread (no worker may call MPI), and leaves MPI initialized for the
// host to finalize.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "comm/comm.h"
#include "comm/mpi/mpi_runtime.h"
#include "util/half.h"

namespace dsrt {
namespace {

TEST(HostOwnedMpi, CollectivesRunOnTheCallingThread) {
  int world_rank = -1, world_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // The MPI communicator itself, with host buffers: on a GPU machine the automatic choice would
  // wrap it (host staging where ranks share a GPU, else NCCL, which cannot take host buffers).
  setenv("DSRT_COMM", "mpi", 1);
  std::shared_ptr<Comm> comm;
  Status status = comm_create_from_env(&comm);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_STREQ(comm->backend(), "mpi");
  EXPECT_EQ(comm->rank(), world_rank);
  EXPECT_EQ(comm->size(), world_size);

  for (size_t count : {size_t{5}, size_t{30001}}) {
    std::vector<uint16_t> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = float_to_bf16(0.25f * static_cast<float>(world_rank + 1));
    CommHandle handle;
    ASSERT_TRUE(comm->all_reduce(values.data(), count, DSRT_BF16, ReduceOp::Sum, &handle).ok());
    ASSERT_TRUE(handle->wait().ok());
    float expected = 0.25f * static_cast<float>(world_size * (world_size + 1) / 2);
    for (size_t i = 0; i < count; i += 97) ASSERT_EQ(bf16_to_float(values[i]), expected) << i;
  }
  std::vector<float> send(7 * world_size, 1.5f), recv(7);
  ASSERT_TRUE(comm->reduce_scatter_sync(send.data(), recv.data(), 7, DSRT_F32, ReduceOp::Sum).ok());
  EXPECT_EQ(recv[6], 1.5f * world_size);
  EXPECT_TRUE(comm->barrier().ok());
  comm.reset();

  // a second communicator after the first is gone
  ASSERT_TRUE(comm_create_from_env(&comm).ok());
  double value = 1.0;
  ASSERT_TRUE(comm->all_reduce_f64(&value, 1, ReduceOp::Sum).ok());
  EXPECT_EQ(value, static_cast<double>(world_size));
  comm.reset();

  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0) << "dsrt must leave a host-owned MPI initialized";
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) {
  int provided = 0;
  dsrt::mpi_keep_plugins_mapped();  // the host initializes MPI here, not dsrt
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
