// Picking the next token from a model's logits, as nanoGPT's sample.py: divide the logits by a
// temperature, keep the top k, and draw from their softmax; or greedy (the argmax).
//
// Determinism: draw i of a sampler is a pure function of (seed, i, logits): its uniform number is
// splitmix64 (Steele, Lea, Flood 2014) keyed by seed and i, not a stateful stream, and the rest is
// computed in double in a fixed order. So the same weights give the same text whichever ranks
// layout produced them, and every replica that samples with the same seed writes the same bytes.
// Ties: the top k are the k largest logits, equal logits ordered by index (exactly k are kept,
// where nanoGPT keeps every logit equal to the k-th); greedy takes the lowest index of the
// maximum. So top-k 1 is greedy.
// Thread-safety: a Sampler is immutable; next() is const and safe from any thread.
// Errors: InvalidArgument for a temperature that is not finite and > 0, top_k < 1, empty logits, a
// NaN logit or an infinite largest logit.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace strait::sched {

struct SamplingOptions {
  bool greedy = false;
  double temperature = 0.8;  // nanoGPT sample.py's defaults
  int top_k = 200;           // more than the vocabulary: all of it
  std::uint64_t seed = 1337;

  void validate() const;
  // "greedy" or "top-k 200, temperature 0.8, seed 1337".
  [[nodiscard]] std::string describe() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // The token of draw `draw` (0, 1, 2, ... for the bytes of one sample).
  [[nodiscard]] std::int32_t next(std::span<const float> logits, std::uint64_t draw) const;

  // The draw's uniform number in [0, 1) (53 bits), exposed for tests.
  [[nodiscard]] double uniform(std::uint64_t draw) const;

 private:
  SamplingOptions options_;
};

}  // namespace strait::sched
