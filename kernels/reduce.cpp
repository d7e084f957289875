#include "kernels/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace strait::kernels {
namespace {

template <class T, class Op>
void apply(void* inout, const void* in, std::size_t n, Op op) {
  // inout == in is fine: each element is read before it is written. The loop auto-vectorises.
  auto* a = static_cast<T*>(inout);
  const auto* b = static_cast<const T*>(in);
  for (std::size_t i = 0; i < n; ++i) a[i] = op(a[i], b[i]);
}

template <class T>
void reduce_native(ReduceOp op, void* inout, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum:
      apply<T>(inout, in, n, [](T x, T y) { return static_cast<T>(x + y); });
      break;
    case ReduceOp::Prod:
      apply<T>(inout, in, n, [](T x, T y) { return static_cast<T>(x * y); });
      break;
    case ReduceOp::Min: apply<T>(inout, in, n, [](T x, T y) { return std::min(x, y); }); break;
    case ReduceOp::Max: apply<T>(inout, in, n, [](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::Avg: break;  // rejected by reduce()
  }
}

// 16-bit floats: widen, reduce in f32, round back.
template <std::uint16_t (*ToHalf)(float), float (*FromHalf)(std::uint16_t)>
void reduce_half(ReduceOp op, void* inout, const void* in, std::size_t n) {
  auto* a = static_cast<std::uint16_t*>(inout);
  const auto* b = static_cast<const std::uint16_t*>(in);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = FromHalf(a[i]);
    const float y = FromHalf(b[i]);
    float r = 0.0F;
    switch (op) {
      case ReduceOp::Sum: r = x + y; break;
      case ReduceOp::Prod: r = x * y; break;
      case ReduceOp::Min: r = std::min(x, y); break;
      case ReduceOp::Max: r = std::max(x, y); break;
      case ReduceOp::Avg: break;
    }
    a[i] = ToHalf(r);
  }
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

void reduce(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count) {
  if (op == ReduceOp::Avg) {
    throw Error(ErrorCode::InvalidArgument,
                "kernels::reduce: avg is not elementwise; reduce with sum, then scale by 1/n");
  }
  if (count == 0) return;
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

void scale(DType dtype, void* inout, std::size_t count, double factor) {
  switch (dtype) {
    case DType::F32: {
      auto* a = static_cast<float*>(inout);
      const auto f = static_cast<float>(factor);
      for (std::size_t i = 0; i < count; ++i) a[i] *= f;
      return;
    }
    case DType::F64: {
      auto* a = static_cast<double*>(inout);
      for (std::size_t i = 0; i < count; ++i) a[i] *= factor;
      return;
    }
    case DType::F16:
    case DType::BF16: {
      auto* a = static_cast<std::uint16_t*>(inout);
      const auto f = static_cast<float>(factor);
      const bool bf = dtype == DType::BF16;
      for (std::size_t i = 0; i < count; ++i) {
        const float x = (bf ? bf16_to_f32(a[i]) : f16_to_f32(a[i])) * f;
        a[i] = bf ? f32_to_bf16(x) : f32_to_f16(x);
      }
      return;
    }
    default:
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("kernels::scale: dtype {} is an integer type; avg and scaling are "
                              "defined for floating-point dtypes only",
                              dtype_name(dtype)));
  }
}

}  // namespace strait::kernels
