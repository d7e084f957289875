// AVX2 reduction and scale kernels (kernels/reduce_simd.h): 256-bit vectors, unrolled 4 times; the
// few elements before inout is vector-aligned, and the tail, go to the scalar path. Only the
// functions marked STRAIT_AVX2 contain AVX2/FMA/F16C instructions (GCC target attributes, not
// -mavx2 on the file), so the exported entry points, and the rest of the library, stay baseline
// x86-64. Everything here has internal linkage and uses no standard-library templates, so no AVX2
// copy of a shared inline function can reach the linker.
#include "kernels/reduce_simd.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define STRAIT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace strait::kernels::detail {
namespace {

// A lane type says how `kLanes` elements of one dtype load into a vector V and store back, and
// what sum / prod / min / max are on V. min and max are std::min and std::max exactly:
// min(x, y) = y < x ? y : x and max(x, y) = x < y ? y : x, so a NaN on either side, or two zeros,
// give x. _mm256_min_ps(A, B) is A < B ? A : B (B when unordered or equal), hence min(y, x).

struct F32Ops {
  using V = __m256;
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_ps(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) { return _mm256_mul_ps(x, y); }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_min_ps(y, x); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_max_ps(y, x); }
  STRAIT_AVX2 static V broadcast(float f) { return _mm256_set1_ps(f); }
};

struct F32 : F32Ops {
  using T = float;
  using S = float;  // scale()'s factor type
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX2 static V load(const unsigned char* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  STRAIT_AVX2 static void store(unsigned char* p, V v) {
    _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
  }
};

struct F64 {
  using T = double;
  using S = double;
  using V = __m256d;
  static constexpr std::size_t kLanes = 4;
  STRAIT_AVX2 static V load(const unsigned char* p) {
    return _mm256_loadu_pd(reinterpret_cast<const double*>(p));
  }
  STRAIT_AVX2 static void store(unsigned char* p, V v) {
    _mm256_storeu_pd(reinterpret_cast<double*>(p), v);
  }
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_pd(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) { return _mm256_mul_pd(x, y); }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_min_pd(y, x); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_max_pd(y, x); }
  STRAIT_AVX2 static V broadcast(double f) { return _mm256_set1_pd(f); }
};

STRAIT_AVX2 inline __m128i load128(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
STRAIT_AVX2 inline void store128(unsigned char* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}
STRAIT_AVX2 inline __m256i load256(const unsigned char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
STRAIT_AVX2 inline void store256(unsigned char* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

// f16: F16C widens exactly. On the way back a NaN becomes sign | 0x7fc00000 first, so that
// VCVTPS2PH gives f32_to_f16's quiet NaN sign | 0x7e00 instead of keeping the payload; every other
// value is rounded to nearest even by the instruction, as f32_to_f16 does (overflow to Inf,
// subnormals kept; MXCSR's DAZ would flush f32 subnormal inputs, which the default MXCSR does not).
struct F16 : F32Ops {
  using T = std::uint16_t;
  using S = float;
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX2 static V load(const unsigned char* p) { return _mm256_cvtph_ps(load128(p)); }
  STRAIT_AVX2 static void store(unsigned char* p, V v) {
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 quiet = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0F)),
                                      _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    store128(p, _mm256_cvtps_ph(_mm256_blendv_ps(v, quiet, nan),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// bf16: widen by a 16-bit shift; narrow exactly as f32_to_bf16: add 0x7fff + the kept lsb and
// shift, except a NaN, which keeps its top 16 bits with the quiet bit (0x40) set.
struct BF16 : F32Ops {
  using T = std::uint16_t;
  using S = float;
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX2 static V load(const unsigned char* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  STRAIT_AVX2 static void store(unsigned char* p, V v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane is <= 0xffff
    store128(p, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
};

struct IntLoadStore {
  using V = __m256i;
  STRAIT_AVX2 static V load(const unsigned char* p) { return load256(p); }
  STRAIT_AVX2 static void store(unsigned char* p, V v) { store256(p, v); }
};

// 8-bit products: AVX2 has no 8-bit multiply. The low byte of a 16-bit product depends only on the
// low bytes of its operands, so multiply the even bytes and the odd bytes (shifted down) as 16-bit
// lanes and keep each low byte: the product modulo 256, signed or not.
STRAIT_AVX2 inline __m256i mul8(__m256i x, __m256i y) {
  const __m256i even = _mm256_mullo_epi16(x, y);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                         _mm256_slli_epi16(odd, 8));
}

struct I8 : IntLoadStore {
  using T = std::int8_t;
  static constexpr std::size_t kLanes = 32;
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_epi8(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) { return mul8(x, y); }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_min_epi8(x, y); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_max_epi8(x, y); }
};

struct U8 : IntLoadStore {
  using T = std::uint8_t;
  static constexpr std::size_t kLanes = 32;
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_epi8(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) { return mul8(x, y); }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_min_epu8(x, y); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_max_epu8(x, y); }
};

struct I32 : IntLoadStore {
  using T = std::int32_t;
  static constexpr std::size_t kLanes = 8;
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_epi32(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) { return _mm256_mullo_epi32(x, y); }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_min_epi32(x, y); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_max_epi32(x, y); }
};

// 64-bit products and min/max have no AVX2 instruction. Product modulo 2^64 from 32-bit halves:
// x * y = xl * yl + ((xh * yl + xl * yh) << 32). Min/max: a signed compare and a blend.
struct I64 : IntLoadStore {
  using T = std::int64_t;
  static constexpr std::size_t kLanes = 4;
  STRAIT_AVX2 static V sum(V x, V y) { return _mm256_add_epi64(x, y); }
  STRAIT_AVX2 static V prod(V x, V y) {
    const __m256i low = _mm256_mul_epu32(x, y);
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), y),
                                           _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32)));
    return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
  }
  STRAIT_AVX2 static V min(V x, V y) { return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y)); }
  STRAIT_AVX2 static V max(V x, V y) { return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(y, x)); }
};

template <class L, ReduceOp kOp>
STRAIT_AVX2 inline typename L::V apply(typename L::V x, typename L::V y) {
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

// Every load of a group comes before its stores, so inout == in is safe.
template <class L, ReduceOp kOp>
STRAIT_AVX2 std::size_t run(void* inout, const void* in, std::size_t n) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  auto* a = static_cast<unsigned char*>(inout);
  const auto* b = static_cast<const unsigned char*>(in);
  std::size_t i = 0;
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
  return i;
}

template <class L>
STRAIT_AVX2 std::size_t run_op(ReduceOp op, void* inout, const void* in, std::size_t n) {
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
STRAIT_AVX2 std::size_t scale_run(void* inout, std::size_t n, typename L::S factor) {
  constexpr std::size_t w = L::kLanes;
  constexpr std::size_t step = w * sizeof(typename L::T);
  const auto f = L::broadcast(factor);
  auto* a = static_cast<unsigned char*>(inout);
  std::size_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w, a += 2 * step) {
    const auto x0 = L::load(a), x1 = L::load(a + step);
    L::store(a, L::prod(x0, f));
    L::store(a + step, L::prod(x1, f));
  }
  for (; i + w <= n; i += w, a += step) L::store(a, L::prod(L::load(a), f));
  return i;
}

// Elements to do (in scalar code) before inout is aligned to the vector's store width: 16 bytes for
// f16/bf16 (8 halves), 32 for the rest; none when inout is not even element-aligned. At most n.
// Stores that straddle cache lines cost about a third of the bandwidth in L2 (Zen 5, 256 KiB f32
// sum: 163 instead of 252 GB/s); `in` is then aligned too whenever both share their misalignment.
std::size_t head_count(DType dtype, const void* inout, std::size_t n) {
  const std::size_t size = dtype_size(dtype);
  const std::size_t width = size == 2 ? 16 : 32;
  const auto addr = reinterpret_cast<std::uintptr_t>(inout);
  if (addr % size != 0 || addr % width == 0) return 0;
  const std::size_t head = (width - addr % width) / size;
  return head < n ? head : n;
}

}  // namespace

std::size_t reduce_avx2(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count) {
  if (op == ReduceOp::Avg) return 0;
  const std::size_t head = head_count(dtype, inout, count);
  if (head != 0) reduce_scalar(dtype, op, inout, in, head);
  const std::size_t skip = head * dtype_size(dtype);
  void* a = static_cast<unsigned char*>(inout) + skip;
  const void* b = static_cast<const unsigned char*>(in) + skip;
  const std::size_t n = count - head;
  switch (dtype) {
    case DType::F32: return head + run_op<F32>(op, a, b, n);
    case DType::F64: return head + run_op<F64>(op, a, b, n);
    case DType::F16: return head + run_op<F16>(op, a, b, n);
    case DType::BF16: return head + run_op<BF16>(op, a, b, n);
    case DType::I8: return head + run_op<I8>(op, a, b, n);
    case DType::U8: return head + run_op<U8>(op, a, b, n);
    case DType::I32: return head + run_op<I32>(op, a, b, n);
    case DType::I64: return head + run_op<I64>(op, a, b, n);
  }
  return head;
}

std::size_t scale_avx2(DType dtype, void* inout, std::size_t count, double factor) {
  if (!dtype_is_float(dtype)) return 0;
  const std::size_t head = head_count(dtype, inout, count);
  if (head != 0) scale_scalar(dtype, inout, head, factor);
  void* a = static_cast<unsigned char*>(inout) + head * dtype_size(dtype);
  const std::size_t n = count - head;
  const auto f = static_cast<float>(factor);
  switch (dtype) {
    case DType::F32: return head + scale_run<F32>(a, n, f);
    case DType::F64: return head + scale_run<F64>(a, n, factor);
    case DType::F16: return head + scale_run<F16>(a, n, f);
    case DType::BF16: return head + scale_run<BF16>(a, n, f);
    default: return head;
  }
}

}  // namespace strait::kernels::detail

#endif  // __x86_64__
