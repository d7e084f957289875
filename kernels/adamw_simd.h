// Internal to kernels/adamw.cpp, kernels/simd_<isa>.cpp (and the tests): the per-SIMD-level AdamW
// loops behind kernels/adamw.h, and the one driver each instruction set's loop is made from.
// Callers use adamw_step() or ParallelAdamW, which pick a path through simd_level()
// (kernels/cpu_features.h).
//
// Bit-identical by construction: every path computes each element with the same IEEE operations
// in the same order (adamw_element below), and SIMD multiply, add, divide and square root round
// exactly as their scalar forms do. The files are built with -ffp-contract=off so that no path
// fuses a multiply and an add the others round twice (GCC contracts even intrinsics by default).
// The bf16 copy is f32_to_bf16 (kernels/dtype.h) in every path: round to nearest even, NaN kept
// quiet, subnormals kept (VCVTNEPS2BF16 would flush them, so it is not used).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace strait::kernels::detail {

// One step's fp32 scalars, formed in double from the hyperparameters and rounded once
// (adamw_scalars() in adamw.cpp), as torch.optim.AdamW does.
struct AdamWScalars {
  float decay = 1.0F;         // 1 - lr * weight_decay
  float b1 = 0.0F;            // beta1
  float one_minus_b1 = 0.0F;  // 1 - beta1
  float b2 = 0.0F;            // beta2
  float one_minus_b2 = 0.0F;  // 1 - beta2
  float bias2_sqrt = 1.0F;    // sqrt(1 - beta2^t)
  float step_size = 0.0F;     // lr / (1 - beta1^t)
  float eps = 0.0F;
};

// The operands of one call: n elements from each pointer; bf16 is null when no copy is wanted.
struct AdamWRange {
  float* p = nullptr;
  const float* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::uint16_t* bf16 = nullptr;
  std::size_t n = 0;
};

// The update of element i, in the order every SIMD path follows lane by lane (torch's order:
// p *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; p += -step_size m / denom).
template <bool kBf16>
inline void adamw_element(const AdamWScalars& s, const AdamWRange& r, std::size_t i) {
  const float g = r.g[i];
  const float m = s.b1 * r.m[i] + s.one_minus_b1 * g;
  const float v = s.b2 * r.v[i] + s.one_minus_b2 * (g * g);
  const float denom = std::sqrt(v) / s.bias2_sqrt + s.eps;
  const float p = r.p[i] * s.decay - s.step_size * (m / denom);
  r.p[i] = p;
  r.m[i] = m;
  r.v[i] = v;
  if constexpr (kBf16) r.bf16[i] = f32_to_bf16(p);
}

// The portable loop (any CPU; the tail of the AVX2 path).
void adamw_scalar(const AdamWScalars& s, const AdamWRange& r) noexcept;

// Each returns how many leading elements it updated; the caller finishes the rest with the scalar
// loop. AVX-512 does them all (masked tail); AVX2 stops at the last whole group of 8.
// Calling a path the CPU lacks is an illegal instruction: check cpu_simd_level() first.
#if defined(__x86_64__)
std::size_t adamw_avx2(const AdamWScalars& s, const AdamWRange& r) noexcept;
std::size_t adamw_avx512(const AdamWScalars& s, const AdamWRange& r) noexcept;
#endif

}  // namespace strait::kernels::detail

// The driver, compiled only inside an instruction set's file (kernels/simd_<isa>.cpp), which
// defines STRAIT_SIMD_TARGET as its target attribute and instantiates adamw_driver<F> with an f32
// lane type of internal linkage. F: `kLanes` floats in a vector F::V; load(p), store(p, v), add,
// sub, mul, div, sqrt, broadcast(float) and store_bf16(p, v) (f32_to_bf16 on every lane). A lane
// type with a mask type F::M also does the tail: each of those operations then takes the mask of
// the lanes to touch last, and masked-off lanes are neither loaded nor stored, nor divided or
// rooted, so the tail raises no floating-point exception the scalar loop would not.
#if defined(STRAIT_SIMD_TARGET)
namespace strait::kernels::detail::simd {

template <class F>
struct AdamWVectors {
  typename F::V decay, b1, one_minus_b1, b2, one_minus_b2, bias2_sqrt, step_size, eps;
};

// adamw_element() on the F::kLanes elements at i, or the lanes of the mask `k...` among them.
template <class F, bool kBf16, class... K>
STRAIT_SIMD_TARGET inline void adamw_update(const AdamWVectors<F>& c, const AdamWRange& r,
                                            std::size_t i, K... k) {
  const auto g = F::load(r.g + i, k...);
  const auto m = F::add(F::mul(c.b1, F::load(r.m + i, k...)), F::mul(c.one_minus_b1, g));
  const auto v = F::add(F::mul(c.b2, F::load(r.v + i, k...)), F::mul(c.one_minus_b2, F::mul(g, g)));
  const auto denom = F::add(F::div(F::sqrt(v, k...), c.bias2_sqrt, k...), c.eps);
  const auto p =
      F::sub(F::mul(F::load(r.p + i, k...), c.decay), F::mul(c.step_size, F::div(m, denom, k...)));
  F::store(r.p + i, p, k...);
  F::store(r.m + i, m, k...);
  F::store(r.v + i, v, k...);
  if constexpr (kBf16) F::store_bf16(r.bf16 + i, p, k...);
}

// Two vectors per iteration, then one; a masked lane type finishes the tail, the others return
// where the last whole vector ended.
template <class F, bool kBf16>
STRAIT_SIMD_TARGET std::size_t adamw_run(const AdamWScalars& s, const AdamWRange& r) {
  const AdamWVectors<F> c{F::broadcast(s.decay),        F::broadcast(s.b1),
                          F::broadcast(s.one_minus_b1), F::broadcast(s.b2),
                          F::broadcast(s.one_minus_b2), F::broadcast(s.bias2_sqrt),
                          F::broadcast(s.step_size),    F::broadcast(s.eps)};
  constexpr std::size_t w = F::kLanes;
  std::size_t i = 0;
  for (; i + 2 * w <= r.n; i += 2 * w) {
    adamw_update<F, kBf16>(c, r, i);
    adamw_update<F, kBf16>(c, r, i + w);
  }
  if (i + w <= r.n) {
    adamw_update<F, kBf16>(c, r, i);
    i += w;
  }
  if constexpr (requires { typename F::M; }) {
    if (i < r.n) {
      adamw_update<F, kBf16>(c, r, i, static_cast<typename F::M>((1U << (r.n - i)) - 1U));
      i = r.n;
    }
  }
  return i;
}

template <class F>
std::size_t adamw_driver(const AdamWScalars& s, const AdamWRange& r) {
  return r.bf16 != nullptr ? adamw_run<F, true>(s, r) : adamw_run<F, false>(s, r);
}

}  // namespace strait::kernels::detail::simd
#endif  // STRAIT_SIMD_TARGET
