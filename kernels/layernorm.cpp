#include "kernels/layernorm.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/fast_math.h"

namespace strait::kernels {
namespace {

void check(const char* op, int N, int C) {
  if (N < 0 || C <= 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: bad shape N={} C={}: need N >= 0 and C > 0", op, N, C));
  }
}

}  // namespace

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C) {
  check("layernorm_forward", N, C);
  const auto c = static_cast<std::size_t>(C);
  const F inv_c = F(1) / static_cast<F>(C);
  const auto eps = static_cast<F>(kLayerNormEps);
  for (std::size_t r = 0; r < static_cast<std::size_t>(N); ++r) {
    const F* x = inp + r * c;
    const F m = detail::lane_sum<F>(c, [&](std::size_t i) { return x[i]; }) * inv_c;
    // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
    const F sq = detail::lane_sum<F>(c, [&](std::size_t i) {
      const F d = x[i] - m;
      return d * d;
    });
    const F s = F(1) / std::sqrt(sq * inv_c + eps);
    F* o = out + r * c;
    for (std::size_t i = 0; i < c; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C) {
  check("layernorm_backward", N, C);
  const auto c = static_cast<std::size_t>(C);
  const F inv_c = F(1) / static_cast<F>(C);
  for (std::size_t r = 0; r < static_cast<std::size_t>(N); ++r) {
    const F* x = inp + r * c;
    const F* d = dout + r * c;
    F* dx = dinp + r * c;
    const F m = mean[r];
    const F s = rstd[r];
    const F g_mean =
        detail::lane_sum<F>(c, [&](std::size_t i) { return weight[i] * d[i]; }) * inv_c;
    const F gn_mean =
        detail::lane_sum<F>(c, [&](std::size_t i) { return weight[i] * d[i] * ((x[i] - m) * s); }) *
        inv_c;
    if (dweight != nullptr && dbias != nullptr) {
      for (std::size_t i = 0; i < c; ++i) {
        const F n = (x[i] - m) * s;
        const F g = weight[i] * d[i];
        dx[i] += s * (g - g_mean - n * gn_mean);
        dweight[i] += n * d[i];
        dbias[i] += d[i];
      }
      continue;
    }
    // The same operations, without the parameter gradients that are not wanted (a zero-bubble B).
    for (std::size_t i = 0; i < c; ++i) {
      const F n = (x[i] - m) * s;
      const F g = weight[i] * d[i];
      dx[i] += s * (g - g_mean - n * gn_mean);
    }
    if (dweight != nullptr) {
      for (std::size_t i = 0; i < c; ++i) dweight[i] += ((x[i] - m) * s) * d[i];
    }
    if (dbias != nullptr) {
      for (std::size_t i = 0; i < c; ++i) dbias[i] += d[i];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace strait::kernels
