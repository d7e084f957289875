// Elementwise codec kernels for compressed collectives (CPU): 16-bit casts, blockwise absmax
// int8/int4 quantization, and 1-bit sign with a per-block scale. comm/compress/ wraps them as
// Codecs; the wire layouts are defined here so that every path (and later CUDA) writes the same
// bytes.
//
// Paths: scalar, AVX2 (+FMA/F16C) and AVX-512, picked per call from simd_level(). Every path gives
// bit-identical output to the scalar one (the collectives need all ranks to agree bit for bit, and
// ranks may run on different CPUs): per-block scales are computed once by shared code, each element
// goes through the same IEEE operations in the same order (the files are built without FMA
// contraction), and the one reduction (the 1-bit mean) is summed in a fixed 16-lane order.
//
// Wire buffers are byte spans with no alignment requirement. Little-endian, as x86-64 and aarch64.
//   bf16 / f16:  count x 2 bytes.
//   absmax:      nblocks f32 scales, then the payload: int8: count bytes (two's complement);
//                int4: ceil(count / 2) bytes, element 2j in the low nibble of byte j, 2j+1 in the
//                high nibble (two's complement, -7..7).
//   sign:        nblocks f32 scales, then ceil(count / 8) bytes, element i in bit i % 8 of byte
//                i / 8; a set bit means the sign bit of x was set (so -0.0 decodes to -scale).
//   nblocks = ceil(count / block); the last block may be short.
//
// Non-finite input: every encoder returns the index of the first NaN or +-Inf element (found from
// the same max-of-|bits| the absmax needs, so the check costs no extra pass) and leaves the output
// unspecified; the caller must report it, never send it. std::nullopt means all were finite.
// Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for size mismatches and bad formats (block 0, odd int4 block, sign block
// not a multiple of 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace strait::kernels {

// Decoders either overwrite out or add the decoded values into it (a ring reducing in fp32).
enum class Accumulate : std::uint8_t { No, Yes };

// --- 16-bit casts (round to nearest even)
// --------------------------------------------------------- bf16: finite values beyond bf16's range
// clamp to +-(max bf16) instead of rounding to Inf.
[[nodiscard]] std::optional<std::size_t> encode_bf16(std::span<const float> in,
                                                     std::span<std::byte> out);
void decode_bf16(std::span<const std::byte> in, std::span<float> out, Accumulate acc);
// f16 (IEEE binary16): finite values clamp to +-65504 instead of overflowing to Inf; values below
// its range become subnormals or zero.
[[nodiscard]] std::optional<std::size_t> encode_f16(std::span<const float> in,
                                                    std::span<std::byte> out);
void decode_f16(std::span<const std::byte> in, std::span<float> out, Accumulate acc);

// --- blockwise absmax int8 / int4 ---------------------------------------------------------------
// Per block: scale = absmax / L (L = 127 for int8, 7 for int4), q = clamp(round(x * (L / absmax)),
// -L, L), decoded as q * scale. A block whose absmax is below kAbsmaxFloor (all zeros included)
// stores scale 0 and decodes to exact zeros, so no scale or reciprocal is ever subnormal or Inf.
// Nearest rounding is to nearest even: |x - decode| <= scale / 2 (plus fp32 rounding of the
// product). Stochastic rounding is floor(x * L / absmax + u) with u in [0, 1) from
// stochastic_uniform(seed, i): unbiased, |x - decode| < scale, and the same for a given seed on
// every path and CPU.
enum class Rounding : std::uint8_t { Nearest, Stochastic };

struct AbsmaxFormat {
  int bits = 8;             // 8 or 4
  std::size_t block = 256;  // elements per scale; even for int4
};

inline constexpr float kAbsmaxFloor = 0x1p-100F;

std::size_t absmax_encoded_bytes(const AbsmaxFormat& format, std::size_t count);
[[nodiscard]] std::optional<std::size_t> absmax_encode(const AbsmaxFormat& format,
                                                       std::span<const float> in,
                                                       std::span<std::byte> out,
                                                       Rounding rounding = Rounding::Nearest,
                                                       std::uint64_t seed = 0);
void absmax_decode(const AbsmaxFormat& format, std::span<const std::byte> in, std::span<float> out,
                   Accumulate acc);

// The u in [0, 1) (a multiple of 2^-24) that stochastic rounding adds to element `index` of a call
// with `seed`: a counter-based hash (two rounds of a 32-bit integer mixer over the index's low 32
// bits and a key from splitmix64(seed)), so elements can be drawn in any order or width. Indices
// 2^32 apart share a draw.
float stochastic_uniform(std::uint64_t seed, std::size_t index) noexcept;

// --- 1-bit sign with a per-block scale
// ------------------------------------------------------------ Per block: scale = mean |x| (Seide
// et al. 2014; Tang et al. 2021, 1-bit Adam), decoded as sign(x) * scale. Biased: use it with error
// feedback. The mean's sum runs in 16 fixed lanes (lane i % 16), reduced pairwise (j += j + 8, + 4,
// + 2, + 1); a sum that overflows fp32 is redone in double. block must be a multiple of 8 so that
// each block's bits start a byte.
std::size_t sign_encoded_bytes(std::size_t block, std::size_t count);
[[nodiscard]] std::optional<std::size_t> sign_encode(std::size_t block, std::span<const float> in,
                                                     std::span<std::byte> out);
void sign_decode(std::size_t block, std::span<const std::byte> in, std::span<float> out,
                 Accumulate acc);

}  // namespace strait::kernels
