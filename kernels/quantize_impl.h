// Internal to kernels/quantize.cpp, kernels/simd_<isa>.cpp (and the host side of
// kernels/cuda/quantize.h): the per-SIMD-level primitives the codec drivers call, the scalar
// tails every level (and the scalar level) shares, made of kernels/codec_math.h's per-element
// operations (the CUDA kernels' too), so that the paths are bit-identical by construction, and the
// one driver each instruction set's primitives are made from. The files including this are built
// with -ffp-contract=off: a fused multiply-add in one path and not another would break that.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/codec_math.h"
#include "kernels/dtype.h"

namespace strait::kernels::detail {

struct SumMax {
  float sum = 0.0F;            // sum of |x| in the fixed 16-lane order
  std::uint32_t max_bits = 0;  // max of |bits|: >= kInfBits means a NaN or Inf was seen
};

// One SIMD level's primitives. Pointers into `wire` are unaligned; n is elements.
struct CodecKernels {
  std::uint32_t (*max_abs_bits)(const float* x, std::size_t n);
  // q = clamp(round(x * inv)) into int8 / packed int4 (start index even; n odd only at the end).
  void (*quantize8)(const float* x, std::size_t n, float inv, bool stochastic, StochasticKey key,
                    std::size_t index0, std::byte* q);
  void (*quantize4)(const float* x, std::size_t n, float inv, bool stochastic, StochasticKey key,
                    std::size_t index0, std::byte* q);
  void (*dequantize8)(const std::byte* q, std::size_t n, float scale, float* out, bool add);
  void (*dequantize4)(const std::byte* q, std::size_t n, float scale, float* out, bool add);
  SumMax (*abs_sum)(const float* x, std::size_t n);
  void (*signs)(const float* x, std::size_t n, std::byte* bits);  // start index % 8 == 0
  void (*unsigns)(const std::byte* bits, std::size_t n, float scale, float* out, bool add);
  std::uint32_t (*to_bf16)(const float* x, std::size_t n, std::byte* out);  // returns max |bits|
  std::uint32_t (*to_f16)(const float* x, std::size_t n, std::byte* out);
  void (*from_bf16)(const std::byte* in, std::size_t n, float* out, bool add);
  void (*from_f16)(const std::byte* in, std::size_t n, float* out, bool add);
};

const CodecKernels& scalar_codec_kernels();
#if defined(__x86_64__)
const CodecKernels& avx2_codec_kernels();
const CodecKernels& avx512_codec_kernels();
#endif

// --- shared scalar element operations ---------------------------------------------------------

// The stream's key for a seed: splitmix64's output function, so nearby seeds give unrelated keys.
// Shared with the CUDA codecs (kernels/cuda/), which must draw the same stream.
inline StochasticKey stochastic_key(std::uint64_t seed) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return {static_cast<std::uint32_t>(z), static_cast<std::uint32_t>(z >> 32)};
}

inline std::uint16_t bf16_clamped(float x) {
  return bf16_from_bits(std::bit_cast<std::uint32_t>(x));
}

inline std::uint16_t f32_to_f16_clamped(float x) {
  return f32_to_f16(std::clamp(x, -kF16Max, kF16Max));
}

inline float load_f32(const std::byte* p) {
  float v = 0.0F;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_f32(std::byte* p, float v) {
  std::memcpy(p, &v, sizeof v);
}
inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_u16(std::byte* p, std::uint16_t v) {
  std::memcpy(p, &v, sizeof v);
}

// acc[j] (j < 16) reduced as acc[j] += acc[j + 8], then + 4, + 2, + 1: the 1-bit mean's fixed
// order.
inline float reduce16(float* acc) {
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

// Scalar tails shared by all levels (elements [from, n) of a block; `from` is a multiple of the
// vector width, so lanes continue as i % 16).
inline void quantize8_tail(const float* x, std::size_t from, std::size_t n, float inv,
                           bool stochastic, StochasticKey key, std::size_t index0, std::byte* q) {
  for (std::size_t i = from; i < n; ++i) {
    q[i] = int8_byte(quantize_one(x[i], inv, 127.0F, stochastic, key, index0 + i));
  }
}

inline void quantize4_tail(const float* x, std::size_t from, std::size_t n, float inv,
                           bool stochastic, StochasticKey key, std::size_t index0, std::byte* q) {
  for (std::size_t i = from; i < n; i += 2) {
    const auto lo = static_cast<int>(quantize_one(x[i], inv, 7.0F, stochastic, key, index0 + i));
    const int hi =
        i + 1 < n
            ? static_cast<int>(quantize_one(x[i + 1], inv, 7.0F, stochastic, key, index0 + i + 1))
            : 0;
    q[i / 2] = nibble_pair(lo, hi);
  }
}

inline float nibble_value(std::byte b, bool high) {
  return static_cast<float>(nibble_code(b, high));
}

inline void dequantize8_tail(const std::byte* q, std::size_t from, std::size_t n, float scale,
                             float* out, bool add) {
  for (std::size_t i = from; i < n; ++i) {
    const float v = static_cast<float>(static_cast<std::int8_t>(q[i])) * scale;
    out[i] = add ? out[i] + v : v;
  }
}

inline void dequantize4_tail(const std::byte* q, std::size_t from, std::size_t n, float scale,
                             float* out, bool add) {
  for (std::size_t i = from; i < n; ++i) {
    const float v = nibble_value(q[i / 2], (i & 1U) != 0) * scale;
    out[i] = add ? out[i] + v : v;
  }
}

inline void signs_tail(const float* x, std::size_t from, std::size_t n, std::byte* bits) {
  for (std::size_t i = from; i < n; i += 8) {
    unsigned byte = 0;
    for (std::size_t j = 0; j < 8 && i + j < n; ++j) {
      byte |= (std::bit_cast<std::uint32_t>(x[i + j]) >> 31) << j;
    }
    bits[i / 8] = static_cast<std::byte>(byte);
  }
}

inline void unsigns_tail(const std::byte* bits, std::size_t from, std::size_t n, float scale,
                         float* out, bool add) {
  for (std::size_t i = from; i < n; ++i) {
    const float v = sign_value(bits, i, scale);
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace strait::kernels::detail

// The driver of the codec primitives, compiled only inside an instruction set's file
// (kernels/simd_<isa>.cpp), which defines STRAIT_SIMD_TARGET as its target attribute and
// instantiates codec_driver<Isa> with lane types of internal linkage. Isa::Codec (Q below) is the
// ISA's f32 lane type (kLanes floats in Q::V: load, store, add, sub, mul, min, max, broadcast, as
// in kernels/reduce_simd.h) with the 32-bit integer lanes Q::U beside it: bits / floats
// (reinterpretation), to_float / trunc (conversion), floor / nearest (rounding), and_u, or_u,
// xor_u, add_u, mullo_u, min_u, max_u (unsigned), srli_u<k>, set1_u, iota_u (0, 1, ...), hmax_u
// (the largest lane); sign_bits / select_signs (one bit a lane, to and from a mask); and the
// packing that depends on the register width: pack_i8 (32 / kLanes vectors of int32 to 32 int8 in
// order), narrow_i16 (16 int16 to int8), from_i8 (16 int8 to 16 / kLanes float vectors),
// store_u16 (16 / kLanes vectors of values < 2^16 to 16 halves), store_f16 (VCVTPS2PH, nearest).
// Isa::F16 and Isa::BF16 widen halves. Each primitive does what whole vectors cover and leaves the
// rest to the scalar tails above, so every level gives the scalar level's bits.
#if defined(STRAIT_SIMD_TARGET)
#include <immintrin.h>

namespace strait::kernels::detail::simd {

template <class Q>
STRAIT_SIMD_TARGET inline typename Q::U abs_bits_v(typename Q::V x) {
  return Q::and_u(Q::bits(x), Q::set1_u(kAbsMask));
}

template <class Q>
STRAIT_SIMD_TARGET inline typename Q::U lowbias32_v(typename Q::U x) {
  x = Q::xor_u(x, Q::template srli_u<16>(x));
  x = Q::mullo_u(x, Q::set1_u(0x7feb352dU));
  x = Q::xor_u(x, Q::template srli_u<15>(x));
  x = Q::mullo_u(x, Q::set1_u(0x846ca68bU));
  return Q::xor_u(x, Q::template srli_u<16>(x));
}

// uniform_from_word(random_word(key, i)) for the kLanes elements from index on.
template <class Q>
STRAIT_SIMD_TARGET inline typename Q::V uniform_v(StochasticKey key, std::size_t index) {
  const auto i = Q::add_u(Q::set1_u(static_cast<std::uint32_t>(index)), Q::iota_u());
  auto h = lowbias32_v<Q>(Q::xor_u(i, Q::set1_u(key.k0)));
  h = lowbias32_v<Q>(Q::add_u(h, Q::set1_u(key.k1)));
  return Q::mul(Q::to_float(Q::template srli_u<8>(h)), Q::broadcast(0x1p-24F));
}

// quantize_one() on kLanes lanes, as int32. x is finite (blocks with a NaN or Inf are refused
// first); max(lo, r) is MAXPS(r, lo) and min(hi, c) is MINPS(c, hi).
template <class Q>
STRAIT_SIMD_TARGET inline typename Q::U quantize_v(typename Q::V x, typename Q::V inv,
                                                   typename Q::V limit, bool stochastic,
                                                   StochasticKey key, std::size_t index) {
  const auto y = Q::mul(x, inv);
  const auto r = stochastic ? Q::floor(Q::add(y, uniform_v<Q>(key, index))) : Q::nearest(y);
  const auto lo = Q::sub(Q::broadcast(0.0F), limit);
  return Q::trunc(Q::min(limit, Q::max(lo, r)));
}

// 32 quantized int8 lanes, in element order.
template <class Q>
STRAIT_SIMD_TARGET inline __m256i quantize32(const float* x, typename Q::V inv, typename Q::V limit,
                                             bool stochastic, StochasticKey key,
                                             std::size_t index) {
  constexpr std::size_t w = Q::kLanes;
  typename Q::U r[32 / w];
  for (std::size_t j = 0; j < 32 / w; ++j) {
    r[j] = quantize_v<Q>(Q::load(x + j * w), inv, limit, stochastic, key, index + j * w);
  }
  return Q::pack_i8(r);
}

template <class Q>
STRAIT_SIMD_TARGET inline void store_add(float* out, typename Q::V v, bool add) {
  if (add) v = Q::add(Q::load(out), v);
  Q::store(out, v);
}

template <class Q>
STRAIT_SIMD_TARGET std::uint32_t max_abs_bits_v(const float* x, std::size_t n) {
  constexpr std::size_t w = Q::kLanes;
  auto m0 = Q::set1_u(0);
  auto m1 = Q::set1_u(0);
  std::size_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    m0 = Q::max_u(m0, abs_bits_v<Q>(Q::load(x + i)));
    m1 = Q::max_u(m1, abs_bits_v<Q>(Q::load(x + i + w)));
  }
  std::uint32_t m = Q::hmax_u(Q::max_u(m0, m1));
  for (; i < n; ++i) m = std::max(m, abs_bits(x[i]));
  return m;
}

template <class Q>
STRAIT_SIMD_TARGET void quantize8_v(const float* x, std::size_t n, float inv, bool stochastic,
                                    StochasticKey key, std::size_t index0, std::byte* q) {
  const auto vinv = Q::broadcast(inv);
  const auto limit = Q::broadcast(127.0F);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        quantize32<Q>(x + i, vinv, limit, stochastic, key, index0 + i));
  }
  quantize8_tail(x, i, n, inv, stochastic, key, index0, q);
}

template <class Q>
STRAIT_SIMD_TARGET void quantize4_v(const float* x, std::size_t n, float inv, bool stochastic,
                                    StochasticKey key, std::size_t index0, std::byte* q) {
  const auto vinv = Q::broadcast(inv);
  const auto limit = Q::broadcast(7.0F);
  const __m256i lo_nibble = _mm256_set1_epi16(0x000f);
  const __m256i hi_nibble = _mm256_set1_epi16(0x00f0);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i b = quantize32<Q>(x + i, vinv, limit, stochastic, key, index0 + i);
    // Each 16-bit lane holds elements 2j (low byte) and 2j + 1: fold them into one byte.
    const __m256i w = _mm256_or_si256(_mm256_and_si256(b, lo_nibble),
                                      _mm256_and_si256(_mm256_srli_epi16(b, 4), hi_nibble));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i / 2), Q::narrow_i16(w));
  }
  quantize4_tail(x, i, n, inv, stochastic, key, index0, q);
}

// 16 int8 lanes times s, stored to (or added into) out[0, 16).
template <class Q>
STRAIT_SIMD_TARGET inline void put_i8x16(float* out, __m128i e, typename Q::V s, bool add) {
  constexpr std::size_t w = Q::kLanes;
  typename Q::V v[16 / w];
  Q::from_i8(e, v);
  for (std::size_t j = 0; j < 16 / w; ++j) store_add<Q>(out + j * w, Q::mul(v[j], s), add);
}

template <class Q>
STRAIT_SIMD_TARGET void dequantize8_v(const std::byte* q, std::size_t n, float scale, float* out,
                                      bool add) {
  const auto s = Q::broadcast(scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    put_i8x16<Q>(out + i, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)), s, add);
  }
  dequantize8_tail(q, i, n, scale, out, add);
}

template <class Q>
STRAIT_SIMD_TARGET void dequantize4_v(const std::byte* q, std::size_t n, float scale, float* out,
                                      bool add) {
  const auto s = Q::broadcast(scale);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i / 2));
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    // Interleave to element order, then sign-extend the nibbles: (v ^ 8) - 8.
    put_i8x16<Q>(out + i, _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight), s,
                 add);
    put_i8x16<Q>(out + i + 16, _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight),
                 s, add);
  }
  dequantize4_tail(q, i, n, scale, out, add);
}

// Lane j of the 16 sums takes the elements i % 16 == j, whatever the vector width.
template <class Q>
STRAIT_SIMD_TARGET SumMax abs_sum_v(const float* x, std::size_t n) {
  constexpr std::size_t w = Q::kLanes;
  typename Q::V acc[16 / w];
  for (auto& a : acc) a = Q::broadcast(0.0F);
  auto m = Q::set1_u(0);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (std::size_t j = 0; j < 16 / w; ++j) {
      const auto a = abs_bits_v<Q>(Q::load(x + i + j * w));
      acc[j] = Q::add(acc[j], Q::floats(a));
      m = Q::max_u(m, a);
    }
  }
  alignas(64) float lanes[16];
  for (std::size_t j = 0; j < 16 / w; ++j) Q::store(lanes + j * w, acc[j]);
  std::uint32_t mx = Q::hmax_u(m);
  for (; i < n; ++i) {
    lanes[i % 16] += std::bit_cast<float>(abs_bits(x[i]));
    mx = std::max(mx, abs_bits(x[i]));
  }
  return {reduce16(lanes), mx};
}

// Bit j of a byte is element 8 k + j: kLanes sign bits are kLanes / 8 bytes, little-endian.
template <class Q>
STRAIT_SIMD_TARGET void signs_v(const float* x, std::size_t n, std::byte* bits) {
  constexpr std::size_t w = Q::kLanes;
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    const std::uint32_t m = Q::sign_bits(Q::load(x + i));
    std::memcpy(bits + i / 8, &m, w / 8);
  }
  signs_tail(x, i, n, bits);
}

// -scale by its sign bit, as the scalar path's negation (0 - scale would give +0 for 0).
template <class Q>
STRAIT_SIMD_TARGET void unsigns_v(const std::byte* bits, std::size_t n, float scale, float* out,
                                  bool add) {
  constexpr std::size_t w = Q::kLanes;
  const auto pos = Q::broadcast(scale);
  const auto neg = Q::floats(Q::xor_u(Q::bits(pos), Q::set1_u(0x80000000U)));
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    std::uint32_t m = 0;
    std::memcpy(&m, bits + i / 8, w / 8);
    store_add<Q>(out + i, Q::select_signs(m, pos, neg), add);
  }
  unsigns_tail(bits, i, n, scale, out, add);
}

// bf16_clamped() on kLanes lanes, as int32 holding the 16-bit result.
template <class Q>
STRAIT_SIMD_TARGET inline typename Q::U bf16_clamped_v(typename Q::U bits) {
  const auto a = Q::min_u(Q::and_u(bits, Q::set1_u(kAbsMask)), Q::set1_u(kBf16MaxBelow));
  const auto odd = Q::and_u(Q::template srli_u<16>(a), Q::set1_u(1));
  const auto r = Q::template srli_u<16>(Q::add_u(Q::add_u(a, Q::set1_u(0x7fff)), odd));
  return Q::or_u(r, Q::and_u(Q::template srli_u<16>(bits), Q::set1_u(0x8000)));
}

template <class Q>
STRAIT_SIMD_TARGET std::uint32_t to_bf16_v(const float* x, std::size_t n, std::byte* out) {
  constexpr std::size_t w = Q::kLanes;
  auto m = Q::set1_u(0);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    typename Q::U r[16 / w];
    for (std::size_t j = 0; j < 16 / w; ++j) {
      const auto v = Q::load(x + i + j * w);
      m = Q::max_u(m, abs_bits_v<Q>(v));
      r[j] = bf16_clamped_v<Q>(Q::bits(v));
    }
    Q::store_u16(out + 2 * i, r);
  }
  std::uint32_t mx = Q::hmax_u(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, bf16_clamped(x[i]));
  }
  return mx;
}

template <class Q>
STRAIT_SIMD_TARGET std::uint32_t to_f16_v(const float* x, std::size_t n, std::byte* out) {
  constexpr std::size_t w = Q::kLanes;
  const auto hi = Q::broadcast(kF16Max);
  const auto lo = Q::broadcast(-kF16Max);
  auto m = Q::set1_u(0);
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    const auto v = Q::load(x + i);
    m = Q::max_u(m, abs_bits_v<Q>(v));
    // MINPS(MAXPS(v, lo), hi) is std::clamp for non-NaN v; NaN is reported, so its bits do not
    // matter.
    Q::store_f16(out + 2 * i, Q::min(hi, Q::max(lo, v)));
  }
  std::uint32_t mx = Q::hmax_u(m);
  for (; i < n; ++i) {
    mx = std::max(mx, abs_bits(x[i]));
    store_u16(out + 2 * i, f32_to_f16_clamped(x[i]));
  }
  return mx;
}

// Halves widened by the ISA's reduce lane type (Isa::BF16 or Isa::F16), exactly.
template <class Isa, bool kBf16>
STRAIT_SIMD_TARGET void from_half_v(const std::byte* in, std::size_t n, float* out, bool add) {
  using Q = typename Isa::Codec;
  using Half = std::conditional_t<kBf16, typename Isa::BF16, typename Isa::F16>;
  constexpr std::size_t w = Q::kLanes;
  std::size_t i = 0;
  for (; i + w <= n; i += w) store_add<Q>(out + i, Half::load(in + 2 * i), add);
  for (; i < n; ++i) {
    const std::uint16_t h = load_u16(in + 2 * i);
    const float v = kBf16 ? bf16_to_f32(h) : f16_to_f32(h);
    out[i] = add ? out[i] + v : v;
  }
}

template <class Isa>
const CodecKernels& codec_driver() {
  using Q = typename Isa::Codec;
  static constexpr CodecKernels k{
      max_abs_bits_v<Q>, quantize8_v<Q>,         quantize4_v<Q>,
      dequantize8_v<Q>,  dequantize4_v<Q>,       abs_sum_v<Q>,
      signs_v<Q>,        unsigns_v<Q>,           to_bf16_v<Q>,
      to_f16_v<Q>,       from_half_v<Isa, true>, from_half_v<Isa, false>};
  return k;
}

}  // namespace strait::kernels::detail::simd
#endif  // STRAIT_SIMD_TARGET
