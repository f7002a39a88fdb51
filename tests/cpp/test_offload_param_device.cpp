// The parameter coordinator's host-shard path on a device whose memory the host cannot hand to a
// collective (a GPU with NCCL), run on the host: a device that calls itself CUDA but keeps its
// memory in host RAM, and a communicator that refuses any buffer not allocated by it. Shards kept
// in pinned host memory (offload_param "cpu", and "nvme" under max_in_cpu) must reach the gathers
// through a device staging buffer there (at one rank a device copy then makes the gathered copy,
// with no collective), and be handed out as they are on the CPU device (one rank: the shard is the
// whole tensor, so nothing copies it); write_fp32's
// overwrite of a gathered copy must go through Device::copy. Values are checked against a bf16
// rounding of the fp32 inputs computed here.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "util/half.h"
#include "zero/param_coordinator.h"

namespace dsrt {
namespace {

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(dsrt_device_type type) : type_(type), inner_(device_create_cpu()) {}
  dsrt_device_type type() const override { return type_; }
  int index() const override { return 0; }
  const char *name() const override { return "fake device"; }

  Status allocate(size_t bytes, DeviceBuffer *out, bool zero) override {
    DeviceBuffer buffer;
    DSRT_RETURN_IF_ERROR(inner_->allocate(bytes, &buffer, zero));
    return adopt(std::move(buffer), out, &device_);
  }
  Status allocate_pinned(size_t bytes, DeviceBuffer *out) override {
    DeviceBuffer buffer;
    DSRT_RETURN_IF_ERROR(inner_->allocate_pinned(bytes, &buffer));
    return adopt(std::move(buffer), out, &pinned_);
  }
  Status copy(void *dst, const void *src, size_t bytes, DeviceStream stream) override {
    if (in(device_, dst) && !in(device_, src)) ++uploads_[dst];
    if (in(device_, dst) && !in(device_, src) && in(pinned_, src)) ++pinned_uploads;
    if (in(device_, dst) && in(device_, src)) ++device_copies;
    return inner_->copy(dst, src, bytes, stream);
  }
  Status memset(void *dst, int value, size_t bytes, DeviceStream stream) override {
    return inner_->memset(dst, value, bytes, stream);
  }
  Status create_stream(DeviceStream *out) override { return inner_->create_stream(out); }
  Status destroy_stream(DeviceStream stream) override { return inner_->destroy_stream(stream); }
  Status synchronize(DeviceStream stream) override { return inner_->synchronize(stream); }
  Status create_event(DeviceEvent *out) override { return inner_->create_event(out); }
  Status destroy_event(DeviceEvent event) override { return inner_->destroy_event(event); }
  Status record_event(DeviceEvent event, DeviceStream stream) override { return inner_->record_event(event, stream); }
  Status stream_wait_event(DeviceStream stream, DeviceEvent event) override {
    return inner_->stream_wait_event(stream, event);
  }
  Status synchronize_event(DeviceEvent event) override { return inner_->synchronize_event(event); }

  bool in_device(const void *p) const { return in(device_, p); }
  bool in_pinned(const void *p) const { return in(pinned_, p); }
  int pinned_uploads = 0, device_copies = 0;
  int uploads_to(const void *dst) const {
    auto it = uploads_.find(dst);
    return it == uploads_.end() ? 0 : it->second;
  }

 private:
  // Live allocations by start address.
  using Ranges = std::map<const char *, size_t>;
  static bool in(const Ranges &ranges, const void *p) {
    const char *c = static_cast<const char *>(p);
    auto it = ranges.upper_bound(c);
    if (it == ranges.begin()) return false;
    --it;
    return c < it->first + it->second;
  }
  Status adopt(DeviceBuffer buffer, DeviceBuffer *out, Ranges *ranges) {
    auto owned = std::make_shared<DeviceBuffer>(std::move(buffer));
    void *data = owned->data();
    const size_t bytes = owned->bytes();
    (*ranges)[static_cast<const char *>(data)] = bytes;
    *out = DeviceBuffer(data, bytes, [this, ranges, owned](void *p) mutable {
      ranges->erase(static_cast<const char *>(p));
      owned.reset();
    });
    return Status::Ok();
  }
  dsrt_device_type type_;
  std::unique_ptr<Device> inner_;
  Ranges device_, pinned_;
  std::map<const void *, int> uploads_;
};

// A world of one rank whose all_gather records where its buffers are.
class CheckingComm final : public Comm {
 public:
  CheckingComm(std::shared_ptr<Comm> inner, const FakeDevice *device) : inner_(std::move(inner)), device_(device) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char *backend() const override { return "checking"; }
  Status all_reduce(void *b, size_t n, dsrt_dtype d, ReduceOp op, CommHandle *h) override {
    return inner_->all_reduce(b, n, d, op, h);
  }
  Status reduce_scatter(const void *s, void *r, size_t n, dsrt_dtype d, ReduceOp op, CommHandle *h) override {
    return inner_->reduce_scatter(s, r, n, d, op, h);
  }
  Status reduce_scatter_v(const void *s, void *r, const size_t *n, dsrt_dtype d, ReduceOp op, CommHandle *h) override {
    return inner_->reduce_scatter_v(s, r, n, d, op, h);
  }
  Status all_gather(const void *send, void *recv, size_t n, dsrt_dtype d, CommHandle *h) override {
    ++gathers;
    if (!device_->in_device(recv)) ++host_recvs;
    if (device_->in_device(send)) ++device_sends;
    if (device_->in_pinned(send)) ++pinned_sends;
    return inner_->all_gather(send, recv, n, d, h);
  }
  Status all_gather_v(const void *s, void *r, const size_t *n, dsrt_dtype d, CommHandle *h) override {
    return inner_->all_gather_v(s, r, n, d, h);
  }
  Status broadcast(void *b, size_t n, dsrt_dtype d, int root, CommHandle *h) override {
    return inner_->broadcast(b, n, d, root, h);
  }
  Status all_reduce_f64(double *v, size_t n, ReduceOp op) override { return inner_->all_reduce_f64(v, n, op); }
  Status all_reduce_u64(uint64_t *v, size_t n, ReduceOp op) override { return inner_->all_reduce_u64(v, n, op); }
  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    return inner_->broadcast_bytes(data, bytes, root);
  }
  Status barrier() override { return inner_->barrier(); }
  Status all_gather_bytes(const void *s, void *r, size_t n, CommHandle *h) override {
    return inner_->all_gather_bytes(s, r, n, h);
  }
  Status all_to_all_bytes(const void *s, void *r, size_t n, CommHandle *h) override {
    return inner_->all_to_all_bytes(s, r, n, h);
  }
  Status all_to_all(const void *s, void *r, size_t n, dsrt_dtype d, CommHandle *h) override {
    return inner_->all_to_all(s, r, n, d, h);
  }
  Status split(int color, int key, std::shared_ptr<Comm> *out) override { return inner_->split(color, key, out); }

  int gathers = 0, host_recvs = 0, device_sends = 0, pinned_sends = 0;

 private:
  std::shared_ptr<Comm> inner_;
  const FakeDevice *device_;
};

// Every non-persistent shard in pinned host memory, as offload_param "cpu" keeps them.
class HostShards final : public ShardSource {
 public:
  std::vector<DeviceBuffer> kept;  // per tensor; empty for persistent ones
  const void *resident(size_t t) const override { return kept[t].empty() ? nullptr : kept[t].data(); }
  size_t free_buffers() const override { return 0; }
  Status start_read(size_t t, bool *started) override {
    *started = false;
    return Error(DSRT_ERR_STATE, "shard %zu is not in host memory", t);
  }
  Status finish_read(size_t t, void *) override { return Error(DSRT_ERR_STATE, "no read of shard %zu", t); }
  void cancel_read(size_t) override {}
};

const std::vector<int64_t> kNumels = {7, 1000, 2145, 3000, 5};

std::vector<uint16_t> to_bf16(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

void run(dsrt_device_type type) {
  SCOPED_TRACE(type == DSRT_DEVICE_CPU ? "CPU device" : "GPU-like device");
  FakeDevice device(type);
  std::shared_ptr<Comm> local;
  ASSERT_TRUE(comm_create_local(&local).ok());
  CheckingComm comm(local, &device);
  Partitioning part;
  ASSERT_TRUE(part.build(kNumels, 3, 1).ok());
  const ShardLayout &layout = part.shard_layout();

  // The initial values: working shards in device memory (persistent tensors are gathered from them).
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<std::vector<uint16_t>> values;
  DeviceBuffer working;
  ASSERT_TRUE(device.allocate(static_cast<size_t>(part.resident_working_elems()) * 2, &working, true).ok());
  for (size_t t = 0; t < kNumels.size(); ++t) {
    std::vector<float> v(static_cast<size_t>(kNumels[t]));
    for (float &x : v) x = dist(rng);
    values.push_back(to_bf16(v));
    ASSERT_TRUE(device.copy(working.as<uint16_t>() + layout.shard_offset(t), values[t].data(), values[t].size() * 2, nullptr).ok());
  }
  HostShards source;  // declared before the coordinator, which borrows it
  CoordinatorOptions options;
  options.working_dtype = DSRT_BF16;
  options.persistence_threshold = 10;
  options.prefetch_bucket_elems = 4000;
  ParamCoordinator coordinator;
  ASSERT_TRUE(coordinator.init(&part, &comm, &device, options, working.data(), {"a", "b", "c", "d", "e"}).ok());

  // Move the shards to pinned host memory and drop the device working shards (param_nvme_close).
  source.kept.resize(kNumels.size());
  for (size_t t = 0; t < kNumels.size(); ++t) {
    if (coordinator.persistent(t)) continue;
    const size_t bytes = static_cast<size_t>(layout.shard_size(t)) * 2;
    ASSERT_TRUE(device.allocate_pinned(bytes, &source.kept[t]).ok());
    ASSERT_TRUE(device.copy(source.kept[t].data(), working.as<uint16_t>() + layout.shard_offset(t), bytes, nullptr).ok());
  }
  coordinator.set_shard_source(nullptr, &source);
  working.reset();
  const int init_gathers = comm.gathers;
  const int init_uploads = device.pinned_uploads, init_copies = device.device_copies;

  for (int micro = 0; micro < 3; ++micro) {
    for (size_t t = 0; t < kNumels.size(); ++t) {
      void *data = nullptr;
      Status s = coordinator.acquire(t, &data);
      ASSERT_TRUE(s.ok()) << s.message();
      if (type == DSRT_DEVICE_CPU && !coordinator.persistent(t)) {
        // One rank on the CPU device: the host shard itself, which is the whole tensor.
        EXPECT_EQ(data, source.kept[t].data()) << "tensor " << t;
        EXPECT_EQ(coordinator.gathered_bytes(), (7u + 5u) * 2);  // the persistent copies only
      } else {
        ASSERT_TRUE(device.in_device(data));
      }
      std::vector<uint16_t> got(values[t].size());
      ASSERT_TRUE(device.copy(got.data(), data, got.size() * 2, nullptr).ok());
      EXPECT_EQ(got, values[t]) << "micro-step " << micro << " tensor " << t;
      ASSERT_TRUE(coordinator.release(t).ok());
    }
    ASSERT_TRUE(coordinator.end_micro_step().ok());
  }
  EXPECT_GT(coordinator.prefetch_hits(), 0);
  const int gathers = comm.gathers - init_gathers;
  EXPECT_EQ(comm.host_recvs, 0);
  if (type == DSRT_DEVICE_CPU) {
    EXPECT_EQ(gathers, 0);  // handed out as they are: nothing is copied
  } else {
    // One rank on a GPU: no collective (the gathered copy is the shard); each gather stages the
    // pinned shard in device memory, then copies it device to device into the gathered buffer.
    EXPECT_EQ(comm.gathers, 0);
    EXPECT_GE(device.pinned_uploads - init_uploads, 3 * 3);
    EXPECT_EQ(device.device_copies - init_copies, device.pinned_uploads - init_uploads);
  }

  // write_fp32's overwrite of live gathered copies (persistent "a" and acquired "c") reaches
  // device memory through Device::copy; on the CPU device "c" is its host shard, written there.
  void *c = nullptr;
  ASSERT_TRUE(coordinator.acquire(2, &c).ok());
  for (size_t t : {size_t{0}, size_t{2}}) {
    std::vector<float> full(static_cast<size_t>(kNumels[t]));
    for (float &x : full) x = dist(rng);
    const void *gathered = coordinator.gathered_data(t);
    const int before = device.uploads_to(gathered);
    Status s = coordinator.overwrite(t, full.data());
    ASSERT_TRUE(s.ok()) << s.message();
    const bool view = type == DSRT_DEVICE_CPU && !coordinator.persistent(t);
    if (view) {
      EXPECT_EQ(gathered, source.kept[t].data());
    }
    EXPECT_EQ(device.uploads_to(gathered), before + (view ? 0 : 1)) << "tensor " << t;
    std::vector<uint16_t> got(full.size());
    ASSERT_TRUE(device.copy(got.data(), gathered, got.size() * 2, nullptr).ok());
    EXPECT_EQ(got, to_bf16(full)) << "tensor " << t;
  }
  ASSERT_TRUE(coordinator.release(2).ok());
  ASSERT_TRUE(coordinator.end_micro_step().ok());
}

TEST(OffloadParamDevice, HostShardsAreStagedOnAGpuAndSentDirectlyOnTheCpu) {
  run(DSRT_DEVICE_CUDA);
  run(DSRT_DEVICE_CPU);
}

}  // namespace
}  // namespace dsrt
