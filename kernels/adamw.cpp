#include "kernels/adamw.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace strait::kernels {
namespace {

void check(bool ok, const char* what, double value, const char* range) {
  if (!ok) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw: {} = {} is out of range: it must be {}", what, value, range));
  }
}

}  // namespace

void validate(const AdamWHyper& h) {
  // Written so that NaN fails every check.
  check(h.lr >= 0.0 && std::isfinite(h.lr), "lr", h.lr, "finite and >= 0");
  check(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", h.beta1, "in [0, 1)");
  check(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", h.beta2, "in [0, 1)");
  check(h.eps >= 0.0 && std::isfinite(h.eps), "eps", h.eps, "finite and >= 0");
  check(h.weight_decay >= 0.0 && std::isfinite(h.weight_decay), "weight_decay", h.weight_decay,
        "finite and >= 0");
}

void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> m,
                std::span<float> v, const AdamWHyper& hyper, std::int64_t step) {
  const std::size_t n = params.size();
  if (grads.size() != n || m.size() != n || v.size() != n) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw: params, grads, m and v must have the same length, got {}, {}, "
                            "{} and {}",
                            n, grads.size(), m.size(), v.size()));
  }
  if (step < 1) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("adamw: step is {} but counts from 1 (the first update is step 1)", step));
  }
  validate(hyper);

  // Scalars as torch.optim.AdamW forms them (in double), then one rounding to fp32.
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias2 = 1.0 - std::pow(hyper.beta2, t);
  const auto decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  const auto step_size = static_cast<float>(hyper.lr / bias1);
  const auto bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const auto b1 = static_cast<float>(hyper.beta1);
  const auto b2 = static_cast<float>(hyper.beta2);
  const auto one_minus_b1 = static_cast<float>(1.0 - hyper.beta1);
  const auto one_minus_b2 = static_cast<float>(1.0 - hyper.beta2);
  const auto eps = static_cast<float>(hyper.eps);

  float* p = params.data();
  const float* g = grads.data();
  float* mp = m.data();
  float* vp = v.data();
  // Elementwise with no cross-lane dependency: GCC vectorises it (sqrt needs -fno-math-errno,
  // set for this file in kernels/CMakeLists.txt); lanes and the scalar tail round identically.
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * mp[i] + one_minus_b1 * gi;
    const float vi = b2 * vp[i] + one_minus_b2 * (gi * gi);
    const float denom = std::sqrt(vi) / bias2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
    mp[i] = mi;
    vp[i] = vi;
  }
}

}  // namespace strait::kernels
