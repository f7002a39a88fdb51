// bench_cpu_adam.cpp -- params/s of dsrt's CPU AdamW over one large partition, against the memory
// floor measured in the same run, and (when the caller passes it) torch.optim.AdamW's rate.
//
// The floor is a plain sweep with the update's exact access pattern: read p, g, m, v and write p,
// m, v (and the 16-bit working copy), with the same OpenMP chunking, and with either regular or
// non-temporal stores, and regular ones with each line asked for 2 KiB ahead (as the kernels do: one core
// alone does not keep enough fills in flight without it); the fastest is the floor. (A STREAM triad under-counts: its
// stores go to lines it never read, so each one costs a read for ownership too.)
//
//   bench_cpu_adam [--params N] [--threads T] [--iters K] [--torch-fp32 PARAMS_PER_S]
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "optim/cpu_dispatch.h"
#include "optim/cpu_optimizer.h"
#include "util/aligned_buffer.h"
#include "util/half.h"

// GCC 12 reports the intrinsics' deliberately undefined pass-through operands.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Store kinds of the floor sweep: all regular; all non-temporal; regular for p, m, v (whose lines
// were just read) and non-temporal for the write-only 16-bit copy; the last with software prefetch
// of every array 2 KiB ahead (the kernels' distance, optim/kernels_body.inl).
enum Stores { kRegular, kStreamAll, kStreamCopy, kStreamCopyPrefetch };
constexpr size_t kAhead = 512;  // elements

template <class T>
inline void ahead(const T *base, size_t i, bool for_write) {
  const void *at = reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(base) + (i + kAhead) * sizeof(T));
  if (for_write) __builtin_prefetch(at, 1, 3);
  else __builtin_prefetch(at, 0, 3);
}

struct Arrays {
  float *p, *g, *m, *v;
  uint16_t *w16;
  size_t n;
};

// ---------------------------------------------------------------------------------------------
// The floor sweeps. Each does the minimum arithmetic that keeps every load and store live.

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,prfchw"))) void sweep_update_avx512(const Arrays &a, bool with_copy,
                                                                                      int stores, size_t b, size_t e) {
  const bool stream = stores == kStreamAll;
  const bool prefetch = stores == kStreamCopyPrefetch;
  size_t i = b;
  for (; i + 16 <= e; i += 16) {
    if (prefetch) {
      ahead(a.g, i, false);
      ahead(a.p, i, true);
      ahead(a.m, i, true);
      ahead(a.v, i, true);
    }
    __m512 g = _mm512_loadu_ps(a.g + i);
    __m512 p = _mm512_add_ps(_mm512_loadu_ps(a.p + i), g);
    __m512 m = _mm512_add_ps(_mm512_loadu_ps(a.m + i), g);
    __m512 v = _mm512_fmadd_ps(g, g, _mm512_loadu_ps(a.v + i));  // stays >= 0 for the optimizer
    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p), 16));
    if (stream) {
      _mm512_stream_ps(a.p + i, p);
      _mm512_stream_ps(a.m + i, m);
      _mm512_stream_ps(a.v + i, v);
      if (with_copy) _mm256_stream_si256(reinterpret_cast<__m256i *>(a.w16 + i), h);
    } else {
      _mm512_storeu_ps(a.p + i, p);
      _mm512_storeu_ps(a.m + i, m);
      _mm512_storeu_ps(a.v + i, v);
      if (with_copy && stores >= kStreamCopy) _mm256_stream_si256(reinterpret_cast<__m256i *>(a.w16 + i), h);
      else if (with_copy) _mm256_storeu_si256(reinterpret_cast<__m256i *>(a.w16 + i), h);
    }
  }
  for (; i < e; ++i) {
    a.p[i] += a.g[i];
    a.m[i] += a.g[i];
    a.v[i] += a.g[i] * a.g[i];
    if (with_copy) a.w16[i] = static_cast<uint16_t>(dsrt::float_to_bits(a.p[i]) >> 16);
  }
  if (stores != kRegular) _mm_sfence();
}

__attribute__((target("avx512f"))) double sweep_read_avx512(const float *g, size_t b, size_t e) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  size_t i = b;
  for (; i + 32 <= e; i += 32) {
    ahead(g, i, false);
    ahead(g, i + 16, false);
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(g + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(g + i + 16));
  }
  double s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  for (; i < e; ++i) s += g[i];
  return s;
}
#endif

void sweep_update_plain(const Arrays &a, bool with_copy, size_t b, size_t e) {
  for (size_t i = b; i < e; ++i) {
    const float g = a.g[i];
    a.p[i] += g;
    a.m[i] += g;
    a.v[i] += g * g;
    if (with_copy) a.w16[i] = static_cast<uint16_t>(dsrt::float_to_bits(a.p[i]) >> 16);
  }
}

double sweep_read_plain(const float *g, size_t b, size_t e) {
  double s = 0;
  for (size_t i = b; i < e; ++i) s += g[i];
  return s;
}

bool have_avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// The same split the kernels use (optim/cpu_dispatch.h): aligned chunks taken dynamically.
template <class Fn>
void chunked(size_t n, Fn &&fn) {
  dsrt::optim_kernels::for_each_chunk(n, dsrt::optim_kernels::plan_chunks(n),
                                      [&](size_t b, size_t e, size_t) { fn(b, e); });
}

void floor_update(const Arrays &a, bool with_copy, int stores) {
  chunked(a.n, [&](size_t b, size_t e) {
#if defined(__x86_64__)
    if (have_avx512()) return sweep_update_avx512(a, with_copy, stores, b, e);
#endif
    sweep_update_plain(a, with_copy, b, e);
  });
}

volatile double g_sink;
void floor_read(const float *g, size_t n) {
  const dsrt::optim_kernels::ChunkPlan plan = dsrt::optim_kernels::plan_chunks(n);
  std::vector<double> part(plan.count, 0.0);
  dsrt::optim_kernels::for_each_chunk(n, plan, [&](size_t b, size_t e, size_t chunk) {
#if defined(__x86_64__)
    if (have_avx512()) {
      part[chunk] = sweep_read_avx512(g, b, e);
      return;
    }
#endif
    part[chunk] = sweep_read_plain(g, b, e);
  });
  double total = 0;
  for (double s : part) total += s;
  g_sink = total;
}

double seconds(const std::function<void()> &fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Timing {
  std::vector<double> runs;
  double best() const { return *std::min_element(runs.begin(), runs.end()); }
  double median() const {
    std::vector<double> s = runs;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

void fill_random(float *x, size_t n, float scale, uint64_t seed) {
  chunked(n, [&](size_t b, size_t e) {
    std::mt19937 rng(static_cast<uint32_t>(seed + b));
    std::uniform_real_distribution<float> u(-scale, scale);
    for (size_t i = b; i < e; ++i) x[i] = u(rng);
  });
}

}  // namespace

int main(int argc, char **argv) {
  size_t n = 100000000;
  int threads = omp_get_max_threads();
  int iters = 5;
  double torch_fp32 = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--params") n = std::strtoull(next(), nullptr, 10);
    else if (arg == "--threads") threads = std::atoi(next());
    else if (arg == "--iters") iters = std::max(1, std::atoi(next()));
    else if (arg == "--torch-fp32") torch_fp32 = std::atof(next());
    else {
      std::fprintf(stderr, "usage: %s [--params N] [--threads T] [--iters K] [--torch-fp32 PARAMS_PER_S]\n", argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);

  dsrt::AlignedBuffer bp, bg, bm, bv, bw;
  if (!bp.allocate(n * 4, false) || !bg.allocate(n * 4, false) || !bm.allocate(n * 4, false) ||
      !bv.allocate(n * 4, false) || !bw.allocate(n * 2, false)) {
    std::fprintf(stderr, "cannot allocate %zu parameters' arrays\n", n);
    return 1;
  }
  Arrays a{bp.as<float>(), bg.as<float>(), bm.as<float>(), bv.as<float>(), bw.as<uint16_t>(), n};
  fill_random(a.p, n, 1.0f, 1);
  fill_random(a.g, n, 1e-2f, 2);
  fill_random(a.m, n, 1e-3f, 3);
  fill_random(a.v, n, 1e-3f, 4);
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) a.v[i] = a.v[i] * a.v[i];
    std::memset(a.w16 + b, 0, (e - b) * 2);
  });

  dsrt::OptimizerConfig config;
  config.type = dsrt::OptimizerType::AdamW;
  config.weight_decay = 0.01;
  int64_t step = 0;
  bool any_error = false;
  auto adam = [&](bool with_copy) {
    dsrt::OptimizerSlice s;
    s.master = a.p;
    s.grad = a.g;
    s.state0 = a.m;
    s.state1 = a.v;
    s.n = n;
    if (with_copy) {
      s.working = a.w16;
      s.working_dtype = DSRT_BF16;
    }
    dsrt::Status st = dsrt::cpu_optimizer_step(dsrt::make_optimizer_hyper(config, 1e-6, ++step), s, 1.0f);
    if (!st.ok()) {
      std::fprintf(stderr, "step failed: %s\n", st.message().c_str());
      any_error = true;
    }
  };
  auto norm_and_adam = [&](bool with_copy) {
    bool nonfinite = false;
    g_sink = dsrt::cpu_sum_squares(a.g, DSRT_F32, n, 1.0f, &nonfinite);
    if (nonfinite) any_error = true;
    adam(with_copy);
  };

  std::printf("cpu_adam: %zu parameters, %d threads, isa %s, best of %d runs (median in brackets)\n", n, threads,
              dsrt::cpu_optimizer_isa(), iters);
  const double gp = static_cast<double>(n) / 1e9;
  for (bool with_copy : {false, true}) {
    Timing t_adam, t_floor_regular, t_floor_stream, t_floor_mixed, t_floor_ahead, t_pass, t_read, t_norm;
    adam(with_copy);  // warm-up: page faults, thread pool
    floor_update(a, with_copy, kRegular);
    for (int k = 0; k < iters; ++k) {  // interleaved, so machine load drifts hit both alike
      t_floor_regular.runs.push_back(seconds([&] { floor_update(a, with_copy, kRegular); }));
      t_floor_stream.runs.push_back(seconds([&] { floor_update(a, with_copy, kStreamAll); }));
      if (with_copy) t_floor_mixed.runs.push_back(seconds([&] { floor_update(a, with_copy, kStreamCopy); }));
      t_floor_ahead.runs.push_back(seconds([&] { floor_update(a, with_copy, kStreamCopyPrefetch); }));
      t_adam.runs.push_back(seconds([&] { adam(with_copy); }));
      t_read.runs.push_back(seconds([&] { floor_read(a.g, n); }));
      t_norm.runs.push_back(seconds([&] {
        bool nonfinite = false;
        g_sink = dsrt::cpu_sum_squares(a.g, DSRT_F32, n, 1.0f, &nonfinite);
      }));
      t_pass.runs.push_back(seconds([&] { norm_and_adam(with_copy); }));
    }
    double floor_best = std::min({t_floor_regular.best(), t_floor_stream.best(), t_floor_ahead.best()});
    if (with_copy) floor_best = std::min(floor_best, t_floor_mixed.best());
    const char *label = with_copy ? "fp32 master + bf16 working copy" : "fp32 (no 16-bit copy)";
    std::printf("\n[%s]  bytes/param moved: %d\n", label, with_copy ? 30 : 28);
    std::printf("  memory floor, regular stores      %6.3f Gparams/s  [%6.3f]\n", gp / t_floor_regular.best(),
                gp / t_floor_regular.median());
    std::printf("  memory floor, non-temporal stores %6.3f Gparams/s  [%6.3f]\n", gp / t_floor_stream.best(),
                gp / t_floor_stream.median());
    if (with_copy) {
      std::printf("  memory floor, non-temporal copy    %6.3f Gparams/s  [%6.3f]\n", gp / t_floor_mixed.best(),
                  gp / t_floor_mixed.median());
    }
    std::printf("  memory floor, prefetched 2 KiB ahead %6.3f Gparams/s  [%6.3f]\n", gp / t_floor_ahead.best(),
                gp / t_floor_ahead.median());
    // On a shared machine, the ratio within each run (floor and update measured back to back) is
    // steadier than the ratio of the best times: print its median too.
    Timing paired, paired_pass;
    for (int k = 0; k < iters; ++k) {
      double f = std::min({t_floor_regular.runs[k], t_floor_stream.runs[k], t_floor_ahead.runs[k]});
      if (with_copy) f = std::min(f, t_floor_mixed.runs[k]);
      paired.runs.push_back(f / t_adam.runs[k]);
      paired_pass.runs.push_back((f + t_read.runs[k]) / t_pass.runs[k]);
    }
    std::printf("  dsrt AdamW                        %6.3f Gparams/s  [%6.3f]  = %.3f of the floor "
                "(median of per-run ratios %.3f)\n",
                gp / t_adam.best(), gp / t_adam.median(), floor_best / t_adam.best(), paired.median());
    const double pass_floor = floor_best + t_read.best();
    std::printf("  sum_squares(g) alone              %6.3f Gparams/s  [%6.3f]  = %.3f of a read-only sweep (%.3f)\n",
                gp / t_norm.best(), gp / t_norm.median(), t_read.best() / t_norm.best(), gp / t_read.best());
    std::printf("  boundary pass (sum_squares(g) + AdamW) %6.3f Gparams/s  [%6.3f]  = %.3f of its floor "
                "(read g + update sweep, %.3f Gparams/s; median of per-run ratios %.3f)\n",
                gp / t_pass.best(), gp / t_pass.median(), pass_floor / t_pass.best(), gp / pass_floor,
                paired_pass.median());
    if (!with_copy && torch_fp32 > 0) {
      std::printf("  torch.optim.AdamW(foreach=True)   %6.3f Gparams/s  -> dsrt is %.2fx torch\n", torch_fp32 / 1e9,
                  (gp / t_adam.best()) / (torch_fp32 / 1e9));
    }
    std::printf("RESULT %s threads=%d dsrt=%.4e floor=%.4e ratio=%.3f paired_ratio=%.3f pass_ratio=%.3f\n",
                with_copy ? "bf16_copy" : "fp32", threads, n / t_adam.best(), n / floor_best,
                floor_best / t_adam.best(), paired.median(), pass_floor / t_pass.best());
  }
  return any_error ? 1 : 0;
}
