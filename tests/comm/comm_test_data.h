// Inputs and double-precision references for the Communicator tests (in-process and the
// multi-process worker): deterministic per (seed, rank, index), so every rank and the checker can
// regenerate any rank's input without sharing memory.
//
// Inputs are chosen per (dtype, op) so that the exact result is representable (integers never
// overflow: signed overflow is undefined behaviour and reduce.h documents no wrap-around), and the
// reference is computed in double from the very values each rank sends (already rounded to the
// dtype). Floating-point results are compared with a bound derived from the dtype's epsilon and
// the number of roundings the ring performs; min/max and integers must be exact.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::kernels {
// gtest prints test parameters through this ("f32" rather than "1-byte object <00>").
inline void PrintTo(DType t, std::ostream* os) {
  *os << dtype_name(t);
}
}  // namespace strait::kernels

namespace strait::comm::testing {

using kernels::DType;
using kernels::ReduceOp;

inline constexpr std::array kAllDTypes = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                          DType::I8,  DType::U8,  DType::I32, DType::I64};

// A recognisable pattern for "not written by the operation".
inline std::vector<std::byte> sentinel(std::size_t bytes) {
  return std::vector<std::byte>(bytes, std::byte{0xa5});
}

// SplitMix64 (Steele, Lea & Flood 2014): a stateless hash of (seed, rank, index).
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline std::uint64_t draw(std::uint64_t seed, int rank, std::size_t i) {
  return mix(mix(mix(seed) ^ static_cast<std::uint64_t>(rank)) ^ i);
}

// Uniform in [0, 1) from 53 random bits.
inline double unit(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Uniform integer in [lo, hi].
inline std::int64_t in_range(std::uint64_t bits, std::int64_t lo, std::int64_t hi) {
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;  // never 0 for the ranges used here
  return lo + static_cast<std::int64_t>(bits % span);
}

// Machine epsilon (the gap between 1 and the next value) of a floating-point dtype.
inline double epsilon(DType t) {
  switch (t) {
    case DType::F32: return 0x1.0p-23;
    case DType::F64: return 0x1.0p-52;
    case DType::F16: return 0x1.0p-10;
    case DType::BF16: return 0x1.0p-7;
    default: return 0.0;
  }
}

// Writes v (exactly representable after rounding to t for floats; in range for integers).
inline void store_value(DType t, double v, std::byte* dst) {
  switch (t) {
    case DType::F32: {
      const auto x = static_cast<float>(v);
      std::memcpy(dst, &x, sizeof x);
      return;
    }
    case DType::F64: std::memcpy(dst, &v, sizeof v); return;
    case DType::F16: {
      const std::uint16_t h = kernels::f32_to_f16(static_cast<float>(v));
      std::memcpy(dst, &h, sizeof h);
      return;
    }
    case DType::BF16: {
      const std::uint16_t h = kernels::f32_to_bf16(static_cast<float>(v));
      std::memcpy(dst, &h, sizeof h);
      return;
    }
    case DType::I8: {
      const auto x = static_cast<std::int8_t>(v);
      std::memcpy(dst, &x, sizeof x);
      return;
    }
    case DType::U8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(dst, &x, sizeof x);
      return;
    }
    case DType::I32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(dst, &x, sizeof x);
      return;
    }
    case DType::I64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(dst, &x, sizeof x);
      return;
    }
  }
}

inline double load_value(DType t, const std::byte* src) {
  switch (t) {
    case DType::F32: {
      float x = 0;
      std::memcpy(&x, src, sizeof x);
      return x;
    }
    case DType::F64: {
      double x = 0;
      std::memcpy(&x, src, sizeof x);
      return x;
    }
    case DType::F16: {
      std::uint16_t h = 0;
      std::memcpy(&h, src, sizeof h);
      return kernels::f16_to_f32(h);
    }
    case DType::BF16: {
      std::uint16_t h = 0;
      std::memcpy(&h, src, sizeof h);
      return kernels::bf16_to_f32(h);
    }
    case DType::I8: {
      std::int8_t x = 0;
      std::memcpy(&x, src, sizeof x);
      return x;
    }
    case DType::U8: {
      std::uint8_t x = 0;
      std::memcpy(&x, src, sizeof x);
      return x;
    }
    case DType::I32: {
      std::int32_t x = 0;
      std::memcpy(&x, src, sizeof x);
      return x;
    }
    case DType::I64: {
      // Exact as a double only up to 2^53: integer results are compared through exact_i64 below.
      std::int64_t x = 0;
      std::memcpy(&x, src, sizeof x);
      return static_cast<double>(x);
    }
  }
  return 0.0;
}

// Integer input ranges such that `world` (<= 5 here; the bound is checked) values never overflow
// under the op, and min/max use the whole range.
struct IntRange {
  std::int64_t lo, hi;
};

inline IntRange int_range(DType t, ReduceOp op) {
  const bool prod = op == ReduceOp::Prod;
  const bool sum = op == ReduceOp::Sum;
  switch (t) {
    case DType::I8: return prod ? IntRange{-2, 2} : sum ? IntRange{-25, 25} : IntRange{-128, 127};
    case DType::U8: return prod ? IntRange{0, 3} : sum ? IntRange{0, 51} : IntRange{0, 255};
    case DType::I32:
      return prod  ? IntRange{-70, 70}
             : sum ? IntRange{-400'000'000, 400'000'000}
                   : IntRange{std::numeric_limits<std::int32_t>::min(),
                              std::numeric_limits<std::int32_t>::max()};
    case DType::I64:
      // Sum and min/max keep to +-2^53 so that the double reference is exact.
      return prod ? IntRange{-1000, 1000} : IntRange{-(1LL << 50), 1LL << 50};
    default: return {0, 0};
  }
}
inline constexpr int kMaxCheckedWorld = 5;  // the integer ranges above assume at most 5 ranks

// The value rank `rank` contributes at index i (already rounded to the dtype).
inline double input_value(DType t, ReduceOp op, std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t bits = draw(seed, rank, i);
  if (!kernels::dtype_is_float(t)) {
    const IntRange r = int_range(t, op);
    return static_cast<double>(in_range(bits, r.lo, r.hi));
  }
  double v = 0.0;
  if (op == ReduceOp::Prod) {
    v = (0.5 + unit(bits)) * ((bits & 1U) != 0 ? -1.0 : 1.0);  // |v| in [0.5, 1.5)
  } else {
    v = 2.0 * unit(bits) - 1.0;  // [-1, 1)
  }
  std::byte tmp[8];
  store_value(t, v, tmp);
  return load_value(t, tmp);
}

inline std::vector<std::byte> make_input(DType t, ReduceOp op, std::uint64_t seed, int rank,
                                         std::size_t count) {
  const std::size_t e = kernels::dtype_size(t);
  std::vector<std::byte> out(count * e);
  for (std::size_t i = 0; i < count; ++i) {
    store_value(t, input_value(t, op, seed, rank, i), out.data() + i * e);
  }
  return out;
}

// Compares result[0, count) with the double-precision reduction over ranks of the inputs at
// indices [first, first + count) (a reduce-scatter's block starts past 0). `what` names the
// operation in the description. Returns nullopt when it matches, else a description of the first
// bad element.
inline std::optional<std::string> check_reduced(const char* what, DType t, ReduceOp op,
                                                std::uint64_t seed, int world,
                                                const std::byte* result, std::size_t first_index,
                                                std::size_t count) {
  const std::size_t e = kernels::dtype_size(t);
  const double eps = epsilon(t);
  std::size_t bad = 0;
  std::string first;
  for (std::size_t n = 0; n < count; ++n) {
    const std::size_t i = first_index + n;
    double ref = 0.0;
    double magnitude = 0.0;  // sum of |x|: the scale of the rounding errors of a sum
    std::int64_t exact = 0;  // integer reference (i64 products exceed 2^53)
    for (int r = 0; r < world; ++r) {
      const double x = input_value(t, op, seed, r, i);
      const auto xi = static_cast<std::int64_t>(x);
      magnitude += std::fabs(x);
      if (r == 0) {
        ref = x;
        exact = xi;
        continue;
      }
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          ref += x;
          exact += xi;
          break;
        case ReduceOp::Prod:
          ref *= x;
          exact *= xi;
          break;
        case ReduceOp::Min:
          ref = std::min(ref, x);
          exact = std::min(exact, xi);
          break;
        case ReduceOp::Max:
          ref = std::max(ref, x);
          exact = std::max(exact, xi);
          break;
        default: break;  // bitwise ops: checked in python/tests/reduce_ops.py against Gloo
      }
    }
    bool ok = false;
    double got = 0.0;
    if (t == DType::I64) {
      std::int64_t g = 0;
      std::memcpy(&g, result + n * e, sizeof g);
      got = static_cast<double>(g);
      ok = g == exact;
      ref = static_cast<double>(exact);
    } else {
      got = load_value(t, result + n * e);
      double tol = 0.0;
      if (kernels::dtype_is_float(t)) {
        switch (op) {
          // world - 1 roundings of partial sums, each at most eps/2 of a partial sum's size,
          // then the rounding of the result: bounded by world * eps * sum |x|.
          case ReduceOp::Sum: tol = world * eps * magnitude; break;
          // Sum, then a multiply by the rounded 1/world: two more roundings of the result.
          case ReduceOp::Avg:
            ref /= world;
            tol = eps * magnitude + 2 * eps * std::fabs(ref);
            break;
          case ReduceOp::Prod: tol = world * eps * std::fabs(ref); break;
          case ReduceOp::Min:
          case ReduceOp::Max: tol = 0.0; break;
          default: break;  // bitwise ops are integer-only
        }
      }
      ok = std::fabs(got - ref) <= tol;
    }
    if (!ok) {
      if (bad == 0) {
        first = fmt::format("element {}: got {:.17g}, expected {:.17g}", i, got, ref);
      }
      ++bad;
    }
  }
  if (bad == 0) return std::nullopt;
  return fmt::format("{} {} {} of {} elements over {} ranks: {} wrong; first: {}",
                     kernels::dtype_name(t), kernels::reduce_op_name(op), what, count, world, bad,
                     first);
}

// Compares an allreduce result with the double-precision reduction of every rank's input.
inline std::optional<std::string> check_allreduce(DType t, ReduceOp op, std::uint64_t seed,
                                                  int world, const std::byte* result,
                                                  std::size_t count) {
  return check_reduced("allreduce", t, op, seed, world, result, 0, count);
}

// Rank `rank`'s input of a float collective: count N(0, 1) draws, a stream per (seed, rank).
inline std::vector<float> input_of(int rank, std::size_t count, std::uint32_t seed) {
  std::mt19937 gen(seed * 7919U + static_cast<std::uint32_t>(rank));
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> x(count);
  for (auto& v : x) v = dist(gen);
  return x;
}

// Rank `r`'s bytes [first, first + bytes) of a pattern distinct per rank and position: the input
// of the byte-exact collectives (allgather, alltoall, gather, scatter, broadcast).
inline std::vector<std::byte> patterned(int r, std::size_t bytes, std::size_t first = 0) {
  std::vector<std::byte> b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    b[i] =
        static_cast<std::byte>(((first + i) * 131 + static_cast<std::size_t>(r) * 29 + 7) & 0xff);
  }
  return b;
}

}  // namespace strait::comm::testing
