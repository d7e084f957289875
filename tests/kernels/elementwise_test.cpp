// GELU and residual add.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/residual.h"
#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

TEST(Gelu, ForwardMatchesTanhFormulaAndApproximatesExactGelu) {
  std::vector<double> x;
  for (int i = -800; i <= 800; ++i) x.push_back(i / 100.0);
  std::vector<double> y(x.size());
  gelu_forward(y.data(), x.data(), static_cast<std::ptrdiff_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double tanh_form =
        0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], tanh_form, 1e-15 * (1.0 + std::fabs(v)));
    // The approximation is within 1e-3 of the exact x * Phi(x) (Hendrycks & Gimpel).
    const double exact = 0.5 * v * std::erfc(-v / std::numbers::sqrt2);
    EXPECT_NEAR(y[i], exact, 1e-3) << "x=" << v;
  }
  // In place.
  auto z = x;
  gelu_forward(z.data(), z.data(), static_cast<std::ptrdiff_t>(z.size()));
  EXPECT_EQ(z, y);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{37}, std::size_t{256}}) {
    std::mt19937_64 rng(n);
    auto x = random_vector(rng, n, -4.0, 4.0);
    const auto r = random_vector(rng, n);
    std::vector<double> y(n);
    const auto N = static_cast<std::ptrdiff_t>(n);
    auto loss = [&] {
      gelu_forward(y.data(), x.data(), N);
      return dot(y, r);
    };
    const auto dx0 = random_vector(rng, n);
    auto dx = dx0;
    gelu_backward(dx.data(), x.data(), r.data(), N);
    EXPECT_LT(relative_error(accumulated(dx, dx0), numeric_gradient(x, loss)), 1e-6);
  }
}

TEST(Gelu, FloatMatchesDouble) {
  std::mt19937_64 rng(4);
  const std::size_t n = 4096;
  const auto x = random_vector(rng, n, -6.0, 6.0);
  const auto r = random_vector(rng, n);
  const auto N = static_cast<std::ptrdiff_t>(n);
  std::vector<double> y(n), dx(n);
  gelu_forward(y.data(), x.data(), N);
  gelu_backward(dx.data(), x.data(), r.data(), N);
  const std::vector<float> xf(x.begin(), x.end()), rf(r.begin(), r.end());
  std::vector<float> yf(n), dxf(n);
  gelu_forward(yf.data(), xf.data(), N);
  gelu_backward(dxf.data(), xf.data(), rf.data(), N);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(yf[i], y[i], 1e-6 * (1.0 + std::fabs(y[i])));
    EXPECT_NEAR(dxf[i], dx[i], 1e-6 * (1.0 + std::fabs(dx[i])));
  }
}

TEST(Gelu, FloatGivesTheSameBitsAtEveryPositionAndHandlesExtremes) {
  // The float loops vectorise; their scalar tail must give each value the same bits, whatever
  // its position. 4 + 3 values: one vector and a tail, then shifted by one.
  const std::vector<float> values = {-3.7F, -0.0F, 1e-6F, 0.73F, 2.5F, -11.0F, 6.0F};
  for (std::size_t shift = 0; shift < values.size(); ++shift) {
    std::vector<float> x(values.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = values[(i + shift) % values.size()];
    std::vector<float> y(x.size()), dx(x.size(), 0.0F), ones(x.size(), 1.0F);
    const auto N = static_cast<std::ptrdiff_t>(x.size());
    gelu_forward(y.data(), x.data(), N);
    gelu_backward(dx.data(), x.data(), ones.data(), N);
    for (std::size_t i = 0; i < x.size(); ++i) {
      float y1 = 0, dx1 = 0;
      const float one = 1.0F;
      gelu_forward(&y1, &x[i], 1);
      gelu_backward(&dx1, &x[i], &one, 1);
      EXPECT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(y1)) << x[i];
      EXPECT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(dx1)) << x[i];
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {inf, -inf, 100.0F, -100.0F, std::nanf("")};
  std::vector<float> y(x.size()), dx(x.size(), 0.0F), ones(x.size(), 1.0F);
  gelu_forward(y.data(), x.data(), static_cast<std::ptrdiff_t>(x.size()));
  gelu_backward(dx.data(), x.data(), ones.data(), static_cast<std::ptrdiff_t>(x.size()));
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[2], 100.0F);
  EXPECT_EQ(dx[2], 1.0F);
  EXPECT_LE(std::fabs(y[3]), 1e-30F);  // -100 Phi(-100) underflows
  EXPECT_LE(std::fabs(dx[3]), 1e-30F);
  EXPECT_TRUE(std::isnan(y[4]) && std::isnan(dx[4]));
}

TEST(Residual, ForwardAddsAndBackwardAccumulatesIntoBoth) {
  std::mt19937_64 rng(8);
  const std::size_t n = 50;
  const auto N = static_cast<std::ptrdiff_t>(n);
  auto a = random_vector(rng, n);
  auto b = random_vector(rng, n);
  const auto r = random_vector(rng, n);
  std::vector<double> out(n);
  residual_forward(out.data(), a.data(), b.data(), N);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), N);
    return dot(out, r);
  };
  const auto da0 = random_vector(rng, n);
  const auto db0 = random_vector(rng, n);
  auto da = da0;
  auto db = db0;
  residual_backward(da.data(), db.data(), r.data(), N);
  EXPECT_LT(relative_error(accumulated(da, da0), numeric_gradient(a, loss)), 1e-6);
  EXPECT_LT(relative_error(accumulated(db, db0), numeric_gradient(b, loss)), 1e-6);
  // In place (the residual stream): out == a.
  auto c = a;
  residual_forward(c.data(), c.data(), b.data(), N);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(c[i], a[i] + b[i]);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), of(n);
  residual_forward(of.data(), af.data(), bf.data(), N);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(of[i], af[i] + bf[i]);
}

}  // namespace
}  // namespace strait::kernels
