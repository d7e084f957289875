#include "kernels/gelu.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace strait::kernels {
namespace {

void check(const char* op, std::ptrdiff_t N) {
  if (N < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: element count {} is negative", op, N));
  }
}

template <class F>
constexpr F kGeluScale = static_cast<F>(0.7978845608028654);  // sqrt(2 / pi)
template <class F>
constexpr F kGeluCubic = static_cast<F>(0.044715);

}  // namespace

template <class F>
void gelu_forward(F* out, const F* inp, std::ptrdiff_t N) {
  check("gelu_forward", N);
  for (std::ptrdiff_t i = 0; i < N; ++i) {
    const F x = inp[i];
    const F u = kGeluScale<F> * (x + kGeluCubic<F> * x * x * x);
    out[i] = F(0.5) * x * (F(1) + std::tanh(u));
  }
}

template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, std::ptrdiff_t N) {
  check("gelu_backward", N);
  for (std::ptrdiff_t i = 0; i < N; ++i) {
    const F x = inp[i];
    const F u = kGeluScale<F> * (x + kGeluCubic<F> * x * x * x);
    const F th = std::tanh(u);
    const F du = kGeluScale<F> * (F(1) + F(3) * kGeluCubic<F> * x * x);
    const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * (F(1) - th * th) * du;
    dinp[i] += grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, std::ptrdiff_t);
template void gelu_forward<double>(double*, const double*, std::ptrdiff_t);
template void gelu_backward<float>(float*, const float*, const float*, std::ptrdiff_t);
template void gelu_backward<double>(double*, const double*, const double*, std::ptrdiff_t);

}  // namespace strait::kernels
