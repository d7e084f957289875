#include "kernels/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <limits>

#include "core/error.h"
#include "kernels/fast_math.h"
#include "kernels/gemm.h"

namespace strait::kernels {
namespace {

void check(const char* op, int B, int T, int C, int NH) {
  if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: bad shape B={} T={} C={} NH={}: sizes must be >= 0, "
                            "NH > 0 and C divisible by NH",
                            op, B, T, C, NH));
  }
}

std::size_t sz(int x) {
  return static_cast<std::size_t>(x);
}

// What both passes derive from a checked shape: the head size, the qkv row stride, the score
// scale 1 / sqrt(hs) and the size of one head's T x T scores.
template <class F>
struct Dims {
  int hs;
  int C3;
  F scale;
  std::size_t tt;
};

template <class F>
Dims<F> dims(const char* op, int B, int T, int C, int NH) {
  check(op, B, T, C, NH);
  const int hs = C / NH;
  return {hs, 3 * C, F(1) / std::sqrt(static_cast<F>(hs)), sz(T) * sz(T)};
}

}  // namespace

template <class F>
void attention_forward(F* out, F* preatt, F* att, const F* qkv, int B, int T, int C, int NH) {
  const auto [hs, C3, scale, tt] = dims<F>("attention_forward", B, T, C, NH);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const F* q = qkv + sz(b) * sz(T) * sz(C3) + sz(h) * sz(hs);
      const F* k = q + C;
      const F* v = q + 2 * static_cast<std::ptrdiff_t>(C);
      F* a = att + (sz(b) * sz(NH) + sz(h)) * tt;
      // Full T x T scores: the masked upper half costs a little extra arithmetic, but one GEMM is
      // faster than T dot-product loops.
      gemm<F>(Trans::No, Trans::Yes, T, T, hs, scale, q, C3, k, C3, F(0), a, T);
      if (preatt != nullptr) {
        F* p = preatt + (sz(b) * sz(NH) + sz(h)) * tt;
        for (std::size_t i = 0; i < sz(T); ++i) {
          for (std::size_t j = 0; j < sz(T); ++j) {
            p[i * sz(T) + j] = j <= i ? a[i * sz(T) + j] : -std::numeric_limits<F>::infinity();
          }
        }
      }
      for (std::size_t i = 0; i < sz(T); ++i) {
        F* row = a + i * sz(T);
        F mx = row[0];
        for (std::size_t j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
        const F inv = F(1) / detail::exp_shifted_sum(row, row, i + 1, mx);
        for (std::size_t j = 0; j <= i; ++j) row[j] *= inv;
        for (std::size_t j = i + 1; j < sz(T); ++j) row[j] = 0;
      }
      F* o = out + sz(b) * sz(T) * sz(C) + sz(h) * sz(hs);
      gemm<F>(Trans::No, Trans::No, T, hs, T, F(1), a, T, v, C3, F(0), o, C);
    }
  }
}

template <class F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B,
                        int T, int C, int NH) {
  const auto [hs, C3, scale, tt] = dims<F>("attention_backward", B, T, C, NH);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const std::size_t qoff = sz(b) * sz(T) * sz(C3) + sz(h) * sz(hs);
      const F* q = qkv + qoff;
      const F* k = q + C;
      const F* v = q + 2 * static_cast<std::ptrdiff_t>(C);
      F* dq = dqkv + qoff;
      F* dk = dq + C;
      F* dv = dq + 2 * static_cast<std::ptrdiff_t>(C);
      const F* a = att + (sz(b) * sz(NH) + sz(h)) * tt;
      const F* dO = dout + sz(b) * sz(T) * sz(C) + sz(h) * sz(hs);
      F* s = scratch;
      // datt = dO . V^T ; dV += att^T . dO
      gemm<F>(Trans::No, Trans::Yes, T, T, hs, F(1), dO, C, v, C3, F(0), s, T);
      gemm<F>(Trans::Yes, Trans::No, T, hs, T, F(1), a, T, dO, C, F(1), dv, C3);
      // Softmax backward in place: ds = att * (datt - sum_j att * datt). Masked entries have
      // att = 0 and so get ds = 0, which keeps the GEMMs below causal.
      for (std::size_t i = 0; i < sz(T); ++i) {
        F* row = s + i * sz(T);
        const F* arow = a + i * sz(T);
        const F dot = detail::lane_sum<F>(i + 1, [&](std::size_t j) { return arow[j] * row[j]; });
        for (std::size_t j = 0; j <= i; ++j) row[j] = arow[j] * (row[j] - dot);
        for (std::size_t j = i + 1; j < sz(T); ++j) row[j] = 0;
      }
      // dQ += scale * ds . K ; dK += scale * ds^T . Q
      gemm<F>(Trans::No, Trans::No, T, hs, T, scale, s, T, k, C3, F(1), dq, C3);
      gemm<F>(Trans::Yes, Trans::No, T, hs, T, scale, s, T, q, C3, F(1), dk, C3);
    }
  }
}

template void attention_forward<float>(float*, float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, double*, const double*, int, int, int,
                                        int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int);

}  // namespace strait::kernels
