// The chunk lists the CUDA multi-tensor kernels read (cuda/chunk_list.h, plain C++): every chunk of
// every tensor is taken by exactly one block of one launch, in order, each block finds its tensor
// and chunk the way the kernels do (chunk_slot, chunk_of_block), and the limits hold. Runs without
// a GPU; test_cuda_kernels runs the kernels over these plans on one.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/chunk_list.h"

namespace dsrt {
namespace cuda_kernels {
namespace {

struct Launch {
  std::vector<std::pair<int, size_t>> blocks;  // (global tensor index, chunk) of each block
  int slots = 0;
};

std::vector<Launch> plan(const std::vector<size_t> &sizes, int max_tensors, int max_blocks) {
  std::vector<TensorEntry> entries(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) {
    entries[t] = TensorEntry{};
    entries[t].n = sizes[t];
    entries[t].global_index = -1;
  }
  std::vector<Launch> launches;
  ChunkList list;
  const Status s = plan_chunk_lists(entries.data(), entries.size(), max_tensors, max_blocks, list,
                                    [&](const ChunkList &l, int blocks) {
                                      Launch launch;
                                      launch.slots = l.count;
                                      for (int b = 0; b < blocks; ++b) {
                                        const int slot = chunk_slot(l, b);
                                        launch.blocks.push_back({l.tensors[slot].global_index, chunk_of_block(l, slot, b)});
                                      }
                                      launches.push_back(launch);
                                      return Status::Ok();
                                    });
  EXPECT_TRUE(s.ok()) << s.message();
  return launches;
}

void expect_every_chunk_once(const std::vector<size_t> &sizes, const std::vector<Launch> &launches, int max_tensors,
                             int max_blocks) {
  std::vector<std::pair<int, size_t>> want, got;
  for (size_t t = 0; t < sizes.size(); ++t)
    for (size_t c = 0; c < chunks_of(sizes[t]); ++c) want.push_back({static_cast<int>(t), c});
  for (const Launch &l : launches) {
    EXPECT_GT(l.blocks.size(), 0u);
    EXPECT_LE(static_cast<int>(l.blocks.size()), max_blocks);
    EXPECT_GE(l.slots, 1);
    EXPECT_LE(l.slots, max_tensors);
    got.insert(got.end(), l.blocks.begin(), l.blocks.end());
  }
  EXPECT_EQ(got, want);  // each chunk once, tensors and chunks in order
}

TEST(CudaChunkList, EveryChunkOnceUnderAnyLimits) {
  std::mt19937 rng(20261126);
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> sizes(1 + rng() % 40);
    for (size_t &n : sizes) {
      const unsigned kind = rng() % 4;
      n = kind == 0 ? 0 : kind == 1 ? 1 + rng() % 1000 : kind == 2 ? rng() % (5 * kChunk) : (rng() % 6) * kChunk;
    }
    const int max_tensors = round % 5 == 0 ? kMaxTensors : 1 + static_cast<int>(rng() % 6);
    const int max_blocks = round % 7 == 0 ? kMaxBlocks : 1 + static_cast<int>(rng() % 9);
    SCOPED_TRACE("round " + std::to_string(round) + " tensors " + std::to_string(max_tensors) + " blocks " +
                 std::to_string(max_blocks));
    expect_every_chunk_once(sizes, plan(sizes, max_tensors, max_blocks), max_tensors, max_blocks);
  }
}

// The benchmark's many-tensor layout: 100M parameters in 512 equal tensors (3 chunks each) take two
// launches at the default limits (the per-block map of before took five of about 330 blocks).
TEST(CudaChunkList, ManySmallTensorsFillFewLaunches) {
  const std::vector<size_t> sizes(512, 100000000 / 512);
  const std::vector<Launch> launches = plan(sizes, kMaxTensors, kMaxBlocks);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].slots, kMaxTensors);
  EXPECT_EQ(launches[0].blocks.size(), static_cast<size_t>(3 * kMaxTensors));
  EXPECT_EQ(launches[1].blocks.size(), static_cast<size_t>(3 * (512 - kMaxTensors)));
  expect_every_chunk_once(sizes, launches, kMaxTensors, kMaxBlocks);
  // One flat tensor: one launch.
  const std::vector<size_t> flat = {200000000};
  EXPECT_EQ(plan(flat, kMaxTensors, kMaxBlocks).size(), 1u);
}

// Cutting each chunk into 2^shift parts (one block each, block b taking part b & (2^shift - 1) of
// the plan's block b >> shift, as step_kernel does): every element of every tensor in exactly one
// part, in order, non-empty parts starting on a multiple of 8 elements, and the parts past a short last chunk empty.
TEST(CudaChunkList, ChunkPartsCoverEveryElementOnce) {
  const std::vector<size_t> sizes = {1, 7, 8, 2047, 2048, 4099, kChunk - 1, kChunk, kChunk + 5, 3 * kChunk + 2049};
  for (int shift = 0; shift <= kMaxPartShift; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    for (const Launch &l : plan(sizes, 3, 4)) {
      for (size_t b = 0; b < (l.blocks.size() << shift); ++b) {
        const auto [tensor, chunk] = l.blocks[b >> shift];
        const int part = static_cast<int>(b & ((size_t(1) << shift) - 1));
        const size_t n = sizes[static_cast<size_t>(tensor)];
        size_t begin = 0, end = 0;
        chunk_part_range(chunk, part, shift, n, &begin, &end);
        EXPECT_LE(begin, end);
        EXPECT_LE(end, n);
        EXPECT_LE(end - begin, kChunk >> shift);
        if (begin == end) {
          EXPECT_EQ(begin, n) << "an empty part is past the tensor's end";
        } else {
          EXPECT_EQ(begin % 8, 0u) << "tensor " << tensor << " chunk " << chunk << " part " << part;
        }
      }
    }
  }
  // The parts of all launches, in launch and block order, tile each tensor from 0 to n.
  for (int shift = 0; shift <= kMaxPartShift; ++shift) {
    std::vector<size_t> covered(sizes.size(), 0);
    for (const Launch &l : plan(sizes, 2, 3)) {
      for (size_t b = 0; b < (l.blocks.size() << shift); ++b) {
        const auto [tensor, chunk] = l.blocks[b >> shift];
        size_t begin = 0, end = 0;
        chunk_part_range(chunk, static_cast<int>(b & ((size_t(1) << shift) - 1)), shift, sizes[static_cast<size_t>(tensor)],
                         &begin, &end);
        if (begin == end) continue;
        EXPECT_EQ(begin, covered[static_cast<size_t>(tensor)]);
        covered[static_cast<size_t>(tensor)] = end;
      }
    }
    EXPECT_EQ(covered, sizes) << "shift " << shift;
  }
}

// vector_head: views at one element offset into 16-byte aligned buffers (fp32 and 16-bit mixed,
// as a flat partition cut into tensors) share the element where all are aligned; arrays that
// disagree, or an address off its element size, have none.
TEST(CudaChunkList, VectorHeadFindsTheSharedAlignedElement) {
  alignas(16) static unsigned char f32[4][256], f16[2][256];
  const int bytes[] = {4, 4, 4, 4, 2, 2};
  for (size_t offset = 0; offset < 40; ++offset) {
    const void *arrays[] = {f32[0] + 4 * offset, f32[1] + 4 * offset, f32[2] + 4 * offset, f32[3] + 4 * offset,
                            f16[0] + 2 * offset, f16[1] + 2 * offset};
    const int h = vector_head(arrays, bytes, 6);
    EXPECT_EQ(h, static_cast<int>((8 - offset % 8) % 8)) << "offset " << offset;
    // Only fp32 arrays: the first element on 16 bytes (a multiple of 4 elements).
    EXPECT_EQ(vector_head(arrays, bytes, 4), static_cast<int>((4 - offset % 4) % 4)) << "offset " << offset;
  }
  const void *disagree[] = {f32[0] + 4, f32[1]};
  EXPECT_EQ(vector_head(disagree, bytes, 2), -1);
  const void *odd[] = {f32[0] + 2};  // an fp32 array on a 2-byte boundary
  EXPECT_EQ(vector_head(odd, bytes, 1), -1);
  const void *with_null[] = {nullptr, f32[1] + 8, nullptr};
  EXPECT_EQ(vector_head(with_null, bytes, 3), 2);
}

// part_vector_range: for any part and head, the three ranges tile the part, the vector range
// starts on head mod 8 and holds whole vectors, and fewer than 8 elements go one at a time on
// either side.
TEST(CudaChunkList, PartVectorRangeTilesThePart) {
  for (size_t begin : {size_t(0), size_t(2048), size_t(65536)}) {
    for (size_t len : {size_t(0), size_t(1), size_t(5), size_t(7), size_t(8), size_t(9), size_t(15), size_t(2048), size_t(4099)}) {
      for (int head = 0; head < 8; ++head) {
        size_t vb = 0, ve = 0;
        part_vector_range(begin, begin + len, head, &vb, &ve);
        SCOPED_TRACE("begin " + std::to_string(begin) + " len " + std::to_string(len) + " head " + std::to_string(head));
        EXPECT_LE(begin, vb);
        EXPECT_LE(vb, ve);
        EXPECT_LE(ve, begin + len);
        EXPECT_EQ((ve - vb) % 8, 0u);
        EXPECT_LT(vb - begin, 8u);
        EXPECT_LT(begin + len - ve, 8u);
        if (ve > vb) {
          EXPECT_EQ(vb % 8, static_cast<size_t>(head));
        }
        if (len >= 16) {
          EXPECT_GT(ve, vb);
        }
      }
    }
  }
}

TEST(CudaChunkList, ALaunchErrorStopsTheWalk) {
  std::vector<TensorEntry> entries(3);
  for (TensorEntry &e : entries) {
    e = TensorEntry{};
    e.n = 2 * kChunk;
  }
  ChunkList list;
  int calls = 0;
  const Status s = plan_chunk_lists(entries.data(), entries.size(), 1, kMaxBlocks, list, [&](const ChunkList &, int) {
    ++calls;
    return Error(DSRT_ERR_DEVICE, "launch failed");
  });
  EXPECT_EQ(s.code(), DSRT_ERR_DEVICE);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace cuda_kernels
}  // namespace dsrt
