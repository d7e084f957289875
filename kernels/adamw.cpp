#include "kernels/adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/adamw_simd.h"
#include "kernels/cpu_features.h"
#include "kernels/tile_pool.h"

namespace strait::kernels {
namespace {

void check(bool ok, const char* what, double value, const char* range) {
  if (!ok) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw: {} = {} is out of range: it must be {}", what, value, range));
  }
}

// Checks everything and forms the step's fp32 scalars as torch.optim.AdamW does (in double, then
// one rounding to fp32).
detail::AdamWScalars prepare(std::span<float> params, std::span<const float> grads,
                             std::span<float> m, std::span<float> v, const AdamWHyper& hyper,
                             std::int64_t step, std::span<std::uint16_t> params_bf16) {
  const std::size_t n = params.size();
  if (grads.size() != n || m.size() != n || v.size() != n) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw: params, grads, m and v must have the same length, got {}, {}, "
                            "{} and {}",
                            n, grads.size(), m.size(), v.size()));
  }
  if (!params_bf16.empty() && params_bf16.size() != n) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw: params_bf16 has {} elements but params has {} (pass an empty "
                            "span for no bf16 copy)",
                            params_bf16.size(), n));
  }
  if (step < 1) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("adamw: step is {} but counts from 1 (the first update is step 1)", step));
  }
  validate(hyper);

  const double t = static_cast<double>(step);
  detail::AdamWScalars s;
  s.decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  s.b1 = static_cast<float>(hyper.beta1);
  s.one_minus_b1 = static_cast<float>(1.0 - hyper.beta1);
  const bool frozen = hyper.freeze_variance_after > 0 && step > hyper.freeze_variance_after;
  s.b2 = frozen ? 1.0F : static_cast<float>(hyper.beta2);
  s.one_minus_b2 = frozen ? 0.0F : static_cast<float>(1.0 - hyper.beta2);
  const double t2 = frozen ? static_cast<double>(hyper.freeze_variance_after) : t;
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hyper.beta2, t2)));
  s.step_size = static_cast<float>(hyper.lr / (1.0 - std::pow(hyper.beta1, t)));
  s.eps = static_cast<float>(hyper.eps);
  return s;
}

detail::AdamWRange range_of(std::span<float> params, std::span<const float> grads,
                            std::span<float> m, std::span<float> v,
                            std::span<std::uint16_t> params_bf16) {
  return {params.data(),
          grads.data(),
          m.data(),
          v.data(),
          params_bf16.empty() ? nullptr : params_bf16.data(),
          params.size()};
}

detail::AdamWRange advance(const detail::AdamWRange& r, std::size_t k) {
  return {r.p + k, r.g + k, r.m + k, r.v + k, r.bf16 == nullptr ? nullptr : r.bf16 + k, r.n - k};
}

// One range on the calling thread at the given level; the scalar loop finishes what the SIMD path
// left (every path rounds alike, so where the split falls does not matter).
void run(SimdLevel level, const detail::AdamWScalars& s, const detail::AdamWRange& r) noexcept {
  std::size_t done = 0;
#if defined(__x86_64__)
  switch (level) {
    case SimdLevel::Avx512: done = detail::adamw_avx512(s, r); break;
    case SimdLevel::Avx2: done = detail::adamw_avx2(s, r); break;
    case SimdLevel::Scalar: break;
  }
#else
  (void)level;
#endif
  if (done < r.n) detail::adamw_scalar(s, advance(r, done));
}

}  // namespace

namespace detail {

// GCC vectorises these loops for baseline x86-64 (SSE2; sqrt needs -fno-math-errno, set for this
// file in kernels/CMakeLists.txt): SSE lanes round exactly like scalar instructions. The operands
// are copied to locals first: a store through r.p could otherwise change r itself as far as the
// compiler knows, which forces a reload per element and keeps the loop scalar (2.3x slower
// measured).
void adamw_scalar(const AdamWScalars& scalars, const AdamWRange& range) noexcept {
  const AdamWScalars s = scalars;
  const AdamWRange r = range;
  if (r.bf16 == nullptr) {
    for (std::size_t i = 0; i < r.n; ++i) adamw_element<false>(s, r, i);
  } else {
    for (std::size_t i = 0; i < r.n; ++i) adamw_element<true>(s, r, i);
  }
}

}  // namespace detail

void validate(const AdamWHyper& h) {
  // Written so that NaN fails every check.
  check(h.lr >= 0.0 && std::isfinite(h.lr), "lr", h.lr, "finite and >= 0");
  check(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", h.beta1, "in [0, 1)");
  check(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", h.beta2, "in [0, 1)");
  check(h.eps >= 0.0 && std::isfinite(h.eps), "eps", h.eps, "finite and >= 0");
  check(h.weight_decay >= 0.0 && std::isfinite(h.weight_decay), "weight_decay", h.weight_decay,
        "finite and >= 0");
  check(h.freeze_variance_after >= 0, "freeze_variance_after",
        static_cast<double>(h.freeze_variance_after), ">= 0 (0: never)");
}

void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> m,
                std::span<float> v, const AdamWHyper& hyper, std::int64_t step,
                std::span<std::uint16_t> params_bf16) {
  const detail::AdamWScalars s = prepare(params, grads, m, v, hyper, step, params_bf16);
  run(simd_level(), s, range_of(params, grads, m, v, params_bf16));
}

ParallelAdamW::ParallelAdamW(unsigned threads) : pool_(std::make_unique<TilePool>(threads)) {}
ParallelAdamW::ParallelAdamW(ParallelAdamW&&) noexcept = default;
ParallelAdamW& ParallelAdamW::operator=(ParallelAdamW&&) noexcept = default;
ParallelAdamW::~ParallelAdamW() = default;

unsigned ParallelAdamW::threads() const noexcept {
  return pool_->threads();
}

void ParallelAdamW::step(std::span<float> params, std::span<const float> grads, std::span<float> m,
                         std::span<float> v, const AdamWHyper& hyper, std::int64_t step,
                         std::span<std::uint16_t> params_bf16) {
  const detail::AdamWScalars s = prepare(params, grads, m, v, hyper, step, params_bf16);
  const detail::AdamWRange all = range_of(params, grads, m, v, params_bf16);
  const SimdLevel level = simd_level();
  const std::size_t tiles = (all.n + kTileParams - 1) / kTileParams;
  pool_->for_each_tile(tiles, [&](std::size_t tile) noexcept {
    const std::size_t lo = tile * kTileParams;
    detail::AdamWRange r = advance(all, lo);
    r.n = std::min(kTileParams, all.n - lo);
    run(level, s, r);
  });
}

}  // namespace strait::kernels
