#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

// A LayerNorm's input (N rows of C values in [lo, hi)) and its weight and bias, drawn in that
// order.
struct Problem {
  std::vector<double> x, w, b;
};

Problem draw(std::mt19937_64& rng, int N, int C, double lo, double hi) {
  Problem p;
  p.x = random_vector(rng, N * C, lo, hi);
  p.w = random_vector(rng, C);
  p.b = random_vector(rng, C);
  return p;
}

TEST(LayerNorm, ForwardMatchesNaiveReference) {
  std::mt19937_64 rng(3);
  const int N = 7, C = 13;
  const auto [x, w, b] = draw(rng, N, C, -3.0, 5.0);
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - m) * (x[n * C + c] - m);
    var /= C;
    const double s = 1.0 / std::sqrt(var + 1e-5);
    EXPECT_NEAR(mean[n], m, 1e-14);
    EXPECT_NEAR(rstd[n], s, 1e-12 * s);
    for (int c = 0; c < C; ++c) {
      EXPECT_NEAR(out[n * C + c], (x[n * C + c] - m) * s * w[c] + b[c], 1e-12);
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for_each_shape({{1, 3}, {6, 8}, {5, 17}, {2, 1}}, [](int N, int C) {
    std::mt19937_64 rng(N * 31 + C);
    auto x = random_vector(rng, N * C, -2.0, 2.0);
    auto w = random_vector(rng, C);
    auto b = random_vector(rng, C);
    const auto r = random_vector(rng, N * C);
    std::vector<double> out(N * C), mean(N), rstd(N);
    auto loss = [&] {
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
      return dot(out, r);
    };
    loss();  // mean and rstd at the unperturbed point, for backward
    const auto saved_mean = mean;
    const auto saved_rstd = rstd;
    SeededGrad dx(rng, x.size());  // drawn in this order: dx, dw, db
    SeededGrad dw(rng, w.size());
    SeededGrad db(rng, b.size());
    layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(),
                       saved_mean.data(), saved_rstd.data(), N, C);
    EXPECT_LT(relative_error(dx.added(), numeric_gradient(x, loss)), 1e-6)
        << "N=" << N << " C=" << C;
    EXPECT_LT(relative_error(dw.added(), numeric_gradient(w, loss)), 1e-6);
    EXPECT_LT(relative_error(db.added(), numeric_gradient(b, loss)), 1e-6);
  });
}

TEST(LayerNorm, BackwardWithoutParameterGradientsGivesTheSameBits) {
  // A zero-bubble B passes null dweight / dbias: dinp must be bit for bit the full backward's, and
  // a gradient asked for alone must equal the one computed beside the others.
  const int N = 7;
  const int C = 33;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const auto x = fill(N * C), w = fill(C), b = fill(C), dout = fill(N * C), dx0 = fill(N * C);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  auto dx_full = dx0;
  std::vector<float> dw_full(C, 0.5F), db_full(C, -0.25F);
  layernorm_backward(dx_full.data(), dw_full.data(), db_full.data(), dout.data(), x.data(),
                     w.data(), mean.data(), rstd.data(), N, C);
  auto dx_only = dx0;
  layernorm_backward<float>(dx_only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
  EXPECT_EQ(0, std::memcmp(dx_only.data(), dx_full.data(), dx_full.size() * sizeof(float)));
  EXPECT_NE(dx_only, dx0);
  auto dx_w = dx0;
  std::vector<float> dw_only(C, 0.5F), db_only(C, -0.25F);
  layernorm_backward<float>(dx_w.data(), dw_only.data(), nullptr, dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
  layernorm_backward<float>(dx_w.data(), nullptr, db_only.data(), dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
  EXPECT_EQ(0, std::memcmp(dw_only.data(), dw_full.data(), dw_full.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(db_only.data(), db_full.data(), db_full.size() * sizeof(float)));
}

TEST(LayerNorm, FloatMatchesDouble) {
  std::mt19937_64 rng(9);
  const int N = 16, C = 128;
  const auto [x, w, b] = draw(rng, N, C, -4.0, 4.0);
  const auto r = random_vector(rng, N * C);
  std::vector<double> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end()),
      rf(r.begin(), r.end());
  std::vector<float> outf(N * C), meanf(N), rstdf(N), dxf(N * C), dwf(C), dbf(C);
  layernorm_forward(outf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(), bf.data(), N, C);
  layernorm_backward(dxf.data(), dwf.data(), dbf.data(), rf.data(), xf.data(), wf.data(),
                     meanf.data(), rstdf.data(), N, C);
  auto widen = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_LT(relative_error(widen(outf), out), 1e-6);
  EXPECT_LT(relative_error(widen(dxf), dx), 1e-5);
  EXPECT_LT(relative_error(widen(dwf), dw), 1e-5);
  EXPECT_LT(relative_error(widen(dbf), db), 1e-6);
}

}  // namespace
}  // namespace strait::kernels
