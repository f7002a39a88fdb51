// simd_avx2.inl -- 8-lane AVX2 + FMA + F16C vector for the optimizer kernels. Included by
// kernels_avx2.cpp after it switched the target, inside its anonymous namespace. Every 16-bit
// conversion is bitwise identical to util/half.h (the hardware's RNE plus NaN fix-ups).

struct Vec {
  static constexpr size_t kWidth = 8;
  __m256 v;

  static Vec set1(float x) { return {_mm256_set1_ps(x)}; }
  static Vec load(const float *p) { return {_mm256_loadu_ps(p)}; }
  void store(float *p) const { _mm256_storeu_ps(p, v); }

  static Vec load_bf16(const uint16_t *p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16))};
  }
  static Vec load_f16(const uint16_t *p) {
    __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    __m256 f = _mm256_cvtph_ps(half);
    __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0)) {
      // The hardware sets the quiet bit of a signalling NaN; half.h keeps the payload as is.
      __m256i bits = _mm256_castps_si256(f);
      __m256i quiet_src = _mm256_slli_epi32(
          _mm256_and_si256(_mm256_cvtepu16_epi32(half), _mm256_set1_epi32(0x200)), 13);
      __m256i fixed = _mm256_or_si256(_mm256_andnot_si256(_mm256_set1_epi32(0x00400000), bits), quiet_src);
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(fixed), nan);
    }
    return {f};
  }
  void store_f16(uint16_t *p) const { _mm_storeu_si128(reinterpret_cast<__m128i *>(p), to_f16_bits()); }
  void store_bf16(uint16_t *p) const { _mm_storeu_si128(reinterpret_cast<__m128i *>(p), to_bf16_bits()); }
  // Non-temporal: p must be kStreamAlign-aligned; call store_fence() after the last one.
  void store_f16_stream(uint16_t *p) const { _mm_stream_si128(reinterpret_cast<__m128i *>(p), to_f16_bits()); }
  void store_bf16_stream(uint16_t *p) const { _mm_stream_si128(reinterpret_cast<__m128i *>(p), to_bf16_bits()); }
  static constexpr size_t kStreamAlign = 16;
  // fp32 non-temporal: p must be kStreamAlignF32-aligned.
  void store_stream(float *p) const { _mm256_stream_ps(p, v); }
  static constexpr size_t kStreamAlignF32 = 32;
  static void store_fence() { _mm_sfence(); }

  __m128i to_f16_bits() const {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // half.h writes every NaN as sign | 0x7e00.
    __m128i magnitude = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    __m128i nan = _mm_cmpgt_epi16(magnitude, _mm_set1_epi16(0x7c00));
    __m128i canonical = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                     _mm_set1_epi16(0x7e00));
    return _mm_blendv_epi8(h, canonical, nan);
  }
  __m128i to_bf16_bits() const {
    __m256i bits = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }

  static Vec fmadd(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec sqrt(Vec a) { return {_mm256_sqrt_ps(a.v)}; }
  static Vec sign(Vec a) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 signed_one = _mm256_or_ps(_mm256_and_ps(a.v, _mm256_set1_ps(-0.0f)), one);
    __m256 nonzero = _mm256_cmp_ps(a.v, _mm256_setzero_ps(), _CMP_NEQ_UQ);
    __m256 r = _mm256_and_ps(signed_one, nonzero);
    return {_mm256_blendv_ps(r, a.v, _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q))};
  }

  struct Acc {
    __m256d lo, hi;
    Acc() : lo(_mm256_setzero_pd()), hi(_mm256_setzero_pd()) {}
    void add_sq(Vec x) {
      __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(x.v));
      __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(x.v, 1));
      lo = _mm256_fmadd_pd(a, a, lo);
      hi = _mm256_fmadd_pd(b, b, hi);
    }
    double total() const {
      alignas(32) double parts[4];
      _mm256_store_pd(parts, _mm256_add_pd(lo, hi));
      return (parts[0] + parts[1]) + (parts[2] + parts[3]);
    }
  };
};

inline Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
