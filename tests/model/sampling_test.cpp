// Sampling the next token (model/sampling.h): top-k 1 is greedy, the draws follow
// softmax(logits / T) restricted to the top k (chi-square against probabilities computed here), and
// a seed fixes the bytes.
#include "model/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace strait::sched {
namespace {

SamplingOptions topk(int k, double temperature, std::uint64_t seed = 1337) {
  SamplingOptions o;
  o.top_k = k;
  o.temperature = temperature;
  o.seed = seed;
  return o;
}

std::vector<float> random_logits(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.0F, 2.0F);
  std::vector<float> out(n);
  for (auto& l : out) l = normal(rng);
  return out;
}

// softmax(logits / T) over the k largest (distinct logits here), zero elsewhere: sorted copies,
// not the sampler's partial sort.
std::vector<double> expected_probabilities(const std::vector<float>& logits, int k, double t) {
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const double kth = sorted[static_cast<std::size_t>(std::min<int>(k, sorted.size())) - 1];
  std::vector<double> p(logits.size(), 0.0);
  double z = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= kth) {
      p[i] = std::exp(static_cast<double>(logits[i]) / t);
      z += p[i];
    }
  }
  for (auto& x : p) x /= z;
  return p;
}

TEST(Sampler, TopKOneIsGreedy) {
  std::mt19937 rng(1);
  SamplingOptions greedy;
  greedy.greedy = true;
  const Sampler argmax(greedy);
  const Sampler top1(topk(1, 0.8, 99));
  for (std::uint64_t draw = 0; draw < 500; ++draw) {
    std::vector<float> logits = random_logits(rng, 256);
    if (draw % 5 == 0) logits[17] = logits[200] = 50.0F;  // a tie: the lower index wins
    const auto want =
        static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(argmax.next(logits, draw), want);
    EXPECT_EQ(top1.next(logits, draw), want) << "draw " << draw;
  }
}

// Chi-square statistic of `counts` against `p` over the cells with p > 0; cells with p == 0 must
// be empty.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi2 = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the top k";
      continue;
    }
    const double e = p[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(Sampler, DrawsFollowTheTemperedSoftmaxOfTheTopK) {
  std::mt19937 rng(7);
  const std::vector<float> logits = random_logits(rng, 12);
  struct Case {
    int k;
    double t;
    double critical;  // chi-square at p = 0.001 with k - 1 degrees of freedom
  };
  for (const Case c : {Case{4, 0.8, 16.27}, Case{12, 1.5, 31.26}, Case{200, 0.5, 31.26}}) {
    const Sampler sampler(topk(c.k, c.t, 2024));
    const int n = 40000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(sampler.next(logits, i))];
    const auto p = expected_probabilities(logits, c.k, c.t);
    EXPECT_LT(chi_square(counts, p, n), c.critical) << "k " << c.k << ", T " << c.t;
  }
}

TEST(Sampler, LowTemperatureApproachesGreedyAndHighApproachesUniform) {
  const std::vector<float> logits = {1.0F, 3.0F, 2.0F, 2.9F};
  const Sampler cold(topk(200, 0.001));  // 0.1 apart: exp(-100)
  const Sampler hot(topk(200, 1000.0));
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 4000; ++i) {
    EXPECT_EQ(cold.next(logits, i), 1);
    ++counts[static_cast<std::size_t>(hot.next(logits, i))];
  }
  for (const int c : counts) EXPECT_NEAR(c, 1000, 150);
}

TEST(Sampler, AFixedSeedGivesTheSameTokensAndAnotherSeedOthers) {
  std::mt19937 rng(3);
  std::vector<std::vector<float>> steps(200);
  for (auto& logits : steps) logits = random_logits(rng, 256);
  const auto run = [&](std::uint64_t seed) {
    const Sampler s(topk(200, 0.8, seed));
    std::vector<std::int32_t> out(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) out[i] = s.next(steps[i], i);
    return out;
  };
  const auto a = run(1337);
  EXPECT_EQ(a, run(1337));
  const auto b = run(1338);
  EXPECT_NE(a, b);
  // A draw depends only on (seed, draw index, logits): drawing out of order changes nothing.
  const Sampler s(topk(200, 0.8, 1337));
  for (std::size_t i = steps.size(); i-- > 0;) EXPECT_EQ(s.next(steps[i], i), a[i]);
}

TEST(Sampler, UniformNumbersLieInZeroOne) {
  const Sampler s(topk(5, 1.0, 0));
  double sum = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const double u = s.uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
}

TEST(Sampler, RefusesBadOptionsAndLogits) {
  EXPECT_THROW(Sampler(topk(200, 0.0)), Error);
  EXPECT_THROW(Sampler(topk(200, -1.0)), Error);
  EXPECT_THROW(Sampler(topk(200, std::numeric_limits<double>::infinity())), Error);
  EXPECT_THROW(Sampler(topk(0, 0.8)), Error);
  SamplingOptions greedy = topk(0, 0.0);
  greedy.greedy = true;
  EXPECT_NO_THROW(Sampler{greedy});  // greedy ignores temperature and k
  const Sampler s(topk(3, 0.8));
  EXPECT_THROW((void)s.next({}, 0), Error);
  const std::vector<float> nan = {1.0F, std::nanf("")};
  EXPECT_THROW((void)s.next(nan, 0), Error);
  EXPECT_EQ(topk(200, 0.8, 1337).describe(), "top-k 200, temperature 0.8, seed 1337");
  EXPECT_EQ(greedy.describe(), "greedy");
}

}  // namespace
}  // namespace strait::sched
