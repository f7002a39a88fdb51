// DeepSpeed's meaning of 0 for the ZeRO sizes: reduce_bucket_size 0 (one bucket per gradient),
// allgather_bucket_size 0 (each partition gathered in one piece) and sub_group_size 0 (one NVMe
// sub-group per parameter) train to the same bits as sized buckets and sub-groups, since the
// reduction and the optimizer are elementwise and exact in their order of summation.
#include <gtest/gtest.h>

#include <dirent.h>

#include "offload_test_util.h"

namespace dsrt {
namespace offload_test {
namespace {

const std::vector<std::vector<int64_t>> kShapes = {{40, 25}, {37}, {9, 57}, {3}};

std::vector<std::vector<float>> trained(const TrainConfig &config, int steps) {
  std::unique_ptr<Engine> e;
  Status st = make_engine(config, local_comm(), kShapes, &e);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!e) return {};
  train(*e, steps);
  return read_all(*e);
}

// Files under folder (recursively) whose name contains part.
size_t files_named(const std::string &folder, const std::string &part) {
  size_t n = 0;
  DIR *dir = opendir(folder.c_str());
  if (dir == nullptr) return 0;
  while (dirent *entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (entry->d_type == DT_DIR) n += files_named(folder + "/" + name, part);
    else if (name.find(part) != std::string::npos) ++n;
  }
  closedir(dir);
  return n;
}

class ZeroSizes : public ::testing::TestWithParam<int> {};

TEST_P(ZeroSizes, BucketSizesZeroTrainAsSizedBuckets) {
  TrainConfig sized = base_config(GetParam());
  sized.gradient_accumulation_steps = 2;
  TrainConfig zero = sized;
  zero.zero.reduce_bucket_size = 0;
  zero.zero.allgather_bucket_size = 0;
  const auto a = trained(sized, 6), b = trained(zero, 6);
  expect_bitwise_equal(a, b);
  // Trained: the weights moved from their initial values.
  std::unique_ptr<Engine> fresh;
  ASSERT_TRUE(make_engine(sized, local_comm(), kShapes, &fresh).ok());
  const auto init = read_all(*fresh);
  ASSERT_EQ(init.size(), b.size());
  EXPECT_NE(init[0], b[0]);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroSizes, ::testing::Values(0, 1, 2, 3));

TEST(ZeroSizesNvme, SubGroupSizeZeroIsOneSubGroupPerParameter) {
  for (int stage : {1, 3}) {
    TempFolder a_folder, b_folder;
    TrainConfig per_param = base_config(stage);
    set_nvme(&per_param, a_folder.path, 0, 2, true);
    TrainConfig sized = base_config(stage);
    set_nvme(&sized, b_folder.path, 300, 2, true);
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(make_engine(per_param, local_comm(), kShapes, &e).ok());
    // One sub-group per parameter: as many "master" arrays as tensors.
    EXPECT_EQ(files_named(a_folder.path, "master"), kShapes.size()) << "stage " << stage;
    e.reset();
    expect_bitwise_equal(trained(per_param, 4), trained(sized, 4));
  }
}

}  // namespace
}  // namespace offload_test
}  // namespace dsrt
