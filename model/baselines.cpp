#include "model/baselines.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace strait::sched {
namespace {

// -sum_i (c_i / n) ln(c_i / n) over a row of counts that sum to n (0 ln 0 = 0).
double entropy_of(std::span<const std::uint64_t> counts, std::uint64_t n) {
  if (n == 0) return 0.0;
  const double total = static_cast<double>(n);
  double h = 0.0;
  for (const std::uint64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / total;
    h -= p * std::log(p);
  }
  return h;
}

void check_alpha(double alpha) {
  if (!(alpha > 0.0)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("smoothing alpha {} must be > 0 (1: add-one / Laplace)", alpha));
  }
}

}  // namespace

ByteNgramCounts::ByteNgramCounts(std::span<const std::uint8_t> train)
    : total_(train.size()), bigram_(std::size_t{256} * 256U, 0) {
  if (train.size() < 2) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("byte n-gram baselines need at least 2 training bytes, got {}", train.size()));
  }
  for (std::size_t i = 0; i < train.size(); ++i) {
    ++unigram_[train[i]];
    if (i + 1 < train.size()) {
      ++row_[train[i]];
      ++bigram_[index(train[i], train[i + 1])];
    }
  }
}

double ByteNgramCounts::unigram_entropy() const {
  return entropy_of(unigram_, total_);
}

double ByteNgramCounts::bigram_entropy() const {
  // H(X_t | X_{t-1}) = sum_a p(a .) H(X_t | X_{t-1} = a), the rows weighted by their share of the
  // N - 1 pairs.
  const double pairs = static_cast<double>(total_ - 1);
  double h = 0.0;
  for (std::size_t a = 0; a < 256; ++a) {
    if (row_[a] == 0) continue;
    const std::span<const std::uint64_t> row(bigram_.data() + a * 256U, 256);
    h += static_cast<double>(row_[a]) / pairs * entropy_of(row, row_[a]);
  }
  return h;
}

double ByteNgramCounts::unigram_log_prob(std::uint8_t b, double alpha) const {
  check_alpha(alpha);
  return std::log((static_cast<double>(unigram_[b]) + alpha) /
                  (static_cast<double>(total_) + 256.0 * alpha));
}

double ByteNgramCounts::bigram_log_prob(std::uint8_t prev, std::uint8_t b, double alpha) const {
  check_alpha(alpha);
  return std::log((static_cast<double>(bigram_[index(prev, b)]) + alpha) /
                  (static_cast<double>(row_[prev]) + 256.0 * alpha));
}

ByteBaselines held_out_baselines(const ByteDataset& dataset, double alpha) {
  check_alpha(alpha);
  const ByteNgramCounts counts(dataset.corpus().train());
  ByteBaselines out;
  out.alpha = alpha;
  out.unigram_entropy = counts.unigram_entropy();
  out.bigram_entropy = counts.bigram_entropy();
  // The eval windows' targets, as the trainer scores them (data.h): eval[o + 1, o + T].
  const std::span<const std::uint8_t> eval = dataset.corpus().eval();
  const auto t = static_cast<std::size_t>(dataset.context());
  double unigram = 0.0;
  double bigram = 0.0;
  for (std::int64_t k = 0; k < dataset.eval_sequences(); ++k) {
    const auto o = static_cast<std::size_t>(dataset.eval_offset(k));
    for (std::size_t i = o + 1; i <= o + t; ++i) {
      unigram -= counts.unigram_log_prob(eval[i], alpha);
      bigram -= counts.bigram_log_prob(eval[i - 1], eval[i], alpha);
      ++out.positions;
    }
  }
  if (out.positions > 0) {
    out.unigram_held_out = unigram / static_cast<double>(out.positions);
    out.bigram_held_out = bigram / static_cast<double>(out.positions);
  }
  return out;
}

double bits_per_byte(double nats) {
  return nats / std::numbers::ln2;
}

}  // namespace strait::sched
