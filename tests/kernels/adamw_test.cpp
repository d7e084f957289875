#include "kernels/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace strait::kernels {
namespace {

// The update written out in double exactly as the paper / torch.optim.AdamW state it.
struct Reference {
  std::vector<double> p, m, v;

  void step(const std::vector<float>& g, const AdamWHyper& h, int t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] -= h.lr * h.weight_decay * p[i];
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(h.beta1, t));
      const double v_hat = v[i] / (1 - std::pow(h.beta2, t));
      p[i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
  }
};

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Whether a and b hold the same bits element by element, which is stricter than equal values
// (-0 equals +0) and holds for NaNs too. On failure, names the first element that differs.
::testing::AssertionResult BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " and " << b.size();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto bits_a = std::bit_cast<std::uint32_t>(a[i]);
    const auto bits_b = std::bit_cast<std::uint32_t>(b[i]);
    if (bits_a != bits_b) {
      return ::testing::AssertionFailure()
             << "element " << i << " differs: " << a[i] << " (bits " << bits_a << ") vs " << b[i]
             << " (bits " << bits_b << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  std::mt19937 rng(11);
  const std::size_t n = 1037;  // not a multiple of any vector width
  for (const AdamWHyper h :
       {AdamWHyper{1e-2, 0.9, 0.999, 1e-8, 0.1}, AdamWHyper{3e-4, 0.8, 0.95, 1e-6, 0.0},
        AdamWHyper{1e-1, 0.0, 0.5, 1e-3, 1.0}}) {
    std::vector<float> p = random_vector(n, rng, 1.0F);
    std::vector<float> m(n, 0.0F), v(n, 0.0F);
    Reference ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
    std::vector<double> g_max(n, 0.0);  // bounds |m| and sqrt(v): the scale of their rounding
    const int steps = 12;
    for (int t = 1; t <= steps; ++t) {
      // Gradients of mixed scale, with exact zeros, so eps and tiny v matter somewhere.
      std::vector<float> g = random_vector(n, rng, t % 2 == 0 ? 1e-3F : 2.0F);
      for (std::size_t i = 0; i < n; i += 17) g[i] = 0.0F;
      adamw_step(p, g, m, v, h, t);
      ref.step(g, h, t);
      for (std::size_t i = 0; i < n; ++i) {
        g_max[i] = std::max(g_max[i], std::fabs(static_cast<double>(g[i])));
        // fp32 rounding accumulates about one ulp of p per step; the update itself is ~lr.
        const double tol_p = 4e-7 * t * (1.0 + std::fabs(ref.p[i]));
        ASSERT_NEAR(p[i], ref.p[i], tol_p) << "lr=" << h.lr << " t=" << t << " i=" << i;
        // b1 m and (1 - b1) g may cancel: the error scales with the terms, not the result.
        ASSERT_NEAR(m[i], ref.m[i], 2e-7 * t * g_max[i]) << "t=" << t << " i=" << i;
        ASSERT_NEAR(v[i], ref.v[i], 2e-7 * t * g_max[i] * g_max[i]) << "t=" << t << " i=" << i;
      }
    }
  }
}

TEST(AdamW, FirstStepIsSignTimesLrPlusDecay) {
  // Closed form at t = 1 from zero moments: m_hat = g and sqrt(v_hat) = |g|, so
  // p1 = p0 (1 - lr wd) - lr g / (|g| + eps). Without bias correction the step would be
  // (1 - b1) / sqrt(1 - b2) = 3.16 times larger.
  const AdamWHyper h{0.05, 0.9, 0.999, 1e-8, 0.2};
  std::vector<float> p = {1.0F, -2.0F, 0.5F, 3.0F, -0.25F};
  const std::vector<float> g = {0.3F, -4.0F, 1e-3F, -7.0F, 2.0F};
  std::vector<float> m(p.size()), v(p.size());
  const std::vector<float> p0 = p;
  adamw_step(p, g, m, v, h, 1);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expect =
        p0[i] * (1 - h.lr * h.weight_decay) - h.lr * g[i] / (std::fabs(g[i]) + h.eps);
    EXPECT_NEAR(p[i], expect, 1e-6) << i;
  }
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  // With zero gradients the moments stay zero and only the decay acts: p_t = p0 (1 - lr wd)^t.
  // (Adam with L2 would fold wd * p into g and move p by about lr per step instead.)
  const AdamWHyper h{0.01, 0.9, 0.999, 1e-8, 0.5};
  std::vector<float> p = {1.0F, -3.0F, 100.0F};
  const std::vector<float> p0 = p;
  const std::vector<float> g(p.size(), 0.0F);
  std::vector<float> m(p.size()), v(p.size());
  for (int t = 1; t <= 50; ++t) adamw_step(p, g, m, v, h, t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expect = p0[i] * std::pow(1 - h.lr * h.weight_decay, 50);
    EXPECT_NEAR(p[i], expect, 1e-5 * std::fabs(expect)) << i;
    EXPECT_EQ(m[i], 0.0F);
    EXPECT_EQ(v[i], 0.0F);
  }
}

TEST(AdamW, SplittingTheRangeIsBitIdentical) {
  // Offload streams ranges in chunks: any split must give the same bits as one call.
  std::mt19937 rng(5);
  const std::size_t n = 4099;
  const AdamWHyper h{2e-3, 0.9, 0.99, 1e-8, 0.05};
  std::vector<float> p1 = random_vector(n, rng, 1.0F), p2 = p1;
  std::vector<float> m1(n), v1(n), m2(n), v2(n);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, rng, 0.5F);
    adamw_step(p1, g, m1, v1, h, t);
    const std::span<float> sp(p2), sm(m2), sv(v2);
    const std::span<const float> sg(g);
    for (const auto& [lo, len] :
         {std::pair<std::size_t, std::size_t>{0, 3}, {3, 1030}, {1033, 3066}}) {
      adamw_step(sp.subspan(lo, len), sg.subspan(lo, len), sm.subspan(lo, len), sv.subspan(lo, len),
                 h, t);
    }
  }
  EXPECT_TRUE(BitIdentical(p1, p2));
  EXPECT_TRUE(BitIdentical(m1, m2));
  EXPECT_TRUE(BitIdentical(v1, v2));
}

TEST(AdamW, RejectsBadArguments) {
  std::vector<float> p(4), g(4), m(4), v(4), short_v(3);
  const AdamWHyper ok;
  const auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;  // no throw
  };
  EXPECT_EQ(code_of([&] { adamw_step(p, g, m, v, ok, 0); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { adamw_step(p, g, m, short_v, ok, 1); }), ErrorCode::InvalidArgument);
  for (AdamWHyper bad :
       {AdamWHyper{-1e-3}, AdamWHyper{1e-3, 1.0}, AdamWHyper{1e-3, 0.9, -0.1},
        AdamWHyper{1e-3, 0.9, 0.999, -1.0},
        AdamWHyper{1e-3, 0.9, 0.999, 1e-8, std::numeric_limits<double>::quiet_NaN()}}) {
    EXPECT_EQ(code_of([&] { adamw_step(p, g, m, v, bad, 1); }), ErrorCode::InvalidArgument);
  }
  adamw_step(std::span<float>{}, {}, {}, {}, ok, 1);  // empty range: nothing to do
}

}  // namespace
}  // namespace strait::kernels
