#include "bench/bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/dtype_limits.h"

namespace strait::bench {
namespace {

using kernels::DType;
using kernels::ReduceOp;

template <typename T>
T get(const void* buf, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void put(void* buf, std::size_t i, T v) {
  std::memcpy(static_cast<std::byte*>(buf) + i * sizeof(T), &v, sizeof(T));
}

// Two's-complement wrap of an exact integer into the dtype, as the collective's arithmetic does.
double wrap(DType dtype, double v) {
  const auto i = static_cast<std::int64_t>(v);
  switch (dtype) {
    case DType::I8: return static_cast<std::int8_t>(i);
    case DType::U8: return static_cast<std::uint8_t>(i);
    case DType::I32: return static_cast<std::int32_t>(i);
    default: return static_cast<double>(i);
  }
}

// The smallest positive value: results this close to zero may round to it or to zero (bf16's
// counted at f32's, as this check always has).
double smallest(DType dtype) {
  return kernels::smallest_subnormal(dtype == DType::BF16 ? DType::F32 : dtype);
}

}  // namespace

double load(DType dtype, const void* buf, std::size_t i) {
  switch (dtype) {
    case DType::F32: return get<float>(buf, i);
    case DType::F64: return get<double>(buf, i);
    case DType::F16: return kernels::f16_to_f32(get<std::uint16_t>(buf, i));
    case DType::BF16: return kernels::bf16_to_f32(get<std::uint16_t>(buf, i));
    case DType::I8: return get<std::int8_t>(buf, i);
    case DType::U8: return get<std::uint8_t>(buf, i);
    case DType::I32: return get<std::int32_t>(buf, i);
    case DType::I64: return static_cast<double>(get<std::int64_t>(buf, i));
  }
  return 0;
}

void store(DType dtype, void* buf, std::size_t i, double v) {
  switch (dtype) {
    case DType::F32: put(buf, i, static_cast<float>(v)); return;
    case DType::F64: put(buf, i, v); return;
    case DType::F16: put(buf, i, kernels::f32_to_f16(static_cast<float>(v))); return;
    case DType::BF16: put(buf, i, kernels::f32_to_bf16(static_cast<float>(v))); return;
    case DType::I8: put(buf, i, static_cast<std::int8_t>(v)); return;
    case DType::U8: put(buf, i, static_cast<std::uint8_t>(v)); return;
    case DType::I32: put(buf, i, static_cast<std::int32_t>(v)); return;
    case DType::I64: put(buf, i, static_cast<std::int64_t>(v)); return;
  }
}

double input_value(DType dtype, ReduceOp op, int rank, std::size_t index) {
  // A cheap hash of (rank, index) into 0 .. 1020: neighbours and ranks differ.
  const auto k =
      static_cast<int>((static_cast<std::size_t>(rank) * 7919U + index * 104729U + 17U) % 1021U);
  double v = 0;
  if (kernels::dtype_is_float(dtype)) {
    // Not multiples of a power of two, so every dtype rounds them and the sums round too.
    v = op == ReduceOp::Prod ? 1.0 + (k - 510) / 4096.0 : (k - 510) / 61.0;
  } else if (dtype == DType::U8) {
    v = op == ReduceOp::Prod ? k % 3 : k % 7;
  } else {
    v = op == ReduceOp::Prod ? k % 4 - 1 : k % 7 - 3;
  }
  std::uint64_t scratch = 0;  // round to the dtype through its own storage
  store(dtype, &scratch, 0, v);
  return load(dtype, &scratch, 0);
}

void fill_inputs(DType dtype, ReduceOp op, int rank, std::size_t first, void* buf,
                 std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    store(dtype, buf, i, input_value(dtype, op, rank, first + i));
}

Expected reduce_expected(DType dtype, ReduceOp op, int ranks,
                         const std::function<double(int)>& value_of) {
  Expected e{.value = value_of(0), .magnitude = 0, .terms = ranks};
  double abs_sum = std::abs(e.value);
  for (int r = 1; r < ranks; ++r) {
    const double x = value_of(r);
    abs_sum += std::abs(x);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: e.value += x; break;
      case ReduceOp::Prod: e.value *= x; break;
      case ReduceOp::Min: e.value = std::min(e.value, x); break;
      case ReduceOp::Max: e.value = std::max(e.value, x); break;
      default: break;  // bitwise ops are not benchmarked
    }
  }
  if (!kernels::dtype_is_float(dtype)) {
    e.value = wrap(dtype, e.value);
    return e;
  }
  switch (op) {
    case ReduceOp::Sum: e.magnitude = abs_sum; break;
    case ReduceOp::Avg:
      e.value /= ranks;
      e.magnitude = abs_sum / ranks;
      break;
    case ReduceOp::Prod: e.magnitude = std::abs(e.value); break;
    default: break;  // min, max: exact
  }
  return e;
}

bool matches(DType dtype, ReduceOp op, const Expected& want, double got) {
  if (std::isnan(got)) return false;
  if (!kernels::dtype_is_float(dtype) || op == ReduceOp::Min || op == ReduceOp::Max ||
      want.magnitude == 0) {
    return got == want.value;
  }
  const double tolerance =
      (want.terms + 1) * kernels::unit_roundoff(dtype) * want.magnitude + smallest(dtype);
  return std::abs(got - want.value) <= tolerance;
}

}  // namespace strait::bench
