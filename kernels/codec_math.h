// The per-element arithmetic of the codecs (kernels/quantize.h), written once for the CPU paths
// (kernels/quantize_impl.h, every SIMD level's scalar tail) and the CUDA kernels
// (kernels/cuda/quantize.cu), so that both give the same bits by construction: the stochastic
// stream, absmax scales, rounding and clamping to int8 / int4, nibble packing, bf16 rounding and
// the 1-bit sign. Every function is inline and STRAIT_HOST_DEVICE. The files that include this are
// built without contraction (-ffp-contract=off, nvcc -fmad=false) and without fast math, so each
// float operation below is one IEEE operation rounded to nearest even on both. Internal.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "kernels/host_device.h"

namespace strait::kernels::detail {

inline constexpr std::uint32_t kAbsMask = 0x7fffffffU;
inline constexpr std::uint32_t kInfBits = 0x7f800000U;  // |bits| >= this: Inf or NaN
inline constexpr float kF16Max = 65504.0F;
inline constexpr std::uint32_t kBf16MaxBelow = 0x7f7f7fffU;  // largest |bits| not rounding to Inf

// The two 32-bit keys of a stochastic-rounding stream.
struct StochasticKey {
  std::uint32_t k0 = 0;
  std::uint32_t k1 = 0;
};

STRAIT_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}

STRAIT_HOST_DEVICE inline float bits_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}

STRAIT_HOST_DEVICE inline std::uint32_t abs_bits(float x) {
  return float_bits(x) & kAbsMask;
}

// Chris Wellons' "lowbias32" integer hash (a bijection on 32 bits with low avalanche bias).
STRAIT_HOST_DEVICE inline std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The counter-based stream: element `index`'s word, whatever path or thread draws it.
STRAIT_HOST_DEVICE inline std::uint32_t random_word(StochasticKey key, std::size_t index) {
  return lowbias32(lowbias32(static_cast<std::uint32_t>(index) ^ key.k0) + key.k1);
}

// Top 24 bits of the word as a float in [0, 1): exact, so every path gets the same u.
STRAIT_HOST_DEVICE inline float uniform_from_word(std::uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1p-24F;
}

// Round to nearest even for |y| < 2^22 (adding and removing 1.5 * 2^23 leaves no fraction bits);
// the SIMD paths use their round instruction, which gives the same result.
STRAIT_HOST_DEVICE inline float round_nearest(float y) {
  constexpr float kMagic = 0x1.8p23F;
  return (y + kMagic) - kMagic;
}

STRAIT_HOST_DEVICE inline float floor_small(float y) {
  const float r = round_nearest(y);
  return r > y ? r - 1.0F : r;
}

// clamp(round(x * inv), -limit, limit) as std::min(std::max(r, -limit), limit); |x * inv| <= limit
// + 1 < 2^22, so the rounding above is exact.
STRAIT_HOST_DEVICE inline float quantize_one(float x, float inv, float limit, bool stochastic,
                                             StochasticKey key, std::size_t index) {
  const float y = x * inv;
  const float r =
      stochastic ? floor_small(y + uniform_from_word(random_word(key, index))) : round_nearest(y);
  const float lo = r < -limit ? -limit : r;
  return limit < lo ? limit : lo;
}

// One block's scale (what it decodes by) and inverse (what it encodes by), from its largest |x|
// (finite) and the format's limit L (127 or 7): absmax / L and L / absmax, or zeros for a block
// below `floor` (kernels::kAbsmaxFloor); near FLT_MAX the scale steps one ulp towards 0 so that
// L * scale stays finite.
struct AbsmaxScale {
  float scale = 0.0F;
  float inv = 0.0F;
};
STRAIT_HOST_DEVICE inline AbsmaxScale absmax_scale(float absmax, float limit, float floor) {
  AbsmaxScale s;
  if (absmax >= floor) {
    s.scale = absmax / limit;
    if (abs_bits(limit * s.scale) >= kInfBits) s.scale = bits_float(float_bits(s.scale) - 1U);
    s.inv = limit / absmax;
  }
  return s;
}

// An int8 code's byte, and two int4 codes in one byte (lo in the low nibble).
STRAIT_HOST_DEVICE inline std::byte int8_byte(float q) {
  return static_cast<std::byte>(static_cast<std::int8_t>(q));
}
STRAIT_HOST_DEVICE inline std::byte nibble_pair(int lo, int hi) {
  return static_cast<std::byte>((static_cast<unsigned>(lo) & 0xfU) |
                                ((static_cast<unsigned>(hi) & 0xfU) << 4));
}
// The signed 4-bit code in the low (high = false) or high nibble of b.
STRAIT_HOST_DEVICE inline int nibble_code(std::byte b, bool high) {
  const unsigned v = (static_cast<unsigned>(b) >> (high ? 4 : 0)) & 0xfU;
  return static_cast<int>(v ^ 8U) - 8;  // sign-extend 4 bits
}

// bf16 of the fp32 with these bits, nearest even, finite values clamped to +-max bf16: integer
// arithmetic, so no hardware conversion is trusted.
STRAIT_HOST_DEVICE inline std::uint16_t bf16_from_bits(std::uint32_t bits) {
  const std::uint32_t m = bits & kAbsMask;
  const std::uint32_t a = m < kBf16MaxBelow ? m : kBf16MaxBelow;
  const std::uint32_t r = (a + 0x7fffU + ((a >> 16) & 1U)) >> 16;
  return static_cast<std::uint16_t>(((bits >> 16) & 0x8000U) | r);
}

// Element i of the 1-bit format: -scale where its sign bit is set, else scale.
STRAIT_HOST_DEVICE inline float sign_value(const std::byte* bits, std::size_t i, float scale) {
  const bool neg = ((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1U) != 0;
  return neg ? -scale : scale;
}

}  // namespace strait::kernels::detail
