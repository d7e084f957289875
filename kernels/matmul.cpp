#include "kernels/matmul.h"

#include <fmt/format.h>

#include <cstddef>

#include "core/error.h"
#include "kernels/gemm.h"

namespace strait::kernels {
namespace {

void check(const char* op, int N, int C, int OC) {
  if (N < 0 || C < 0 || OC < 0) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("kernels::{}: bad shape N={} C={} OC={}: sizes must be >= 0", op, N, C, OC));
  }
}

}  // namespace

template <class F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
  check("matmul_forward", N, C, OC);
  const auto oc = static_cast<std::size_t>(OC);
  F beta = 0;
  if (bias != nullptr) {
    // Seed every row with the bias and let the GEMM add onto it.
    for (std::size_t r = 0; r < static_cast<std::size_t>(N); ++r) {
      F* o = out + r * oc;
      for (std::size_t j = 0; j < oc; ++j) o[j] = bias[j];
    }
    beta = 1;
  }
  gemm<F>(Trans::No, Trans::Yes, N, OC, C, F(1), inp, C, weight, C, beta, out, OC);
}

template <class F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC) {
  check("matmul_backward", N, C, OC);
  if (dinp != nullptr) {
    gemm<F>(Trans::No, Trans::No, N, C, OC, F(1), dout, OC, weight, C, F(1), dinp, C);
  }
  if (dweight != nullptr) {
    gemm<F>(Trans::Yes, Trans::No, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);
  }
  if (dbias != nullptr) {
    const auto oc = static_cast<std::size_t>(OC);
    for (std::size_t r = 0; r < static_cast<std::size_t>(N); ++r) {
      const F* d = dout + r * oc;
      for (std::size_t j = 0; j < oc; ++j) dbias[j] += d[j];
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);

}  // namespace strait::kernels
