#include "kernels/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/reduce_simd.h"

namespace strait::kernels {
namespace {

// The scalar path (any CPU; the head and tail of the AVX2 path). Elements are read and written
// through memcpy, so any byte address is fine; GCC still auto-vectorises the loops (for baseline
// x86-64: SSE2) with unaligned loads.
template <class T>
T load(const unsigned char* p, std::size_t i) noexcept {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void store(unsigned char* p, std::size_t i, T v) noexcept {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <class T, class Op>
void apply(void* inout, const void* in, std::size_t n, Op op) {
  // inout == in is fine: each element is read before it is written.
  auto* a = static_cast<unsigned char*>(inout);
  const auto* b = static_cast<const unsigned char*>(in);
  for (std::size_t i = 0; i < n; ++i) store<T>(a, i, op(load<T>(a, i), load<T>(b, i)));
}

// Integers wrap modulo 2^bits: the arithmetic is done on the unsigned type (signed overflow would
// be undefined behaviour), then converted back (modular since C++20).
template <class T>
T add(T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  } else {
    return x + y;
  }
}

template <class T>
T mul(T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  } else {
    return x * y;
  }
}

// Band, Bor, Bxor on integers (reduce() refuses them for floats).
template <class T>
void reduce_bitwise(ReduceOp op, void* inout, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Band: apply<T>(inout, in, n, [](T x, T y) { return T(x & y); }); break;
    case ReduceOp::Bor: apply<T>(inout, in, n, [](T x, T y) { return T(x | y); }); break;
    default: apply<T>(inout, in, n, [](T x, T y) { return T(x ^ y); }); break;
  }
}

template <class T>
void reduce_native(ReduceOp op, void* inout, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum: apply<T>(inout, in, n, [](T x, T y) { return add(x, y); }); break;
    case ReduceOp::Prod: apply<T>(inout, in, n, [](T x, T y) { return mul(x, y); }); break;
    case ReduceOp::Min: apply<T>(inout, in, n, [](T x, T y) { return std::min(x, y); }); break;
    case ReduceOp::Max: apply<T>(inout, in, n, [](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::Band:
    case ReduceOp::Bor:
    case ReduceOp::Bxor:
      if constexpr (std::is_integral_v<T>) reduce_bitwise<T>(op, inout, in, n);
      break;
    case ReduceOp::Avg: break;  // rejected by reduce()
  }
}

// 16-bit floats: widen, reduce in f32, round back.
template <std::uint16_t (*ToHalf)(float), float (*FromHalf)(std::uint16_t)>
void reduce_half(ReduceOp op, void* inout, const void* in, std::size_t n) {
  auto* a = static_cast<unsigned char*>(inout);
  const auto* b = static_cast<const unsigned char*>(in);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = FromHalf(load<std::uint16_t>(a, i));
    const float y = FromHalf(load<std::uint16_t>(b, i));
    float r = 0.0F;
    switch (op) {
      case ReduceOp::Sum: r = x + y; break;
      case ReduceOp::Prod: r = x * y; break;
      case ReduceOp::Min: r = std::min(x, y); break;
      case ReduceOp::Max: r = std::max(x, y); break;
      default: break;  // Avg, bitwise: rejected by reduce()
    }
    store<std::uint16_t>(a, i, ToHalf(r));
  }
}

}  // namespace

namespace detail {

void reduce_scalar(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count) {
  switch (dtype) {
    case DType::F32: reduce_native<float>(op, inout, in, count); break;
    case DType::F64: reduce_native<double>(op, inout, in, count); break;
    case DType::I8: reduce_native<std::int8_t>(op, inout, in, count); break;
    case DType::U8: reduce_native<std::uint8_t>(op, inout, in, count); break;
    case DType::I32: reduce_native<std::int32_t>(op, inout, in, count); break;
    case DType::I64: reduce_native<std::int64_t>(op, inout, in, count); break;
    case DType::F16: reduce_half<f32_to_f16, f16_to_f32>(op, inout, in, count); break;
    case DType::BF16: reduce_half<f32_to_bf16, bf16_to_f32>(op, inout, in, count); break;
  }
}

void scale_scalar(DType dtype, void* inout, std::size_t count, double factor) {
  auto* a = static_cast<unsigned char*>(inout);
  switch (dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(factor);
      for (std::size_t i = 0; i < count; ++i) store<float>(a, i, load<float>(a, i) * f);
      return;
    }
    case DType::F64: {
      for (std::size_t i = 0; i < count; ++i) store<double>(a, i, load<double>(a, i) * factor);
      return;
    }
    case DType::F16:
    case DType::BF16: {
      const auto f = static_cast<float>(factor);
      const bool bf = dtype == DType::BF16;
      for (std::size_t i = 0; i < count; ++i) {
        const auto h = load<std::uint16_t>(a, i);
        const float x = (bf ? bf16_to_f32(h) : f16_to_f32(h)) * f;
        store<std::uint16_t>(a, i, bf ? f32_to_bf16(x) : f32_to_f16(x));
      }
      return;
    }
    default: return;  // integers: rejected by scale()
  }
}

}  // namespace detail

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Band: return "band";
    case ReduceOp::Bor: return "bor";
    case ReduceOp::Bxor: return "bxor";
  }
  return "?";
}

void reduce(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count) {
  if (op == ReduceOp::Avg) {
    throw Error(ErrorCode::InvalidArgument,
                "kernels::reduce: avg is not elementwise; reduce with sum, then scale by 1/n");
  }
  if (reduce_op_is_bitwise(op) && dtype_is_float(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::reduce: {} is a bitwise op, defined for integer dtypes only, "
                            "not {}; reinterpret the data as an integer type of its width",
                            reduce_op_name(op), dtype_name(dtype)));
  }
  if (count == 0) return;
  std::size_t done = 0;
#if defined(__x86_64__)
  switch (simd_level()) {
    case SimdLevel::Avx512: done = detail::reduce_avx512(dtype, op, inout, in, count); break;
    case SimdLevel::Avx2: done = detail::reduce_avx2(dtype, op, inout, in, count); break;
    case SimdLevel::Scalar: break;
  }
#endif
  if (done == count) return;
  const std::size_t skip = done * dtype_size(dtype);
  detail::reduce_scalar(dtype, op, static_cast<unsigned char*>(inout) + skip,
                        static_cast<const unsigned char*>(in) + skip, count - done);
}

void scale(DType dtype, void* inout, std::size_t count, double factor) {
  if (!dtype_is_float(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::scale: dtype {} is an integer type; avg and scaling are "
                            "defined for floating-point dtypes only",
                            dtype_name(dtype)));
  }
  if (count == 0) return;
  std::size_t done = 0;
#if defined(__x86_64__)
  switch (simd_level()) {
    case SimdLevel::Avx512: done = detail::scale_avx512(dtype, inout, count, factor); break;
    case SimdLevel::Avx2: done = detail::scale_avx2(dtype, inout, count, factor); break;
    case SimdLevel::Scalar: break;
  }
#endif
  if (done == count) return;
  detail::scale_scalar(dtype, static_cast<unsigned char*>(inout) + done * dtype_size(dtype),
                       count - done, factor);
}

}  // namespace strait::kernels
