// quant_simd_avx512.inl -- the quantization helpers for the 16-lane Vec of optim/simd_avx512.inl.

inline Vec q_abs(Vec x) { return {_mm512_abs_ps(x.v)}; }
inline Vec q_max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
inline Vec q_min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
inline float q_hmax(Vec a) { return _mm512_reduce_max_ps(a.v); }
inline bool q_any_nan(Vec a) { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q) != 0; }
// r is already clamped: cvtps rounds to nearest even; the narrowing keeps the lane order.
inline void q_store_i8(Vec r, int8_t *p) {
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r.v)));
}
inline Vec q_load_i8(const int8_t *p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))))};
}
