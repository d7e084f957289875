// AVX-512 (F, BW, VL, DQ) codec primitives: 16 lanes per vector, the scalar tails of
// quantize_impl.h for what is left. Only the functions carry the target attribute, so the file
// runs on any x86-64 until simd_level() picks it. Built with -ffp-contract=off (quantize_impl.h).
#include "kernels/quantize_impl.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable), which
// -Wuninitialized reports once they are inlined at -O3 (GCC bug 105593): silence it for this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define STRAIT_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

namespace strait::kernels::detail {
namespace {

STRAIT_AVX512 inline __m512i abs_bits16(__m512i bits) {
  return _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(kAbsMask)));
}

STRAIT_AVX512 inline __m512i lowbias32x16(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846ca68bU)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

STRAIT_AVX512 inline __m512 uniform16(StochasticKey key, std::size_t index) {
  const __m512i i =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i h = lowbias32x16(_mm512_xor_si512(i, _mm512_set1_epi32(static_cast<int>(key.k0))));
  h = lowbias32x16(_mm512_add_epi32(h, _mm512_set1_epi32(static_cast<int>(key.k1))));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(0x1p-24F));
}

// quantize_one() on 16 lanes, narrowed to int8 (the values are within -127..127).
STRAIT_AVX512 inline __m128i quantize16(const float* x, __m512 inv, __m512 limit, bool stochastic,
                                        StochasticKey key, std::size_t index) {
  const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x), inv);
  const __m512 r = stochastic
                       ? _mm512_roundscale_ps(_mm512_add_ps(y, uniform16(key, index)),
                                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
                       : _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c =
      _mm512_min_ps(_mm512_max_ps(r, _mm512_sub_ps(_mm512_setzero_ps(), limit)), limit);
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(c));
}

STRAIT_AVX512 std::uint32_t v_max_abs_bits(const float* x, std::size_t n) {
  __m512i m0 = _mm512_setzero_si512();
  __m512i m1 = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_epu32(m0, abs_bits16(_mm512_loadu_si512(x + i)));
    m1 = _mm512_max_epu32(m1, abs_bits16(_mm512_loadu_si512(x + i + 16)));
  }
  std::uint32_t m = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
  for (; i < n; ++i) m = std::max(m, abs_bits(x[i]));
  return m;
}

STRAIT_AVX512 void v_quantize8(const float* x, std::size_t n, float inv, bool stochastic,
                               StochasticKey key, std::size_t index0, std::byte* q) {
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 limit = _mm512_set1_ps(127.0F);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     quantize16(x + i, vinv, limit, stochastic, key, index0 + i));
  }
  quantize8_tail(x, i, n, inv, stochastic, key, index0, q);
}

STRAIT_AVX512 void v_quantize4(const float* x, std::size_t n, float inv, bool stochastic,
                               StochasticKey key, std::size_t index0, std::byte* q) {
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 limit = _mm512_set1_ps(7.0F);
  const __m256i lo_nibble = _mm256_set1_epi16(0x000f);
  const __m256i hi_nibble = _mm256_set1_epi16(0x00f0);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b =
        _mm256_setr_m128i(quantize16(x + i, vinv, limit, stochastic, key, index0 + i),
                          quantize16(x + i + 16, vinv, limit, stochastic, key, index0 + i + 16));
    // Each 16-bit lane holds elements 2j (low byte) and 2j + 1: fold them into one byte.
    const __m256i w = _mm256_or_si256(_mm256_and_si256(b, lo_nibble),
                                      _mm256_and_si256(_mm256_srli_epi16(b, 4), hi_nibble));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i / 2), _mm256_cvtepi16_epi8(w));
  }
  quantize4_tail(x, i, n, inv, stochastic, key, index0, q);
}

STRAIT_AVX512 inline void store16(float* out, __m512 v, bool add) {
  if (add) v = _mm512_add_ps(_mm512_loadu_ps(out), v);
  _mm512_storeu_ps(out, v);
}

STRAIT_AVX512 void v_dequantize8(const std::byte* q, std::size_t n, float scale, float* out,
                                 bool add) {
  const __m512 s = _mm512_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    store16(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s), add);
  }
  dequantize8_tail(q, i, n, scale, out, add);
}

STRAIT_AVX512 void v_dequantize4(const std::byte* q, std::size_t n, float scale, float* out,
                                 bool add) {
  const __m512 s = _mm512_set1_ps(scale);
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
    store16(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(e0)), s), add);
    store16(out + i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(e1)), s), add);
  }
  dequantize4_tail(q, i, n, scale, out, add);
}

STRAIT_AVX512 SumMax v_abs_sum(const float* x, std::size_t n) {
  __m512 acc = _mm512_setzero_ps();  // lane j: elements i % 16 == j
  __m512i m = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = abs_bits16(_mm512_loadu_si512(x + i));
    acc = _mm512_add_ps(acc, _mm512_castsi512_ps(a));
    m = _mm512_max_epu32(m, a);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  std::uint32_t mx = _mm512_reduce_max_epu32(m);
  for (; i < n; ++i) {
    lanes[i % 16] += std::bit_cast<float>(abs_bits(x[i]));
    mx = std::max(mx, abs_bits(x[i]));
  }
  return {reduce16(lanes), mx};
}

STRAIT_AVX512 void v_signs(const float* x, std::size_t n, std::byte* bits) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const auto m = static_cast<std::uint16_t>(_mm512_movepi32_mask(_mm512_loadu_si512(x + i)));
    store_u16(bits + i / 8, m);  // elements i..i+7 in the first byte (little-endian)
  }
  signs_tail(x, i, n, bits);
}

STRAIT_AVX512 void v_unsigns(const std::byte* bits, std::size_t n, float scale, float* out,
                             bool add) {
  const __m512 pos = _mm512_set1_ps(scale);
  // -scale by its sign bit, as the scalar path's negation (0 - scale would give +0 for 0).
  const __m512 neg = _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(pos), _mm512_set1_epi32(static_cast<int>(0x80000000U))));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const auto m = static_cast<__mmask16>(load_u16(bits + i / 8));
    store16(out + i, _mm512_mask_blend_ps(m, pos, neg), add);
  }
  unsigns_tail(bits, i, n, scale, out, add);
}

// bf16_clamped() on 16 lanes, as int32 holding the 16-bit result.
STRAIT_AVX512 inline __m512i bf16x16(__m512i bits) {
  const __m512i a =
      _mm512_min_epu32(abs_bits16(bits), _mm512_set1_epi32(static_cast<int>(kBf16MaxBelow)));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000));
  return _mm512_or_si512(r, sign);
}

STRAIT_AVX512 std::uint32_t v_to_bf16(const float* x, std::size_t n, std::byte* out) {
  __m512i m = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = _mm512_loadu_si512(x + i);
    m = _mm512_max_epu32(m, abs_bits16(a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), _mm512_cvtepi32_epi16(bf16x16(a)));
  }
  std::uint32_t mx = _mm512_reduce_max_epu32(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, bf16_clamped(x[i]));
  }
  return mx;
}

STRAIT_AVX512 std::uint32_t v_to_f16(const float* x, std::size_t n, std::byte* out) {
  const __m512 hi = _mm512_set1_ps(kF16Max);
  const __m512 lo = _mm512_set1_ps(-kF16Max);
  __m512i m = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    m = _mm512_max_epu32(m, abs_bits16(_mm512_castps_si512(v)));
    // min(max(v, lo), hi) is std::clamp for non-NaN v; NaN is reported, so its bits do not matter.
    const __m256i h =
        _mm512_cvtps_ph(_mm512_min_ps(_mm512_max_ps(v, lo), hi), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), h);
  }
  std::uint32_t mx = _mm512_reduce_max_epu32(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, f32_to_f16_clamped(x[i]));
  }
  return mx;
}

STRAIT_AVX512 void v_from_bf16(const std::byte* in, std::size_t n, float* out, bool add) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    store16(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), add);
  }
  for (; i < n; ++i) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(load_u16(in + 2 * i)) << 16);
    out[i] = add ? out[i] + v : v;
  }
}

STRAIT_AVX512 void v_from_f16(const std::byte* in, std::size_t n, float* out, bool add) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store16(out + i,
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i))), add);
  }
  for (; i < n; ++i) {
    const float v = f16_to_f32(load_u16(in + 2 * i));
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace

const CodecKernels& avx512_codec_kernels() {
  static constexpr CodecKernels k{v_max_abs_bits, v_quantize8, v_quantize4, v_dequantize8,
                                  v_dequantize4,  v_abs_sum,   v_signs,     v_unsigns,
                                  v_to_bf16,      v_to_f16,    v_from_bf16, v_from_f16};
  return k;
}

}  // namespace strait::kernels::detail

#pragma GCC diagnostic pop
#endif  // __x86_64__
