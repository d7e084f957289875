// AVX2 (+FMA/F16C) instruction set for the SIMD drivers: the lane types (256-bit vectors) and the
// instantiations of reduce/scale (kernels/reduce_simd.h), AdamW (kernels/adamw_simd.h) and the
// codec primitives (kernels/quantize_impl.h). Only functions marked STRAIT_SIMD_TARGET contain
// AVX2 instructions (GCC target attributes, not -mavx2 on the file), so the exported entry points,
// and the rest of the library, stay baseline x86-64 until simd_level() picks this path. The lane
// types have internal linkage, so no AVX2 instantiation can stand in for another file's at link
// time. Built with -ffp-contract=off: no lane may fuse a multiply and an add the scalar path
// rounds twice (FMA is in the target, for the CPU check, but never used).
#if defined(__x86_64__)
#define STRAIT_SIMD_TARGET __attribute__((target("avx2,fma,f16c")))
#endif

#include "kernels/adamw_simd.h"
#include "kernels/quantize_impl.h"
#include "kernels/reduce_simd.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace strait::kernels::detail {
namespace {

STRAIT_SIMD_TARGET inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
STRAIT_SIMD_TARGET inline void store128(void* p, __m128i v) {
  _mm_storeu_si128(static_cast<__m128i*>(p), v);
}

// f32_to_bf16 on 8 lanes: add 0x7fff + the kept lsb and shift; a NaN keeps its top 16 bits with
// the quiet bit (0x40) set.
STRAIT_SIMD_TARGET inline __m128i to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i bias =
      _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane is <= 0xffff
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// 8-bit products: AVX2 has no 8-bit multiply. The low byte of a 16-bit product depends only on the
// low bytes of its operands, so multiply the even bytes and the odd bytes (shifted down) as 16-bit
// lanes and keep each low byte: the product modulo 256, signed or not.
STRAIT_SIMD_TARGET inline __m256i mul8(__m256i x, __m256i y) {
  const __m256i even = _mm256_mullo_epi16(x, y);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                         _mm256_slli_epi16(odd, 8));
}

// The lane types (see the drivers' headers). _mm256_min_ps(A, B) is A < B ? A : B (B when
// unordered or equal), hence min(y, x) for std::min(x, y).
struct Avx2 {
  struct F32Ops {
    using V = __m256;
    using S = float;  // scale()'s factor type
    static constexpr std::size_t kLanes = 8;
    STRAIT_SIMD_TARGET static V add(V x, V y) { return _mm256_add_ps(x, y); }
    STRAIT_SIMD_TARGET static V sub(V x, V y) { return _mm256_sub_ps(x, y); }
    STRAIT_SIMD_TARGET static V mul(V x, V y) { return _mm256_mul_ps(x, y); }
    STRAIT_SIMD_TARGET static V div(V x, V y) { return _mm256_div_ps(x, y); }
    STRAIT_SIMD_TARGET static V sqrt(V x) { return _mm256_sqrt_ps(x); }
    STRAIT_SIMD_TARGET static V min(V x, V y) { return _mm256_min_ps(y, x); }
    STRAIT_SIMD_TARGET static V max(V x, V y) { return _mm256_max_ps(y, x); }
    STRAIT_SIMD_TARGET static V broadcast(float f) { return _mm256_set1_ps(f); }
  };

  struct F32 : F32Ops {
    using T = float;
    STRAIT_SIMD_TARGET static V load(const void* p) {
      return _mm256_loadu_ps(static_cast<const float*>(p));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v) {
      _mm256_storeu_ps(static_cast<float*>(p), v);
    }
    STRAIT_SIMD_TARGET static void store_bf16(void* p, V v) { store128(p, to_bf16(v)); }
  };

  struct F64 {
    using T = double;
    using S = double;
    using V = __m256d;
    static constexpr std::size_t kLanes = 4;
    STRAIT_SIMD_TARGET static V load(const void* p) {
      return _mm256_loadu_pd(static_cast<const double*>(p));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v) {
      _mm256_storeu_pd(static_cast<double*>(p), v);
    }
    STRAIT_SIMD_TARGET static V add(V x, V y) { return _mm256_add_pd(x, y); }
    STRAIT_SIMD_TARGET static V mul(V x, V y) { return _mm256_mul_pd(x, y); }
    STRAIT_SIMD_TARGET static V min(V x, V y) { return _mm256_min_pd(y, x); }
    STRAIT_SIMD_TARGET static V max(V x, V y) { return _mm256_max_pd(y, x); }
    STRAIT_SIMD_TARGET static V broadcast(double f) { return _mm256_set1_pd(f); }
  };

  // f16: F16C widens exactly. On the way back a NaN becomes sign | 0x7fc00000 first, so that
  // VCVTPS2PH gives f32_to_f16's quiet NaN sign | 0x7e00 instead of keeping the payload; every
  // other value is rounded to nearest even by the instruction, as f32_to_f16 does (overflow to
  // Inf, subnormals kept; MXCSR's DAZ would flush f32 subnormal inputs, which the default MXCSR
  // does not).
  struct F16 : F32Ops {
    using T = std::uint16_t;
    STRAIT_SIMD_TARGET static V load(const void* p) { return _mm256_cvtph_ps(load128(p)); }
    STRAIT_SIMD_TARGET static void store(void* p, V v) {
      const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
      const __m256 quiet = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0F)),
                                        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
      store128(p, _mm256_cvtps_ph(_mm256_blendv_ps(v, quiet, nan),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  };

  // bf16: widen by a 16-bit shift; narrow as f32_to_bf16 (to_bf16 above).
  struct BF16 : F32Ops {
    using T = std::uint16_t;
    STRAIT_SIMD_TARGET static V load(const void* p) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v) { store128(p, to_bf16(v)); }
  };

  struct Int {
    using V = __m256i;
    STRAIT_SIMD_TARGET static V load(const void* p) {
      return _mm256_loadu_si256(static_cast<const __m256i*>(p));
    }
    STRAIT_SIMD_TARGET static void store(void* p, V v) {
      _mm256_storeu_si256(static_cast<__m256i*>(p), v);
    }
    STRAIT_SIMD_TARGET static V band(V x, V y) { return _mm256_and_si256(x, y); }
    STRAIT_SIMD_TARGET static V bor(V x, V y) { return _mm256_or_si256(x, y); }
    STRAIT_SIMD_TARGET static V bxor(V x, V y) { return _mm256_xor_si256(x, y); }
  };

  STRAIT_SIMD_INT_LANES(I8, Int, std::int8_t, 32, _mm256_add_epi8, mul8, _mm256_min_epi8,
                        _mm256_max_epi8);

  STRAIT_SIMD_INT_LANES(U8, Int, std::uint8_t, 32, _mm256_add_epi8, mul8, _mm256_min_epu8,
                        _mm256_max_epu8);

  STRAIT_SIMD_INT_LANES(I32, Int, std::int32_t, 8, _mm256_add_epi32, _mm256_mullo_epi32,
                        _mm256_min_epi32, _mm256_max_epi32);

  // 64-bit products and min/max have no AVX2 instruction. Product modulo 2^64 from 32-bit halves:
  // x * y = xl * yl + ((xh * yl + xl * yh) << 32). Min/max: a signed compare and a blend.
  struct I64 : Int {
    using T = std::int64_t;
    static constexpr std::size_t kLanes = 4;
    STRAIT_SIMD_TARGET static V add(V x, V y) { return _mm256_add_epi64(x, y); }
    STRAIT_SIMD_TARGET static V mul(V x, V y) {
      const __m256i low = _mm256_mul_epu32(x, y);
      const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), y),
                                             _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32)));
      return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
    }
    STRAIT_SIMD_TARGET static V min(V x, V y) {
      return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
    }
    STRAIT_SIMD_TARGET static V max(V x, V y) {
      return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(y, x));
    }
  };

  // The codec lane type: F32 with 32-bit integer lanes beside it (kernels/quantize_impl.h).
  struct Codec : F32 {
    using U = __m256i;
    STRAIT_SIMD_TARGET static U bits(V x) { return _mm256_castps_si256(x); }
    STRAIT_SIMD_TARGET static V floats(U x) { return _mm256_castsi256_ps(x); }
    STRAIT_SIMD_TARGET static V to_float(U x) { return _mm256_cvtepi32_ps(x); }
    STRAIT_SIMD_TARGET static U trunc(V x) { return _mm256_cvttps_epi32(x); }
    STRAIT_SIMD_TARGET static V floor(V x) {
      return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    STRAIT_SIMD_TARGET static V nearest(V x) {
      return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    STRAIT_SIMD_TARGET static U and_u(U x, U y) { return _mm256_and_si256(x, y); }
    STRAIT_SIMD_TARGET static U or_u(U x, U y) { return _mm256_or_si256(x, y); }
    STRAIT_SIMD_TARGET static U xor_u(U x, U y) { return _mm256_xor_si256(x, y); }
    STRAIT_SIMD_TARGET static U add_u(U x, U y) { return _mm256_add_epi32(x, y); }
    STRAIT_SIMD_TARGET static U mullo_u(U x, U y) { return _mm256_mullo_epi32(x, y); }
    STRAIT_SIMD_TARGET static U min_u(U x, U y) { return _mm256_min_epu32(x, y); }
    STRAIT_SIMD_TARGET static U max_u(U x, U y) { return _mm256_max_epu32(x, y); }
    template <int kBits>
    STRAIT_SIMD_TARGET static U srli_u(U x) {
      return _mm256_srli_epi32(x, kBits);
    }
    STRAIT_SIMD_TARGET static U set1_u(std::uint32_t v) {
      return _mm256_set1_epi32(static_cast<int>(v));
    }
    STRAIT_SIMD_TARGET static U iota_u() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
    STRAIT_SIMD_TARGET static std::uint32_t hmax_u(U v) {
      __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
      m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
      return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
    }
    STRAIT_SIMD_TARGET static std::uint32_t sign_bits(V x) {
      return static_cast<std::uint32_t>(_mm256_movemask_ps(x));
    }
    STRAIT_SIMD_TARGET static V select_signs(std::uint32_t m, V pos, V neg) {
      const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
      const __m256i set = _mm256_cmpeq_epi32(
          _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(m)), lane_bit), lane_bit);
      return _mm256_blendv_ps(pos, neg, _mm256_castsi256_ps(set));
    }
    // The packs work per 128-bit lane: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1.
    STRAIT_SIMD_TARGET static __m256i pack_i8(const U* r) {
      const __m256i packed =
          _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
      return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    STRAIT_SIMD_TARGET static __m128i narrow_i16(__m256i w) {
      return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08));
    }
    STRAIT_SIMD_TARGET static void from_i8(__m128i e, V* v) {
      v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e));
      v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e, 8)));
    }
    STRAIT_SIMD_TARGET static void store_u16(void* out, const U* r) {
      const __m256i p = _mm256_packus_epi32(r[0], r[1]);  // per 128-bit lane
      _mm256_storeu_si256(static_cast<__m256i*>(out), _mm256_permute4x64_epi64(p, 0xd8));
    }
    STRAIT_SIMD_TARGET static void store_f16(void* out, V v) {
      store128(out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
  };
};

}  // namespace

std::size_t reduce_avx2(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count) {
  return simd::reduce_driver<Avx2>(dtype, op, inout, in, count);
}

std::size_t scale_avx2(DType dtype, void* inout, std::size_t count, double factor) {
  return simd::scale_driver<Avx2>(dtype, inout, count, factor);
}

std::size_t adamw_avx2(const AdamWScalars& s, const AdamWRange& r) noexcept {
  return simd::adamw_driver<Avx2::F32>(s, r);
}

const CodecKernels& avx2_codec_kernels() {
  return simd::codec_driver<Avx2>();
}

}  // namespace strait::kernels::detail

#endif  // __x86_64__
