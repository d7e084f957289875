#include "kernels/crossentropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

TEST(CrossEntropy, ForwardMatchesNaiveSoftmax) {
  std::mt19937_64 rng(2);
  const int N = 9, V = 13;
  const auto logits = random_vector(rng, N * V, -4.0, 4.0);
  const auto targets = random_tokens(rng, N, V);
  std::vector<double> probs(N * V), losses(N);
  const double mean =
      crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  double ref_mean = 0;
  for (int n = 0; n < N; ++n) {
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(logits[n * V + v]);
    for (int v = 0; v < V; ++v)
      EXPECT_NEAR(probs[n * V + v], std::exp(logits[n * V + v]) / z, 1e-15);
    const double loss = -std::log(std::exp(logits[n * V + targets[n]]) / z);
    EXPECT_NEAR(losses[n], loss, 1e-13);
    ref_mean += loss / N;
  }
  EXPECT_NEAR(mean, ref_mean, 1e-13);
}

TEST(CrossEntropy, StableForHugeLogitsAndInPlace) {
  // Naive exp(1000) overflows; the loss of the losing class is 1000 + log(1 + e^-1000) = 1000.
  std::vector<double> logits = {1000.0, 0.0, 0.0, 1000.0};
  const std::vector<std::int32_t> targets = {1, 1};
  std::vector<double> losses(2);
  const double mean =
      crossentropy_forward(losses.data(), logits.data(), logits.data(), targets.data(), 2, 2);
  EXPECT_DOUBLE_EQ(losses[0], 1000.0);
  EXPECT_NEAR(losses[1], 0.0, 1e-300);
  EXPECT_DOUBLE_EQ(mean, 500.0);
  EXPECT_DOUBLE_EQ(logits[0], 1.0);  // probabilities, written in place
  EXPECT_EQ(logits[1], 0.0);
  std::vector<float> lf = {88.0F, -88.0F, 3.0F};
  std::vector<float> pf(3), lossf(1);
  const std::vector<std::int32_t> t1 = {1};
  crossentropy_forward(lossf.data(), pf.data(), lf.data(), t1.data(), 1, 3);
  EXPECT_NEAR(lossf[0], 176.0F, 1e-3F);
  EXPECT_TRUE(std::isfinite(lossf[0]));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  for_each_shape({{1, 2}, {1, 5}, {6, 3}, {4, 17}}, [](int N, int V) {
    std::mt19937_64 rng(N * 7 + V);
    auto logits = random_vector(rng, N * V, -3.0, 3.0);
    const auto targets = random_tokens(rng, N, V);
    const double scale = 0.37;
    std::vector<double> probs(N * V), losses(N);
    auto loss = [&] {
      return scale * N *
             crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    };
    loss();
    const auto saved_probs = probs;
    const auto d0 = random_vector(rng, logits.size());
    auto d = d0;
    crossentropy_backward(d.data(), saved_probs.data(), targets.data(), scale, N, V);
    EXPECT_LT(relative_error(accumulated(d, d0), numeric_gradient(logits, loss)), 1e-6)
        << "N=" << N << " V=" << V;
  });
}

TEST(CrossEntropy, SingleClassHasZeroLossAndGradient) {
  std::vector<double> logits = {3.5, -2.0}, probs(2), losses(2), d = {0.25, -0.5};
  const std::vector<std::int32_t> targets = {0, 0};
  EXPECT_EQ(crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), 2, 1),
            0.0);
  crossentropy_backward(d.data(), probs.data(), targets.data(), 1.0, 2, 1);
  EXPECT_EQ(d, (std::vector<double>{0.25, -0.5}));
}

TEST(CrossEntropy, FloatMatchesDouble) {
  std::mt19937_64 rng(12);
  const int N = 64, V = 256;
  const auto logits = random_vector(rng, N * V, -8.0, 8.0);
  const auto targets = random_tokens(rng, N, V);
  std::vector<double> probs(N * V), losses(N), d(N * V);
  const double mean =
      crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  crossentropy_backward(d.data(), probs.data(), targets.data(), 1.0 / N, N, V);
  const std::vector<float> lf(logits.begin(), logits.end());
  std::vector<float> pf(N * V), lossf(N), df(N * V);
  const double meanf =
      crossentropy_forward(lossf.data(), pf.data(), lf.data(), targets.data(), N, V);
  crossentropy_backward(df.data(), pf.data(), targets.data(), 1.0F / N, N, V);
  EXPECT_NEAR(meanf, mean, 1e-5 * mean);
  EXPECT_LT(relative_error(std::vector<double>(df.begin(), df.end()), d), 1e-5);
}

TEST(CrossEntropy, RejectsTargetsOutsideVocabulary) {
  std::vector<double> logits(6), probs(6), losses(2);
  const std::vector<std::int32_t> targets = {0, 3};
  try {
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), 2, 3);
    FAIL() << "target 3 with V = 3 must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strait::kernels
