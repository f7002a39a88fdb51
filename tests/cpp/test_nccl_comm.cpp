// The NCCL entry points in every kind of build: without NCCL they answer DSRT_ERR_UNSUPPORTED with
// a message; with NCCL but no GPU, creating a communicator is DSRT_ERR_DEVICE saying so; with a
// GPU, a world of one runs every collective on device and host buffers against values computed
// here (the exchange paths with several ranks need several GPUs and are not covered by this
// program). GPU-only tests skip with a message on machines without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/device_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "dsrt.h"
#include "util/half.h"

#ifdef DSRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dsrt {
namespace {

int visible_gpus() {
#ifdef DSRT_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

// Environment of a torchrun rank; restored afterwards.
class TorchrunEnv {
 public:
  TorchrunEnv() {
    for (const char *name : kNames) saved_.push_back(std::getenv(name) ? std::getenv(name) : "\x01");
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
  }
  ~TorchrunEnv() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i] == "\x01") unsetenv(kNames[i]);
      else setenv(kNames[i], saved_[i].c_str(), 1);
    }
  }

 private:
  static constexpr const char *kNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DSRT_COMM"};
  std::vector<std::string> saved_;
};

// Under torchrun with DSRT_COMM=nccl dsrt joins over NCCL: a build without it, or a machine without
// a GPU, says so at once (before any rendezvous; auto would pick TCP there); DSRT_COMM=mpi needs an
// MPI launcher.
TEST(NcclComm, TorchrunNeedsNcclAndAGpu) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible: creating would start a real rendezvous";
  TorchrunEnv env;
  setenv("DSRT_COMM", "nccl", 1);
  std::shared_ptr<Comm> comm;
  Status status = comm_create_from_env(&comm);
#ifdef DSRT_HAVE_NCCL
  EXPECT_EQ(status.code(), DSRT_ERR_DEVICE) << status.message();
#else
  EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED) << status.message();
#endif
  EXPECT_NE(status.message().find("torchrun"), std::string::npos) << status.message();
  EXPECT_FALSE(comm);
  setenv("DSRT_COMM", "mpi", 1);
  status = comm_create_from_env(&comm);
  EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED) << status.message();
  EXPECT_NE(status.message().find("mpirun"), std::string::npos) << status.message();
}

#ifndef DSRT_HAVE_NCCL

TEST(NcclComm, UnsupportedWithoutNccl) {
  std::vector<uint8_t> id(kNcclUniqueIdBytes, 0);
  Status status = nccl_unique_id(id.data());
  EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED);
  EXPECT_NE(status.message().find("NCCL"), std::string::npos) << status.message();
  std::shared_ptr<Comm> comm;
  status = nccl_comm_create(id.data(), 0, 1, 0, &comm);
  EXPECT_EQ(status.code(), DSRT_ERR_UNSUPPORTED);
  EXPECT_FALSE(comm);
  // and through the C ABI
  EXPECT_EQ(dsrt_nccl_unique_id(id.data()), DSRT_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("dsrt_nccl_unique_id"), std::string::npos);
  dsrt_comm *handle = nullptr;
  EXPECT_EQ(dsrt_comm_create_nccl(id.data(), 0, 1, 0, &handle), DSRT_ERR_UNSUPPORTED);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(dsrt_has_feature("nccl"), 0);
}

#else

TEST(NcclComm, NoGpuIsADeviceError) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible: the no-GPU error cannot be provoked here";
  std::vector<uint8_t> id(kNcclUniqueIdBytes, 0);
  std::shared_ptr<Comm> comm;
  Status status = nccl_comm_create(id.data(), 0, 1, 0, &comm);
  EXPECT_EQ(status.code(), DSRT_ERR_DEVICE);
  EXPECT_NE(status.message().find("no"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << status.message();
  EXPECT_FALSE(comm);
  dsrt_comm *handle = nullptr;
  EXPECT_EQ(dsrt_comm_create_nccl(id.data(), 0, 1, 0, &handle), DSRT_ERR_DEVICE);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(dsrt_has_feature("nccl"), 0);
}

class NcclWorldOfOne : public ::testing::Test {
 protected:
  void SetUp() override {
    if (visible_gpus() == 0) GTEST_SKIP() << "no CUDA GPU visible: the NCCL collectives run only on a GPU machine";
    std::vector<uint8_t> id(kNcclUniqueIdBytes);
    Status status = nccl_unique_id(id.data());
    ASSERT_TRUE(status.ok()) << status.message();
    status = nccl_comm_create(id.data(), 0, 1, 0, &comm_);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(cudaStreamCreate(&compute_), cudaSuccess);
    ASSERT_TRUE(comm_set_compute_stream(*comm_, compute_).ok());
  }
  void TearDown() override {
    comm_.reset();
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
  }
  void *device_copy(const std::vector<uint8_t> &host) {
    void *p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    buffers_.push_back(p);
    return p;
  }
  std::vector<uint8_t> to_host(const void *p, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  ~NcclWorldOfOne() override {
    for (void *p : buffers_) cudaFree(p);
  }

  std::shared_ptr<Comm> comm_;
  cudaStream_t compute_ = nullptr;
  std::vector<void *> buffers_;
};

std::vector<uint8_t> random_data(size_t count, dsrt_dtype dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

// With one rank every reduction is the identity and every gather a copy: exact, on every path
// (fp32 sums on NCCL's own collectives, the rest through the exchange and the fp32 kernel).
TEST_F(NcclWorldOfOne, EveryCollectiveOnDeviceBuffers) {
  EXPECT_STREQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->size(), 1);
  unsigned seed = 1;
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (size_t count : {size_t{1}, size_t{1001}, size_t{65537}}) {
        auto data = random_data(count, dtype, ++seed);
        void *buffer = device_copy(data);
        ASSERT_TRUE(comm_->all_reduce_sync(buffer, count, dtype, op).ok());
        EXPECT_EQ(to_host(buffer, data.size()), data) << "all_reduce " << dtype_name(dtype) << " n=" << count;
        void *recv = device_copy(std::vector<uint8_t>(data.size(), 0));
        Status status = comm_->reduce_scatter_sync(device_copy(data), recv, count, dtype, op);
        ASSERT_TRUE(status.ok()) << status.message();
        EXPECT_EQ(to_host(recv, data.size()), data) << "reduce_scatter " << dtype_name(dtype);
        size_t counts[1] = {count};
        CommHandle handle;
        ASSERT_TRUE(comm_->reduce_scatter_v(device_copy(data), recv, counts, dtype, op, &handle).ok());
        ASSERT_TRUE(handle->wait().ok());
        EXPECT_EQ(to_host(recv, data.size()), data) << "reduce_scatter_v " << dtype_name(dtype);
      }
  auto data = random_data(4097, DSRT_BF16, 99);
  void *gathered = device_copy(std::vector<uint8_t>(data.size(), 0));
  ASSERT_TRUE(comm_->all_gather_sync(device_copy(data), gathered, 4097, DSRT_BF16).ok());
  EXPECT_EQ(to_host(gathered, data.size()), data);
  size_t counts[1] = {4097};
  CommHandle handle;
  void *gathered_v = device_copy(std::vector<uint8_t>(data.size(), 0));
  ASSERT_TRUE(comm_->all_gather_v(device_copy(data), gathered_v, counts, DSRT_BF16, &handle).ok());
  ASSERT_TRUE(handle->wait().ok());
  EXPECT_EQ(to_host(gathered_v, data.size()), data);
  void *bcast = device_copy(data);
  ASSERT_TRUE(comm_->broadcast_sync(bcast, 4097, DSRT_BF16, 0).ok());
  EXPECT_EQ(to_host(bcast, data.size()), data);
}

TEST_F(NcclWorldOfOne, HostBuffersAndControlValues) {
  auto data = random_data(3001, DSRT_F16, 7);
  auto buffer = data;
  ASSERT_TRUE(comm_->all_reduce_sync(buffer.data(), 3001, DSRT_F16, ReduceOp::Sum).ok());
  EXPECT_EQ(buffer, data) << "a host buffer staged through the device";
  double values[3] = {1.5, NAN, -2.0};
  ASSERT_TRUE(comm_->all_reduce_f64(values, 3, ReduceOp::Max).ok());
  EXPECT_EQ(values[0], 1.5);
  EXPECT_TRUE(std::isnan(values[1])) << "NaN must survive max";
  uint64_t counters[2] = {1ull << 50, 3};
  ASSERT_TRUE(comm_->all_reduce_u64(counters, 2, ReduceOp::Sum).ok());
  EXPECT_EQ(counters[0], 1ull << 50);
  std::string text = "manifest";
  ASSERT_TRUE(comm_->broadcast_bytes(&text[0], text.size(), 0).ok());
  EXPECT_EQ(text, "manifest");
  EXPECT_TRUE(comm_->barrier().ok());
}

// A collective issued after work on the compute stream sees that work's result.
TEST_F(NcclWorldOfOne, OrderedAfterTheComputeStream) {
  const size_t count = size_t{1} << 22;
  void *src = device_copy(std::vector<uint8_t>(count * 4, 0));
  void *dst = device_copy(std::vector<uint8_t>(count * 4, 0));
  ASSERT_EQ(cudaMemsetAsync(src, 0x3f, count * 4, compute_), cudaSuccess);
  ASSERT_TRUE(comm_->all_gather_sync(src, dst, count, DSRT_F32).ok());
  auto host = to_host(dst, count * 4);
  EXPECT_EQ(host.front(), 0x3f);
  EXPECT_EQ(host.back(), 0x3f);
}

#endif  // DSRT_HAVE_NCCL

}  // namespace
}  // namespace dsrt
