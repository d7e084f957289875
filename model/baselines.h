// Byte n-gram baselines for `strait train`'s held-out loss: what a model that only knew byte
// frequencies (unigram) or byte-pair frequencies (bigram) of the training split would score, so
// the transformer's loss can be read against them.
//
// ByteNgramCounts counts the bytes and the adjacent byte pairs of a training text. From them:
//  - unigram_entropy(): the plug-in entropy H(X) = -sum_b p(b) ln p(b), p(b) = c(b) / N;
//  - bigram_entropy(): the plug-in conditional entropy H(X_t | X_{t-1}) = -sum_{a,b} p(a, b)
//    ln p(b | a), with p(a, b) = c(a, b) / (N - 1) over the N - 1 pairs and p(b | a) =
//    c(a, b) / c(a, .), c(a, .) the pairs that start with a (not c(a): the text's last byte starts
//    no pair);
//  - unigram_log_prob / bigram_log_prob: add-alpha (Laplace for alpha = 1) smoothed models,
//    q(b) = (c(b) + alpha) / (N + 256 alpha) and q(b | a) = (c(a, b) + alpha) / (c(a, .) +
//    256 alpha), which give every byte a non-zero probability, so they can score unseen text.
// The plug-in entropies describe the training split itself (a model's loss on the training text
// at best); the smoothed models' cross-entropy on held-out bytes is what compares with a model's
// held-out loss.
//
// held_out_baselines(dataset, alpha) scores the smoothed models on exactly the positions the
// trainer's held-out loss averages over: every target of every eval window of the dataset
// (data.h: targets eval[o + 1, o + T] of the window at offset o, each predicted from the byte
// before it).
// All figures are in nats per byte; bits per byte = nats / ln 2 (bits_per_byte()).
// Thread-safety: immutable after construction.
// Errors: InvalidArgument for a training text shorter than 2 bytes (no pair) or alpha <= 0.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "model/data.h"

namespace strait::sched {

class ByteNgramCounts {
 public:
  explicit ByteNgramCounts(std::span<const std::uint8_t> train);

  [[nodiscard]] std::uint64_t bytes() const { return total_; }
  [[nodiscard]] std::uint64_t count(std::uint8_t b) const { return unigram_[b]; }
  [[nodiscard]] std::uint64_t count(std::uint8_t a, std::uint8_t b) const {
    return bigram_[index(a, b)];
  }

  [[nodiscard]] double unigram_entropy() const;
  [[nodiscard]] double bigram_entropy() const;
  [[nodiscard]] double unigram_log_prob(std::uint8_t b, double alpha) const;
  [[nodiscard]] double bigram_log_prob(std::uint8_t prev, std::uint8_t b, double alpha) const;

 private:
  static std::size_t index(std::uint8_t a, std::uint8_t b) { return std::size_t{a} * 256U + b; }

  std::uint64_t total_ = 0;
  std::array<std::uint64_t, 256> unigram_{};
  std::array<std::uint64_t, 256> row_{};  // c(a, .): pairs that start with a
  std::vector<std::uint64_t> bigram_;     // c(a, b) at index(a, b); 512 KiB, so on the heap
};

struct ByteBaselines {
  double alpha = 1.0;             // the smoothing of the cross-entropies
  std::int64_t positions = 0;     // held-out targets scored
  double unigram_entropy = 0.0;   // training split, plug-in, nats per byte
  double bigram_entropy = 0.0;    // H(X_t | X_{t-1}) of the training split, nats per byte
  double unigram_held_out = 0.0;  // cross-entropy on the held-out positions, nats per byte
  double bigram_held_out = 0.0;   // likewise, conditioned on the previous byte
};

[[nodiscard]] ByteBaselines held_out_baselines(const ByteDataset& dataset, double alpha = 1.0);

[[nodiscard]] double bits_per_byte(double nats);

}  // namespace strait::sched
