// simd_avx512.inl -- 16-lane AVX-512 (F, BW, VL) vector for the optimizer kernels. Included by
// kernels_avx512.cpp after it switched the target, inside its anonymous namespace. Every 16-bit
// conversion is bitwise identical to util/half.h: the bf16 rounding is done in integers because
// VCVTNEPS2BF16 flushes denormals, and NaNs are rewritten the way half.h writes them.

struct Vec {
  static constexpr size_t kWidth = 16;
  __m512 v;

  static Vec set1(float x) { return {_mm512_set1_ps(x)}; }
  static Vec load(const float *p) { return {_mm512_loadu_ps(p)}; }
  void store(float *p) const { _mm512_storeu_ps(p, v); }

  static Vec load_bf16(const uint16_t *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16))};
  }
  static Vec load_f16(const uint16_t *p) {
    __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    __m512 f = _mm512_cvtph_ps(half);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    if (__builtin_expect(nan != 0, 0)) {
      // The hardware sets the quiet bit of a signalling NaN; half.h keeps the payload as is.
      __m512i bits = _mm512_castps_si512(f);
      __m512i quiet_src =
          _mm512_slli_epi32(_mm512_and_si512(_mm512_cvtepu16_epi32(half), _mm512_set1_epi32(0x200)), 13);
      __m512i fixed = _mm512_or_si512(_mm512_andnot_si512(_mm512_set1_epi32(0x00400000), bits), quiet_src);
      f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(fixed));
    }
    return {f};
  }
  __m256i to_f16_bits() const {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i magnitude = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    __mmask16 nan = _mm256_cmpgt_epi16_mask(magnitude, _mm256_set1_epi16(0x7c00));
    __m256i canonical = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                        _mm256_set1_epi16(0x7e00));
    return _mm256_mask_blend_epi16(nan, h, canonical);
  }
  __m256i to_bf16_bits() const {
    __m512i bits = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
  }
  void store_f16(uint16_t *p) const { _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), to_f16_bits()); }
  void store_bf16(uint16_t *p) const { _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), to_bf16_bits()); }
  // Non-temporal: p must be kStreamAlign-aligned; call store_fence() after the last one.
  void store_f16_stream(uint16_t *p) const { _mm256_stream_si256(reinterpret_cast<__m256i *>(p), to_f16_bits()); }
  void store_bf16_stream(uint16_t *p) const { _mm256_stream_si256(reinterpret_cast<__m256i *>(p), to_bf16_bits()); }
  static constexpr size_t kStreamAlign = 32;
  // fp32 non-temporal: p must be kStreamAlignF32-aligned.
  void store_stream(float *p) const { _mm512_stream_ps(p, v); }
  static constexpr size_t kStreamAlignF32 = 64;
  static void store_fence() { _mm_sfence(); }

  static Vec fmadd(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec sqrt(Vec a) { return {_mm512_sqrt_ps(a.v)}; }
  static Vec sign(Vec a) {
    __m512i sign_bit = _mm512_and_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    __m512 signed_one = _mm512_castsi512_ps(_mm512_or_si512(sign_bit, _mm512_set1_epi32(0x3f800000)));
    __mmask16 nonzero = _mm512_cmp_ps_mask(a.v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __mmask16 nan = _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q);
    return {_mm512_mask_mov_ps(_mm512_maskz_mov_ps(nonzero, signed_one), nan, a.v)};
  }

  struct Acc {
    __m512d lo, hi;
    Acc() : lo(_mm512_setzero_pd()), hi(_mm512_setzero_pd()) {}
    void add_sq(Vec x) {
      __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x.v));
      __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x.v), 1)));
      lo = _mm512_fmadd_pd(a, a, lo);
      hi = _mm512_fmadd_pd(b, b, hi);
    }
    double total() const {
      alignas(64) double parts[8];
      _mm512_store_pd(parts, _mm512_add_pd(lo, hi));
      return ((parts[0] + parts[1]) + (parts[2] + parts[3])) + ((parts[4] + parts[5]) + (parts[6] + parts[7]));
    }
  };
};

inline Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
