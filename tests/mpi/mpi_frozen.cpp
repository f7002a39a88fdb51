// Frozen tensors on several ranks at ZeRO-3: a LoRA-style model (frozen base, trainable adapters)
// trains its adapters as a single-rank stage-0 engine does on the same data, the base stays
// bitwise unchanged, each rank holds ceil(n/W) elements of it, and checkpoints and the 16-bit model
// file hold it bitwise. The base's gather is prefetched along the recorded acquire order like a
// trainable tensor's (within the prefetch bucket and the live limit), and offload_param ("cpu",
// "nvme") moves its shards off the device, with training, gathered copies and checkpoints bitwise
// as without.
// dsrt-mpi-ranks: 2 3 4
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "../cpp/frozen_lora_util.h"
#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "zero/param_coordinator.h"
#include "mpi_test_main.h"

namespace dsrt {

std::shared_ptr<Comm> g_world;

namespace {

using namespace lora_test;

constexpr int64_t kSteps = 5;

std::shared_ptr<Comm> local_comm() {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  return comm;
}

// A folder every rank names the same (rank 0's pid).
std::string shared_dir(const char *what) {
  int64_t pid = ::getpid();
  EXPECT_TRUE(g_world->broadcast_bytes(&pid, sizeof pid, 0).ok());
  return testing::TempDir() + "dsrt_mpi_frozen_" + what + "_" + std::to_string(pid);
}

// The single-rank stage-0 engine fed the average of every rank's micro-batch gradients.
void single_rank_reference(std::vector<float> *a, std::vector<float> *b) {
  LoraEngine le = make_lora(lora_config(0), local_comm());
  ASSERT_TRUE(le.engine);
  const int world = g_world->size();
  for (int64_t s = 0; s < kSteps; ++s) {
    const std::vector<double> w = acquired_values(le.base), av = acquired_values(le.a), bv = acquired_values(le.b);
    std::vector<double> ga(av.size(), 0.0), gb(bv.size(), 0.0);
    for (int r = 0; r < world; ++r) {
      std::vector<double> gar, gbr;
      lora_grads(batch(s, r), w, av, bv, &gar, &gbr);
      for (size_t i = 0; i < ga.size(); ++i) ga[i] += gar[i] / world;
      for (size_t i = 0; i < gb.size(); ++i) gb[i] += gbr[i] / world;
    }
    add_grad(le.a, ga);
    add_grad(le.b, gb);
    ASSERT_TRUE(le.engine->step(nullptr).ok());
  }
  *a = read_fp32(le.a);
  *b = read_fp32(le.b);
}

TEST(MpiFrozen, Stage3LoraMatchesSingleRankStage0) {
  std::vector<float> ref_a, ref_b;
  single_rank_reference(&ref_a, &ref_b);
  LoraEngine le = make_lora(lora_config(3), g_world);
  ASSERT_TRUE(le.engine);
  for (int64_t s = 0; s < kSteps; ++s) train_step(le, s, g_world->rank());
  EXPECT_LT(relative_error(read_fp32(le.a), widened(ref_a)), 1e-5);
  EXPECT_LT(relative_error(read_fp32(le.b), widened(ref_b)), 1e-5);
  // Not a comparison of untouched values: the adapters moved.
  EXPECT_GT(relative_error(read_fp32(le.a), widened(a_init())), 1e-3);
  const std::vector<float> base = base_init(), after = read_fp32(le.base);
  EXPECT_EQ(std::memcmp(after.data(), base.data(), base.size() * sizeof(float)), 0);
  // The gathered copy the host reads is the whole base, bitwise.
  void *data = nullptr;
  ASSERT_EQ(dsrt_tensor_acquire(le.base, &data, nullptr), DSRT_OK) << dsrt_last_error_message();
  EXPECT_EQ(std::memcmp(device_bytes(le.base, data, base.size() * sizeof(float)).data(), base.data(),
                        base.size() * sizeof(float)), 0);
  ASSERT_EQ(dsrt_tensor_release(le.base), DSRT_OK);
}

// MiCS: the base is sharded over the shard group (half the world), gathered there, and the
// adapters train as the single-rank reference does.
TEST(MpiFrozen, MicsShardsTheBaseOverTheShardGroup) {
  const int world = g_world->size();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even world (shard groups of half of it)";
  const int k = world / 2;
  std::vector<float> ref_a, ref_b;
  single_rank_reference(&ref_a, &ref_b);
  TrainConfig config = lora_config(3);
  config.zero.mics_shard_size = k;
  LoraEngine le = make_lora(config, g_world);
  LoraEngine without = make_lora(config, g_world, false);
  ASSERT_TRUE(le.engine && without.engine);
  const uint64_t share = static_cast<uint64_t>((kOut * kIn + k - 1) / k) * sizeof(float);
  EXPECT_EQ(device_working_bytes(*le.engine) - device_working_bytes(*without.engine), share);
  for (int64_t s = 0; s < kSteps; ++s) train_step(le, s, g_world->rank());
  EXPECT_LT(relative_error(read_fp32(le.a), widened(ref_a)), 1e-5);
  EXPECT_LT(relative_error(read_fp32(le.b), widened(ref_b)), 1e-5);
  EXPECT_GT(relative_error(read_fp32(le.a), widened(a_init())), 1e-3);
  const std::vector<float> base = base_init();
  void *data = nullptr;
  ASSERT_EQ(dsrt_tensor_acquire(le.base, &data, nullptr), DSRT_OK) << dsrt_last_error_message();
  EXPECT_EQ(std::memcmp(device_bytes(le.base, data, base.size() * sizeof(float)).data(), base.data(),
                        base.size() * sizeof(float)), 0);
  ASSERT_EQ(dsrt_tensor_release(le.base), DSRT_OK);
}

TEST(MpiFrozen, EachRankHoldsItsShareOfTheBase) {
  const int world = g_world->size();
  const uint64_t full = static_cast<uint64_t>(kOut * kIn) * sizeof(float);
  const uint64_t share = static_cast<uint64_t>((kOut * kIn + world - 1) / world) * sizeof(float);
  LoraEngine with = make_lora(lora_config(3), g_world);
  LoraEngine without = make_lora(lora_config(3), g_world, false);
  ASSERT_TRUE(with.engine && without.engine);
  const uint64_t frozen_bytes = device_working_bytes(*with.engine) - device_working_bytes(*without.engine);
  EXPECT_EQ(frozen_bytes, share);
  EXPECT_LT(frozen_bytes, full);
  // While acquired, the gathered copy (padded to W shares) counts too; the release frees it.
  void *data = nullptr;
  ASSERT_EQ(dsrt_tensor_acquire(with.base, &data, nullptr), DSRT_OK);
  EXPECT_EQ(device_working_bytes(*with.engine) - device_working_bytes(*without.engine), share + share * world);
  ASSERT_EQ(dsrt_tensor_release(with.base), DSRT_OK);
  EXPECT_EQ(device_working_bytes(*with.engine) - device_working_bytes(*without.engine), share);
  // Stage 2 keeps the whole base on every rank.
  LoraEngine flat = make_lora(lora_config(2), g_world);
  LoraEngine flat_without = make_lora(lora_config(2), g_world, false);
  EXPECT_EQ(device_working_bytes(*flat.engine) - device_working_bytes(*flat_without.engine), full);
}

TEST(MpiFrozen, GradOfTheBaseIsRefusedNamingIt) {
  LoraEngine le = make_lora(lora_config(3), g_world);
  ASSERT_TRUE(le.engine);
  void *data = nullptr;
  EXPECT_EQ(dsrt_tensor_grad(le.base, &data, nullptr), DSRT_ERR_STATE);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("'base.weight'"), std::string::npos)
      << dsrt_last_error_message();
  // The engine goes on working after the refusal.
  train_step(le, 0, g_world->rank());
}

TEST(MpiFrozen, CheckpointRoundTripAndSixteenBitModel) {
  const std::string dir = shared_dir("ckpt");
  TrainConfig config = lora_config(3);
  config.zero.stage3_gather_16bit_weights_on_model_save = true;
  LoraEngine a = make_lora(config, g_world);
  for (int64_t s = 0; s < 2; ++s) train_step(a, s, g_world->rank());
  Status st = save_checkpoint(*a.engine, dir, "t");
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t s = 2; s < 4; ++s) train_step(a, s, g_world->rank());

  LoraEngine b = make_lora(config, g_world, true, false, random_values(kOut * kIn, 77, 1.0f));
  st = load_checkpoint(*b.engine, dir, "t");
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> base = base_init(), loaded = read_fp32(b.base);
  EXPECT_EQ(std::memcmp(loaded.data(), base.data(), base.size() * sizeof(float)), 0);
  for (int64_t s = 2; s < 4; ++s) train_step(b, s, g_world->rank());
  for (dsrt_tensor *t : {a.a, a.b}) {
    const std::vector<float> x = read_fp32(t);
    const std::vector<float> y = read_fp32(t == a.a ? b.a : b.b);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << dsrt_tensor_name(t);
  }
  // Loaded into a single-rank stage-0 engine (resharding): the same base.
  if (g_world->rank() == 0) {
    LoraEngine one = make_lora(lora_config(0), local_comm(), true, false, random_values(kOut * kIn, 5, 1.0f));
    st = load_checkpoint(*one.engine, dir, "t");
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> v = read_fp32(one.base);
    EXPECT_EQ(std::memcmp(v.data(), base.data(), base.size() * sizeof(float)), 0);
    std::ifstream in(join_file_path(join_file_path(dir, "t"), kModel16File), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t nbytes = base.size() * sizeof(float);
    ASSERT_GT(bytes.size(), nbytes);
    EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - nbytes, base.data(), nbytes), 0);
  }
  // Where the base is trainable: DSRT_ERR_CHECKPOINT naming it, on every rank.
  LoraEngine c = make_lora(config, g_world, true, true);
  st = load_checkpoint(*c.engine, dir, "t");
  EXPECT_EQ(st.code(), DSRT_ERR_CHECKPOINT);
  EXPECT_NE(st.message().find("'base.weight'"), std::string::npos) << st.message();
  ASSERT_TRUE(g_world->barrier().ok());
  if (g_world->rank() == 0) (void)remove_tree(dir);
}

// Prefetching: with the base acquired after adapter A, A's acquire issues the base's gather from
// the second step on (the first records the order); results are bitwise those of a run that
// prefetches nothing (stage3_prefetch_bucket_size 0), and a live limit below the base's size
// keeps it from being prefetched.
TEST(MpiFrozen, Stage3PrefetchesTheBaseLikeATrainableTensor) {
  TrainConfig config = lora_config(3);
  LoraEngine pre = make_lora(config, g_world);
  config.zero.stage3_prefetch_bucket_size = 0;
  LoraEngine none = make_lora(config, g_world);
  config = lora_config(3);
  config.zero.stage3_max_live_parameters = 300;  // below the base's 693 elements
  LoraEngine limited = make_lora(config, g_world);
  ASSERT_TRUE(pre.engine && none.engine && limited.engine);
  for (int64_t s = 0; s < kSteps; ++s) {
    train_step(pre, s, g_world->rank(), true);
    train_step(none, s, g_world->rank(), true);
    train_step(limited, s, g_world->rank(), true);
  }
  const size_t entry = pre.engine->frozen().coordinator_entry(0);
  const ParamCoordinator *pc = pre.engine->param_coordinator();
  ASSERT_NE(pc, nullptr);
  ASSERT_EQ(pc->num_entries(), 3u);
  EXPECT_TRUE(pc->frozen(entry));
  EXPECT_FALSE(pc->frozen(0));
  EXPECT_FALSE(pc->persistent(entry));
  EXPECT_EQ(pc->prefetch_hits(entry), kSteps - 1);
  EXPECT_EQ(none.engine->param_coordinator()->prefetch_hits(), 0);
  EXPECT_EQ(limited.engine->param_coordinator()->prefetch_hits(entry), 0);
  for (LoraEngine *other : {&none, &limited}) {
    expect_bitwise(read_fp32(pre.a), read_fp32(other->a), "A");
    expect_bitwise(read_fp32(pre.b), read_fp32(other->b), "B");
    expect_bitwise(read_fp32(pre.base), read_fp32(other->base), "base");
  }
  EXPECT_GT(relative_error(read_fp32(pre.a), widened(a_init())), 1e-3);
  // Between micro-steps nothing non-persistent stays gathered.
  EXPECT_EQ(device_working_bytes(*pre.engine) - device_working_bytes(*none.engine), 0u);
}

// Below stage3_param_persistence_threshold a frozen tensor stays gathered on every rank, as a
// trainable one does: acquire returns the same copy, release keeps it.
TEST(MpiFrozen, SmallFrozenTensorsPersist) {
  TrainConfig config = lora_config(3);
  config.zero.stage3_param_persistence_threshold = kOut * kIn;
  LoraEngine le = make_lora(config, g_world);
  ASSERT_TRUE(le.engine);
  const ParamCoordinator *pc = le.engine->param_coordinator();
  const size_t entry = le.engine->frozen().coordinator_entry(0);
  ASSERT_TRUE(pc->persistent(entry));
  const void *kept = pc->gathered_data(entry);
  ASSERT_NE(kept, nullptr);
  const std::vector<float> base = base_init();
  EXPECT_EQ(std::memcmp(device_bytes(le.base, kept, base.size() * sizeof(float)).data(), base.data(),
                        base.size() * sizeof(float)), 0);
  for (int64_t s = 0; s < 2; ++s) train_step(le, s, g_world->rank(), true);
  void *data = nullptr;
  ASSERT_EQ(dsrt_tensor_acquire(le.base, &data, nullptr), DSRT_OK);
  EXPECT_EQ(data, kept);
  ASSERT_EQ(dsrt_tensor_release(le.base), DSRT_OK);
  EXPECT_EQ(pc->gathered_data(entry), kept);
  EXPECT_EQ(pc->prefetch_hits(entry), 0);  // never gathered again
}

// offload_param "cpu" and "nvme": the base's shard leaves the device for host memory or a swap
// file; training, the gathered base and a checkpoint round trip are bitwise as without offload.
void offload_round_trip(bool nvme, const std::string &swap, const std::string &dir) {
  TrainConfig config = lora_config(3);
  LoraEngine ref = make_lora(config, g_world);
  LoraEngine ref_without = make_lora(config, g_world, false);
  offload_params(&config, nvme, swap);
  LoraEngine off = make_lora(config, g_world);
  LoraEngine off_without = make_lora(config, g_world, false);
  ASSERT_TRUE(ref.engine && off.engine && ref_without.engine && off_without.engine);
  ASSERT_TRUE(off.engine->param_offload());

  // Memory: the base's shard is off the device and under host memory or NVMe instead.
  const uint64_t share = static_cast<uint64_t>((kOut * kIn + g_world->size() - 1) / g_world->size()) * sizeof(float);
  const dsrt_memory_stats with = memory_stats(*off.engine), without = memory_stats(*off_without.engine);
  EXPECT_EQ(device_working_bytes(*ref.engine) - device_working_bytes(*ref_without.engine), share);
  EXPECT_EQ(with.working_params[DSRT_LOC_DEVICE], without.working_params[DSRT_LOC_DEVICE]);
  const int where = nvme ? DSRT_LOC_NVME : DSRT_LOC_HOST;
  EXPECT_GE(with.working_params[where] - without.working_params[where], share);
  EXPECT_LT(with.working_params[where] - without.working_params[where], share + 64);

  for (int64_t s = 0; s < 2; ++s) {
    train_step(ref, s, g_world->rank(), true);
    train_step(off, s, g_world->rank(), true);
  }
  EXPECT_GT(off.engine->param_coordinator()->prefetch_hits(off.engine->frozen().coordinator_entry(0)), 0);
  Status st = save_checkpoint(*off.engine, dir, "t");
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t s = 2; s < 4; ++s) {
    train_step(ref, s, g_world->rank(), true);
    train_step(off, s, g_world->rank(), true);
  }
  expect_bitwise(read_fp32(ref.a), read_fp32(off.a), "A");
  expect_bitwise(read_fp32(ref.b), read_fp32(off.b), "B");
  const std::vector<float> base = base_init();
  expect_bitwise(read_fp32(off.base), base, "base");
  void *data = nullptr;
  ASSERT_EQ(dsrt_tensor_acquire(off.base, &data, nullptr), DSRT_OK) << dsrt_last_error_message();
  EXPECT_EQ(std::memcmp(device_bytes(off.base, data, base.size() * sizeof(float)).data(), base.data(),
                        base.size() * sizeof(float)), 0);
  ASSERT_EQ(dsrt_tensor_release(off.base), DSRT_OK);

  // Loaded into an offloaded engine whose base started elsewhere, and into an in-memory one: both
  // continue bitwise as the engine that saved.
  LoraEngine back = make_lora(config, g_world, true, false, random_values(kOut * kIn, 78, 1.0f));
  LoraEngine plain = make_lora(lora_config(3), g_world, true, false, random_values(kOut * kIn, 79, 1.0f));
  ASSERT_TRUE(back.engine && plain.engine);
  for (LoraEngine *le : {&back, &plain}) {
    st = load_checkpoint(*le->engine, dir, "t");
    ASSERT_TRUE(st.ok()) << st.message();
    expect_bitwise(read_fp32(le->base), base, "loaded base");
    for (int64_t s = 2; s < 4; ++s) train_step(*le, s, g_world->rank(), true);
    expect_bitwise(read_fp32(le->a), read_fp32(off.a), "A after load");
    expect_bitwise(read_fp32(le->b), read_fp32(off.b), "B after load");
  }
  // write_fp32 on the offloaded base reaches its shard (read back gathered, and after a step).
  const std::vector<float> other = random_values(kOut * kIn, 80, 0.5f);
  ASSERT_EQ(dsrt_tensor_write_fp32(back.base, other.data(), other.size()), DSRT_OK) << dsrt_last_error_message();
  expect_bitwise(read_fp32(back.base), other, "written base");
  train_step(back, 4, g_world->rank(), true);
  expect_bitwise(read_fp32(back.base), other, "written base after a step");
}

void offload_test(bool nvme) {
  SCOPED_TRACE(nvme ? "nvme" : "cpu");
  const std::string swap = shared_dir(nvme ? "swap_nvme" : "swap_cpu");
  const std::string dir = shared_dir(nvme ? "ckpt_nvme" : "ckpt_cpu");
  if (g_world->rank() == 0) {
    ASSERT_TRUE(make_directories(swap).ok());
  }
  ASSERT_TRUE(g_world->barrier().ok());
  offload_round_trip(nvme, swap, dir);  // the engines (and their swap folders) are gone after it
  ASSERT_TRUE(g_world->barrier().ok());
  if (g_world->rank() == 0) {
    (void)remove_tree(dir);
    (void)remove_tree(swap);
  }
}

TEST(MpiFrozen, OffloadParamCpuMovesTheBaseShards) { offload_test(false); }
TEST(MpiFrozen, OffloadParamNvmeMovesTheBaseShards) { offload_test(true); }

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_frozen", &dsrt::g_world); }
