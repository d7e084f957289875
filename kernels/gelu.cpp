#include "kernels/gelu.h"

#include <cmath>

#include "kernels/count_check.h"
#include "kernels/fast_math.h"

namespace strait::kernels {
namespace {

using detail::check_count;

template <class F>
constexpr F kGeluScale = static_cast<F>(0.7978845608028654);  // sqrt(2 / pi)
template <class F>
constexpr F kGeluCubic = static_cast<F>(0.044715);

// GELU's float loops compute gelu(x) = x * sigmoid(2u) (since (1 + tanh u) / 2 = sigmoid(2u)),
// with exp from a polynomial instead of libm: libm's scalar tanhf and expm1f were 40% of a
// training step (perf), about 18 ns an element; four lanes of SSE2 (every x86-64 has it) take
// about 1.6 (BM_GeluForward, bench/RESULTS.md). The scalar tail (and other CPUs) run the same
// operations in the same order, so every element gets the same bits wherever it sits and on every
// x86-64 machine. Written with intrinsics: GCC's own vectorisation of the clamp's selects was as
// slow as libm. exp: kernels/fast_math.h.
inline float sigmoid_of_twice(float u) {
  return 1.0F / (1.0F + detail::exp_clamped(-2.0F * u));
}

#if defined(__SSE2__)
inline __m128 sigmoid_of_twice(__m128 u) {
  const __m128 one = _mm_set1_ps(1.0F);
  return _mm_div_ps(one, _mm_add_ps(one, detail::exp_clamped(_mm_mul_ps(_mm_set1_ps(-2.0F), u))));
}
#endif

void forward(float* out, const float* inp, std::ptrdiff_t N) {
  std::ptrdiff_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= N; i += 4) {
    const __m128 x = _mm_loadu_ps(inp + i);
    const __m128 x3 = _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(kGeluCubic<float>), x), x), x);
    const __m128 u = _mm_mul_ps(_mm_set1_ps(kGeluScale<float>), _mm_add_ps(x, x3));
    _mm_storeu_ps(out + i, _mm_mul_ps(x, sigmoid_of_twice(u)));
  }
#endif
  for (; i < N; ++i) {
    const float x = inp[i];
    const float u = kGeluScale<float> * (x + kGeluCubic<float> * x * x * x);
    out[i] = x * sigmoid_of_twice(u);
  }
}

// d gelu / dx = (1 + th) / 2 + x (1 - th^2) du / 2 with th = 2s - 1: s + 2 x s (1 - s) du, where
// du = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void backward(float* dinp, const float* inp, const float* dout, std::ptrdiff_t N) {
  std::ptrdiff_t i = 0;
#if defined(__SSE2__)
  const __m128 one = _mm_set1_ps(1.0F);
  for (; i + 4 <= N; i += 4) {
    const __m128 x = _mm_loadu_ps(inp + i);
    const __m128 cubic = _mm_set1_ps(kGeluCubic<float>);
    const __m128 scale = _mm_set1_ps(kGeluScale<float>);
    const __m128 u =
        _mm_mul_ps(scale, _mm_add_ps(x, _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(cubic, x), x), x)));
    const __m128 du = _mm_mul_ps(
        scale, _mm_add_ps(one, _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(3.0F), cubic), x), x)));
    const __m128 s = sigmoid_of_twice(u);
    const __m128 slope = _mm_mul_ps(
        _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_set1_ps(2.0F), x), s), _mm_sub_ps(one, s)), du);
    const __m128 grad = _mm_add_ps(s, slope);
    _mm_storeu_ps(dinp + i,
                  _mm_add_ps(_mm_loadu_ps(dinp + i), _mm_mul_ps(grad, _mm_loadu_ps(dout + i))));
  }
#endif
  for (; i < N; ++i) {
    const float x = inp[i];
    const float u = kGeluScale<float> * (x + kGeluCubic<float> * x * x * x);
    const float du = kGeluScale<float> * (1.0F + 3.0F * kGeluCubic<float> * x * x);
    const float s = sigmoid_of_twice(u);
    const float grad = s + 2.0F * x * s * (1.0F - s) * du;
    dinp[i] += grad * dout[i];
  }
}

// The double versions are the reference (tests, gradient checks): libm's tanh.
void forward(double* out, const double* inp, std::ptrdiff_t N) {
  for (std::ptrdiff_t i = 0; i < N; ++i) {
    const double x = inp[i];
    const double u = kGeluScale<double> * (x + kGeluCubic<double> * x * x * x);
    out[i] = 0.5 * x * (1.0 + std::tanh(u));
  }
}

void backward(double* dinp, const double* inp, const double* dout, std::ptrdiff_t N) {
  for (std::ptrdiff_t i = 0; i < N; ++i) {
    const double x = inp[i];
    const double u = kGeluScale<double> * (x + kGeluCubic<double> * x * x * x);
    const double th = std::tanh(u);
    const double du = kGeluScale<double> * (1.0 + 3.0 * kGeluCubic<double> * x * x);
    dinp[i] += (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du) * dout[i];
  }
}

}  // namespace

template <class F>
void gelu_forward(F* out, const F* inp, std::ptrdiff_t N) {
  check_count("gelu_forward", N);
  forward(out, inp, N);
}

template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, std::ptrdiff_t N) {
  check_count("gelu_backward", N);
  backward(dinp, inp, dout, N);
}

template void gelu_forward<float>(float*, const float*, std::ptrdiff_t);
template void gelu_forward<double>(double*, const double*, std::ptrdiff_t);
template void gelu_backward<float>(float*, const float*, const float*, std::ptrdiff_t);
template void gelu_backward<double>(double*, const double*, const double*, std::ptrdiff_t);

}  // namespace strait::kernels
