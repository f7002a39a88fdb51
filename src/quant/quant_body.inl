// quant_body.inl -- the block quantization kernels, written once over the optimizer's vector type
// Vec (optim/simd_<isa>.inl) and this layer's quant_simd_<isa>.inl helpers, and included by each
// quant_<isa>.cpp inside its anonymous namespace after both. It includes nothing itself.
//
// Symmetric quantization as DeepSpeed's kernels do it (ops/csrc/includes/quantization_utils.h):
// per group, m = max |x|; the multiplier is 2^(bits-1) / m (1 when m is 0); q = round-to-nearest-
// even(x * multiplier) clamped to [-2^(bits-1), 2^(bits-1) - 1]; the stored scale is 1 / multiplier
// and the value read back is q * scale. Every ISA computes the same float operations in the same
// order (the files are built without FP contraction), so all produce identical bytes.
//
// Two choices DeepSpeed's kernels do not make (they assume finite data): a group holding inf or
// NaN stores a NaN scale and zeros, so everything read back from it is NaN and the step's overflow
// check sees it; a group whose largest magnitude is below 2^-118 (where the multiplier would
// overflow fp32) is stored as zeros with scale 1, an error below 2^-118.

constexpr size_t kChunk = 256;  // elements quantized into a byte buffer at a time (a multiple of every width)

template <int D>
inline Vec q_load(const void *base, size_t i) {
  if constexpr (D == DSRT_F32) return Vec::load(static_cast<const float *>(base) + i);
  else if constexpr (D == DSRT_F16) return Vec::load_f16(static_cast<const uint16_t *>(base) + i);
  else return Vec::load_bf16(static_cast<const uint16_t *>(base) + i);
}

template <int D>
inline void q_store(void *base, size_t i, Vec x) {
  if constexpr (D == DSRT_F32) x.store(static_cast<float *>(base) + i);
  else if constexpr (D == DSRT_F16) x.store_f16(static_cast<uint16_t *>(base) + i);
  else x.store_bf16(static_cast<uint16_t *>(base) + i);
}

constexpr size_t q_elem_size(int dtype) { return dtype == DSRT_F32 ? 4 : 2; }

// A vector of elements [i, i + kWidth) of src clipped to [i, end): the missing lanes are zero.
template <int D>
inline Vec q_load_upto(const void *src, size_t i, size_t end) {
  if (i + Vec::kWidth <= end) return q_load<D>(src, i);
  alignas(64) unsigned char pad[Vec::kWidth * 4] = {};
  std::memcpy(pad, static_cast<const char *>(src) + i * q_elem_size(D), (end - i) * q_elem_size(D));
  return q_load<D>(pad, 0);
}

template <int D>
void quantize_groups(const QuantizeArgs &a, size_t g_begin, size_t g_end) {
  const float qmax = static_cast<float>((1 << (a.bits - 1)) - 1);
  const float qmin = -static_cast<float>(1 << (a.bits - 1));
  const float levels = static_cast<float>(1 << (a.bits - 1));
  alignas(64) int8_t chunk[kChunk + Vec::kWidth];
  for (size_t g = g_begin; g < g_end; ++g) {
    const size_t begin = g * a.group;
    const size_t end = begin + a.group < a.n ? begin + a.group : a.n;
    Vec m = Vec::set1(0.0f);
    Vec bad = Vec::set1(0.0f);  // x * 0 summed: NaN as soon as one x is inf or NaN
    for (size_t i = begin; i < end; i += Vec::kWidth) {
      const Vec x = q_load_upto<D>(a.src, i, end);
      m = q_max(m, q_abs(x));
      bad = bad + x * Vec::set1(0.0f);
    }
    const float absmax = q_hmax(m);
    bool zero = false;
    float multiplier = 1.0f;
    if (q_any_nan(bad)) {
      a.scales[g] = std::numeric_limits<float>::quiet_NaN();
      zero = true;
    } else if (absmax < 0x1p-118f) {
      a.scales[g] = 1.0f;
      zero = true;
    } else {
      multiplier = levels / absmax;
      a.scales[g] = 1.0f / multiplier;
    }
    for (size_t c = begin; c < end; c += kChunk) {
      const size_t c_end = c + kChunk < end ? c + kChunk : end;
      if (zero) {
        std::memset(chunk, 0, c_end - c);
      } else {
        for (size_t i = c; i < c_end; i += Vec::kWidth) {
          const Vec x = q_load_upto<D>(a.src, i, c_end) * Vec::set1(multiplier);
          q_store_i8(q_min(q_max(x, Vec::set1(qmin)), Vec::set1(qmax)), chunk + (i - c));
        }
      }
      if (a.bits == 8) {
        std::memcpy(a.q + c, chunk, c_end - c);
      } else {
        // c is even (groups and chunks start at even elements for 4 bits); a last odd element
        // fills the high nibble of its byte and leaves the low one zero.
        for (size_t i = c; i < c_end; i += 2) {
          const unsigned hi = static_cast<unsigned>(chunk[i - c]) & 0xfu;
          const unsigned lo = i + 1 < c_end ? static_cast<unsigned>(chunk[i + 1 - c]) & 0xfu : 0u;
          a.q[i / 2] = static_cast<uint8_t>((hi << 4) | lo);
        }
      }
    }
  }
}

template <int D>
void dequantize_groups(const DequantizeArgs &a, size_t g_begin, size_t g_end) {
  alignas(64) int8_t chunk[kChunk + Vec::kWidth];
  for (size_t g = g_begin; g < g_end; ++g) {
    const size_t begin = g * a.group;
    const size_t end = begin + a.group < a.n ? begin + a.group : a.n;
    const Vec scale = Vec::set1(a.scales[g]);
    for (size_t c = begin; c < end; c += kChunk) {
      const size_t c_end = c + kChunk < end ? c + kChunk : end;
      if (a.bits == 8) {
        std::memcpy(chunk, a.q + c, c_end - c);
      } else {
        for (size_t i = c; i < c_end; i += 2) {
          const uint8_t byte = a.q[i / 2];
          // Arithmetic shifts sign-extend each nibble.
          chunk[i - c] = static_cast<int8_t>(static_cast<int8_t>(byte) >> 4);
          if (i + 1 < c_end) chunk[i + 1 - c] = static_cast<int8_t>(static_cast<int8_t>(byte << 4) >> 4);
        }
      }
      size_t i = c;
      for (; i + Vec::kWidth <= c_end; i += Vec::kWidth) {
        Vec v = q_load_i8(chunk + (i - c)) * scale;
        if (a.accumulate) v = Vec::load(static_cast<float *>(a.dst) + i) + v;
        q_store<D>(a.dst, i, v);
      }
      if (i < c_end) {
        // The tail through zero-padded buffers, computed by the same vector code.
        alignas(64) int8_t qpad[Vec::kWidth] = {};
        alignas(64) unsigned char dpad[Vec::kWidth * 4] = {};
        const size_t left = c_end - i;
        std::memcpy(qpad, chunk + (i - c), left);
        Vec v = q_load_i8(qpad) * scale;
        if (a.accumulate) {
          std::memcpy(dpad, static_cast<float *>(a.dst) + i, left * 4);
          v = Vec::load(reinterpret_cast<const float *>(dpad)) + v;
        }
        q_store<D>(dpad, 0, v);
        std::memcpy(static_cast<char *>(a.dst) + i * q_elem_size(D), dpad, left * q_elem_size(D));
      }
    }
  }
}

void quantize_range(const QuantizeArgs &a, size_t g_begin, size_t g_end) {
  switch (a.src_dtype) {
    case DSRT_F16: return quantize_groups<DSRT_F16>(a, g_begin, g_end);
    case DSRT_BF16: return quantize_groups<DSRT_BF16>(a, g_begin, g_end);
    default: return quantize_groups<DSRT_F32>(a, g_begin, g_end);
  }
}

void dequantize_range(const DequantizeArgs &a, size_t g_begin, size_t g_end) {
  if (a.accumulate) return dequantize_groups<DSRT_F32>(a, g_begin, g_end);
  switch (a.dst_dtype) {
    case DSRT_F16: return dequantize_groups<DSRT_F16>(a, g_begin, g_end);
    case DSRT_BF16: return dequantize_groups<DSRT_BF16>(a, g_begin, g_end);
    default: return dequantize_groups<DSRT_F32>(a, g_begin, g_end);
  }
}

#define DSRT_QUANT_KERNEL_TABLE(isa_name) \
  { isa_name, &quantize_range, &dequantize_range }
