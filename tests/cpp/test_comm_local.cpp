// The world of one: every collective is the identity or a copy, handles complete, and bad
// arguments are reported (not crashed on); launcher detection in comm_create_from_env.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_features.h"
#include "comm/comm_checks.h"
#include "util/half.h"

namespace dsrt {
namespace {

const dsrt_dtype kDtypes[] = {DSRT_F32, DSRT_F16, DSRT_BF16};

std::vector<uint8_t> random_bytes(size_t count, dsrt_dtype dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype) + 1);
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

std::shared_ptr<Comm> local() {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  return comm;
}

// The byte and all-to-all collectives copy; split gives a world of one; bad arguments are named;
// a world of one puts nothing on the wire.
TEST(CommLocal, BytesAllToAllAndSplit) {
  auto comm = local();
  ASSERT_TRUE(comm);
  auto send = random_bytes(77, DSRT_BF16, 5);
  std::vector<uint8_t> recv(send.size(), 0);
  CommHandle h;
  ASSERT_TRUE(comm->all_gather_bytes(send.data(), recv.data(), 77 * 2, &h).ok());
  ASSERT_TRUE(h->wait().ok());
  EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), 77 * 2));
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_TRUE(comm->all_to_all_bytes(send.data(), recv.data(), 31, &h).ok());
  ASSERT_TRUE(h->wait().ok());
  EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), 31));
  EXPECT_EQ(recv[31], 0);
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_TRUE(comm->all_to_all(send.data(), recv.data(), 77, DSRT_BF16, &h).ok());
  ASSERT_TRUE(h->wait().ok());
  EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), 77 * 2));

  Status overlap = comm->all_to_all(send.data(), send.data() + 2, 10, DSRT_F16, &h);
  EXPECT_EQ(overlap.code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap.message();
  EXPECT_EQ(comm->all_to_all_bytes(nullptr, recv.data(), 4, &h).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm->all_gather_bytes(send.data(), recv.data(), 4, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);

  std::shared_ptr<Comm> child;
  ASSERT_TRUE(comm->split(3, 9, &child).ok());
  ASSERT_TRUE(child);
  EXPECT_EQ(child->size(), 1);
  EXPECT_EQ(comm->split(-1, 0, &child).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm->split(0, 0, nullptr).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm->traffic().total(), 0u);
}

TEST(CommLocal, Identity) {
  auto comm = local();
  ASSERT_TRUE(comm);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend(), "local");
}

TEST(CommLocal, ReductionsLeaveDataUnchanged) {
  auto comm = local();
  for (dsrt_dtype dtype : kDtypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      const size_t count = 1001;
      auto original = random_bytes(count, dtype, 7);
      auto buffer = original;
      CommHandle handle;
      ASSERT_TRUE(comm->all_reduce(buffer.data(), count, dtype, op, &handle).ok());
      ASSERT_TRUE(handle);
      EXPECT_TRUE(handle->wait().ok());
      EXPECT_EQ(buffer, original);
    }
  }
}

TEST(CommLocal, ScatterGatherBroadcastCopy) {
  auto comm = local();
  for (dsrt_dtype dtype : kDtypes) {
    const size_t count = 777, bytes = count * dtype_size(dtype);
    auto send = random_bytes(count, dtype, 11);
    std::vector<uint8_t> recv(bytes, 0);
    EXPECT_TRUE(comm->reduce_scatter_sync(send.data(), recv.data(), count, dtype, ReduceOp::Sum).ok());
    EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), bytes));

    std::fill(recv.begin(), recv.end(), 0);
    size_t counts[1] = {count};
    CommHandle handle;
    ASSERT_TRUE(comm->reduce_scatter_v(send.data(), recv.data(), counts, dtype, ReduceOp::Max, &handle).ok());
    EXPECT_TRUE(handle->wait().ok());
    EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), bytes));

    std::fill(recv.begin(), recv.end(), 0);
    EXPECT_TRUE(comm->all_gather_sync(send.data(), recv.data(), count, dtype).ok());
    EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), bytes));

    std::fill(recv.begin(), recv.end(), 0);
    ASSERT_TRUE(comm->all_gather_v(send.data(), recv.data(), counts, dtype, &handle).ok());
    EXPECT_TRUE(handle->wait().ok());
    EXPECT_EQ(0, std::memcmp(recv.data(), send.data(), bytes));

    // in place
    auto copy = send;
    EXPECT_TRUE(comm->all_gather_sync(copy.data(), copy.data(), count, dtype).ok());
    EXPECT_TRUE(comm->reduce_scatter_sync(copy.data(), copy.data(), count, dtype, ReduceOp::Sum).ok());
    EXPECT_EQ(copy, send);

    EXPECT_TRUE(comm->broadcast_sync(copy.data(), count, dtype, 0).ok());
    EXPECT_EQ(copy, send);
  }
}

TEST(CommLocal, ControlValues) {
  auto comm = local();
  double values[3] = {1.5, -2.0, 1e300};
  EXPECT_TRUE(comm->all_reduce_f64(values, 3, ReduceOp::Sum).ok());
  EXPECT_EQ(values[0], 1.5);
  EXPECT_EQ(values[2], 1e300);
  uint64_t counters[2] = {5, 1ull << 60};
  EXPECT_TRUE(comm->all_reduce_u64(counters, 2, ReduceOp::Max).ok());
  EXPECT_EQ(counters[1], 1ull << 60);
  char text[6] = "hello";
  EXPECT_TRUE(comm->broadcast_bytes(text, sizeof text, 0).ok());
  EXPECT_STREQ(text, "hello");
  EXPECT_TRUE(comm->barrier().ok());
}

TEST(CommLocal, ZeroCountsAcceptNullBuffers) {
  auto comm = local();
  CommHandle handle;
  EXPECT_TRUE(comm->all_reduce(nullptr, 0, DSRT_BF16, ReduceOp::Sum, &handle).ok());
  EXPECT_TRUE(handle->wait().ok());
  EXPECT_TRUE(comm->all_gather(nullptr, nullptr, 0, DSRT_F32, &handle).ok());
  EXPECT_TRUE(handle->wait().ok());
  EXPECT_TRUE(comm->all_reduce_f64(nullptr, 0, ReduceOp::Sum).ok());
}

void expect_invalid(const Status &status, const char *needle) {
  EXPECT_EQ(status.code(), DSRT_ERR_INVALID_ARGUMENT) << status.message();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
}

TEST(CommLocal, BadArgumentsAreReported) {
  auto comm = local();
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CommHandle handle;
  expect_invalid(comm->all_reduce(data, 8, DSRT_F32, ReduceOp::Sum, nullptr), "handle");
  expect_invalid(comm->all_reduce(nullptr, 8, DSRT_F32, ReduceOp::Sum, &handle), "buffer is NULL");
  expect_invalid(comm->all_reduce(data, 8, static_cast<dsrt_dtype>(7), ReduceOp::Sum, &handle), "dtype 7");
  expect_invalid(comm->all_reduce(data, 8, DSRT_F32, static_cast<ReduceOp>(9), &handle), "reduce op 9");
  expect_invalid(comm->broadcast(data, 8, DSRT_F32, 1, &handle), "root 1");
  expect_invalid(comm->broadcast(data, 8, DSRT_F32, -1, &handle), "root -1");
  expect_invalid(comm->broadcast_bytes(data, 4, 2), "root 2");
  expect_invalid(comm->reduce_scatter(data, nullptr, 4, DSRT_F32, ReduceOp::Sum, &handle), "recv is NULL");
  expect_invalid(comm->reduce_scatter(data, data + 2, 4, DSRT_F32, ReduceOp::Sum, &handle), "overlaps");
  expect_invalid(comm->all_gather(data + 1, data, 4, DSRT_F32, &handle), "overlaps");
  expect_invalid(comm->reduce_scatter_v(data, data + 4, nullptr, DSRT_F32, ReduceOp::Sum, &handle), "counts");
  expect_invalid(comm->all_gather_v(data, data + 4, nullptr, DSRT_F32, &handle), "counts");
  expect_invalid(comm->all_reduce_f64(nullptr, 3, ReduceOp::Sum), "values is NULL");
  // nothing was touched
  for (int i = 0; i < 8; ++i) EXPECT_EQ(data[i], static_cast<float>(i + 1));
}

// Launcher variables this process might inherit; each test below sets only what it needs.
class LauncherEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char *name : kNames) {
      const char *value = std::getenv(name);
      if (value) saved_.emplace_back(name, value);
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char *name : kNames) unsetenv(name);
    for (auto &entry : saved_) setenv(entry.first.c_str(), entry.second.c_str(), 1);
  }
  static constexpr const char *kNames[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                           "PMIX_RANK", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
                                           "RANK", "WORLD_SIZE", "DSRT_COMM_TIMEOUT_S", "DSRT_COMM",
                                           "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(LauncherEnv, AloneIsAWorldOfOne) {
  std::shared_ptr<Comm> comm;
  ASSERT_TRUE(comm_create_from_env(&comm).ok());
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
}

TEST_F(LauncherEnv, TorchrunNcclNeedsNcclAndAGpu) {
  if (comm_has_nccl()) GTEST_SKIP() << "a GPU with NCCL is present: torchrun would really rendezvous";
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  std::shared_ptr<Comm> comm;
  // auto picks the TCP communicator here, which needs rank 0's address
  Status status = comm_create_from_env(&comm);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM) << status.message();
  EXPECT_NE(status.message().find("MASTER_ADDR"), std::string::npos) << status.message();
  EXPECT_FALSE(comm);
  setenv("DSRT_COMM", "nccl", 1);
  status = comm_create_from_env(&comm);
#ifdef DSRT_HAVE_NCCL
  // Built with NCCL, but no GPU is visible here.
  EXPECT_EQ(status.code(), DSRT_ERR_DEVICE) << status.message();
#else
  EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED) << status.message();
#endif
  EXPECT_NE(status.message().find("torchrun"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("NCCL"), std::string::npos) << status.message();
  EXPECT_FALSE(comm);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  ASSERT_TRUE(comm_create_from_env(&comm).ok());
  EXPECT_EQ(comm->size(), 1);
}

TEST_F(LauncherEnv, InconsistentLauncherEnvironment) {
  std::shared_ptr<Comm> comm;
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  Status status = comm_create_from_env(&comm);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_NE(status.message().find("OMPI_COMM_WORLD_RANK=3"), std::string::npos) << status.message();
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_RANK", "one", 1);
  setenv("PMI_SIZE", "2", 1);
  status = comm_create_from_env(&comm);
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_NE(status.message().find("PMI_RANK='one'"), std::string::npos) << status.message();
}

TEST_F(LauncherEnv, TimeoutSetting) {
  EXPECT_EQ(comm_timeout_seconds_from_env(), 120.0);
  setenv("DSRT_COMM_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(comm_timeout_seconds_from_env(), 2.5);
  // A communicator keeps the value of its creation, unless the config key "comm_timeout" (set by
  // an engine) overrides it.
  EXPECT_EQ(comm_timeout_seconds(2.5), 2.5);
  comm_set_timeout_seconds(7);
  EXPECT_EQ(comm_timeout_seconds(2.5), 7.0);
  comm_set_timeout_seconds(0);
  EXPECT_EQ(comm_timeout_seconds(2.5), 2.5);
  setenv("DSRT_COMM_TIMEOUT_S", "soon", 1);
  EXPECT_EQ(comm_timeout_seconds_from_env(), 120.0);
  setenv("DSRT_COMM_TIMEOUT_S", "-1", 1);
  EXPECT_EQ(comm_timeout_seconds_from_env(), 120.0);
}

}  // namespace
}  // namespace dsrt
