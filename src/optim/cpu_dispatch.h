// cpu_dispatch.h -- picks the kernel table for this CPU (or the one DSRT_CPU_ISA / a test forces)
// and splits a range into cache-line-aligned chunks that the work pool's threads take dynamically
// (work_pool.h: OpenMP's thread count, not its regions).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "optim/kernel_table.h"
#include "optim/work_pool.h"

namespace dsrt {
namespace optim_kernels {

const KernelTable &active_kernels();

// Below this many elements a range runs on the calling thread: a parallel region costs a few
// microseconds, more than such a range takes.
constexpr size_t kParallelMinElements = 1 << 15;
// Chunk boundaries are multiples of this many elements (256 bytes of fp32, 128 of 16-bit), so
// threads never share a cache line of any array and every chunk but the last has no vector tail.
constexpr size_t kChunkAlign = 64;
// Threads take chunks dynamically, several per thread, so a thread that loses its core for a
// while (to the engine's I/O or communication threads, or another process) delays the step by
// one chunk rather than by its whole share (and one that never got its core takes none: the
// caller runs them all); chunks stay large enough to amortize the hand-out.
constexpr size_t kChunksPerThread = 8;
constexpr size_t kMinChunkElements = 1 << 15;

// How [0, n) is cut: chunk i is [i * size, min(n, (i + 1) * size)). The cut depends only on n and
// the thread count, never on timing, so per-chunk partial sums added in chunk order give the same
// result on every run.
struct ChunkPlan {
  size_t size = 0;
  size_t count = 0;
  int threads = 1;
};

inline ChunkPlan plan_chunks(size_t n) {
  ChunkPlan plan;
  plan.threads = (n < kParallelMinElements || omp_in_parallel() || in_work_pool()) ? 1 : std::max(1, omp_get_max_threads());
  if (plan.threads == 1) {
    plan.size = n;
    plan.count = n ? 1 : 0;
    return plan;
  }
  size_t size = (n + plan.threads * kChunksPerThread - 1) / (plan.threads * kChunksPerThread);
  size = std::max(size, kMinChunkElements);
  size = (size + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  plan.size = size;
  plan.count = (n + size - 1) / size;
  if (plan.count == 1) plan.threads = 1;
  return plan;
}

// The sum of squares from per-chunk partials, added in chunk order (so every way of forming them
// -- one pass, a stream, a fold into the gradient's writes -- gives the same bits), times scale
// squared. Squares of finite floats summed in double cannot overflow, so a non-finite sum means an
// inf or nan in the data: *nonfinite (when given) says so at no extra cost.
inline double finish_sum_squares(const std::vector<double> &partial, float scale, bool *nonfinite) {
  double raw = 0.0;
  for (double p : partial) raw += p;
  if (nonfinite) *nonfinite = !std::isfinite(raw);
  const double s = static_cast<double>(scale);
  return raw * s * s;
}

// fn(begin, end, chunk_index) for every chunk of the plan, on the work pool's threads.
template <class Fn>
void for_each_chunk(size_t n, const ChunkPlan &plan, Fn &&fn) {
  if (plan.threads == 1) {
    for (size_t c = 0; c < plan.count; ++c) fn(c * plan.size, std::min(n, (c + 1) * plan.size), c);
    return;
  }
  work_pool_run(plan.count, plan.threads,
                [&](size_t chunk) { fn(chunk * plan.size, std::min(n, (chunk + 1) * plan.size), chunk); });
}

// Several ranges at once (one per slice): each is cut into aligned pieces of at most the chunk
// size the total would get, consecutive small pieces are grouped into units of about one chunk,
// and threads take units dynamically. Small tensors then share the threads instead of each
// running alone. The cut depends only on the sizes and the thread count.
struct Piece {
  size_t slice, begin, end;
};
struct BatchPlan {
  std::vector<Piece> pieces;
  std::vector<size_t> unit_begin;  // unit u is pieces[unit_begin[u], unit_begin[u + 1])
  int threads = 1;
};

inline BatchPlan plan_batch(const std::vector<size_t> &sizes) {
  size_t total = 0;
  for (size_t n : sizes) total += n;
  const ChunkPlan chunks = plan_chunks(total);
  BatchPlan plan;
  plan.threads = chunks.threads;
  const size_t chunk = std::max<size_t>(chunks.size, 1);
  size_t unit_fill = chunk;  // forces a new unit at the first piece
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (size_t b = 0; b < sizes[s]; b += chunk) {
      const size_t e = std::min(sizes[s], b + chunk);
      if (unit_fill + (e - b) > chunk) {
        plan.unit_begin.push_back(plan.pieces.size());
        unit_fill = 0;
      }
      plan.pieces.push_back({s, b, e});
      unit_fill += e - b;
    }
  }
  plan.unit_begin.push_back(plan.pieces.size());
  return plan;
}

// fn(piece, piece_index) for every piece of the plan.
template <class Fn>
void for_each_piece(const BatchPlan &plan, Fn &&fn) {
  const long long units = static_cast<long long>(plan.unit_begin.size()) - 1;
  auto run_unit = [&](size_t u) {
    for (size_t i = plan.unit_begin[u]; i < plan.unit_begin[u + 1]; ++i) fn(plan.pieces[i], i);
  };
  if (plan.threads == 1 || units <= 1) {
    for (long long u = 0; u < units; ++u) run_unit(static_cast<size_t>(u));
    return;
  }
  work_pool_run(static_cast<size_t>(units), plan.threads, run_unit);
}

}  // namespace optim_kernels
}  // namespace dsrt
