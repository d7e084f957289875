// Internal to kernels/ (and its tests): the explicit SIMD paths behind kernels/reduce.h, and the
// one driver every instruction set's path is made from. Callers use reduce() and scale(), which
// pick a path through simd_level() (kernels/cpu_features.h).
//
// Each SIMD function handles a prefix of the buffer and returns how many leading elements it
// reduced (or scaled); reduce() finishes the rest with the scalar path, so every path gives the
// same bits. AVX-512 always does all `count` elements (masked head to align the stores to inout,
// masked tail). AVX2 aligns its stores with a scalar head and stops at the last whole vector (the
// tail left is under 32 bytes). 0 means "not handled here" (Avg, integer scale, bitwise ops on
// floats). Same buffer rules
// as reduce(): any byte alignment, inout == in allowed.
// Calling a path the CPU lacks is an illegal instruction: check cpu_simd_level() first.
// The SIMD functions are only defined on x86-64; other targets build the scalar path alone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/reduce_op.h"

namespace strait::kernels::detail {

// The portable loops (kernels/reduce.cpp), for any CPU; the same contract as reduce() / scale()
// without the argument checks (op is not Avg, dtype of scale is a float).
void reduce_scalar(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
void scale_scalar(DType dtype, void* inout, std::size_t count, double factor);

std::size_t reduce_avx2(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
std::size_t reduce_avx512(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
std::size_t scale_avx2(DType dtype, void* inout, std::size_t count, double factor);
std::size_t scale_avx512(DType dtype, void* inout, std::size_t count, double factor);

}  // namespace strait::kernels::detail

// The driver, compiled only inside an instruction set's file (kernels/simd_<isa>.cpp), which
// defines STRAIT_SIMD_TARGET as its target attribute and instantiates reduce_driver<Isa> and
// scale_driver<Isa> with lane types of internal linkage, so each file's copies stay its own.
//
// Isa::F32, F64, F16, BF16, I8, U8, I32, I64 are lane types L: `kLanes` elements of type L::T
// load into a vector L::V (load(p)) and store back (store(p, v)); add, mul, min and max act on V
// (min and max as std::min / std::max: min(x, y) = y < x ? y : x, so a NaN on either side, or two
// zeros, give x); float types also have broadcast(L::S), integer types band, bor and bxor. A lane
// type with a mask type L::M also loads and stores the first lanes under a mask (load(p, m),
// store(p, v, m)) and does head and tail itself; one without leaves the head to the scalar path and
// the tail to the caller.
#if defined(STRAIT_SIMD_TARGET)

// An integer lane type, declared inside an ISA's lane struct: elements of TYPE over BASE (which
// gives V, load and store), LANES of them, with the four named functions (intrinsics, or the
// file's helpers where the ISA has no instruction) as add, mul, min and max.
#define STRAIT_SIMD_INT_LANES(NAME, BASE, TYPE, LANES, ADD, MUL, MIN, MAX) \
  struct NAME : BASE {                                                     \
    using T = TYPE;                                                        \
    static constexpr std::size_t kLanes = LANES;                           \
    STRAIT_SIMD_TARGET static V add(V x, V y) { return ADD(x, y); }        \
    STRAIT_SIMD_TARGET static V mul(V x, V y) { return MUL(x, y); }        \
    STRAIT_SIMD_TARGET static V min(V x, V y) { return MIN(x, y); }        \
    STRAIT_SIMD_TARGET static V max(V x, V y) { return MAX(x, y); }        \
  }

namespace strait::kernels::detail::simd {

template <class L>
concept Masked = requires {
  typename L::M;
};

// The first r lanes (r < kLanes <= 64).
template <Masked L>
constexpr typename L::M first_lanes(std::size_t r) {
  return static_cast<typename L::M>((std::uint64_t{1} << r) - 1U);
}

// Elements to do before `p` is aligned to the vector's store width (none when p is not even
// element-aligned), at most n. Stores that straddle cache lines cost a third (AVX2, 256 KiB f32
// sum in L2: 163 instead of 252 GB/s) to a half (AVX-512, 16 MiB: 43 instead of 73 GB/s) of the
// bandwidth on Zen 5; `in` is then aligned too whenever both share their misalignment.
template <class L>
std::size_t head_count(const void* p, std::size_t n) {
  constexpr std::size_t size = sizeof(typename L::T);
  constexpr std::size_t width = L::kLanes * size;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (addr % size != 0 || addr % width == 0) return 0;
  const std::size_t head = (width - addr % width) / size;
  return head < n ? head : n;
}

// Integer lane types also have band, bor and bxor (the same instructions for every width).
template <class L>
concept Bitwise = requires(typename L::V v) {
  L::band(v, v);
  L::bor(v, v);
  L::bxor(v, v);
};

template <class L, ReduceOp kOp>
STRAIT_SIMD_TARGET inline typename L::V apply(typename L::V x, typename L::V y) {
  static_assert(kOp != ReduceOp::Avg);
  if constexpr (kOp == ReduceOp::Band) {
    return L::band(x, y);
  } else if constexpr (kOp == ReduceOp::Bor) {
    return L::bor(x, y);
  } else if constexpr (kOp == ReduceOp::Bxor) {
    return L::bxor(x, y);
  } else if constexpr (kOp == ReduceOp::Sum) {
    return L::add(x, y);
  } else if constexpr (kOp == ReduceOp::Prod) {
    return L::mul(x, y);
  } else if constexpr (kOp == ReduceOp::Min) {
    return L::min(x, y);
  } else {
    return L::max(x, y);
  }
}

// Unrolled 4 times; every load of a group comes before its stores, so inout == in is safe.
template <class L, ReduceOp kOp>
STRAIT_SIMD_TARGET std::size_t reduce_run(DType dtype, void* inout, const void* in, std::size_t n) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  auto* a = static_cast<unsigned char*>(inout);
  const auto* b = static_cast<const unsigned char*>(in);
  std::size_t i = head_count<L>(a, n);
  if (i != 0) {
    if constexpr (Masked<L>) {
      const auto m = first_lanes<L>(i);
      L::store(a, apply<L, kOp>(L::load(a, m), L::load(b, m)), m);
    } else {
      reduce_scalar(dtype, kOp, a, b, i);
    }
    a += i * sizeof(typename L::T);
    b += i * sizeof(typename L::T);
  }
  for (; i + 4 * w <= n; i += 4 * w, a += 4 * step, b += 4 * step) {
    const auto x0 = L::load(a), x1 = L::load(a + step);
    const auto x2 = L::load(a + 2 * step), x3 = L::load(a + 3 * step);
    const auto y0 = L::load(b), y1 = L::load(b + step);
    const auto y2 = L::load(b + 2 * step), y3 = L::load(b + 3 * step);
    L::store(a, apply<L, kOp>(x0, y0));
    L::store(a + step, apply<L, kOp>(x1, y1));
    L::store(a + 2 * step, apply<L, kOp>(x2, y2));
    L::store(a + 3 * step, apply<L, kOp>(x3, y3));
  }
  for (; i + w <= n; i += w, a += step, b += step) {
    L::store(a, apply<L, kOp>(L::load(a), L::load(b)));
  }
  if constexpr (Masked<L>) {
    if (i < n) {
      const auto m = first_lanes<L>(n - i);
      L::store(a, apply<L, kOp>(L::load(a, m), L::load(b, m)), m);
    }
    return n;
  }
  return i;
}

template <Bitwise L>
std::size_t reduce_bitwise_op(DType dtype, ReduceOp op, void* inout, const void* in,
                              std::size_t n) {
  if (op == ReduceOp::Band) return reduce_run<L, ReduceOp::Band>(dtype, inout, in, n);
  if (op == ReduceOp::Bor) return reduce_run<L, ReduceOp::Bor>(dtype, inout, in, n);
  return reduce_run<L, ReduceOp::Bxor>(dtype, inout, in, n);
}

template <class L>
std::size_t reduce_op(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum: return reduce_run<L, ReduceOp::Sum>(dtype, inout, in, n);
    case ReduceOp::Prod: return reduce_run<L, ReduceOp::Prod>(dtype, inout, in, n);
    case ReduceOp::Min: return reduce_run<L, ReduceOp::Min>(dtype, inout, in, n);
    case ReduceOp::Max: return reduce_run<L, ReduceOp::Max>(dtype, inout, in, n);
    case ReduceOp::Band:
    case ReduceOp::Bor:
    case ReduceOp::Bxor:
      if constexpr (Bitwise<L>) return reduce_bitwise_op<L>(dtype, op, inout, in, n);
      break;
    case ReduceOp::Avg: break;
  }
  return 0;
}

// reduce_avx2() and the like: the dispatch stays baseline x86-64, only the loops carry the target.
template <class Isa>
std::size_t reduce_driver(DType dtype, ReduceOp op, void* inout, const void* in,
                          std::size_t count) {
  switch (dtype) {
    case DType::F32: return reduce_op<typename Isa::F32>(dtype, op, inout, in, count);
    case DType::F64: return reduce_op<typename Isa::F64>(dtype, op, inout, in, count);
    case DType::F16: return reduce_op<typename Isa::F16>(dtype, op, inout, in, count);
    case DType::BF16: return reduce_op<typename Isa::BF16>(dtype, op, inout, in, count);
    case DType::I8: return reduce_op<typename Isa::I8>(dtype, op, inout, in, count);
    case DType::U8: return reduce_op<typename Isa::U8>(dtype, op, inout, in, count);
    case DType::I32: return reduce_op<typename Isa::I32>(dtype, op, inout, in, count);
    case DType::I64: return reduce_op<typename Isa::I64>(dtype, op, inout, in, count);
  }
  return 0;
}

// Unrolled twice; `factor` is already the lane type's (float for the 16-bit types).
template <class L>
STRAIT_SIMD_TARGET std::size_t scale_run(DType dtype, void* inout, std::size_t n,
                                         typename L::S factor) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  const auto f = L::broadcast(factor);
  auto* a = static_cast<unsigned char*>(inout);
  std::size_t i = head_count<L>(a, n);
  if (i != 0) {
    if constexpr (Masked<L>) {
      const auto m = first_lanes<L>(i);
      L::store(a, L::mul(L::load(a, m), f), m);
    } else {
      scale_scalar(dtype, a, i, factor);  // a float factor widened and rounded back: the same
    }
    a += i * sizeof(typename L::T);
  }
  for (; i + 2 * w <= n; i += 2 * w, a += 2 * step) {
    const auto x0 = L::load(a), x1 = L::load(a + step);
    L::store(a, L::mul(x0, f));
    L::store(a + step, L::mul(x1, f));
  }
  for (; i + w <= n; i += w, a += step) L::store(a, L::mul(L::load(a), f));
  if constexpr (Masked<L>) {
    if (i < n) {
      const auto m = first_lanes<L>(n - i);
      L::store(a, L::mul(L::load(a, m), f), m);
    }
    return n;
  }
  return i;
}

template <class Isa>
std::size_t scale_driver(DType dtype, void* inout, std::size_t count, double factor) {
  const auto f = static_cast<float>(factor);
  switch (dtype) {
    case DType::F32: return scale_run<typename Isa::F32>(dtype, inout, count, f);
    case DType::F64: return scale_run<typename Isa::F64>(dtype, inout, count, factor);
    case DType::F16: return scale_run<typename Isa::F16>(dtype, inout, count, f);
    case DType::BF16: return scale_run<typename Isa::BF16>(dtype, inout, count, f);
    default: return 0;
  }
}

}  // namespace strait::kernels::detail::simd
#endif  // STRAIT_SIMD_TARGET
