#include "kernels/encoder.h"

#include <fmt/format.h>

#include <cstddef>

#include "core/error.h"

namespace strait::kernels {
namespace {

void check(const char* op, const std::int32_t* tokens, int B, int T, int C, int V) {
  if (B < 0 || T < 0 || C < 0 || V <= 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: bad shape B={} T={} C={} V={}: B, T, C must be >= 0 and "
                            "V > 0",
                            op, B, T, C, V));
  }
  const auto n = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  for (std::size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("kernels::{}: token {} at position {} (b={}, t={}) is outside the "
                              "vocabulary [0, {}): check the tokenizer and the model's vocab size",
                              op, tokens[i], i, i / static_cast<std::size_t>(T),
                              i % static_cast<std::size_t>(T), V));
    }
  }
}

// Calls fn(row, t) for every position in batch order: row = b * T + t.
template <class Fn>
void for_each_position(int B, int T, Fn&& fn) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      fn(static_cast<std::size_t>(b) * static_cast<std::size_t>(T) + static_cast<std::size_t>(t),
         static_cast<std::size_t>(t));
    }
  }
}

}  // namespace

template <class F>
void encoder_forward(F* out, const std::int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                     int C, int V) {
  check("encoder_forward", tokens, B, T, C, V);
  const auto c = static_cast<std::size_t>(C);
  for_each_position(B, T, [&](std::size_t row, std::size_t t) {
    F* o = out + row * c;
    const F* e = wte + static_cast<std::size_t>(tokens[row]) * c;
    const F* p = wpe + t * c;
    for (std::size_t i = 0; i < c; ++i) o[i] = e[i] + p[i];
  });
}

template <class F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const std::int32_t* tokens, int B, int T,
                      int C, int V) {
  check("encoder_backward", tokens, B, T, C, V);
  const auto c = static_cast<std::size_t>(C);
  for_each_position(B, T, [&](std::size_t row, std::size_t t) {
    const F* d = dout + row * c;
    F* e = dwte + static_cast<std::size_t>(tokens[row]) * c;
    F* p = dwpe + t * c;
    for (std::size_t i = 0; i < c; ++i) {
      e[i] += d[i];
      p[i] += d[i];
    }
  });
}

template void encoder_forward<float>(float*, const std::int32_t*, const float*, const float*, int,
                                     int, int, int);
template void encoder_forward<double>(double*, const std::int32_t*, const double*, const double*,
                                      int, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const std::int32_t*, int, int,
                                      int, int);
template void encoder_backward<double>(double*, double*, const double*, const std::int32_t*, int,
                                       int, int, int);

}  // namespace strait::kernels
