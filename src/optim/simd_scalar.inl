// simd_scalar.inl -- the one-lane "vector" the scalar kernels are written with. Included by
// kernels_scalar.cpp inside its anonymous namespace (see kernels_body.inl for the interface).

struct Vec {
  static constexpr size_t kWidth = 1;
  float v;

  static Vec set1(float x) { return {x}; }
  static Vec load(const float *p) { return {*p}; }
  void store(float *p) const { *p = v; }
  static Vec load_f16(const uint16_t *p) { return {fp16_to_float(*p)}; }
  static Vec load_bf16(const uint16_t *p) { return {bf16_to_float(*p)}; }
  void store_f16(uint16_t *p) const { *p = float_to_fp16(v); }
  void store_bf16(uint16_t *p) const { *p = float_to_bf16(v); }
  void store_f16_stream(uint16_t *p) const { store_f16(p); }
  void store_bf16_stream(uint16_t *p) const { store_bf16(p); }
  static constexpr size_t kStreamAlign = 1;
  void store_stream(float *p) const { store(p); }
  static constexpr size_t kStreamAlignF32 = 1;
  static void store_fence() {}

  // a * b + c; unfused here (a scalar build has no guaranteed FMA instruction).
  static Vec fmadd(Vec a, Vec b, Vec c) { return {a.v * b.v + c.v}; }
  static Vec sqrt(Vec a) { return {std::sqrt(a.v)}; }
  // torch.sign: -1, 0 or 1; nan stays nan.
  static Vec sign(Vec a) { return {a.v > 0.0f ? 1.0f : (a.v < 0.0f ? -1.0f : a.v)}; }

  struct Acc {
    double sum = 0.0;
    void add_sq(Vec x) {
      double d = x.v;
      sum += d * d;
    }
    double total() const { return sum; }
  };
};

inline Vec operator+(Vec a, Vec b) { return {a.v + b.v}; }
inline Vec operator-(Vec a, Vec b) { return {a.v - b.v}; }
inline Vec operator*(Vec a, Vec b) { return {a.v * b.v}; }
inline Vec operator/(Vec a, Vec b) { return {a.v / b.v}; }
