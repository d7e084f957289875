// AVX2 AdamW (kernels/adamw_simd.h): 8 lanes per vector, two vectors per iteration; the tail of
// fewer than 8 elements goes to the scalar loop. Only the functions marked STRAIT_AVX2 contain
// AVX2 instructions (a GCC target attribute, not -mavx2 on the file), so the rest of the library
// stays baseline x86-64 until simd_level() picks this path. No FMA is used although the target
// allows it: every lane must round like adamw_element(), and the file is built with
// -ffp-contract=off so GCC does not fuse the multiplies and adds on its own.
#include "kernels/adamw_simd.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define STRAIT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace strait::kernels::detail {
namespace {

struct Consts {
  __m256 decay, b1, one_minus_b1, b2, one_minus_b2, bias2_sqrt, step_size, eps;
};

STRAIT_AVX2 inline Consts broadcast(const AdamWScalars& s) {
  return {_mm256_set1_ps(s.decay),        _mm256_set1_ps(s.b1),
          _mm256_set1_ps(s.one_minus_b1), _mm256_set1_ps(s.b2),
          _mm256_set1_ps(s.one_minus_b2), _mm256_set1_ps(s.bias2_sqrt),
          _mm256_set1_ps(s.step_size),    _mm256_set1_ps(s.eps)};
}

// f32_to_bf16 on 8 lanes: add 0x7fff + the kept lsb and shift; a NaN keeps its top 16 bits with
// the quiet bit (0x40) set.
STRAIT_AVX2 inline __m128i to_bf16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i bias =
      _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane is <= 0xffff
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// adamw_element() on the 8 elements at i.
template <bool kBf16>
STRAIT_AVX2 inline void update8(const Consts& c, const AdamWRange& r, std::size_t i) {
  const __m256 g = _mm256_loadu_ps(r.g + i);
  const __m256 m = _mm256_add_ps(_mm256_mul_ps(c.b1, _mm256_loadu_ps(r.m + i)),
                                 _mm256_mul_ps(c.one_minus_b1, g));
  const __m256 v = _mm256_add_ps(_mm256_mul_ps(c.b2, _mm256_loadu_ps(r.v + i)),
                                 _mm256_mul_ps(c.one_minus_b2, _mm256_mul_ps(g, g)));
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c.bias2_sqrt), c.eps);
  const __m256 p = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(r.p + i), c.decay),
                                 _mm256_mul_ps(c.step_size, _mm256_div_ps(m, denom)));
  _mm256_storeu_ps(r.p + i, p);
  _mm256_storeu_ps(r.m + i, m);
  _mm256_storeu_ps(r.v + i, v);
  if constexpr (kBf16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.bf16 + i), to_bf16(p));
  }
}

template <bool kBf16>
STRAIT_AVX2 std::size_t run(const AdamWScalars& s, const AdamWRange& r) {
  const Consts c = broadcast(s);
  std::size_t i = 0;
  for (; i + 16 <= r.n; i += 16) {
    update8<kBf16>(c, r, i);
    update8<kBf16>(c, r, i + 8);
  }
  if (i + 8 <= r.n) {
    update8<kBf16>(c, r, i);
    i += 8;
  }
  return i;
}

}  // namespace

std::size_t adamw_avx2(const AdamWScalars& s, const AdamWRange& r) noexcept {
  return r.bf16 != nullptr ? run<true>(s, r) : run<false>(s, r);
}

}  // namespace strait::kernels::detail

#endif  // __x86_64__
