// Frozen tensors on one rank at every ZeRO stage: a LoRA-style model trains its adapters as a
// float64 AdamW reference does while the frozen base stays bitwise unchanged; the base costs its
// working copy only; gradient calls on it are refused naming it; checkpoints and the 16-bit model
// hold it. At stage 3 the base is one of the parameter coordinator's entries (prefetched, kept
// gathered below the persistence threshold) and offload_param moves its shard off the device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "ckpt/ckpt.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "frozen_lora_util.h"
#include "zero/param_coordinator.h"

namespace dsrt {
namespace {

using namespace lora_test;

std::shared_ptr<Comm> local_comm() {
  std::shared_ptr<Comm> comm;
  EXPECT_TRUE(comm_create_local(&comm).ok());
  return comm;
}

std::string scratch(const char *what) {
  std::string dir = testing::TempDir() + "dsrt_frozen_" + what + "_" + std::to_string(::getpid());
  (void)remove_tree(dir);
  return dir;
}

TEST(EngineFrozen, LoraTrainsAdaptersAtEveryStageAndLeavesTheBaseBitwise) {
  std::vector<double> ref_a, ref_b;
  constexpr int64_t kSteps = 6;
  reference(kSteps, 1, &ref_a, &ref_b);
  const std::vector<float> base = base_init();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    LoraEngine le = make_lora(lora_config(stage), local_comm());
    ASSERT_TRUE(le.engine);
    EXPECT_EQ(le.engine->num_tensors(), 2u);  // the frozen base is not a trainable tensor
    for (int64_t s = 0; s < kSteps; ++s) train_step(le, s, 0);
    EXPECT_LT(relative_error(read_fp32(le.a), ref_a), 1e-5);
    EXPECT_LT(relative_error(read_fp32(le.b), ref_b), 1e-5);
    const std::vector<float> after = read_fp32(le.base);
    EXPECT_EQ(std::memcmp(after.data(), base.data(), base.size() * sizeof(float)), 0);
    // The adapters moved (the comparison above is not on untouched values).
    EXPECT_GT(relative_error(read_fp32(le.a), widened(a_init())), 1e-3);
  }
}

TEST(EngineFrozen, MemoryCountsTheWorkingCopyOnly) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    LoraEngine with = make_lora(lora_config(stage), local_comm());
    LoraEngine without = make_lora(lora_config(stage), local_comm(), false);
    ASSERT_TRUE(with.engine && without.engine);
    EXPECT_EQ(device_working_bytes(*with.engine) - device_working_bytes(*without.engine),
              static_cast<uint64_t>(kOut * kIn * sizeof(float)));
    dsrt_memory_stats a, b;
    std::memset(&a, 0, sizeof a);
    std::memset(&b, 0, sizeof b);
    a.struct_size = b.struct_size = sizeof a;
    ASSERT_TRUE(with.engine->memory(&a).ok());
    ASSERT_TRUE(without.engine->memory(&b).ok());
    EXPECT_EQ(a.master_params[DSRT_LOC_DEVICE], b.master_params[DSRT_LOC_DEVICE]);
    EXPECT_EQ(a.optimizer_states[DSRT_LOC_DEVICE], b.optimizer_states[DSRT_LOC_DEVICE]);
    EXPECT_EQ(a.gradients[DSRT_LOC_DEVICE], b.gradients[DSRT_LOC_DEVICE]);
  }
  // 16-bit working dtype: two bytes per frozen element, its value rounded to bf16.
  LoraEngine with = make_lora(lora_config(3, DSRT_BF16), local_comm());
  LoraEngine without = make_lora(lora_config(3, DSRT_BF16), local_comm(), false);
  EXPECT_EQ(device_working_bytes(*with.engine) - device_working_bytes(*without.engine),
            static_cast<uint64_t>(kOut * kIn * 2));
  const std::vector<float> base = base_init(), got = read_fp32(with.base);
  for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(got[i], bf16_to_float(float_to_bf16(base[i]))) << i;
}

TEST(EngineFrozen, GradientCallsAreRefusedNamingTheTensor) {
  LoraEngine le = make_lora(lora_config(3), local_comm());
  ASSERT_TRUE(le.engine);
  void *data = nullptr;
  EXPECT_EQ(dsrt_tensor_grad(le.base, &data, nullptr), DSRT_ERR_STATE);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("base.weight"), std::string::npos) << dsrt_last_error_message();
  EXPECT_EQ(data, nullptr);
  EXPECT_EQ(dsrt_tensor_grad_ready(le.base), DSRT_ERR_STATE);
  EXPECT_NE(std::string(dsrt_last_error_message()).find("base.weight"), std::string::npos);
  EXPECT_EQ(dsrt_tensor_set_group(le.base, 0), DSRT_ERR_STATE);
  EXPECT_EQ(dsrt_tensor_group(le.base), -1);
  EXPECT_EQ(dsrt_tensor_release(le.base), DSRT_ERR_STATE);  // not acquired
  // Accessors and registration rules.
  EXPECT_STREQ(dsrt_tensor_name(le.base), "base.weight");
  EXPECT_EQ(dsrt_tensor_numel(le.base), kOut * kIn);
  EXPECT_EQ(dsrt_tensor_ndim(le.base), 2);
  const int64_t shape[1] = {4};
  dsrt_engine handle;  // a C handle around a fresh, unbuilt engine
  Status s = Engine::create(lora_config(0), local_comm(), &handle.impl);
  ASSERT_TRUE(s.ok()) << s.message();
  dsrt_tensor *t = nullptr;
  ASSERT_EQ(dsrt_engine_add_frozen_param(&handle, "x", shape, 1, nullptr, &t), DSRT_OK);
  EXPECT_EQ(dsrt_engine_add_param(&handle, "x", shape, 1, nullptr, nullptr), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_engine_add_frozen_param(&handle, "x", shape, 1, nullptr, nullptr), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_engine_add_frozen_param(nullptr, "y", shape, 1, nullptr, nullptr), DSRT_ERR_INVALID_ARGUMENT);
  const float bad[4] = {1.0f, NAN, 0.0f, 0.0f};
  EXPECT_EQ(dsrt_engine_add_frozen_param(&handle, "y", shape, 1, bad, nullptr), DSRT_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(dsrt_engine_add_param(&handle, "z", shape, 1, nullptr, nullptr), DSRT_OK);
  ASSERT_EQ(dsrt_engine_build(&handle), DSRT_OK);
  EXPECT_EQ(dsrt_engine_add_frozen_param(&handle, "w", shape, 1, nullptr, nullptr), DSRT_ERR_STATE);
  EXPECT_EQ(dsrt_engine_num_tensors(&handle), 1);
  // write_fp32 sets a frozen value (rounded to the working dtype), read_fp32 returns it.
  const float v[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  ASSERT_EQ(dsrt_tensor_write_fp32(t, v, 4), DSRT_OK);
  float r[4] = {};
  ASSERT_EQ(dsrt_tensor_read_fp32(t, r, 4), DSRT_OK);
  EXPECT_EQ(std::memcmp(r, v, sizeof v), 0);
  EXPECT_EQ(dsrt_tensor_read_fp32(t, r, 3), DSRT_ERR_INVALID_ARGUMENT);
}

TEST(EngineFrozen, CheckpointsAndTheSixteenBitModelHoldTheBase) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = scratch(("ckpt" + std::to_string(stage)).c_str());
    TrainConfig config = lora_config(stage);
    config.zero.stage3_gather_16bit_weights_on_model_save = true;
    LoraEngine a = make_lora(config, local_comm());
    for (int64_t s = 0; s < 3; ++s) train_step(a, s, 0);
    ASSERT_TRUE(save_checkpoint(*a.engine, dir, "t").ok());
    for (int64_t s = 3; s < 5; ++s) train_step(a, s, 0);

    // A fresh engine with another base value: the load restores the saved base and the adapters.
    LoraEngine b = make_lora(config, local_comm(), true, false, random_values(kOut * kIn, 99, 1.0f));
    Status st = load_checkpoint(*b.engine, dir, "t");
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> base = base_init(), loaded = read_fp32(b.base);
    EXPECT_EQ(std::memcmp(loaded.data(), base.data(), base.size() * sizeof(float)), 0);
    for (int64_t s = 3; s < 5; ++s) train_step(b, s, 0);
    const std::vector<float> fa = read_fp32(a.a), fb = read_fp32(b.a);
    EXPECT_EQ(std::memcmp(fa.data(), fb.data(), fa.size() * sizeof(float)), 0);

    Manifest m;
    ASSERT_TRUE(read_manifest(join_file_path(dir, "t"), &m).ok());
    ASSERT_EQ(m.frozen.size(), 1u);
    EXPECT_EQ(m.frozen[0].name, "base.weight");
    EXPECT_EQ(m.tensors.size(), 2u);

    // The 16-bit model: the base (registered first, written after the trainable tensors) is the
    // file's last kOut*kIn*4 bytes, bitwise.
    std::ifstream in(join_file_path(join_file_path(dir, "t"), kModel16File), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t nbytes = base.size() * sizeof(float);
    ASSERT_GT(bytes.size(), nbytes);
    EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - nbytes, base.data(), nbytes), 0);
    EXPECT_NE(std::string(bytes.begin(), bytes.end() - static_cast<std::ptrdiff_t>(nbytes)).find("\"base.weight\""),
              std::string::npos);

    // Offline access (zero-to-fp32): the frozen tensor after the trainable ones, bitwise.
    dsrt_checkpoint *ckpt = nullptr;
    ASSERT_EQ(dsrt_checkpoint_open(dir.c_str(), "t", &ckpt), DSRT_OK) << dsrt_last_error_message();
    EXPECT_EQ(dsrt_checkpoint_num_tensors(ckpt), 3);
    EXPECT_STREQ(dsrt_checkpoint_tensor_name(ckpt, 2), "base.weight");
    int64_t dims[8] = {};
    int32_t ndim = 0;
    ASSERT_EQ(dsrt_checkpoint_tensor_shape(ckpt, "base.weight", dims, &ndim), DSRT_OK);
    EXPECT_EQ(ndim, 2);
    EXPECT_EQ(dims[0], kOut);
    std::vector<float> offline(base.size());
    ASSERT_EQ(dsrt_checkpoint_read_tensor_fp32(ckpt, "base.weight", offline.data(), offline.size()), DSRT_OK)
        << dsrt_last_error_message();
    EXPECT_EQ(std::memcmp(offline.data(), base.data(), base.size() * sizeof(float)), 0);
    dsrt_checkpoint_close(ckpt);

    // An engine where the base is trainable: refused, naming the tensor.
    LoraEngine c = make_lora(config, local_comm(), true, true);
    st = load_checkpoint(*c.engine, dir, "t");
    EXPECT_EQ(st.code(), DSRT_ERR_CHECKPOINT);
    EXPECT_NE(st.message().find("'base.weight' is frozen in the checkpoint"), std::string::npos) << st.message();
    // And the converse: a checkpoint that trained the base, loaded where it is frozen.
    const std::string dir2 = dir + "_trainable";
    ASSERT_TRUE(save_checkpoint(*c.engine, dir2, "t").ok());
    st = load_checkpoint(*b.engine, dir2, "t");
    EXPECT_EQ(st.code(), DSRT_ERR_CHECKPOINT);
    EXPECT_NE(st.message().find("'base.weight' is trainable in the checkpoint"), std::string::npos) << st.message();
    // A checkpoint without any frozen tensor (saved by an engine without the base) loads, and the
    // frozen base keeps its value.
    const std::string dir3 = dir + "_nofrozen";
    LoraEngine bare = make_lora(config, local_comm(), false);
    ASSERT_TRUE(save_checkpoint(*bare.engine, dir3, "t").ok());
    LoraEngine d = make_lora(config, local_comm());
    st = load_checkpoint(*d.engine, dir3, "t");
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> kept = read_fp32(d.base);
    EXPECT_EQ(std::memcmp(kept.data(), base.data(), base.size() * sizeof(float)), 0);
    (void)remove_tree(dir3);

    // A damaged frozen-parameter file: the load fails naming the tensor and changes nothing.
    {
      const std::string frozen_path = join_file_path(join_file_path(dir, "t"), kFrozenFile);
      std::fstream f(frozen_path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(17);
      f.put('\x5a');
    }
    const std::vector<float> before = read_fp32(b.a);
    st = load_checkpoint(*b.engine, dir, "t");
    EXPECT_EQ(st.code(), DSRT_ERR_CHECKPOINT);
    EXPECT_NE(st.message().find("frozen tensor 'base.weight'"), std::string::npos) << st.message();
    const std::vector<float> unchanged = read_fp32(b.a);
    EXPECT_EQ(std::memcmp(before.data(), unchanged.data(), before.size() * sizeof(float)), 0);
    (void)remove_tree(dir);
    (void)remove_tree(dir2);
  }
}

// One rank, offload_param "cpu" and "nvme" (fp32 and bf16): the base's shard moves to host memory
// or a swap file, the device keeps only the adapters' and persistent tensors' copies, and training,
// the gathered base, checkpoints and the 16-bit model file are bitwise those of the in-memory engine.
TEST(EngineFrozen, OffloadParamMovesTheBaseOffTheDevice) {
  for (bool nvme : {false, true}) {
    for (dsrt_dtype working : {DSRT_F32, DSRT_BF16}) {
      SCOPED_TRACE(Format("nvme %d dtype %s", nvme, dtype_name(working)));
      const std::string swap = scratch("swap");
      const std::string dir = scratch("offload_ckpt");
      ASSERT_TRUE(make_directories(swap).ok());
      {
        TrainConfig config = lora_config(3, working);
        config.zero.stage3_gather_16bit_weights_on_model_save = true;
        LoraEngine ref = make_lora(config, local_comm());
        offload_params(&config, nvme, swap);
        LoraEngine off = make_lora(config, local_comm());
        LoraEngine off_without = make_lora(config, local_comm(), false);
        ASSERT_TRUE(ref.engine && off.engine && off_without.engine);
        const uint64_t base_bytes = static_cast<uint64_t>(kOut * kIn) * dtype_size(working);
        const dsrt_memory_stats with = memory_stats(*off.engine), without = memory_stats(*off_without.engine);
        EXPECT_EQ(with.working_params[DSRT_LOC_DEVICE], without.working_params[DSRT_LOC_DEVICE]);
        const int where = nvme ? DSRT_LOC_NVME : DSRT_LOC_HOST;
        EXPECT_GE(with.working_params[where] - without.working_params[where], base_bytes);
        EXPECT_LT(with.working_params[where] - without.working_params[where], base_bytes + 64);
        EXPECT_EQ(with.master_params[DSRT_LOC_DEVICE], without.master_params[DSRT_LOC_DEVICE]);

        for (int64_t s = 0; s < 3; ++s) {
          train_step(ref, s, 0, true);
          train_step(off, s, 0, true);
        }
        const size_t entry = off.engine->frozen().coordinator_entry(0);
        EXPECT_EQ(off.engine->param_coordinator()->prefetch_hits(entry), 2);
        if (nvme) {
          EXPECT_GT(off.engine->param_coordinator()->swap_in_stats().bytes_read, base_bytes);
        }
        ASSERT_TRUE(save_checkpoint(*off.engine, dir, "t").ok());
        ASSERT_TRUE(save_checkpoint(*ref.engine, dir, "r").ok());
        for (int64_t s = 3; s < 5; ++s) {
          train_step(ref, s, 0, true);
          train_step(off, s, 0, true);
        }
        expect_bitwise(read_fp32(ref.a), read_fp32(off.a), "A");
        expect_bitwise(read_fp32(ref.b), read_fp32(off.b), "B");
        expect_bitwise(read_fp32(ref.base), read_fp32(off.base), "base");
        EXPECT_GT(relative_error(read_fp32(off.a), widened(a_init())), 1e-3);

        // The two checkpoints' files are the same bytes (frozen values and the 16-bit model).
        for (const char *file : {kFrozenFile, kModel16File}) {
          std::ifstream x(join_file_path(join_file_path(dir, "t"), file), std::ios::binary);
          std::ifstream y(join_file_path(join_file_path(dir, "r"), file), std::ios::binary);
          const std::string bx((std::istreambuf_iterator<char>(x)), std::istreambuf_iterator<char>());
          const std::string by((std::istreambuf_iterator<char>(y)), std::istreambuf_iterator<char>());
          EXPECT_FALSE(bx.empty()) << file;
          EXPECT_EQ(bx, by) << file;
        }
        // Loaded into an offloaded engine whose base started elsewhere: continues bitwise.
        LoraEngine back = make_lora(config, local_comm(), true, false, random_values(kOut * kIn, 98, 1.0f));
        Status st = load_checkpoint(*back.engine, dir, "t");
        ASSERT_TRUE(st.ok()) << st.message();
        for (int64_t s = 3; s < 5; ++s) train_step(back, s, 0, true);
        expect_bitwise(read_fp32(back.a), read_fp32(off.a), "A after load");
        expect_bitwise(read_fp32(back.base), read_fp32(ref.base), "base after load");
      }
      (void)remove_tree(dir);
      (void)remove_tree(swap);
    }
  }
}

}  // namespace
}  // namespace dsrt
