// dsrt-mpi-ranks: 2
// NCCL under mpirun (DSRT_COMM=nccl): without NCCL in the build every rank gets
// DSRT_ERR_UNSUPPORTED, without a GPU every rank gets DSRT_ERR_DEVICE (the decision is collective,
// so no rank hangs); with one GPU per rank, every collective on device buffers against a float64
// reduction of every rank's data (16-bit sums within one rounding of it, NaN through max), on
// ranks that all hold the same bits. Machines with fewer GPUs than ranks skip the collectives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "mpi_test_main.h"
#include "util/half.h"

#ifdef DSRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

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

// Every rank agrees whether each rank has its own GPU (a single host is assumed by this test).
bool every_rank_has_a_gpu() {
  uint64_t enough = visible_gpus() >= g_world->size() ? 1 : 0;
  EXPECT_TRUE(g_world->all_reduce_u64(&enough, 1, ReduceOp::Min).ok());
  return enough == 1;
}

Status create_nccl(std::shared_ptr<Comm> *out) {
  setenv("DSRT_COMM", "nccl", 1);
  Status status = comm_create_from_env(out);
  setenv("DSRT_COMM", "mpi", 1);
  return status;
}

TEST(NcclUnderMpirun, UnavailableIsTheSameErrorOnEveryRank) {
  if (every_rank_has_a_gpu()) GTEST_SKIP() << "every rank has a GPU: NCCL is available here";
  std::shared_ptr<Comm> comm;
  Status status = create_nccl(&comm);
#ifdef DSRT_HAVE_NCCL
  const dsrt_status want = visible_gpus() > 0 ? DSRT_ERR_COMM : DSRT_ERR_DEVICE;  // shared GPU, or none
#else
  const dsrt_status want = DSRT_ERR_UNSUPPORTED;
#endif
  EXPECT_EQ(status.code(), want) << status.message();
  EXPECT_NE(status.message().find("DSRT_COMM"), std::string::npos) << status.message();
  EXPECT_FALSE(comm);
  EXPECT_TRUE(g_world->barrier().ok()) << "a rank is stuck after the failed creation";
}

#ifdef DSRT_HAVE_NCCL

std::vector<uint8_t> rank_data(int r, size_t count, dsrt_dtype dtype, unsigned salt) {
  std::mt19937 rng(104729u * static_cast<unsigned>(r + 1) + salt);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

struct DeviceCopy {
  void *ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceCopy(const std::vector<uint8_t> &host) : bytes(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(ptr); }
  std::vector<uint8_t> host() const {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

// got must be the float64 reduction rounded once to dtype, within fp32 accumulation error.
void expect_reduced(const std::vector<uint8_t> &got, int ranks, size_t first, size_t count, size_t total,
                    dsrt_dtype dtype, ReduceOp op, unsigned salt, const std::string &what) {
  std::vector<double> want(total), scale(total, 0.0);
  for (int r = 0; r < ranks; ++r) {
    auto data = rank_data(r, total, dtype, salt);
    for (size_t i = 0; i < total; ++i) {
      double x = to_float(data.data(), dtype, i);
      scale[i] += std::fabs(x);
      want[i] = r == 0 ? x : op == ReduceOp::Sum ? want[i] + x : op == ReduceOp::Max ? std::max(want[i], x)
                                                                                        : std::min(want[i], x);
    }
  }
  const int mantissa = dtype == DSRT_F32 ? 23 : dtype == DSRT_F16 ? 10 : 7;
  size_t bad = 0;
  for (size_t i = 0; i < count && bad < 5; ++i) {
    double value = to_float(got.data(), dtype, i), w = want[first + i];
    double ulp = w == 0 ? 0 : std::ldexp(1.0, std::ilogb(std::fabs(w)) - mantissa);
    double tol = op == ReduceOp::Sum ? ulp / 2 + ranks * std::ldexp(scale[first + i], -23) + 1e-7 : 0.0;
    if (!(std::fabs(value - w) <= tol)) {
      ADD_FAILURE() << what << ": element " << first + i << " is " << value << ", float64 reference " << w;
      ++bad;
    }
  }
}

TEST(NcclUnderMpirun, CollectivesOnDeviceBuffers) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one CUDA GPU per rank (runs on a multi-GPU machine)";
  std::shared_ptr<Comm> comm;
  Status status = create_nccl(&comm);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_STREQ(comm->backend(), "nccl");
  const int n = comm->size(), me = comm->rank();
  unsigned salt = 0;
  for (dsrt_dtype dtype : {DSRT_F32, DSRT_F16, DSRT_BF16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (size_t count : {size_t{1}, size_t{1001}, size_t{100003}}) {
        ++salt;
        std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(count);
        DeviceCopy buffer(rank_data(me, count, dtype, salt));
        ASSERT_TRUE(comm->all_reduce_sync(buffer.ptr, count, dtype, op).ok());
        auto reduced = buffer.host();
        expect_reduced(reduced, n, 0, count, count, dtype, op, salt, "all_reduce " + what);
        uint64_t hash = std::hash<std::string>()(std::string(reduced.begin(), reduced.end()));
        uint64_t range[2] = {hash, ~hash};
        ASSERT_TRUE(g_world->all_reduce_u64(range, 2, ReduceOp::Max).ok());
        EXPECT_EQ(range[0], ~range[1]) << what << ": ranks hold different all_reduce results";

        DeviceCopy send(rank_data(me, count * n, dtype, salt + 5000));
        DeviceCopy recv(std::vector<uint8_t>(count * dtype_size(dtype)));
        CommHandle handle;
        ASSERT_TRUE(comm->reduce_scatter(send.ptr, recv.ptr, count, dtype, op, &handle).ok());
        status = handle->wait();
        ASSERT_TRUE(status.ok()) << status.message();
        expect_reduced(recv.host(), n, me * count, count, count * n, dtype, op, salt + 5000, "reduce_scatter " + what);

        std::vector<size_t> counts(n);
        size_t total = 0, offset = 0;
        for (int r = 0; r < n; ++r) {
          counts[r] = r == 1 ? 0 : count + static_cast<size_t>(r);
          if (r < me) offset += counts[r];
          total += counts[r];
        }
        DeviceCopy send_v(rank_data(me, total, dtype, salt + 9000));
        DeviceCopy recv_v(std::vector<uint8_t>(counts[me] * dtype_size(dtype)));
        ASSERT_TRUE(comm->reduce_scatter_v(send_v.ptr, recv_v.ptr, counts.data(), dtype, op, &handle).ok());
        ASSERT_TRUE(handle->wait().ok());
        expect_reduced(recv_v.host(), n, offset, counts[me], total, dtype, op, salt + 9000, "reduce_scatter_v " + what);
        DeviceCopy mine(rank_data(me, counts[me], dtype, salt + 13000));
        DeviceCopy gathered(std::vector<uint8_t>(total * dtype_size(dtype)));
        ASSERT_TRUE(comm->all_gather_v(mine.ptr, gathered.ptr, counts.data(), dtype, &handle).ok());
        ASSERT_TRUE(handle->wait().ok());
        auto all = gathered.host();
        size_t at = 0;
        for (int r = 0; r < n; ++r) {
          auto theirs = rank_data(r, counts[r], dtype, salt + 13000);
          EXPECT_EQ(0, std::memcmp(all.data() + at * dtype_size(dtype), theirs.data(), theirs.size()))
              << "all_gather_v block " << r << " " << what;
          at += counts[r];
        }
      }
  double values[2] = {static_cast<double>(me), me == 1 ? NAN : 0.0};
  ASSERT_TRUE(comm->all_reduce_f64(values, 2, ReduceOp::Max).ok());
  EXPECT_EQ(values[0], n - 1.0);
  EXPECT_TRUE(std::isnan(values[1]));
  EXPECT_TRUE(comm->barrier().ok());
}

#endif  // DSRT_HAVE_NCCL

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_nccl_comm", &dsrt::g_world); }
