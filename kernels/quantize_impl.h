// Internal to kernels/quantize*.cpp (and the host side of kernels/cuda/quantize.h): the
// per-SIMD-level primitives the codec drivers call, and the scalar per-element operations every
// level's tail (and the scalar level) shares, so that the paths are bit-identical by construction.
// The files including this are built with -ffp-contract=off: a fused multiply-add in one path and
// not another would break that.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"

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

inline std::uint32_t abs_bits(float x) {
  return std::bit_cast<std::uint32_t>(x) & kAbsMask;
}

// The stream's key for a seed: splitmix64's output function, so nearby seeds give unrelated keys.
// Shared with the CUDA codecs (kernels/cuda/), which must draw the same stream.
inline StochasticKey stochastic_key(std::uint64_t seed) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return {static_cast<std::uint32_t>(z), static_cast<std::uint32_t>(z >> 32)};
}

// Chris Wellons' "lowbias32" integer hash (a bijection on 32 bits with low avalanche bias).
inline std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

inline std::uint32_t random_word(StochasticKey key, std::size_t index) {
  return lowbias32(lowbias32(static_cast<std::uint32_t>(index) ^ key.k0) + key.k1);
}

// Top 24 bits of the word as a float in [0, 1): exact, so every path gets the same u.
inline float uniform_from_word(std::uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1p-24F;
}

// Round to nearest even for |y| < 2^22 (adding and removing 1.5 * 2^23 leaves no fraction bits);
// the SIMD paths use their round instruction, which gives the same result.
inline float round_nearest(float y) {
  constexpr float kMagic = 0x1.8p23F;
  return (y + kMagic) - kMagic;
}

inline float floor_small(float y) {
  const float r = round_nearest(y);
  return r > y ? r - 1.0F : r;
}

inline float quantize_one(float x, float inv, float limit, bool stochastic, StochasticKey key,
                          std::size_t index) {
  const float y = x * inv;
  const float r =
      stochastic ? floor_small(y + uniform_from_word(random_word(key, index))) : round_nearest(y);
  return std::min(std::max(r, -limit), limit);
}

inline std::uint16_t bf16_clamped(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t a = std::min(bits & kAbsMask, kBf16MaxBelow);
  const std::uint32_t r = (a + 0x7fffU + ((a >> 16) & 1U)) >> 16;
  return static_cast<std::uint16_t>(((bits >> 16) & 0x8000U) | r);
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
    const float r = quantize_one(x[i], inv, 127.0F, stochastic, key, index0 + i);
    q[i] = static_cast<std::byte>(static_cast<std::int8_t>(r));
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
    q[i / 2] = static_cast<std::byte>((static_cast<unsigned>(lo) & 0xfU) |
                                      ((static_cast<unsigned>(hi) & 0xfU) << 4));
  }
}

inline float nibble_value(std::byte b, bool high) {
  const unsigned v = (static_cast<unsigned>(b) >> (high ? 4 : 0)) & 0xfU;
  return static_cast<float>(static_cast<int>(v ^ 8U) - 8);  // sign-extend 4 bits
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
    const bool neg = ((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1U) != 0;
    const float v = neg ? -scale : scale;
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace strait::kernels::detail
