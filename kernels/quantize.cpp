// Codec drivers (block loops, scales, size checks: shared by every SIMD level) and the scalar
// level.
#include "kernels/quantize.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/quantize_impl.h"

namespace strait::kernels {
namespace detail {
namespace {

std::uint32_t s_max_abs_bits(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, abs_bits(x[i]));
  return m;
}

void s_quantize8(const float* x, std::size_t n, float inv, bool stochastic, StochasticKey key,
                 std::size_t index0, std::byte* q) {
  quantize8_tail(x, 0, n, inv, stochastic, key, index0, q);
}

void s_quantize4(const float* x, std::size_t n, float inv, bool stochastic, StochasticKey key,
                 std::size_t index0, std::byte* q) {
  quantize4_tail(x, 0, n, inv, stochastic, key, index0, q);
}

void s_dequantize8(const std::byte* q, std::size_t n, float scale, float* out, bool add) {
  dequantize8_tail(q, 0, n, scale, out, add);
}

void s_dequantize4(const std::byte* q, std::size_t n, float scale, float* out, bool add) {
  dequantize4_tail(q, 0, n, scale, out, add);
}

SumMax s_abs_sum(const float* x, std::size_t n) {
  float acc[16] = {};
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc[i % 16] += std::fabs(x[i]);
    m = std::max(m, abs_bits(x[i]));
  }
  return {reduce16(acc), m};
}

void s_signs(const float* x, std::size_t n, std::byte* bits) {
  signs_tail(x, 0, n, bits);
}

void s_unsigns(const std::byte* bits, std::size_t n, float scale, float* out, bool add) {
  // A byte at a time with the sign picked by index, so the compiler unrolls it without branches
  // (bit by bit it ran at under 1 GB/s).
  const float value[2] = {scale, -scale};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto b = static_cast<unsigned>(bits[i / 8]);
    for (unsigned j = 0; j < 8; ++j) {
      const float v = value[(b >> j) & 1U];
      out[i + j] = add ? out[i + j] + v : v;
    }
  }
  unsigns_tail(bits, i, n, scale, out, add);
}

// The 16-bit casts, one loop for both formats (kNarrow / kWiden: the element conversion).
template <std::uint16_t (*kNarrow)(float)>
std::uint32_t s_to_half(const float* x, std::size_t n, std::byte* out) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    m = std::max(m, abs_bits(x[i]));
    store_u16(out + 2 * i, kNarrow(x[i]));
  }
  return m;
}

template <float (*kWiden)(std::uint16_t)>
void s_from_half(const std::byte* in, std::size_t n, float* out, bool add) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = kWiden(load_u16(in + 2 * i));
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace

const CodecKernels& scalar_codec_kernels() {
  static constexpr CodecKernels k{s_max_abs_bits,
                                  s_quantize8,
                                  s_quantize4,
                                  s_dequantize8,
                                  s_dequantize4,
                                  s_abs_sum,
                                  s_signs,
                                  s_unsigns,
                                  s_to_half<bf16_clamped>,
                                  s_to_half<f32_to_f16_clamped>,
                                  s_from_half<bf16_to_f32>,
                                  s_from_half<f16_to_f32>};
  return k;
}

}  // namespace detail

namespace {

using detail::CodecKernels;

const CodecKernels& active() {
#if defined(__x86_64__)
  switch (simd_level()) {
    case SimdLevel::Avx512: return detail::avx512_codec_kernels();
    case SimdLevel::Avx2: return detail::avx2_codec_kernels();
    case SimdLevel::Scalar: break;
  }
#endif
  return detail::scalar_codec_kernels();
}

std::size_t first_non_finite(std::span<const float> in) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (detail::abs_bits(in[i]) >= detail::kInfBits) return i;
  }
  return in.size();  // not reached: callers only look after the max said one is there
}

void check_size(std::string_view what, std::string_view buffer, std::size_t got, std::size_t want) {
  if (got == want) return;
  throw Error(
      ErrorCode::InvalidArgument,
      fmt::format("kernels::{}: {} holds {} bytes, the format needs {}", what, buffer, got, want));
}

std::size_t blocks(std::size_t count, std::size_t block) {
  return (count + block - 1) / block;
}

void check_absmax(const AbsmaxFormat& f) {
  if ((f.bits != 8 && f.bits != 4) || f.block == 0 || (f.bits == 4 && f.block % 2 != 0)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::absmax: bits={} block={} is not a format: bits is 8 or 4, "
                            "block > 0, and even for 4 bits (two elements share a byte)",
                            f.bits, f.block));
  }
}

void check_sign_block(std::size_t block) {
  if (block == 0 || block % 8 != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::sign: block={} must be a positive multiple of 8 (each "
                            "block's bits start a byte)",
                            block));
  }
}

std::size_t payload_bytes(const AbsmaxFormat& f, std::size_t count) {
  return f.bits == 8 ? count : (count + 1) / 2;
}

}  // namespace

// --- casts ---------------------------------------------------------------------------------------

std::optional<std::size_t> encode_bf16(std::span<const float> in, std::span<std::byte> out) {
  check_size("encode_bf16", "out", out.size(), 2 * in.size());
  if (active().to_bf16(in.data(), in.size(), out.data()) < detail::kInfBits) return std::nullopt;
  return first_non_finite(in);
}

std::optional<std::size_t> encode_f16(std::span<const float> in, std::span<std::byte> out) {
  check_size("encode_f16", "out", out.size(), 2 * in.size());
  if (active().to_f16(in.data(), in.size(), out.data()) < detail::kInfBits) return std::nullopt;
  return first_non_finite(in);
}

void decode_bf16(std::span<const std::byte> in, std::span<float> out, Accumulate acc) {
  check_size("decode_bf16", "in", in.size(), 2 * out.size());
  active().from_bf16(in.data(), out.size(), out.data(), acc == Accumulate::Yes);
}

void decode_f16(std::span<const std::byte> in, std::span<float> out, Accumulate acc) {
  check_size("decode_f16", "in", in.size(), 2 * out.size());
  active().from_f16(in.data(), out.size(), out.data(), acc == Accumulate::Yes);
}

// --- absmax --------------------------------------------------------------------------------------

std::size_t absmax_encoded_bytes(const AbsmaxFormat& format, std::size_t count) {
  check_absmax(format);
  return 4 * blocks(count, format.block) + payload_bytes(format, count);
}

float stochastic_uniform(std::uint64_t seed, std::size_t index) noexcept {
  return detail::uniform_from_word(detail::random_word(detail::stochastic_key(seed), index));
}

std::optional<std::size_t> absmax_encode(const AbsmaxFormat& format, std::span<const float> in,
                                         std::span<std::byte> out, Rounding rounding,
                                         std::uint64_t seed) {
  check_size("absmax_encode", "out", out.size(), absmax_encoded_bytes(format, in.size()));
  const CodecKernels& k = active();
  const std::size_t n = in.size();
  const std::size_t nb = blocks(n, format.block);
  const float limit = format.bits == 8 ? 127.0F : 7.0F;
  const bool stochastic = rounding == Rounding::Stochastic;
  const detail::StochasticKey key = detail::stochastic_key(seed);
  auto* quantize = format.bits == 8 ? k.quantize8 : k.quantize4;
  std::byte* payload = out.data() + 4 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t start = b * format.block;
    const std::size_t m = std::min(format.block, n - start);
    const float* x = in.data() + start;
    const std::uint32_t max_bits = k.max_abs_bits(x, m);
    if (max_bits >= detail::kInfBits) return start + first_non_finite(in.subspan(start, m));
    const float absmax = std::bit_cast<float>(max_bits);
    // Below the floor inv is 0, and x * 0 rounds to 0 even stochastically (u < 1): the block
    // decodes to 0.
    const detail::AbsmaxScale s = detail::absmax_scale(absmax, limit, kAbsmaxFloor);
    detail::store_f32(out.data() + 4 * b, s.scale);
    quantize(x, m, s.inv, stochastic, key, start, payload + (format.bits == 8 ? start : start / 2));
  }
  return std::nullopt;
}

void absmax_decode(const AbsmaxFormat& format, std::span<const std::byte> in, std::span<float> out,
                   Accumulate acc) {
  check_size("absmax_decode", "in", in.size(), absmax_encoded_bytes(format, out.size()));
  const CodecKernels& k = active();
  const std::size_t n = out.size();
  const std::size_t nb = blocks(n, format.block);
  auto* dequantize = format.bits == 8 ? k.dequantize8 : k.dequantize4;
  const std::byte* payload = in.data() + 4 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t start = b * format.block;
    const std::size_t m = std::min(format.block, n - start);
    const float scale = detail::load_f32(in.data() + 4 * b);
    dequantize(payload + (format.bits == 8 ? start : start / 2), m, scale, out.data() + start,
               acc == Accumulate::Yes);
  }
}

// --- sign ----------------------------------------------------------------------------------------

std::size_t sign_encoded_bytes(std::size_t block, std::size_t count) {
  check_sign_block(block);
  return 4 * blocks(count, block) + (count + 7) / 8;
}

std::optional<std::size_t> sign_encode(std::size_t block, std::span<const float> in,
                                       std::span<std::byte> out) {
  check_size("sign_encode", "out", out.size(), sign_encoded_bytes(block, in.size()));
  const CodecKernels& k = active();
  const std::size_t n = in.size();
  const std::size_t nb = blocks(n, block);
  std::byte* bits = out.data() + 4 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t start = b * block;
    const std::size_t m = std::min(block, n - start);
    const float* x = in.data() + start;
    const detail::SumMax s = k.abs_sum(x, m);
    if (s.max_bits >= detail::kInfBits) return start + first_non_finite(in.subspan(start, m));
    float scale = s.sum / static_cast<float>(m);
    if (!std::isfinite(scale)) {
      // Finite inputs whose sum overflows fp32: the mean (<= absmax) still fits, so sum in double,
      // in index order (shared code, so still the same on every path).
      double sum = 0.0;
      for (std::size_t i = 0; i < m; ++i) sum += std::fabs(static_cast<double>(x[i]));
      scale = static_cast<float>(sum / static_cast<double>(m));
    }
    detail::store_f32(out.data() + 4 * b, scale);
    k.signs(x, m, bits + start / 8);
  }
  return std::nullopt;
}

void sign_decode(std::size_t block, std::span<const std::byte> in, std::span<float> out,
                 Accumulate acc) {
  check_size("sign_decode", "in", in.size(), sign_encoded_bytes(block, out.size()));
  const CodecKernels& k = active();
  const std::size_t n = out.size();
  const std::size_t nb = blocks(n, block);
  const std::byte* bits = in.data() + 4 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t start = b * block;
    const std::size_t m = std::min(block, n - start);
    k.unsigns(bits + start / 8, m, detail::load_f32(in.data() + 4 * b), out.data() + start,
              acc == Accumulate::Yes);
  }
}

}  // namespace strait::kernels
