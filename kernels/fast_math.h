// Internal to kernels/: the pieces that let the transformer's float loops vectorise without
// giving up reproducibility.
//
// - exp_clamped: exp(t) with t clamped to [-87, 88] (so the result stays a normal float), as
//   Cody-Waite reduction by ln 2 and Cephes' expf polynomial on [-ln2/2, ln2/2] (within 2 ulp),
//   then 2^k from the exponent bits. One SSE2 form (4 lanes; every x86-64 has SSE2) and one scalar
//   form of the same operations in the same order: an element gets the same bits in either, so a
//   loop's vector body and its scalar tail agree, and so does every x86-64 machine. libm's expf is
//   a call per element that no loop can vectorise. A NaN stays NaN.
// - lane_sum: a float sum in a fixed order that the compiler can vectorise: 8 partial sums (lane
//   k takes terms k, k + 8, ...) added pairwise at the end. The order is the source's, the same
//   on every machine; it differs from a left-to-right sum by rounding only.
// - exp_shifted_sum: out[i] = exp(in[i] - shift) for a softmax (out may be in), and their sum:
//   float through exp_clamped and lane_sum; double through libm and a left-to-right sum (the
//   reference the tests compare with).
// Files that use them are built with -ffp-contract=off (kernels/CMakeLists.txt): a fused
// multiply-add in one form and not the other would break the agreement.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace strait::kernels::detail {

inline constexpr float kExpLog2e = 1.44269504088896341F;
inline constexpr float kExpRound = 12582912.0F;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kExpLn2Hi = 0.693359375F;
inline constexpr float kExpLn2Lo = -2.12194440e-4F;
inline constexpr float kExpPoly[] = {1.9875691500e-4F, 1.3981999507e-3F, 8.3334519073e-3F,
                                     4.1665795894e-2F, 1.6666665459e-1F, 5.0000001201e-1F};
inline constexpr float kExpMin = -87.0F;
inline constexpr float kExpMax = 88.0F;

inline float exp_clamped(float t) {
  t = kExpMin > t ? kExpMin : t;  // as _mm_max_ps(min, t): a NaN t passes
  t = kExpMax < t ? kExpMax : t;  // as _mm_min_ps(max, t)
  const float k = (t * kExpLog2e + kExpRound) - kExpRound;
  const float r = (t - k * kExpLn2Hi) - k * kExpLn2Lo;
  float p = kExpPoly[0];
  for (int j = 1; j < 6; ++j) p = p * r + kExpPoly[j];
  p = p * (r * r) + r + 1.0F;
  const std::int32_t ki = k == k ? static_cast<std::int32_t>(k) : 0;  // NaN: p is NaN anyway
  return p * std::bit_cast<float>(static_cast<std::uint32_t>(ki + 127) << 23);
}

#if defined(__SSE2__)
inline __m128 exp_clamped(__m128 t) {
  t = _mm_min_ps(_mm_set1_ps(kExpMax), _mm_max_ps(_mm_set1_ps(kExpMin), t));
  const __m128 round = _mm_set1_ps(kExpRound);
  const __m128 k = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(t, _mm_set1_ps(kExpLog2e)), round), round);
  const __m128 r = _mm_sub_ps(_mm_sub_ps(t, _mm_mul_ps(k, _mm_set1_ps(kExpLn2Hi))),
                              _mm_mul_ps(k, _mm_set1_ps(kExpLn2Lo)));
  __m128 p = _mm_set1_ps(kExpPoly[0]);
  for (int j = 1; j < 6; ++j) p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kExpPoly[j]));
  p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r), _mm_set1_ps(1.0F));
  const __m128i bits = _mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(k), _mm_set1_epi32(127)), 23);
  return _mm_mul_ps(p, _mm_castsi128_ps(bits));
}
#endif

template <class F, class Term>
F lane_sum(std::size_t n, Term&& term) {
  constexpr std::size_t kLanes = 8;
  F acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) acc[k] += term(i + k);
  }
  for (std::size_t k = 0; i < n; ++i, ++k) acc[k] += term(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Softmax rows: shift is the row's maximum, so every exponent is <= 0 (below -87 the clamp turns
// exp's 1e-38 or less into exp(-87), nothing next to the maximum's 1).
inline float exp_shifted_sum(float* out, const float* in, std::size_t n, float shift) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128 s = _mm_set1_ps(shift);
  for (; i + 4 <= n; i += 4) {
    _mm_storeu_ps(out + i, exp_clamped(_mm_sub_ps(_mm_loadu_ps(in + i), s)));
  }
#endif
  for (; i < n; ++i) out[i] = exp_clamped(in[i] - shift);
  return lane_sum<float>(n, [&](std::size_t j) { return out[j]; });
}

inline double exp_shifted_sum(double* out, const double* in, std::size_t n, double shift) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - shift);
    sum += out[i];
  }
  return sum;
}

}  // namespace strait::kernels::detail
