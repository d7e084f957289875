#include "kernels/crossentropy.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/fast_math.h"

namespace strait::kernels {
namespace {

void check(const char* op, const std::int32_t* targets, int N, int V) {
  if (N < 0 || V <= 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: bad shape N={} V={}: need N >= 0 and V > 0", op, N, V));
  }
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0 || targets[n] >= V) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("kernels::{}: target {} at position {} is outside the vocabulary "
                              "[0, {}): check the data and the model's vocab size",
                              op, targets[n], n, V));
    }
  }
}

}  // namespace

template <class F>
double crossentropy_forward(F* losses, F* probs, const F* logits, const std::int32_t* targets,
                            int N, int V) {
  check("crossentropy_forward", targets, N, V);
  const auto v = static_cast<std::size_t>(V);
  double total = 0;
  for (std::size_t n = 0; n < static_cast<std::size_t>(N); ++n) {
    const F* l = logits + n * v;
    F* p = probs + n * v;
    const F target_logit = l[targets[n]];  // read before p (which may be l) is overwritten
    F mx = l[0];
    for (std::size_t i = 1; i < v; ++i) mx = l[i] > mx ? l[i] : mx;
    const F sum = detail::exp_shifted_sum(p, l, v, mx);
    const F inv = F(1) / sum;
    for (std::size_t i = 0; i < v; ++i) p[i] *= inv;
    const F loss = std::log(sum) + mx - target_logit;
    losses[n] = loss;
    total += static_cast<double>(loss);
  }
  return N == 0 ? 0.0 : total / N;
}

template <class F>
void crossentropy_backward(F* dlogits, const F* probs, const std::int32_t* targets, F scale, int N,
                           int V) {
  check("crossentropy_backward", targets, N, V);
  const auto v = static_cast<std::size_t>(V);
  for (std::size_t n = 0; n < static_cast<std::size_t>(N); ++n) {
    const F* p = probs + n * v;
    F* d = dlogits + n * v;
    for (std::size_t i = 0; i < v; ++i) d[i] += scale * p[i];
    d[targets[n]] -= scale;
  }
}

template double crossentropy_forward<float>(float*, float*, const float*, const std::int32_t*, int,
                                            int);
template double crossentropy_forward<double>(double*, double*, const double*, const std::int32_t*,
                                             int, int);
template void crossentropy_backward<float>(float*, const float*, const std::int32_t*, float, int,
                                           int);
template void crossentropy_backward<double>(double*, const double*, const std::int32_t*, double,
                                            int, int);

}  // namespace strait::kernels
