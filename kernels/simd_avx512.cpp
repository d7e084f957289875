// AVX-512 (F, BW, VL, DQ) instruction set for the SIMD drivers: the lane types (512-bit vectors,
// with masks for heads and tails) and the instantiations of reduce/scale (kernels/reduce_simd.h),
// AdamW (kernels/adamw_simd.h) and the codec primitives (kernels/quantize_impl.h). Masked-off lanes
// are neither read nor written, so no byte outside the buffers is touched. Only functions marked
// STRAIT_SIMD_TARGET contain AVX-512 instructions (GCC target attributes, not -mavx512f on the
// file), so the exported entry points, and the rest of the library, stay baseline x86-64 until
// simd_level() picks this path. The lane types have internal linkage, so no AVX-512 instantiation
// can stand in for another file's at link time. Built with -ffp-contract=off (no fused
// multiply-add the scalar path rounds twice).
#if defined(__x86_64__)
#define STRAIT_SIMD_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#endif

#include "kernels/adamw_simd.h"
#include "kernels/quantize_impl.h"
#include "kernels/reduce_simd.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable), which
// -Wuninitialized reports once they are inlined at -O3 (GCC bug 105593): silence it for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace strait::kernels::detail {
namespace {

// f32_to_bf16 on 16 lanes: add 0x7fff + the kept lsb and shift; a NaN keeps its top 16 bits with
// the quiet bit (0x40) set. Every lane ends <= 0xffff, so VPMOVDW's truncation is exact.
STRAIT_SIMD_TARGET inline __m256i to_bf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// f32_to_f16 on 16 lanes: a NaN becomes sign | 0x7fc00000 first, so that VCVTPS2PH gives
// f32_to_f16's quiet NaN sign | 0x7e00 instead of keeping the payload; every other value is
// rounded to nearest even by the instruction, as f32_to_f16 does (overflow to Inf, subnormals
// kept; MXCSR's DAZ would flush f32 subnormal inputs, which the default MXCSR does not).
STRAIT_SIMD_TARGET inline __m256i to_f16(__m512 v) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512 quiet = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0F)),
                                    _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  return _mm512_cvtps_ph(_mm512_mask_mov_ps(v, nan, quiet),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// 8-bit products: there is no 8-bit multiply. The low byte of a 16-bit product depends only on
// the low bytes of its operands, so multiply the even bytes and the odd bytes (shifted down) as
// 16-bit lanes and keep each low byte: the product modulo 256, signed or not.
STRAIT_SIMD_TARGET inline __m512i mul8(__m512i x, __m512i y) {
  const __m512i even = _mm512_mullo_epi16(x, y);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00ff)),
                         _mm512_slli_epi16(odd, 8));
}

// An integer base lane type of 512-bit registers: the mask type of its element width and the
// masked load and store intrinsics of that width.
#define STRAIT_AVX512_INT_BASE(NAME, MASK, LOAD_MASKED, STORE_MASKED)                  \
  struct NAME {                                                                        \
    using V = __m512i;                                                                 \
    using M = MASK;                                                                    \
    STRAIT_SIMD_TARGET static V load(const void* p) { return _mm512_loadu_si512(p); }  \
    STRAIT_SIMD_TARGET static V load(const void* p, M m) { return LOAD_MASKED(m, p); } \
    STRAIT_SIMD_TARGET static void store(void* p, V v) { _mm512_storeu_si512(p, v); }  \
    STRAIT_SIMD_TARGET static void store(void* p, V v, M m) { STORE_MASKED(p, m, v); } \
    STRAIT_SIMD_TARGET static V band(V x, V y) { return _mm512_and_si512(x, y); }      \
    STRAIT_SIMD_TARGET static V bor(V x, V y) { return _mm512_or_si512(x, y); }        \
    STRAIT_SIMD_TARGET static V bxor(V x, V y) { return _mm512_xor_si512(x, y); }      \
  }

// The lane types (see the drivers' headers), each whole or under a mask M of the first lanes.
// _mm512_min_ps(A, B) is A < B ? A : B (B when unordered or equal), hence min(y, x) for
// std::min(x, y).
struct Avx512 {
  struct F32Ops {
    using V = __m512;
    using M = __mmask16;
    using S = float;  // scale()'s factor type
    static constexpr std::size_t kLanes = 16;
    STRAIT_SIMD_TARGET static V add(V x, V y) { return _mm512_add_ps(x, y); }
    STRAIT_SIMD_TARGET static V sub(V x, V y) { return _mm512_sub_ps(x, y); }
    STRAIT_SIMD_TARGET static V mul(V x, V y) { return _mm512_mul_ps(x, y); }
    STRAIT_SIMD_TARGET static V div(V x, V y) { return _mm512_div_ps(x, y); }
    STRAIT_SIMD_TARGET static V div(V x, V y, M m) { return _mm512_maskz_div_ps(m, x, y); }
    STRAIT_SIMD_TARGET static V sqrt(V x) { return _mm512_sqrt_ps(x); }
    STRAIT_SIMD_TARGET static V sqrt(V x, M m) { return _mm512_maskz_sqrt_ps(m, x); }
    STRAIT_SIMD_TARGET static V min(V x, V y) { return _mm512_min_ps(y, x); }
    STRAIT_SIMD_TARGET static V max(V x, V y) { return _mm512_max_ps(y, x); }
    STRAIT_SIMD_TARGET static V broadcast(float f) { return _mm512_set1_ps(f); }
  };

  struct F32 : F32Ops {
    using T = float;
    STRAIT_SIMD_TARGET static V load(const void* p) { return _mm512_loadu_ps(p); }
    STRAIT_SIMD_TARGET static V load(const void* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
    STRAIT_SIMD_TARGET static void store(void* p, V v) { _mm512_storeu_ps(p, v); }
    STRAIT_SIMD_TARGET static void store(void* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
    STRAIT_SIMD_TARGET static void store_bf16(void* p, V v) {
      _mm256_storeu_si256(static_cast<__m256i*>(p), to_bf16(v));
    }
    STRAIT_SIMD_TARGET static void store_bf16(void* p, V v, M m) {
      _mm256_mask_storeu_epi16(p, m, to_bf16(v));
    }
  };

  struct F64 {
    using T = double;
    using S = double;
    using V = __m512d;
    using M = __mmask8;
    static constexpr std::size_t kLanes = 8;
    STRAIT_SIMD_TARGET static V load(const void* p) { return _mm512_loadu_pd(p); }
    STRAIT_SIMD_TARGET static V load(const void* p, M m) { return _mm512_maskz_loadu_pd(m, p); }
    STRAIT_SIMD_TARGET static void store(void* p, V v) { _mm512_storeu_pd(p, v); }
    STRAIT_SIMD_TARGET static void store(void* p, V v, M m) { _mm512_mask_storeu_pd(p, m, v); }
    STRAIT_SIMD_TARGET static V add(V x, V y) { return _mm512_add_pd(x, y); }
    STRAIT_SIMD_TARGET static V mul(V x, V y) { return _mm512_mul_pd(x, y); }
    STRAIT_SIMD_TARGET static V min(V x, V y) { return _mm512_min_pd(y, x); }
    STRAIT_SIMD_TARGET static V max(V x, V y) { return _mm512_max_pd(y, x); }
    STRAIT_SIMD_TARGET static V broadcast(double f) { return _mm512_set1_pd(f); }
  };

  // 16 halves in a 256-bit register, whole or masked, widened to f32 and narrowed back.
  template <class Half>
  struct Halves : F32Ops {
    using T = std::uint16_t;
    STRAIT_SIMD_TARGET static V load(const void* p) {
      return Half::widen(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    }
    STRAIT_SIMD_TARGET static V load(const void* p, M m) {
      return Half::widen(_mm256_maskz_loadu_epi16(m, p));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v) {
      _mm256_storeu_si256(static_cast<__m256i*>(p), Half::narrow(v));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v, M m) {
      _mm256_mask_storeu_epi16(p, m, Half::narrow(v));
    }
  };

  // f16: VCVTPH2PS widens exactly; narrow as f32_to_f16 (to_f16 above).
  struct F16Convert {
    STRAIT_SIMD_TARGET static __m512 widen(__m256i h) { return _mm512_cvtph_ps(h); }
    STRAIT_SIMD_TARGET static __m256i narrow(__m512 v) { return to_f16(v); }
  };
  using F16 = Halves<F16Convert>;

  // bf16: widen by a 16-bit shift; narrow as f32_to_bf16 (to_bf16 above).
  struct BF16Convert {
    STRAIT_SIMD_TARGET static __m512 widen(__m256i h) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    STRAIT_SIMD_TARGET static __m256i narrow(__m512 v) { return to_bf16(v); }
  };
  using BF16 = Halves<BF16Convert>;

  // Integers: whole-register loads and stores, masked per element width.
  STRAIT_AVX512_INT_BASE(Int8, __mmask64, _mm512_maskz_loadu_epi8, _mm512_mask_storeu_epi8);
  STRAIT_AVX512_INT_BASE(Int32, __mmask16, _mm512_maskz_loadu_epi32, _mm512_mask_storeu_epi32);
  STRAIT_AVX512_INT_BASE(Int64, __mmask8, _mm512_maskz_loadu_epi64, _mm512_mask_storeu_epi64);

  STRAIT_SIMD_INT_LANES(I8, Int8, std::int8_t, 64, _mm512_add_epi8, mul8, _mm512_min_epi8,
                        _mm512_max_epi8);

  STRAIT_SIMD_INT_LANES(U8, Int8, std::uint8_t, 64, _mm512_add_epi8, mul8, _mm512_min_epu8,
                        _mm512_max_epu8);

  STRAIT_SIMD_INT_LANES(I32, Int32, std::int32_t, 16, _mm512_add_epi32, _mm512_mullo_epi32,
                        _mm512_min_epi32, _mm512_max_epi32);

  STRAIT_SIMD_INT_LANES(I64, Int64, std::int64_t, 8, _mm512_add_epi64, _mm512_mullo_epi64,
                        _mm512_min_epi64, _mm512_max_epi64);  // mul: AVX512DQ

  // The codec lane type: F32 with 32-bit integer lanes beside it (kernels/quantize_impl.h).
  struct Codec : F32 {
    using U = __m512i;
    STRAIT_SIMD_TARGET static U bits(V x) { return _mm512_castps_si512(x); }
    STRAIT_SIMD_TARGET static V floats(U x) { return _mm512_castsi512_ps(x); }
    STRAIT_SIMD_TARGET static V to_float(U x) { return _mm512_cvtepi32_ps(x); }
    STRAIT_SIMD_TARGET static U trunc(V x) { return _mm512_cvttps_epi32(x); }
    STRAIT_SIMD_TARGET static V floor(V x) {
      return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    STRAIT_SIMD_TARGET static V nearest(V x) {
      return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    STRAIT_SIMD_TARGET static U and_u(U x, U y) { return _mm512_and_si512(x, y); }
    STRAIT_SIMD_TARGET static U or_u(U x, U y) { return _mm512_or_si512(x, y); }
    STRAIT_SIMD_TARGET static U xor_u(U x, U y) { return _mm512_xor_si512(x, y); }
    STRAIT_SIMD_TARGET static U add_u(U x, U y) { return _mm512_add_epi32(x, y); }
    STRAIT_SIMD_TARGET static U mullo_u(U x, U y) { return _mm512_mullo_epi32(x, y); }
    STRAIT_SIMD_TARGET static U min_u(U x, U y) { return _mm512_min_epu32(x, y); }
    STRAIT_SIMD_TARGET static U max_u(U x, U y) { return _mm512_max_epu32(x, y); }
    template <int kBits>
    STRAIT_SIMD_TARGET static U srli_u(U x) {
      return _mm512_srli_epi32(x, kBits);
    }
    STRAIT_SIMD_TARGET static U set1_u(std::uint32_t v) {
      return _mm512_set1_epi32(static_cast<int>(v));
    }
    STRAIT_SIMD_TARGET static U iota_u() {
      return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    }
    STRAIT_SIMD_TARGET static std::uint32_t hmax_u(U v) { return _mm512_reduce_max_epu32(v); }
    STRAIT_SIMD_TARGET static std::uint32_t sign_bits(V x) {
      return _mm512_movepi32_mask(_mm512_castps_si512(x));
    }
    STRAIT_SIMD_TARGET static V select_signs(std::uint32_t m, V pos, V neg) {
      return _mm512_mask_blend_ps(static_cast<__mmask16>(m), pos, neg);
    }
    // Each narrowing holds: the values are within -127..127.
    STRAIT_SIMD_TARGET static __m256i pack_i8(const U* r) {
      return _mm256_setr_m128i(_mm512_cvtepi32_epi8(r[0]), _mm512_cvtepi32_epi8(r[1]));
    }
    STRAIT_SIMD_TARGET static __m128i narrow_i16(__m256i w) { return _mm256_cvtepi16_epi8(w); }
    STRAIT_SIMD_TARGET static void from_i8(__m128i e, V* v) {
      v[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(e));
    }
    STRAIT_SIMD_TARGET static void store_u16(void* out, const U* r) {
      _mm256_storeu_si256(static_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r[0]));
    }
    STRAIT_SIMD_TARGET static void store_f16(void* out, V v) {
      _mm256_storeu_si256(static_cast<__m256i*>(out),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
  };
};

}  // namespace

std::size_t reduce_avx512(DType dtype, ReduceOp op, void* inout, const void* in,
                          std::size_t count) {
  return simd::reduce_driver<Avx512>(dtype, op, inout, in, count);
}

std::size_t scale_avx512(DType dtype, void* inout, std::size_t count, double factor) {
  return simd::scale_driver<Avx512>(dtype, inout, count, factor);
}

std::size_t adamw_avx512(const AdamWScalars& s, const AdamWRange& r) noexcept {
  return simd::adamw_driver<Avx512::F32>(s, r);
}

const CodecKernels& avx512_codec_kernels() {
  return simd::codec_driver<Avx512>();
}

}  // namespace strait::kernels::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // __x86_64__
