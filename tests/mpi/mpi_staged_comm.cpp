// dsrt-mpi-ranks: 2 3
// The host-staged communicator (device buffers copied through host staging to an inner MPI
// communicator) on the CPU device, whose copies are memcpy: every collective, in place and out of
// place, synchronous and with several handles in flight, must give bit for bit what the plain MPI
// communicator gives on the same data; step numbers and timeouts reach the inner communicator.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/staged/staged_comm.h"
#include "device/device.h"
#include "mpi_test_main.h"
#include "util/half.h"

namespace dsrt {
namespace {

std::shared_ptr<Comm> g_world;

const dsrt_dtype kDtypes[] = {DSRT_F32, DSRT_F16, DSRT_BF16};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

// An MPI communicator (forced, whatever the machine has) wrapped for buffers of a CPU device.
struct Staged {
  std::shared_ptr<Device> device;
  std::shared_ptr<Comm> comm;
};

Staged make_staged() {
  Staged s;
  s.device = std::shared_ptr<Device>(device_create_cpu());
  setenv("DSRT_COMM", "mpi", 1);
  std::shared_ptr<Comm> inner;
  Status status = comm_create_from_env(&inner);
  unsetenv("DSRT_COMM");
  EXPECT_TRUE(status.ok()) << status.message();
  if (!status.ok()) return s;
  EXPECT_STREQ(inner->backend(), "mpi");
  status = staged_comm_create(inner, s.device, &s.comm);
  EXPECT_TRUE(status.ok()) << status.message();
  return s;
}

std::vector<uint8_t> rank_data(int r, size_t count, dsrt_dtype dtype, unsigned salt) {
  std::mt19937 rng(7919u * static_cast<unsigned>(r + 1) + salt);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<uint8_t> bytes(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) from_float(bytes.data(), dtype, i, dist(rng));
  return bytes;
}

// A device buffer holding data (at least one byte, so an empty block still has an address).
DeviceBuffer on_device(Device &device, const std::vector<uint8_t> &data, size_t extra = 0) {
  DeviceBuffer buffer;
  Status status = device.allocate(std::max<size_t>(data.size() + extra, 1), &buffer, false);
  EXPECT_TRUE(status.ok()) << status.message();
  if (!data.empty()) std::memcpy(buffer.data(), data.data(), data.size());
  if (extra > 0) std::memset(buffer.as<char>() + data.size(), 0x77, extra);
  return buffer;
}

void expect_same_bytes(const void *got, const void *want, size_t bytes, const std::string &what) {
  if (bytes == 0) return;  // empty vectors may have null data(), which memcmp must not see
  EXPECT_EQ(0, std::memcmp(got, want, bytes)) << what << ": staged result differs from the MPI result";
}

std::string label(const char *op_name, dsrt_dtype dtype, ReduceOp op, size_t count) {
  const char *ops[] = {"sum", "max", "min"};
  return std::string(op_name) + " " + dtype_name(dtype) + " " + ops[static_cast<int>(op)] + " n=" +
         std::to_string(count);
}

TEST(StagedComm, AllReduceMatchesMpiBitwise) {
  Staged s = make_staged();
  ASSERT_TRUE(s.comm);
  EXPECT_STREQ(s.comm->backend(), "staged");
  EXPECT_EQ(s.comm->rank(), g_world->rank());
  EXPECT_EQ(s.comm->size(), g_world->size());
  unsigned salt = 1;
  for (dsrt_dtype dtype : kDtypes)
    for (ReduceOp op : kOps)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{20001}}) {
        auto want = rank_data(g_world->rank(), count, dtype, ++salt);
        DeviceBuffer got = on_device(*s.device, want);
        ASSERT_TRUE(g_world->all_reduce_sync(want.data(), count, dtype, op).ok());
        CommHandle handle;
        ASSERT_TRUE(s.comm->all_reduce(got.data(), count, dtype, op, &handle).ok());
        Status status = handle->wait();
        ASSERT_TRUE(status.ok()) << status.message();
        expect_same_bytes(got.data(), want.data(), want.size(), label("all_reduce", dtype, op, count));
      }
}

TEST(StagedComm, ReduceScatterMatchesMpiBitwise) {
  Staged s = make_staged();
  ASSERT_TRUE(s.comm);
  const int n = g_world->size(), me = g_world->rank();
  unsigned salt = 100;
  for (dsrt_dtype dtype : kDtypes)
    for (ReduceOp op : kOps)
      for (size_t count : {size_t{1}, size_t{333}, size_t{9001}}) {
        const size_t element = dtype_size(dtype), block = count * element;
        auto send = rank_data(me, count * n, dtype, ++salt);
        std::vector<uint8_t> want(block);
        ASSERT_TRUE(g_world->reduce_scatter_sync(send.data(), want.data(), count, dtype, op).ok());
        DeviceBuffer dsend = on_device(*s.device, send), drecv = on_device(*s.device, std::vector<uint8_t>(block), 16);
        Status status = s.comm->reduce_scatter_sync(dsend.data(), drecv.data(), count, dtype, op);
        ASSERT_TRUE(status.ok()) << status.message();
        std::string what = label("reduce_scatter", dtype, op, count);
        expect_same_bytes(drecv.data(), want.data(), block, what);
        EXPECT_EQ(static_cast<uint8_t>(drecv.as<char>()[block]), 0x77) << what << ": wrote past the block";
        // in place: the result lands on this rank's block of send, the rest of send untouched
        status = s.comm->reduce_scatter_sync(dsend.data(), dsend.as<char>() + me * block, count, dtype, op);
        ASSERT_TRUE(status.ok()) << status.message();
        expect_same_bytes(dsend.as<char>() + me * block, want.data(), block, what + " in place");
        if (me > 0) expect_same_bytes(dsend.data(), send.data(), block, what + " in place, other blocks");
      }
}

TEST(StagedComm, UnevenFormsMatchMpiBitwise) {
  Staged s = make_staged();
  ASSERT_TRUE(s.comm);
  const int n = g_world->size(), me = g_world->rank();
  std::vector<size_t> counts(n), offsets(n);
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = r == 1 ? 0 : 41 * static_cast<size_t>(r) + 3;  // rank 1 owns nothing
    offsets[r] = total;
    total += counts[r];
  }
  unsigned salt = 300;
  for (dsrt_dtype dtype : kDtypes)
    for (ReduceOp op : kOps) {
      const size_t element = dtype_size(dtype);
      auto send = rank_data(me, total, dtype, ++salt);
      std::vector<uint8_t> want(counts[me] * element);
      CommHandle handle;
      ASSERT_TRUE(g_world->reduce_scatter_v(send.data(), want.data(), counts.data(), dtype, op, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      DeviceBuffer dsend = on_device(*s.device, send), drecv = on_device(*s.device, want);
      ASSERT_TRUE(s.comm->reduce_scatter_v(dsend.data(), drecv.data(), counts.data(), dtype, op, &handle).ok());
      Status status = handle->wait();
      ASSERT_TRUE(status.ok()) << status.message();
      expect_same_bytes(drecv.data(), want.data(), want.size(), label("reduce_scatter_v", dtype, op, total));

      auto mine = rank_data(me, counts[me], dtype, salt + 1000);
      std::vector<uint8_t> gathered(total * element);
      ASSERT_TRUE(g_world->all_gather_v(mine.data(), gathered.data(), counts.data(), dtype, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      DeviceBuffer dmine = on_device(*s.device, mine), dgathered = on_device(*s.device, std::vector<uint8_t>(total * element));
      ASSERT_TRUE(s.comm->all_gather_v(dmine.data(), dgathered.data(), counts.data(), dtype, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      expect_same_bytes(dgathered.data(), gathered.data(), gathered.size(), "all_gather_v");
      // in place: this rank's block already sits in the output
      DeviceBuffer in_place = on_device(*s.device, std::vector<uint8_t>(total * element, 0x11));
      if (!mine.empty()) std::memcpy(in_place.as<char>() + offsets[me] * element, mine.data(), mine.size());
      ASSERT_TRUE(s.comm->all_gather_v(in_place.as<char>() + offsets[me] * element, in_place.data(), counts.data(),
                                       dtype, &handle).ok());
      ASSERT_TRUE(handle->wait().ok());
      expect_same_bytes(in_place.data(), gathered.data(), gathered.size(), "all_gather_v in place");
    }
}

TEST(StagedComm, AllGatherAndBroadcastMatchMpi) {
  Staged s = make_staged();
  ASSERT_TRUE(s.comm);
  const int n = g_world->size(), me = g_world->rank();
  unsigned salt = 500;
  for (dsrt_dtype dtype : kDtypes)
    for (size_t count : {size_t{1}, size_t{777}, size_t{12345}}) {
      const size_t block = count * dtype_size(dtype);
      auto mine = rank_data(me, count, dtype, ++salt);
      std::vector<uint8_t> want(block * n);
      ASSERT_TRUE(g_world->all_gather_sync(mine.data(), want.data(), count, dtype).ok());
      DeviceBuffer dmine = on_device(*s.device, mine), drecv = on_device(*s.device, std::vector<uint8_t>(block * n));
      ASSERT_TRUE(s.comm->all_gather_sync(dmine.data(), drecv.data(), count, dtype).ok());
      expect_same_bytes(drecv.data(), want.data(), want.size(), "all_gather");
      DeviceBuffer in_place = on_device(*s.device, std::vector<uint8_t>(block * n, 0x22));
      if (block > 0) std::memcpy(in_place.as<char>() + me * block, mine.data(), block);
      ASSERT_TRUE(s.comm->all_gather_sync(in_place.as<char>() + me * block, in_place.data(), count, dtype).ok());
      expect_same_bytes(in_place.data(), want.data(), want.size(), "all_gather in place");
    }
  for (int root = 0; root < n; ++root)
    for (dsrt_dtype dtype : kDtypes) {
      auto want = rank_data(root, 4097, dtype, 600 + root);
      DeviceBuffer buffer = on_device(*s.device, me == root ? want : std::vector<uint8_t>(want.size(), 0x5a));
      ASSERT_TRUE(s.comm->broadcast_sync(buffer.data(), 4097, dtype, root).ok());
      expect_same_bytes(buffer.data(), want.data(), want.size(), "broadcast from root " + std::to_string(root));
    }
  double values[2] = {me + 0.25, -1.0 * me};
  ASSERT_TRUE(s.comm->all_reduce_f64(values, 2, ReduceOp::Max).ok());
  EXPECT_EQ(values[0], n - 0.75);
  EXPECT_EQ(values[1], 0.0);
  uint64_t counters[1] = {static_cast<uint64_t>(me) + 1};
  ASSERT_TRUE(s.comm->all_reduce_u64(counters, 1, ReduceOp::Sum).ok());
  EXPECT_EQ(counters[0], static_cast<uint64_t>(n * (n + 1) / 2));
  std::string text = me == 0 ? "staged manifest" : std::string(15, '?');
  ASSERT_TRUE(s.comm->broadcast_bytes(&text[0], text.size(), 0).ok());
  EXPECT_EQ(text, "staged manifest");
  EXPECT_TRUE(s.comm->barrier().ok());
}

// Several handles in flight, waited in reverse order; a handle dropped without a wait.
TEST(StagedComm, HandlesInFlight) {
  Staged s = make_staged();
  ASSERT_TRUE(s.comm);
  const int n = g_world->size(), me = g_world->rank();
  const size_t count = 20011;
  auto a = rank_data(me, count, DSRT_BF16, 700), b = rank_data(me, count * n, DSRT_F32, 701);
  auto c = rank_data(me, count, DSRT_F16, 702);
  std::vector<uint8_t> want_a = a, want_b(count * 4), want_c(count * 2 * n);
  ASSERT_TRUE(g_world->all_reduce_sync(want_a.data(), count, DSRT_BF16, ReduceOp::Sum).ok());
  ASSERT_TRUE(g_world->reduce_scatter_sync(b.data(), want_b.data(), count, DSRT_F32, ReduceOp::Sum).ok());
  ASSERT_TRUE(g_world->all_gather_sync(c.data(), want_c.data(), count, DSRT_F16).ok());

  DeviceBuffer da = on_device(*s.device, a), db = on_device(*s.device, b), dc = on_device(*s.device, c);
  DeviceBuffer db_out = on_device(*s.device, std::vector<uint8_t>(count * 4));
  DeviceBuffer dc_out = on_device(*s.device, std::vector<uint8_t>(count * 2 * n));
  CommHandle ha, hb, hc, dropped;
  DeviceBuffer scratch = on_device(*s.device, a);
  ASSERT_TRUE(s.comm->all_reduce(da.data(), count, DSRT_BF16, ReduceOp::Sum, &ha).ok());
  ASSERT_TRUE(s.comm->all_reduce(scratch.data(), count, DSRT_BF16, ReduceOp::Max, &dropped).ok());
  ASSERT_TRUE(s.comm->reduce_scatter(db.data(), db_out.data(), count, DSRT_F32, ReduceOp::Sum, &hb).ok());
  ASSERT_TRUE(s.comm->all_gather(dc.data(), dc_out.data(), count, DSRT_F16, &hc).ok());
  dropped.reset();  // waits inside, so its staging buffer is not reused under a running collective
  ASSERT_TRUE(hc->wait().ok());
  ASSERT_TRUE(hb->wait().ok());
  ASSERT_TRUE(ha->wait().ok());
  EXPECT_TRUE(ha->wait().ok()) << "a second wait returns the same status";
  expect_same_bytes(da.data(), want_a.data(), want_a.size(), "all_reduce in flight");
  expect_same_bytes(db_out.data(), want_b.data(), want_b.size(), "reduce_scatter in flight");
  expect_same_bytes(dc_out.data(), want_c.data(), want_c.size(), "all_gather in flight");
}

// DSRT_COMM=staged picks this communicator from the environment (on the CPU device here).
TEST(StagedComm, ChosenFromEnvironment) {
  setenv("DSRT_COMM", "staged", 1);
  std::shared_ptr<Comm> comm;
  Status status = comm_create_from_env(&comm);
  unsetenv("DSRT_COMM");
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_STREQ(comm->backend(), "staged");
  std::vector<float> values(5, 1.0f + g_world->rank());
  ASSERT_TRUE(comm->all_reduce_sync(values.data(), values.size(), DSRT_F32, ReduceOp::Sum).ok());
  const int n = g_world->size();
  EXPECT_EQ(values[4], static_cast<float>(n * (n + 1) / 2));
  setenv("DSRT_COMM", "carrier-pigeon", 1);
  status = comm_create_from_env(&comm);
  unsetenv("DSRT_COMM");
  EXPECT_EQ(status.code(), DSRT_ERR_COMM);
  EXPECT_NE(status.message().find("DSRT_COMM"), std::string::npos) << status.message();
}

// A collective the other ranks skip times out in the inner communicator, at the staged
// communicator's step.
TEST(StagedComm, TimeoutNamesTheStep) {
  if (g_world->size() < 2) GTEST_SKIP() << "needs two ranks";
  setenv("DSRT_COMM_TIMEOUT_S", "1", 1);
  Staged s = make_staged();
  unsetenv("DSRT_COMM_TIMEOUT_S");
  ASSERT_TRUE(s.comm);
  s.comm->set_step(314);
  if (s.comm->rank() == 0) {
    DeviceBuffer buffer = on_device(*s.device, rank_data(0, 64, DSRT_F32, 800));
    Status status = s.comm->all_reduce_sync(buffer.data(), 64, DSRT_F32, ReduceOp::Sum);
    EXPECT_EQ(status.code(), DSRT_ERR_COMM);
    EXPECT_NE(status.message().find("step 314"), std::string::npos) << status.message();
  }
  EXPECT_TRUE(g_world->barrier().ok());
}

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_staged_comm", &dsrt::g_world); }
