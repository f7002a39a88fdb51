// Frozen tensors on several ranks at ZeRO-3: a LoRA-style model (frozen base, trainable adapters)
// trains its adapters as a single-rank stage-0 engine does on the same data, the base stays
// bitwise unchanged, each rank holds ceil(n/W) elements of it, and checkpoints and the 16-bit model
// file hold it bitwise.
// dsrt-mpi-ranks: 2 3 4
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "../cpp/frozen_lora_util.h"
#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
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
  EXPECT_EQ(std::memcmp(data, base.data(), base.size() * sizeof(float)), 0);
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

}  // namespace
}  // namespace dsrt

int main(int argc, char **argv) { return dsrt::run_mpi_gtests(argc, argv, "mpi_frozen", &dsrt::g_world); }
