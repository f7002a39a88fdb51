// quant_simd_avx2.inl -- the quantization helpers for the 8-lane Vec of optim/simd_avx2.inl.

inline Vec q_abs(Vec x) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x.v)}; }
inline Vec q_max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
inline Vec q_min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
inline float q_hmax(Vec a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
inline bool q_any_nan(Vec a) { return _mm256_movemask_ps(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)) != 0; }
// r is already clamped: cvtps rounds to nearest even; the saturating packs keep the lane order.
inline void q_store_i8(Vec r, int8_t *p) {
  const __m256i i32 = _mm256_cvtps_epi32(r.v);
  const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i *>(p), _mm_packs_epi16(i16, i16));
}
inline Vec q_load_i8(const int8_t *p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))))};
}
