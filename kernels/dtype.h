// Element types strait moves and reduces, with their sizes and names, and the 16-bit float
// conversions (IEEE binary16 and bfloat16, round-to-nearest-even) that the CPU paths use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strait::kernels {

enum class DType : std::uint8_t { F32, F64, F16, BF16, I8, U8, I32, I64 };

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I8:
    case DType::U8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) noexcept {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

// bfloat16: the top 16 bits of an f32, rounded to nearest even; NaN stays NaN (quiet).
constexpr std::uint16_t f32_to_bf16(float f) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7fffffffU) > 0x7f800000U) return static_cast<std::uint16_t>((bits >> 16) | 0x40U);
  const std::uint32_t rounding = 0x7fffU + ((bits >> 16) & 1U);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

constexpr float bf16_to_f32(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

// IEEE 754 binary16, round to nearest even, overflow to infinity, subnormals kept.
constexpr std::uint16_t f32_to_f16(float f) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000U);
  const std::uint32_t abs = bits & 0x7fffffffU;
  if (abs > 0x7f800000U) return static_cast<std::uint16_t>(sign | 0x7e00U);   // NaN
  if (abs >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);  // overflow -> inf
  if (abs < 0x38800000U) {               // result is subnormal or zero
    if (abs < 0x33000000U) return sign;  // below half the smallest subnormal
    const std::uint32_t mant = (abs & 0x7fffffU) | 0x800000U;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    const std::uint32_t half = 1U << (shift - 1);
    const std::uint32_t rest = mant & ((1U << shift) - 1U);
    std::uint32_t out = mant >> shift;
    if (rest > half || (rest == half && (out & 1U))) ++out;
    return static_cast<std::uint16_t>(sign | out);
  }
  // Normal: rebias exponent 127 -> 15, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t rebased = abs - 0x38000000U;
  const std::uint32_t rounded = rebased + 0xfffU + ((rebased >> 13) & 1U);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

constexpr float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fU;
  std::uint32_t mant = h & 0x3ffU;
  if (exp == 0x1fU) return std::bit_cast<float>(sign | 0x7f800000U | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    int e = -1;  // normalise the subnormal
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400U) == 0);
    const std::uint32_t out_exp = static_cast<std::uint32_t>(127 - 15 - e);
    return std::bit_cast<float>(sign | (out_exp << 23) | ((mant & 0x3ffU) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112U) << 23) | (mant << 13));
}

}  // namespace strait::kernels
