#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/gemm.h"
#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

struct Shape {
  int N, C, OC;
};

std::vector<double> naive_linear(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>* bias, Shape s) {
  std::vector<double> out(s.N * s.OC);
  for (int n = 0; n < s.N; ++n) {
    for (int o = 0; o < s.OC; ++o) {
      double acc = bias != nullptr ? (*bias)[o] : 0.0;
      for (int c = 0; c < s.C; ++c) acc += x[n * s.C + c] * w[o * s.C + c];
      out[n * s.OC + o] = acc;
    }
  }
  return out;
}

TEST(Matmul, ForwardMatchesNaiveTripleLoop) {
  for (const Shape s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{10, 4, 2}, Shape{33, 65, 17}}) {
    std::mt19937_64 rng(s.N + 7 * s.C);
    const auto x = random_vector(rng, s.N * s.C);
    const auto w = random_vector(rng, s.OC * s.C);
    const auto bias = random_vector(rng, s.OC);
    std::vector<double> out(s.N * s.OC);
    matmul_forward(out.data(), x.data(), w.data(), bias.data(), s.N, s.C, s.OC);
    EXPECT_LT(relative_error(out, naive_linear(x, w, &bias, s)), 1e-14);
    matmul_forward<double>(out.data(), x.data(), w.data(), nullptr, s.N, s.C, s.OC);
    EXPECT_LT(relative_error(out, naive_linear(x, w, nullptr, s)), 1e-14);

    const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()),
        bf(bias.begin(), bias.end());
    std::vector<float> outf(out.size());
    matmul_forward(outf.data(), xf.data(), wf.data(), bf.data(), s.N, s.C, s.OC);
    EXPECT_LT(
        relative_error(std::vector<double>(outf.begin(), outf.end()), naive_linear(x, w, &bias, s)),
        1e-6);
  }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  for (const Shape s : {Shape{1, 1, 1}, Shape{1, 6, 3}, Shape{4, 3, 5}, Shape{7, 8, 8}}) {
    std::mt19937_64 rng(s.N * 13 + s.OC);
    auto x = random_vector(rng, s.N * s.C);
    auto w = random_vector(rng, s.OC * s.C);
    auto bias = random_vector(rng, s.OC);
    const auto r = random_vector(rng, s.N * s.OC);
    std::vector<double> out(r.size());
    auto loss = [&] {
      matmul_forward(out.data(), x.data(), w.data(), bias.data(), s.N, s.C, s.OC);
      return dot(out, r);
    };
    SeededGrad dx(rng, x.size());  // drawn in this order: dx, dw, db
    SeededGrad dw(rng, w.size());
    SeededGrad db(rng, bias.size());
    matmul_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), s.N, s.C, s.OC);
    EXPECT_LT(relative_error(dx.added(), numeric_gradient(x, loss)), 1e-6);
    EXPECT_LT(relative_error(dw.added(), numeric_gradient(w, loss)), 1e-6);
    EXPECT_LT(relative_error(db.added(), numeric_gradient(bias, loss)), 1e-6);

    // Null gradients are skipped; the others are still computed.
    auto dw_only = dw.seed;
    matmul_backward<double>(nullptr, dw_only.data(), nullptr, r.data(), x.data(), w.data(), s.N,
                            s.C, s.OC);
    EXPECT_LT(relative_error(dw_only, dw.grad), 1e-14);
  }
}

TEST(Gemm, TransposesAndStridesMatchNaive) {
  std::mt19937_64 rng(21);
  const int m = 5, n = 4, k = 3, pad = 2;
  for (const Trans ta : {Trans::No, Trans::Yes}) {
    for (const Trans tb : {Trans::No, Trans::Yes}) {
      // Stored shapes with extra columns, to check the leading dimensions are honoured.
      const int a_rows = ta == Trans::No ? m : k, a_cols = ta == Trans::No ? k : m;
      const int b_rows = tb == Trans::No ? k : n, b_cols = tb == Trans::No ? n : k;
      const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
      const auto a = random_vector(rng, a_rows * lda);
      const auto b = random_vector(rng, b_rows * ldb);
      const auto c0 = random_vector(rng, m * ldc);
      auto c = c0;
      gemm(ta, tb, m, n, k, 0.5, a.data(), lda, b.data(), ldb, 2.0, c.data(), ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          for (int p = 0; p < k; ++p) {
            const double av = ta == Trans::No ? a[i * lda + p] : a[p * lda + i];
            const double bv = tb == Trans::No ? b[p * ldb + j] : b[j * ldb + p];
            acc += av * bv;
          }
          EXPECT_NEAR(c[i * ldc + j], 0.5 * acc + 2.0 * c0[i * ldc + j], 1e-13);
        }
        for (int j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);  // padding kept
      }
    }
  }
  // k = 0: c = beta * c.
  std::vector<double> c = {1.0, 2.0};
  gemm<double>(Trans::No, Trans::No, 1, 2, 0, 1.0, nullptr, 1, nullptr, 2, 3.0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{3.0, 6.0}));
}

}  // namespace
}  // namespace strait::kernels
