// AVX-512 (F, BW, VL, DQ) AdamW (kernels/adamw_simd.h): 16 lanes per vector, two vectors per
// iteration, and a masked tail, so this path does every element itself. Masked-off lanes are
// neither loaded nor stored, and their divisions and square roots are masked too, so a tail raises
// no floating-point exception the scalar loop would not. Only the functions carry the target
// attribute, so the file runs on any x86-64 until simd_level() picks it. Built with
// -ffp-contract=off: every lane rounds like adamw_element().
#include "kernels/adamw_simd.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable), which
// -Wuninitialized reports once they are inlined at -O3 (GCC bug 105593): silence it for this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define STRAIT_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

namespace strait::kernels::detail {
namespace {

struct Consts {
  __m512 decay, b1, one_minus_b1, b2, one_minus_b2, bias2_sqrt, step_size, eps;
};

STRAIT_AVX512 inline Consts broadcast(const AdamWScalars& s) {
  return {_mm512_set1_ps(s.decay),        _mm512_set1_ps(s.b1),
          _mm512_set1_ps(s.one_minus_b1), _mm512_set1_ps(s.b2),
          _mm512_set1_ps(s.one_minus_b2), _mm512_set1_ps(s.bias2_sqrt),
          _mm512_set1_ps(s.step_size),    _mm512_set1_ps(s.eps)};
}

// f32_to_bf16 on 16 lanes: add 0x7fff + the kept lsb and shift; a NaN keeps its top 16 bits with
// the quiet bit (0x40) set. Every lane ends <= 0xffff, so VPMOVDW's truncation is exact.
STRAIT_AVX512 inline __m256i to_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// adamw_element() on the lanes of k among the 16 elements at i.
template <bool kBf16>
STRAIT_AVX512 inline void update16(const Consts& c, const AdamWRange& r, std::size_t i,
                                   __mmask16 k) {
  const __m512 g = _mm512_maskz_loadu_ps(k, r.g + i);
  const __m512 m = _mm512_add_ps(_mm512_mul_ps(c.b1, _mm512_maskz_loadu_ps(k, r.m + i)),
                                 _mm512_mul_ps(c.one_minus_b1, g));
  const __m512 v = _mm512_add_ps(_mm512_mul_ps(c.b2, _mm512_maskz_loadu_ps(k, r.v + i)),
                                 _mm512_mul_ps(c.one_minus_b2, _mm512_mul_ps(g, g)));
  const __m512 denom =
      _mm512_add_ps(_mm512_maskz_div_ps(k, _mm512_maskz_sqrt_ps(k, v), c.bias2_sqrt), c.eps);
  const __m512 p = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, r.p + i), c.decay),
                                 _mm512_mul_ps(c.step_size, _mm512_maskz_div_ps(k, m, denom)));
  _mm512_mask_storeu_ps(r.p + i, k, p);
  _mm512_mask_storeu_ps(r.m + i, k, m);
  _mm512_mask_storeu_ps(r.v + i, k, v);
  if constexpr (kBf16) _mm256_mask_storeu_epi16(r.bf16 + i, k, to_bf16(p));
}

template <bool kBf16>
STRAIT_AVX512 std::size_t run(const AdamWScalars& s, const AdamWRange& r) {
  const Consts c = broadcast(s);
  constexpr __mmask16 kAll = 0xffff;
  std::size_t i = 0;
  for (; i + 32 <= r.n; i += 32) {
    update16<kBf16>(c, r, i, kAll);
    update16<kBf16>(c, r, i + 16, kAll);
  }
  for (; i < r.n; i += 16) {
    const std::size_t left = r.n - i;
    const auto k = left >= 16 ? kAll : static_cast<__mmask16>((1U << left) - 1U);
    update16<kBf16>(c, r, i, k);
  }
  return r.n;
}

}  // namespace

std::size_t adamw_avx512(const AdamWScalars& s, const AdamWRange& r) noexcept {
  return r.bf16 != nullptr ? run<true>(s, r) : run<false>(s, r);
}

}  // namespace strait::kernels::detail

#pragma GCC diagnostic pop
#endif  // __x86_64__
