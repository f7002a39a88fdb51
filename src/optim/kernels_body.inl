// kernels_body.inl -- the optimizer kernels, written once over a vector type Vec and included by
// each kernels_<isa>.cpp inside its anonymous namespace (after simd_<isa>.inl). It includes
// nothing itself: the including file has switched the compiler's target.
//
// Vec provides: kWidth; set1, load, store, load_f16/bf16, store_f16/bf16 and their non-temporal
// _stream forms (kStreamAlign, store_fence); + - * /; fmadd(a, b, c) = a*b + c; sqrt; sign; and
// Acc (a double-precision sum of squares).
//
// A range is processed in whole vectors, then the last partial vector is copied into zero-padded
// stack buffers, run through the same code, and copied back, so tails compute exactly what the
// body computes.

template <int D>
inline Vec load_elems(const void *base, size_t i) {
  if constexpr (D == DSRT_F32) return Vec::load(static_cast<const float *>(base) + i);
  else if constexpr (D == DSRT_F16) return Vec::load_f16(static_cast<const uint16_t *>(base) + i);
  else return Vec::load_bf16(static_cast<const uint16_t *>(base) + i);
}

template <int D>
inline void store_elems(void *base, size_t i, Vec x) {
  if constexpr (D == DSRT_F32) x.store(static_cast<float *>(base) + i);
  else if constexpr (D == DSRT_F16) x.store_f16(static_cast<uint16_t *>(base) + i);
  else x.store_bf16(static_cast<uint16_t *>(base) + i);
}

constexpr size_t elem_size(int dtype) { return dtype == DSRT_F32 ? 4 : 2; }

// The working copy is written and not read again by this pass (a 16-bit one goes to the GPU or to
// disk; an fp32 one on the CPU device is read by the next forward, long after a pass over a large
// range has left the cache), so over large ranges it is stored non-temporally: a regular store
// would first read each line for ownership: 2 (16-bit) or 4 (fp32) extra bytes of traffic per
// parameter on top of the 28 the update moves (gradient, master and two states) and the copy's own.
constexpr size_t kStreamMinElements = 1 << 14;

// One core alone cannot keep enough cache-line fills in flight for the update's four input
// streams: the hardware prefetchers lag a large pass, and the core waits on memory. Asking for each
// line a fixed distance ahead (2 KiB of each fp32 array, measured on AVX-512 Xeons with 1 thread:
// 0.95 -> 1.10 Gparams/s on AdamW with a working copy over 33.7M parameters; 1 KiB was slower, 4
// KiB no better) keeps them coming; the sums of squares, accumulations and conversions below ask
// the same way (a read-only sum: about 20% faster). Arrays written back by the pass are asked for
// with intent to write (PREFETCHW in the AVX-512 build, whose CPUs all have it; a plain prefetch
// elsewhere). Addresses past an array's end are only hints: prefetches never fault.
constexpr size_t kPrefetchElements = 512;

template <int D>
inline void prefetch_elems(const void *base, size_t i, bool for_write) {
  if (base == nullptr) return;
  const void *at = reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(base) + (i + kPrefetchElements) * elem_size(D));
  if (for_write) __builtin_prefetch(at, 1, 3);
  else __builtin_prefetch(at, 0, 3);
}

template <int D>
inline void store_elems_stream(void *base, size_t i, Vec x) {
  if constexpr (D == DSRT_F16) x.store_f16_stream(static_cast<uint16_t *>(base) + i);
  else if constexpr (D == DSRT_BF16) x.store_bf16_stream(static_cast<uint16_t *>(base) + i);
  else x.store_stream(static_cast<float *>(base) + i);
}

// ---------------------------------------------------------------------------------------------
// Step bodies. apply() updates lane block i of the arrays it uses and returns the new master.

struct AdamBody {
  static constexpr bool kUsesGrad = true, kWritesMaster = true, kSums = false;
  static Vec apply(const StepArgs &a, float *p_base, float *m_base, float *v_base, float *, const float *, size_t i,
                   Vec g, typename Vec::Acc &, typename Vec::Acc &) {
    Vec p = Vec::load(p_base + i);
    Vec m = Vec::load(m_base + i);
    Vec v = Vec::load(v_base + i);
    g = g * Vec::set1(a.grad_scale);
    g = Vec::fmadd(p, Vec::set1(a.l2_decay), g);
    m = Vec::fmadd(m, Vec::set1(a.beta1), g * Vec::set1(a.one_minus_beta1));
    v = Vec::fmadd(v, Vec::set1(a.beta2), (g * g) * Vec::set1(a.one_minus_beta2));
    Vec denom = Vec::fmadd(Vec::sqrt(v), Vec::set1(a.inv_sqrt_bc2), Vec::set1(a.eps));
    p = Vec::fmadd(m / denom, Vec::set1(-a.step_size), p * Vec::set1(a.keep_factor));
    m.store(m_base + i);
    v.store(v_base + i);
    return p;
  }
};

struct SgdBody {
  static constexpr bool kUsesGrad = true, kWritesMaster = true, kSums = false;
  static Vec apply(const StepArgs &a, float *p_base, float *buf_base, float *, float *, const float *, size_t i,
                   Vec g, typename Vec::Acc &, typename Vec::Acc &) {
    Vec p = Vec::load(p_base + i);
    g = g * Vec::set1(a.grad_scale);
    g = Vec::fmadd(p, Vec::set1(a.l2_decay), g);
    if (a.momentum != 0.0f) {
      Vec buf = a.first_step ? g
                             : Vec::fmadd(Vec::load(buf_base + i), Vec::set1(a.momentum),
                                          g * Vec::set1(a.one_minus_dampening));
      buf.store(buf_base + i);
      g = a.nesterov ? Vec::fmadd(buf, Vec::set1(a.momentum), g) : buf;
    }
    return Vec::fmadd(g, Vec::set1(-a.lr), p);
  }
};

struct AdagradBody {
  static constexpr bool kUsesGrad = true, kWritesMaster = true, kSums = false;
  static Vec apply(const StepArgs &a, float *p_base, float *sum_base, float *, float *, const float *, size_t i,
                   Vec g, typename Vec::Acc &, typename Vec::Acc &) {
    Vec p = Vec::load(p_base + i);
    Vec s = Vec::load(sum_base + i);
    g = g * Vec::set1(a.grad_scale);
    g = Vec::fmadd(p, Vec::set1(a.l2_decay), g);
    s = Vec::fmadd(g, g, s);
    Vec denom = Vec::sqrt(s) + Vec::set1(a.eps);
    s.store(sum_base + i);
    return Vec::fmadd(g / denom, Vec::set1(-a.lr), p);
  }
};

struct LionBody {
  static constexpr bool kUsesGrad = true, kWritesMaster = true, kSums = false;
  static Vec apply(const StepArgs &a, float *p_base, float *m_base, float *, float *, const float *, size_t i,
                   Vec g, typename Vec::Acc &, typename Vec::Acc &) {
    Vec p = Vec::load(p_base + i);
    Vec m = Vec::load(m_base + i);
    g = g * Vec::set1(a.grad_scale);
    Vec c = Vec::fmadd(m, Vec::set1(a.beta1), g * Vec::set1(a.one_minus_beta1));
    p = Vec::fmadd(Vec::sign(c), Vec::set1(-a.lr), p * Vec::set1(a.keep_factor));
    m = Vec::fmadd(m, Vec::set1(a.beta2), g * Vec::set1(a.one_minus_beta2));
    m.store(m_base + i);
    return p;
  }
};

// DeepSpeed's FusedLamb: update = m / (sqrt(v) + eps) + wd * p, without bias correction (that is
// folded into phase 2's step size); the master is not changed here.
struct LambPhase1Body {
  static constexpr bool kUsesGrad = true, kWritesMaster = false, kSums = true;
  static Vec apply(const StepArgs &a, float *p_base, float *m_base, float *v_base, float *u_base, const float *,
                   size_t i, Vec g, typename Vec::Acc &p_sq, typename Vec::Acc &u_sq) {
    Vec p = Vec::load(p_base + i);
    Vec m = Vec::load(m_base + i);
    Vec v = Vec::load(v_base + i);
    g = g * Vec::set1(a.grad_scale);
    m = Vec::fmadd(m, Vec::set1(a.beta1), g * Vec::set1(a.one_minus_beta1));
    v = Vec::fmadd(v, Vec::set1(a.beta2), (g * g) * Vec::set1(a.one_minus_beta2));
    Vec u = Vec::fmadd(p, Vec::set1(a.decoupled_decay), m / (Vec::sqrt(v) + Vec::set1(a.eps)));
    m.store(m_base + i);
    v.store(v_base + i);
    u.store(u_base + i);
    p_sq.add_sq(p);
    u_sq.add_sq(u);
    return p;
  }
};

struct LambPhase2Body {
  static constexpr bool kUsesGrad = false, kWritesMaster = true, kSums = false;
  static Vec apply(const StepArgs &a, float *p_base, float *, float *, float *, const float *u_base, size_t i, Vec,
                   typename Vec::Acc &, typename Vec::Acc &) {
    return Vec::fmadd(Vec::load(u_base + i), Vec::set1(-a.step_size), Vec::load(p_base + i));
  }
};

template <class Body, int GD, int WK>
void step_loop(const StepArgs &a, size_t begin, size_t end, double *sums) {
  constexpr size_t W = Vec::kWidth;
  typename Vec::Acc p_sq, u_sq;
  bool stream = false;
  if constexpr (Body::kWritesMaster && (WK == DSRT_F16 || WK == DSRT_BF16)) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(static_cast<uint16_t *>(a.working) + begin);
    stream = end - begin >= kStreamMinElements && at % Vec::kStreamAlign == 0;
  } else if constexpr (Body::kWritesMaster && WK == DSRT_F32) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(static_cast<float *>(a.working) + begin);
    stream = end - begin >= kStreamMinElements && at % Vec::kStreamAlignF32 == 0;
  }
  size_t i = begin;
  for (; i + W <= end; i += W) {
    if constexpr (W >= 8) {  // a line per array every one or two vectors; the scalar build does not ask
      if constexpr (Body::kUsesGrad) prefetch_elems<GD>(a.grad, i, false);
      prefetch_elems<DSRT_F32>(a.master, i, Body::kWritesMaster);
      prefetch_elems<DSRT_F32>(a.state0, i, true);
      prefetch_elems<DSRT_F32>(a.state1, i, true);
      prefetch_elems<DSRT_F32>(a.update_in, i, false);
    }
    Vec g = Vec::set1(0.0f);
    if constexpr (Body::kUsesGrad) g = load_elems<GD>(a.grad, i);
    Vec p = Body::apply(a, a.master, a.state0, a.state1, a.update_out, a.update_in, i, g, p_sq, u_sq);
    if constexpr (Body::kWritesMaster) {
      p.store(a.master + i);
      if constexpr (WK != kWorkNone) {
        if (stream) store_elems_stream<WK>(a.working, i, p);
        else store_elems<WK>(a.working, i, p);
      }
    }
  }
  if (stream) Vec::store_fence();  // order the non-temporal stores before whoever reads the copy next
  double tail_p_sq = 0.0, tail_u_sq = 0.0;
  if (i < end) {
    const size_t r = end - i;
    alignas(64) float p_buf[W] = {}, s0_buf[W] = {}, s1_buf[W] = {}, u_out_buf[W] = {}, u_in_buf[W] = {};
    alignas(64) unsigned char g_buf[W * 4] = {};
    std::memcpy(p_buf, a.master + i, r * 4);
    if (a.state0) std::memcpy(s0_buf, a.state0 + i, r * 4);
    if (a.state1) std::memcpy(s1_buf, a.state1 + i, r * 4);
    if (a.update_in) std::memcpy(u_in_buf, a.update_in + i, r * 4);
    Vec g = Vec::set1(0.0f);
    if constexpr (Body::kUsesGrad) {
      std::memcpy(g_buf, static_cast<const unsigned char *>(a.grad) + i * elem_size(GD), r * elem_size(GD));
      g = load_elems<GD>(g_buf, 0);
    }
    typename Vec::Acc unused_p, unused_u;  // padded lanes must not reach the sums
    Vec p = Body::apply(a, p_buf, s0_buf, s1_buf, u_out_buf, u_in_buf, 0, g, unused_p, unused_u);
    if (a.state0) std::memcpy(a.state0 + i, s0_buf, r * 4);
    if (a.state1) std::memcpy(a.state1 + i, s1_buf, r * 4);
    if (a.update_out) std::memcpy(a.update_out + i, u_out_buf, r * 4);
    if constexpr (Body::kSums) {
      for (size_t k = 0; k < r; ++k) {
        tail_p_sq += static_cast<double>(p_buf[k]) * p_buf[k];
        tail_u_sq += static_cast<double>(u_out_buf[k]) * u_out_buf[k];
      }
    }
    if constexpr (Body::kWritesMaster) {
      p.store(p_buf);
      std::memcpy(a.master + i, p_buf, r * 4);
      if constexpr (WK != kWorkNone) {
        alignas(64) unsigned char w_buf[W * 4];
        store_elems<WK>(w_buf, 0, p);
        std::memcpy(static_cast<unsigned char *>(a.working) + i * elem_size(WK), w_buf, r * elem_size(WK));
      }
    }
  }
  if constexpr (Body::kSums) {
    sums[0] += p_sq.total() + tail_p_sq;
    sums[1] += u_sq.total() + tail_u_sq;
  }
}

template <class Body, int GD>
void step_by_working(const StepArgs &a, size_t begin, size_t end, double *sums) {
  switch (a.working_kind) {
    case kWorkF32: return step_loop<Body, GD, kWorkF32>(a, begin, end, sums);
    case kWorkF16: return step_loop<Body, GD, kWorkF16>(a, begin, end, sums);
    case kWorkBF16: return step_loop<Body, GD, kWorkBF16>(a, begin, end, sums);
    default: return step_loop<Body, GD, kWorkNone>(a, begin, end, sums);
  }
}

template <class Body>
void step_range(const StepArgs &a, size_t begin, size_t end, double *sums) {
  switch (a.grad_dtype) {
    case DSRT_F16: return step_by_working<Body, DSRT_F16>(a, begin, end, sums);
    case DSRT_BF16: return step_by_working<Body, DSRT_BF16>(a, begin, end, sums);
    default: return step_by_working<Body, DSRT_F32>(a, begin, end, sums);
  }
}

// ---------------------------------------------------------------------------------------------
// Norms, conversion, accumulation.

template <int D>
double sum_squares_typed(const void *data, size_t begin, size_t end) {
  constexpr size_t W = Vec::kWidth;
  typename Vec::Acc acc0, acc1;
  size_t i = begin;
  for (; i + 2 * W <= end; i += 2 * W) {
    if constexpr (W >= 8) {
      prefetch_elems<D>(data, i, false);
      prefetch_elems<D>(data, i + W, false);
    }
    acc0.add_sq(load_elems<D>(data, i));
    acc1.add_sq(load_elems<D>(data, i + W));
  }
  for (; i + W <= end; i += W) acc0.add_sq(load_elems<D>(data, i));
  if (i < end) {
    alignas(64) unsigned char buf[W * 4] = {};
    std::memcpy(buf, static_cast<const unsigned char *>(data) + i * elem_size(D), (end - i) * elem_size(D));
    acc1.add_sq(load_elems<D>(buf, 0));
  }
  return acc0.total() + acc1.total();
}

double sum_squares_range(const void *data, int dtype, size_t begin, size_t end) {
  switch (dtype) {
    case DSRT_F16: return sum_squares_typed<DSRT_F16>(data, begin, end);
    case DSRT_BF16: return sum_squares_typed<DSRT_BF16>(data, begin, end);
    default: return sum_squares_typed<DSRT_F32>(data, begin, end);
  }
}

// sum_squares_typed's accumulation, resumable: block k of the chunk (W elements from its start)
// goes to accumulator k % 2 and the partial last block to accumulator 1, lane by lane, as there. A
// range that starts or ends inside a block is added as a zero-padded vector: the other lanes
// add +0, which leaves them as they are (they hold +0 or sums of squares).
void sum_squares_part(double *state, const float *chunk, size_t length, size_t begin, size_t end) {
  constexpr size_t W = Vec::kWidth;
  typename Vec::Acc acc[2];
  static_assert(sizeof acc <= kSumSquaresStateDoubles * sizeof(double), "sum_squares_part: state too small");
  std::memcpy(static_cast<void *>(acc), state, sizeof acc);
  const size_t whole_end = length / W * W;  // end of the whole blocks
  end = end < length ? end : length;
  size_t i = begin;
  while (i < end) {
    const size_t block = i / W * W;
    if (i == block && i + W <= end && i + W <= whole_end) {
      if ((i / W) & 1) {
        acc[1].add_sq(Vec::load(chunk + i));
        i += W;
      }
      const size_t limit = end < whole_end ? end : whole_end;
      for (; i + 2 * W <= limit; i += 2 * W) {
        if constexpr (W >= 8) {
          prefetch_elems<DSRT_F32>(chunk, i, false);
          prefetch_elems<DSRT_F32>(chunk, i + W, false);
        }
        acc[0].add_sq(Vec::load(chunk + i));
        acc[1].add_sq(Vec::load(chunk + i + W));
      }
      if (i + W <= limit) {
        acc[0].add_sq(Vec::load(chunk + i));
        i += W;
      }
      continue;
    }
    const size_t stop = end < block + W ? end : block + W;
    alignas(64) float buf[W] = {};
    std::memcpy(buf + (i - block), chunk + i, (stop - i) * sizeof(float));
    acc[block < whole_end ? (block / W) & 1 : 1].add_sq(Vec::load(buf));
    i = stop;
  }
  std::memcpy(state, static_cast<const void *>(acc), sizeof acc);
}

double sum_squares_total(const double *state) {
  typename Vec::Acc acc[2];
  std::memcpy(static_cast<void *>(acc), state, sizeof acc);
  return acc[0].total() + acc[1].total();
}

template <int S, int D>
void convert_typed(const void *src, void *dst, size_t begin, size_t end) {
  constexpr size_t W = Vec::kWidth;
  size_t i = begin;
  for (; i + W <= end; i += W) {
    if constexpr (W >= 8) prefetch_elems<S>(src, i, false);
    store_elems<D>(dst, i, load_elems<S>(src, i));
  }
  if (i < end) {
    alignas(64) unsigned char in[W * 4] = {};
    alignas(64) unsigned char out[W * 4];
    std::memcpy(in, static_cast<const unsigned char *>(src) + i * elem_size(S), (end - i) * elem_size(S));
    store_elems<D>(out, 0, load_elems<S>(in, 0));
    std::memcpy(static_cast<unsigned char *>(dst) + i * elem_size(D), out, (end - i) * elem_size(D));
  }
}

template <int S>
void convert_to(const void *src, void *dst, int dst_dtype, size_t begin, size_t end) {
  switch (dst_dtype) {
    case DSRT_F16: return convert_typed<S, DSRT_F16>(src, dst, begin, end);
    case DSRT_BF16: return convert_typed<S, DSRT_BF16>(src, dst, begin, end);
    default: return convert_typed<S, DSRT_F32>(src, dst, begin, end);
  }
}

void convert_range(const void *src, int src_dtype, void *dst, int dst_dtype, size_t begin, size_t end) {
  if (src_dtype == dst_dtype) {
    std::memmove(static_cast<unsigned char *>(dst) + begin * elem_size(dst_dtype),  // src may be dst
                static_cast<const unsigned char *>(src) + begin * elem_size(src_dtype),
                (end - begin) * elem_size(src_dtype));
    return;
  }
  switch (src_dtype) {
    case DSRT_F16: return convert_to<DSRT_F16>(src, dst, dst_dtype, begin, end);
    case DSRT_BF16: return convert_to<DSRT_BF16>(src, dst, dst_dtype, begin, end);
    default: return convert_to<DSRT_F32>(src, dst, dst_dtype, begin, end);
  }
}

template <int S>
void accumulate_typed(float *dst, const void *src, size_t begin, size_t end, float scale) {
  constexpr size_t W = Vec::kWidth;
  const Vec s = Vec::set1(scale);
  size_t i = begin;
  for (; i + W <= end; i += W) {
    if constexpr (W >= 8) {
      prefetch_elems<S>(src, i, false);
      prefetch_elems<DSRT_F32>(dst, i, true);
    }
    Vec::fmadd(load_elems<S>(src, i), s, Vec::load(dst + i)).store(dst + i);
  }
  if (i < end) {
    const size_t r = end - i;
    alignas(64) unsigned char in[W * 4] = {};
    alignas(64) float acc[W] = {};
    std::memcpy(in, static_cast<const unsigned char *>(src) + i * elem_size(S), r * elem_size(S));
    std::memcpy(acc, dst + i, r * 4);
    Vec::fmadd(load_elems<S>(in, 0), s, Vec::load(acc)).store(acc);
    std::memcpy(dst + i, acc, r * 4);
  }
}

void accumulate_range(float *dst, const void *src, int src_dtype, size_t begin, size_t end, float scale) {
  switch (src_dtype) {
    case DSRT_F16: return accumulate_typed<DSRT_F16>(dst, src, begin, end, scale);
    case DSRT_BF16: return accumulate_typed<DSRT_BF16>(dst, src, begin, end, scale);
    default: return accumulate_typed<DSRT_F32>(dst, src, begin, end, scale);
  }
}

#define DSRT_OPTIM_KERNEL_TABLE(isa_name)                                                              \
  {                                                                                                    \
    isa_name, &step_range<AdamBody>, &step_range<SgdBody>, &step_range<AdagradBody>,                  \
        &step_range<LionBody>, &step_range<LambPhase1Body>, &step_range<LambPhase2Body>,              \
        &sum_squares_range, &convert_range, &accumulate_range, &sum_squares_part, &sum_squares_total  \
  }
