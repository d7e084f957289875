#include "kernels/residual.h"

#include "kernels/count_check.h"

namespace strait::kernels {

using detail::check_count;

template <class F>
void residual_forward(F* out, const F* a, const F* b, std::ptrdiff_t N) {
  check_count("residual_forward", N);
  for (std::ptrdiff_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

template <class F>
void residual_backward(F* da, F* db, const F* dout, std::ptrdiff_t N) {
  check_count("residual_backward", N);
  for (std::ptrdiff_t i = 0; i < N; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template void residual_forward<float>(float*, const float*, const float*, std::ptrdiff_t);
template void residual_forward<double>(double*, const double*, const double*, std::ptrdiff_t);
template void residual_backward<float>(float*, float*, const float*, std::ptrdiff_t);
template void residual_backward<double>(double*, double*, const double*, std::ptrdiff_t);

}  // namespace strait::kernels
