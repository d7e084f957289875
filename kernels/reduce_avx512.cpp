// AVX-512 (F, BW, VL, DQ) reduction and scale kernels (kernels/reduce_simd.h): 512-bit vectors,
// unrolled 4 times, the tail done with masked loads and stores (masked-off lanes are neither read
// nor written, so no byte outside the buffers is touched). Only the functions marked
// STRAIT_AVX512 contain AVX-512 instructions (GCC target attributes, not -mavx512f on the file):
// the exported entry points, and the rest of the library, stay baseline x86-64. Everything here
// has internal linkage and uses no standard-library templates, so no AVX-512 copy of a shared
// inline function can reach the linker.
#include "kernels/reduce_simd.h"

#if defined(__x86_64__)

// GCC 12 flags the `__m512 __Y = __Y;` of _mm512_undefined_ps() (used inside _mm512_min_ps and
// others) as maybe-uninitialized once inlined here; the value is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define STRAIT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace strait::kernels::detail {
namespace {

// A lane type says how `kLanes` elements of one dtype load into a vector V (whole or under a
// mask M of the first lanes) and store back, and what sum / prod / min / max are on V. min and
// max are std::min and std::max exactly: min(x, y) = y < x ? y : x and max(x, y) = x < y ? y : x,
// so a NaN on either side, or two zeros, give x. _mm512_min_ps(A, B) is A < B ? A : B (B when
// unordered or equal), hence min(y, x).

struct F32Ops {
  using V = __m512;
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_ps(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return _mm512_mul_ps(x, y); }
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_ps(y, x); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_ps(y, x); }
  STRAIT_AVX512 static V broadcast(float f) { return _mm512_set1_ps(f); }
};

struct F32 : F32Ops {
  using T = float;
  using S = float;  // scale()'s factor type
  using M = __mmask16;
  static constexpr std::size_t kLanes = 16;
  STRAIT_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_ps(p); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_ps(p, v); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
};

struct F64 {
  using T = double;
  using S = double;
  using V = __m512d;
  using M = __mmask8;
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_pd(p); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) { return _mm512_maskz_loadu_pd(m, p); }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_pd(p, v); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { _mm512_mask_storeu_pd(p, m, v); }
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_pd(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return _mm512_mul_pd(x, y); }
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_pd(y, x); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_pd(y, x); }
  STRAIT_AVX512 static V broadcast(double f) { return _mm512_set1_pd(f); }
};

// 16 halves in a 256-bit register, whole or masked.
struct Halves {
  using M = __mmask16;
  STRAIT_AVX512 static __m256i load16(const unsigned char* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  STRAIT_AVX512 static __m256i load16(const unsigned char* p, M m) {
    return _mm256_maskz_loadu_epi16(m, p);
  }
  STRAIT_AVX512 static void store16(unsigned char* p, __m256i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  STRAIT_AVX512 static void store16(unsigned char* p, __m256i v, M m) {
    _mm256_mask_storeu_epi16(p, m, v);
  }
};

// f16: VCVTPH2PS widens exactly. On the way back a NaN becomes sign | 0x7fc00000 first, so that
// VCVTPS2PH gives f32_to_f16's quiet NaN sign | 0x7e00 instead of keeping the payload; every other
// value is rounded to nearest even by the instruction, as f32_to_f16 does (overflow to Inf,
// subnormals kept; MXCSR's DAZ would flush f32 subnormal inputs, which the default MXCSR does not).
struct F16 : F32Ops, Halves {
  using T = std::uint16_t;
  using S = float;
  static constexpr std::size_t kLanes = 16;
  STRAIT_AVX512 static V widen(__m256i h) { return _mm512_cvtph_ps(h); }
  STRAIT_AVX512 static __m256i narrow(V v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512 quiet = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0F)),
                                      _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    return _mm512_cvtps_ph(_mm512_mask_mov_ps(v, nan, quiet),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  STRAIT_AVX512 static V load(const unsigned char* p) { return widen(load16(p)); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) { return widen(load16(p, m)); }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { store16(p, narrow(v)); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { store16(p, narrow(v), m); }
};

// bf16: widen by a 16-bit shift; narrow exactly as f32_to_bf16: add 0x7fff + the kept lsb and
// shift, except a NaN, which keeps its top 16 bits with the quiet bit (0x40) set.
struct BF16 : F32Ops, Halves {
  using T = std::uint16_t;
  using S = float;
  static constexpr std::size_t kLanes = 16;
  STRAIT_AVX512 static V widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  STRAIT_AVX512 static __m256i narrow(V v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
  }
  STRAIT_AVX512 static V load(const unsigned char* p) { return widen(load16(p)); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) { return widen(load16(p, m)); }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { store16(p, narrow(v)); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { store16(p, narrow(v), m); }
};

// Integers: whole-register loads and stores, masked per element width.
struct Int8LoadStore {
  using V = __m512i;
  using M = __mmask64;
  STRAIT_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) { return _mm512_maskz_loadu_epi8(m, p); }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { _mm512_mask_storeu_epi8(p, m, v); }
};

struct Int32LoadStore {
  using V = __m512i;
  using M = __mmask16;
  STRAIT_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) {
    return _mm512_maskz_loadu_epi32(m, p);
  }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { _mm512_mask_storeu_epi32(p, m, v); }
};

struct Int64LoadStore {
  using V = __m512i;
  using M = __mmask8;
  STRAIT_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  STRAIT_AVX512 static V load(const unsigned char* p, M m) {
    return _mm512_maskz_loadu_epi64(m, p);
  }
  STRAIT_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
  STRAIT_AVX512 static void store(unsigned char* p, V v, M m) { _mm512_mask_storeu_epi64(p, m, v); }
};

// 8-bit products: there is no 8-bit multiply. The low byte of a 16-bit product depends only on
// the low bytes of its operands, so multiply the even bytes and the odd bytes (shifted down) as
// 16-bit lanes and keep each low byte: the product modulo 256, signed or not.
STRAIT_AVX512 inline __m512i mul8(__m512i x, __m512i y) {
  const __m512i even = _mm512_mullo_epi16(x, y);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00ff)),
                         _mm512_slli_epi16(odd, 8));
}

struct I8 : Int8LoadStore {
  using T = std::int8_t;
  static constexpr std::size_t kLanes = 64;
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_epi8(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return mul8(x, y); }
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_epi8(x, y); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_epi8(x, y); }
};

struct U8 : Int8LoadStore {
  using T = std::uint8_t;
  static constexpr std::size_t kLanes = 64;
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_epi8(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return mul8(x, y); }
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_epu8(x, y); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_epu8(x, y); }
};

struct I32 : Int32LoadStore {
  using T = std::int32_t;
  static constexpr std::size_t kLanes = 16;
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_epi32(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return _mm512_mullo_epi32(x, y); }
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_epi32(x, y); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_epi32(x, y); }
};

struct I64 : Int64LoadStore {
  using T = std::int64_t;
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX512 static V sum(V x, V y) { return _mm512_add_epi64(x, y); }
  STRAIT_AVX512 static V prod(V x, V y) { return _mm512_mullo_epi64(x, y); }  // AVX512DQ
  STRAIT_AVX512 static V min(V x, V y) { return _mm512_min_epi64(x, y); }
  STRAIT_AVX512 static V max(V x, V y) { return _mm512_max_epi64(x, y); }
};

// The first r lanes (r < kLanes <= 64).
template <class L>
constexpr typename L::M first_lanes(std::size_t r) {
  return static_cast<typename L::M>((std::uint64_t{1} << r) - 1U);
}

template <class L, ReduceOp kOp>
STRAIT_AVX512 inline typename L::V apply(typename L::V x, typename L::V y) {
  static_assert(kOp != ReduceOp::Avg);
  if constexpr (kOp == ReduceOp::Sum) {
    return L::sum(x, y);
  } else if constexpr (kOp == ReduceOp::Prod) {
    return L::prod(x, y);
  } else if constexpr (kOp == ReduceOp::Min) {
    return L::min(x, y);
  } else {
    return L::max(x, y);
  }
}

// Elements to do before `p` is aligned to the vector's store width (none when p is not even
// element-aligned), at most n. A 64-byte access that straddles two cache lines costs about half
// the bandwidth here (Zen 5: 16 MiB f32 sum, 43 instead of 73 GB/s), so a masked head aligns the
// stores to inout; `in` then stays aligned whenever both buffers share their misalignment.
template <class L>
std::size_t head_count(const unsigned char* p, std::size_t n) {
  constexpr std::size_t size = sizeof(typename L::T);
  constexpr std::size_t width = L::kLanes * size;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (addr % size != 0 || addr % width == 0) return 0;
  const std::size_t head = (width - addr % width) / size;
  return head < n ? head : n;
}

// Every load of a group comes before its stores, so inout == in is safe.
template <class L, ReduceOp kOp>
STRAIT_AVX512 std::size_t run(void* inout, const void* in, std::size_t n) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  auto* a = static_cast<unsigned char*>(inout);
  const auto* b = static_cast<const unsigned char*>(in);
  std::size_t i = head_count<L>(a, n);
  if (i != 0) {
    const auto m = first_lanes<L>(i);
    L::store(a, apply<L, kOp>(L::load(a, m), L::load(b, m)), m);
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
  if (i < n) {
    const auto m = first_lanes<L>(n - i);
    L::store(a, apply<L, kOp>(L::load(a, m), L::load(b, m)), m);
  }
  return n;
}

template <class L>
STRAIT_AVX512 std::size_t run_op(ReduceOp op, void* inout, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum: return run<L, ReduceOp::Sum>(inout, in, n);
    case ReduceOp::Prod: return run<L, ReduceOp::Prod>(inout, in, n);
    case ReduceOp::Min: return run<L, ReduceOp::Min>(inout, in, n);
    case ReduceOp::Max: return run<L, ReduceOp::Max>(inout, in, n);
    case ReduceOp::Avg: break;
  }
  return 0;
}

template <class L>
STRAIT_AVX512 std::size_t scale_run(void* inout, std::size_t n, typename L::S factor) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  const auto f = L::broadcast(factor);
  auto* a = static_cast<unsigned char*>(inout);
  std::size_t i = head_count<L>(a, n);
  if (i != 0) {
    const auto m = first_lanes<L>(i);
    L::store(a, L::prod(L::load(a, m), f), m);
    a += i * sizeof(typename L::T);
  }
  for (; i + 2 * w <= n; i += 2 * w, a += 2 * step) {
    const auto x0 = L::load(a), x1 = L::load(a + step);
    L::store(a, L::prod(x0, f));
    L::store(a + step, L::prod(x1, f));
  }
  for (; i + w <= n; i += w, a += step) L::store(a, L::prod(L::load(a), f));
  if (i < n) {
    const auto m = first_lanes<L>(n - i);
    L::store(a, L::prod(L::load(a, m), f), m);
  }
  return n;
}

}  // namespace

std::size_t reduce_avx512(DType dtype, ReduceOp op, void* inout, const void* in,
                          std::size_t count) {
  switch (dtype) {
    case DType::F32: return run_op<F32>(op, inout, in, count);
    case DType::F64: return run_op<F64>(op, inout, in, count);
    case DType::F16: return run_op<F16>(op, inout, in, count);
    case DType::BF16: return run_op<BF16>(op, inout, in, count);
    case DType::I8: return run_op<I8>(op, inout, in, count);
    case DType::U8: return run_op<U8>(op, inout, in, count);
    case DType::I32: return run_op<I32>(op, inout, in, count);
    case DType::I64: return run_op<I64>(op, inout, in, count);
  }
  return 0;
}

std::size_t scale_avx512(DType dtype, void* inout, std::size_t count, double factor) {
  switch (dtype) {
    case DType::F32: return scale_run<F32>(inout, count, static_cast<float>(factor));
    case DType::F64: return scale_run<F64>(inout, count, factor);
    case DType::F16: return scale_run<F16>(inout, count, static_cast<float>(factor));
    case DType::BF16: return scale_run<BF16>(inout, count, static_cast<float>(factor));
    default: return 0;
  }
}

}  // namespace strait::kernels::detail

#endif  // __x86_64__
