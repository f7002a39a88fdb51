// quant_simd_scalar.inl -- the quantization helpers for the one-lane Vec of optim/simd_scalar.inl.

inline Vec q_abs(Vec x) { return {std::fabs(x.v)}; }
// Inputs are never NaN here (non-finite groups are caught before), so the operand order of the
// vector max/min instructions does not matter.
inline Vec q_max(Vec a, Vec b) { return {a.v > b.v ? a.v : b.v}; }
inline Vec q_min(Vec a, Vec b) { return {a.v < b.v ? a.v : b.v}; }
inline float q_hmax(Vec a) { return a.v; }
inline bool q_any_nan(Vec a) { return std::isnan(a.v); }
// r is already clamped to the integer range: round to nearest even (the default rounding mode).
inline void q_store_i8(Vec r, int8_t *p) { *p = static_cast<int8_t>(std::lrint(r.v)); }
inline Vec q_load_i8(const int8_t *p) { return {static_cast<float>(*p)}; }
