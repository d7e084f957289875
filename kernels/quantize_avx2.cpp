// AVX2 (+FMA/F16C) codec primitives: 8 lanes per vector, the scalar tails of quantize_impl.h for
// what is left. Only the functions carry the target attribute, so the file runs on any x86-64
// until simd_level() picks it. Built with -ffp-contract=off (see quantize_impl.h).
#include "kernels/quantize_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define STRAIT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace strait::kernels::detail {
namespace {

STRAIT_AVX2 inline __m256i abs_bits8(__m256 x) {
  return _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(static_cast<int>(kAbsMask)));
}

STRAIT_AVX2 inline std::uint32_t hmax_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}

STRAIT_AVX2 inline __m256i lowbias32x8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bU)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// u in [0, 1) for elements index .. index + 7, as uniform_from_word(random_word(key, i)).
STRAIT_AVX2 inline __m256 uniform8(StochasticKey key, std::size_t index) {
  const __m256i i = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index)),
                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i h = lowbias32x8(_mm256_xor_si256(i, _mm256_set1_epi32(static_cast<int>(key.k0))));
  h = lowbias32x8(_mm256_add_epi32(h, _mm256_set1_epi32(static_cast<int>(key.k1))));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24F));
}

// quantize_one() on 8 lanes, as int32.
STRAIT_AVX2 inline __m256i quantize8x(__m256 x, __m256 inv, __m256 limit, bool stochastic,
                                      StochasticKey key, std::size_t index) {
  const __m256 y = _mm256_mul_ps(x, inv);
  const __m256 r = stochastic ? _mm256_round_ps(_mm256_add_ps(y, uniform8(key, index)),
                                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
                              : _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 c =
      _mm256_min_ps(_mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
  return _mm256_cvttps_epi32(c);
}

// 32 quantized int8 lanes, in element order.
STRAIT_AVX2 inline __m256i quantize32(const float* x, __m256 inv, __m256 limit, bool stochastic,
                                      StochasticKey key, std::size_t index) {
  const __m256i a = quantize8x(_mm256_loadu_ps(x), inv, limit, stochastic, key, index);
  const __m256i b = quantize8x(_mm256_loadu_ps(x + 8), inv, limit, stochastic, key, index + 8);
  const __m256i c = quantize8x(_mm256_loadu_ps(x + 16), inv, limit, stochastic, key, index + 16);
  const __m256i d = quantize8x(_mm256_loadu_ps(x + 24), inv, limit, stochastic, key, index + 24);
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  // The packs work per 128-bit lane: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1.
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

STRAIT_AVX2 std::uint32_t v_max_abs_bits(const float* x, std::size_t n) {
  __m256i m0 = _mm256_setzero_si256();
  __m256i m1 = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_epu32(m0, abs_bits8(_mm256_loadu_ps(x + i)));
    m1 = _mm256_max_epu32(m1, abs_bits8(_mm256_loadu_ps(x + i + 8)));
  }
  std::uint32_t m = hmax_epu32(_mm256_max_epu32(m0, m1));
  for (; i < n; ++i) m = std::max(m, abs_bits(x[i]));
  return m;
}

STRAIT_AVX2 void v_quantize8(const float* x, std::size_t n, float inv, bool stochastic,
                             StochasticKey key, std::size_t index0, std::byte* q) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 limit = _mm256_set1_ps(127.0F);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        quantize32(x + i, vinv, limit, stochastic, key, index0 + i));
  }
  quantize8_tail(x, i, n, inv, stochastic, key, index0, q);
}

STRAIT_AVX2 void v_quantize4(const float* x, std::size_t n, float inv, bool stochastic,
                             StochasticKey key, std::size_t index0, std::byte* q) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 limit = _mm256_set1_ps(7.0F);
  const __m256i lo_nibble = _mm256_set1_epi16(0x000f);
  const __m256i hi_nibble = _mm256_set1_epi16(0x00f0);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b = quantize32(x + i, vinv, limit, stochastic, key, index0 + i);
    // Each 16-bit lane holds elements 2j (low byte) and 2j + 1: fold them into one byte.
    const __m256i w = _mm256_or_si256(_mm256_and_si256(b, lo_nibble),
                                      _mm256_and_si256(_mm256_srli_epi16(b, 4), hi_nibble));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i / 2), _mm256_castsi256_si128(p));
  }
  quantize4_tail(x, i, n, inv, stochastic, key, index0, q);
}

STRAIT_AVX2 inline void store8(float* out, __m256 v, bool add) {
  if (add) v = _mm256_add_ps(_mm256_loadu_ps(out), v);
  _mm256_storeu_ps(out, v);
}

STRAIT_AVX2 void v_dequantize8(const std::byte* q, std::size_t n, float scale, float* out,
                               bool add) {
  const __m256 s = _mm256_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    store8(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s), add);
  }
  dequantize8_tail(q, i, n, scale, out, add);
}

STRAIT_AVX2 void v_dequantize4(const std::byte* q, std::size_t n, float scale, float* out,
                               bool add) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i / 2));
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    // Interleave to element order, then sign-extend the nibbles: (v ^ 8) - 8.
    const __m128i e0 = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
    const __m128i e1 = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
    store8(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0)), s), add);
    store8(out + i + 8,
           _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e0, 8))), s), add);
    store8(out + i + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1)), s), add);
    store8(out + i + 24,
           _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e1, 8))), s), add);
  }
  dequantize4_tail(q, i, n, scale, out, add);
}

STRAIT_AVX2 SumMax v_abs_sum(const float* x, std::size_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kAbsMask)));
  __m256 acc0 = _mm256_setzero_ps();  // lanes 0..7
  __m256 acc1 = _mm256_setzero_ps();  // lanes 8..15
  __m256i m = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    const __m256 b = _mm256_and_ps(_mm256_loadu_ps(x + i + 8), abs_mask);
    acc0 = _mm256_add_ps(acc0, a);
    acc1 = _mm256_add_ps(acc1, b);
    m = _mm256_max_epu32(m, _mm256_max_epu32(_mm256_castps_si256(a), _mm256_castps_si256(b)));
  }
  alignas(32) float acc[16];
  _mm256_store_ps(acc, acc0);
  _mm256_store_ps(acc + 8, acc1);
  std::uint32_t mx = hmax_epu32(m);
  for (; i < n; ++i) {
    acc[i % 16] += std::bit_cast<float>(abs_bits(x[i]));
    mx = std::max(mx, abs_bits(x[i]));
  }
  return {reduce16(acc), mx};
}

STRAIT_AVX2 void v_signs(const float* x, std::size_t n, std::byte* bits) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    bits[i / 8] = static_cast<std::byte>(_mm256_movemask_ps(_mm256_loadu_ps(x + i)));
  }
  signs_tail(x, i, n, bits);
}

STRAIT_AVX2 void v_unsigns(const std::byte* bits, std::size_t n, float scale, float* out,
                           bool add) {
  const __m256i s = _mm256_castps_si256(_mm256_set1_ps(scale));
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000U));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_set1_epi32(static_cast<int>(bits[i / 8]));
    const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(b, lane_bit), lane_bit);
    store8(out + i, _mm256_castsi256_ps(_mm256_xor_si256(s, _mm256_and_si256(set, sign))), add);
  }
  unsigns_tail(bits, i, n, scale, out, add);
}

// bf16_clamped() on 8 lanes, as int32 holding the 16-bit result.
STRAIT_AVX2 inline __m256i bf16x8(__m256i bits) {
  const __m256i a = _mm256_min_epu32(_mm256_and_si256(bits, _mm256_set1_epi32(kAbsMask)),
                                     _mm256_set1_epi32(static_cast<int>(kBf16MaxBelow)));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000));
  return _mm256_or_si256(r, sign);
}

STRAIT_AVX2 std::uint32_t v_to_bf16(const float* x, std::size_t n, std::byte* out) {
  __m256i m = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8));
    m = _mm256_max_epu32(m, abs_bits8(_mm256_castsi256_ps(a)));
    m = _mm256_max_epu32(m, abs_bits8(_mm256_castsi256_ps(b)));
    const __m256i p = _mm256_packus_epi32(bf16x8(a), bf16x8(b));  // per 128-bit lane
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), _mm256_permute4x64_epi64(p, 0xd8));
  }
  std::uint32_t mx = hmax_epu32(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, bf16_clamped(x[i]));
  }
  return mx;
}

STRAIT_AVX2 std::uint32_t v_to_f16(const float* x, std::size_t n, std::byte* out) {
  const __m256 hi = _mm256_set1_ps(kF16Max);
  const __m256 lo = _mm256_set1_ps(-kF16Max);
  __m256i m = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    m = _mm256_max_epu32(m, abs_bits8(v));
    // min(max(v, lo), hi) is std::clamp for non-NaN v; NaN is reported, so its bits do not matter.
    const __m128i h =
        _mm256_cvtps_ph(_mm256_min_ps(_mm256_max_ps(v, lo), hi), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  std::uint32_t mx = hmax_epu32(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, f32_to_f16_clamped(x[i]));
  }
  return mx;
}

STRAIT_AVX2 void v_from_bf16(const std::byte* in, std::size_t n, float* out, bool add) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    store8(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)), add);
  }
  for (; i < n; ++i) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(load_u16(in + 2 * i)) << 16);
    out[i] = add ? out[i] + v : v;
  }
}

STRAIT_AVX2 void v_from_f16(const std::byte* in, std::size_t n, float* out, bool add) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    store8(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))),
           add);
  }
  for (; i < n; ++i) {
    const float v = f16_to_f32(load_u16(in + 2 * i));
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace

const CodecKernels& avx2_codec_kernels() {
  static constexpr CodecKernels k{v_max_abs_bits, v_quantize8, v_quantize4, v_dequantize8,
                                  v_dequantize4,  v_abs_sum,   v_signs,     v_unsigns,
                                  v_to_bf16,      v_to_f16,    v_from_bf16, v_from_f16};
  return k;
}

}  // namespace strait::kernels::detail

#endif  // __x86_64__
