// The byte n-gram baselines (model/baselines.h) against values worked out by hand for a
// short text, and against a naive computation (std::map counts, the textbook formulas) on a longer
// one.
#include "model/baselines.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/corpus.h"
#include "model/data.h"

namespace strait::sched {
namespace {

std::vector<std::uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// "abracadabra": a 5, b 2, r 2, c 1, d 1 of 11 bytes; its 10 pairs: ab 2, br 2, ra 2, ac, ca, ad,
// da. Every byte but a has one successor, and a is followed by b, b, c, d.
TEST(ByteNgramCounts, EntropiesOfAbracadabraByHand) {
  const auto text = bytes_of("abracadabra");
  const ByteNgramCounts counts(text);
  EXPECT_EQ(counts.bytes(), 11U);
  EXPECT_EQ(counts.count('a'), 5U);
  EXPECT_EQ(counts.count('a', 'b'), 2U);
  EXPECT_EQ(counts.count('b', 'c'), 0U);
  // H(X) = ln 11 - (5 ln 5 + 2 ln 2 + 2 ln 2 + 1 ln 1 + 1 ln 1) / 11.
  const double h1 = std::log(11.0) - (5 * std::log(5.0) + 4 * std::log(2.0)) / 11;
  EXPECT_NEAR(counts.unigram_entropy(), h1, 1e-14);
  // H(X_t | X_{t-1}): only a's row is uncertain, (1/2, 1/4, 1/4) = 1.5 ln 2, weighted by its 4 of
  // the 10 pairs: 0.6 ln 2.
  EXPECT_NEAR(counts.bigram_entropy(), 0.6 * std::log(2.0), 1e-14);
  EXPECT_NEAR(bits_per_byte(counts.bigram_entropy()), 0.6, 1e-14);
}

TEST(ByteNgramCounts, AddOneSmoothedProbabilitiesByHand) {
  const ByteNgramCounts counts(bytes_of("abracadabra"));
  EXPECT_NEAR(counts.unigram_log_prob('a', 1.0), std::log(6.0 / 267), 1e-14);
  EXPECT_NEAR(counts.unigram_log_prob('z', 1.0), std::log(1.0 / 267), 1e-14);
  EXPECT_NEAR(counts.bigram_log_prob('a', 'b', 1.0), std::log(3.0 / 260), 1e-14);
  EXPECT_NEAR(counts.bigram_log_prob('b', 'c', 1.0), std::log(1.0 / 258), 1e-14);
  // The text's last byte starts no pair: a's row has 4 pairs, not 5.
  EXPECT_NEAR(counts.bigram_log_prob('a', 'a', 1.0), std::log(1.0 / 260), 1e-14);
  EXPECT_NEAR(counts.bigram_log_prob('z', 'z', 1.0), std::log(1.0 / 256), 1e-14);
  EXPECT_NEAR(counts.bigram_log_prob('a', 'b', 0.5), std::log(2.5 / 132), 1e-14);
  // Smoothed distributions sum to 1 over the 256 bytes.
  double unigram = 0;
  double row_a = 0;
  for (int b = 0; b < 256; ++b) {
    unigram += std::exp(counts.unigram_log_prob(static_cast<std::uint8_t>(b), 1.0));
    row_a += std::exp(counts.bigram_log_prob('a', static_cast<std::uint8_t>(b), 0.25));
  }
  EXPECT_NEAR(unigram, 1.0, 1e-12);
  EXPECT_NEAR(row_a, 1.0, 1e-12);
}

// Train "abracadabra", held out "abcab" (5 of 16 bytes), T = 2: the eval windows sit at offsets 0
// and 2 and score the targets b, c (after a, b) and a, b (after c, a).
TEST(HeldOutBaselines, ScoreTheEvalWindowsTargetsByHand) {
  DatasetOptions options;
  options.context = 2;
  const ByteDataset dataset(ByteCorpus::from_bytes(bytes_of("abracadabraabcab"), 5.0 / 16),
                            options);
  ASSERT_EQ(dataset.eval_sequences(), 2);
  const ByteBaselines b = held_out_baselines(dataset, 1.0);
  EXPECT_EQ(b.positions, 4);
  EXPECT_EQ(b.alpha, 1.0);
  const double h1 = std::log(11.0) - (5 * std::log(5.0) + 4 * std::log(2.0)) / 11;
  EXPECT_NEAR(b.unigram_entropy, h1, 1e-14);
  EXPECT_NEAR(b.bigram_entropy, 0.6 * std::log(2.0), 1e-14);
  // q(a) = 6/267, q(b) = 3/267, q(c) = 2/267.
  const double unigram =
      -(std::log(3.0 / 267) + std::log(2.0 / 267) + std::log(6.0 / 267) + std::log(3.0 / 267)) / 4;
  EXPECT_NEAR(b.unigram_held_out, unigram, 1e-14);
  // q(b|a) = 3/260, q(c|b) = 1/258, q(a|c) = 2/257, q(b|a) = 3/260.
  const double bigram =
      -(std::log(3.0 / 260) + std::log(1.0 / 258) + std::log(2.0 / 257) + std::log(3.0 / 260)) / 4;
  EXPECT_NEAR(b.bigram_held_out, bigram, 1e-14);
}

// Skewed random bytes over a small alphabet with a first-order dependence, against the formulas
// computed from std::map counts.
TEST(ByteNgramCounts, MatchesANaiveComputationOnRandomText) {
  std::mt19937 rng(42);
  std::vector<std::uint8_t> text(20000);
  std::uint8_t prev = 'a';
  for (auto& b : text) {
    const auto r = static_cast<int>(rng() % 10);
    b = r < 4 ? static_cast<std::uint8_t>(prev + 1) : static_cast<std::uint8_t>('a' + r);
    if (b > 'z') b = 'a';
    prev = b;
  }
  std::map<int, double> uni;
  std::map<std::pair<int, int>, double> pair;
  std::map<int, double> row;
  for (std::size_t i = 0; i < text.size(); ++i) {
    uni[text[i]] += 1;
    if (i + 1 < text.size()) {
      pair[{text[i], text[i + 1]}] += 1;
      row[text[i]] += 1;
    }
  }
  const auto n = static_cast<double>(text.size());
  double h1 = 0;
  for (const auto& [b, c] : uni) h1 -= c / n * std::log(c / n);
  double h2 = 0;
  for (const auto& [ab, c] : pair) h2 -= c / (n - 1) * std::log(c / row[ab.first]);

  const ByteNgramCounts counts(text);
  EXPECT_NEAR(counts.unigram_entropy(), h1, 1e-12);
  EXPECT_NEAR(counts.bigram_entropy(), h2, 1e-12);
  EXPECT_LT(counts.bigram_entropy(), counts.unigram_entropy());  // the dependence is learnable
  for (const auto& [ab, c] : pair) {
    const double want = std::log((c + 0.5) / (row[ab.first] + 128.0));
    EXPECT_NEAR(counts.bigram_log_prob(static_cast<std::uint8_t>(ab.first),
                                       static_cast<std::uint8_t>(ab.second), 0.5),
                want, 1e-12);
  }
}

TEST(ByteNgramCounts, RefusesTooShortATextAndABadAlpha) {
  EXPECT_THROW(ByteNgramCounts(bytes_of("a")), Error);
  const ByteNgramCounts counts(bytes_of("ab"));
  EXPECT_DOUBLE_EQ(counts.bigram_entropy(), 0.0);
  EXPECT_THROW((void)counts.unigram_log_prob('a', 0.0), Error);
  EXPECT_THROW((void)counts.bigram_log_prob('a', 'b', -1.0), Error);
}

}  // namespace
}  // namespace strait::sched
