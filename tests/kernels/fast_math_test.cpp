// kernels/fast_math.h: the polynomial exp against libm's double exp (2 ulp), its SSE2 and scalar
// forms bit for bit, the fixed-order lane sum against a double sum, and the softmax helper.
#include "kernels/fast_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace strait::kernels::detail {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
std::int64_t ulps(float a, float b) {
  const auto ia = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a));
  const auto ib = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(b));
  return ia > ib ? ia - ib : ib - ia;
}

TEST(FastMath, ExpIsWithinTwoUlpOfTheTrueValueOverItsRange) {
  std::int64_t worst = 0;
  float worst_at = 0;
  for (float t = -87.0F; t <= 88.0F; t += 0.00731F) {
    const auto want = static_cast<float>(std::exp(static_cast<double>(t)));
    const std::int64_t d = ulps(exp_clamped(t), want);
    if (d > worst) {
      worst = d;
      worst_at = t;
    }
  }
  EXPECT_LE(worst, 2) << "at t = " << worst_at;
  // Clamped ends, and NaN.
  EXPECT_EQ(exp_clamped(-1000.0F), exp_clamped(-87.0F));
  EXPECT_EQ(exp_clamped(1000.0F), exp_clamped(88.0F));
  EXPECT_TRUE(std::isnormal(exp_clamped(-std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(exp_clamped(std::nanf(""))));
  EXPECT_EQ(exp_clamped(0.0F), 1.0F);
}

#if defined(__SSE2__)
TEST(FastMath, SseAndScalarExpGiveTheSameBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-100.0F, 100.0F);
  for (int n = 0; n < 100000; ++n) {
    alignas(16) float in[4] = {dist(rng), dist(rng), dist(rng), dist(rng)};
    alignas(16) float out[4];
    _mm_store_ps(out, exp_clamped(_mm_load_ps(in)));
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[k]),
                std::bit_cast<std::uint32_t>(exp_clamped(in[k])))
          << in[k];
    }
  }
}
#else
TEST(FastMath, SseAndScalarExpGiveTheSameBits) {
  GTEST_SKIP() << "no SSE2 on this CPU";
}
#endif

TEST(FastMath, LaneSumIsASumInAFixedOrder) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  for (const std::size_t n : {0UL, 1UL, 7UL, 8UL, 9UL, 128UL, 1001UL}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    double exact = 0;
    for (const float v : x) exact += v;
    const float s = lane_sum<float>(n, [&](std::size_t i) { return x[i]; });
    EXPECT_NEAR(s, exact, 1e-6 * (1.0 + static_cast<double>(n))) << n;
    // Lane k takes terms k, k + 8, ...; the lanes are added pairwise.
    float acc[8] = {};
    for (std::size_t i = 0; i < n; ++i) acc[i % 8] += x[i];
    const float want =
        ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(s), std::bit_cast<std::uint32_t>(want)) << n;
  }
}

TEST(FastMath, ExpShiftedSumIsASoftmaxNumeratorInPlaceOrNot) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-20.0F, 5.0F);
  for (const std::size_t n : {1UL, 3UL, 4UL, 5UL, 256UL}) {
    std::vector<float> in(n), out(n);
    for (float& v : in) v = dist(rng);
    float mx = in[0];
    for (const float v : in) mx = v > mx ? v : mx;
    const float sum = exp_shifted_sum(out.data(), in.data(), n, mx);
    double exact = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // Of the float difference, which is what a float softmax exponentiates.
      const double e = std::exp(static_cast<double>(in[i] - mx));
      EXPECT_NEAR(out[i], e, 3e-7 * e) << i;
      exact += e;
    }
    EXPECT_NEAR(sum, exact, 1e-6 * exact);
    auto inplace = in;
    exp_shifted_sum(inplace.data(), inplace.data(), n, mx);
    EXPECT_EQ(inplace, out);
  }
}

}  // namespace
}  // namespace strait::kernels::detail
