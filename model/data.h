// ByteDataset: deterministic training batches and a fixed evaluation set over a ByteCorpus.
//
// Training: sequence g (0-based, within the global batch) of step s starts at an offset of the
// train part that is a pure function of (seed, s, g): a splitmix64 stream keyed by the three
// (Steele et al., "Fast splittable pseudorandom number generators", OOPSLA 2014), reduced to
// [0, train_size - (T+1)] without bias by rejection. However the global batch of G sequences is
// split over data-parallel replicas and microbatches (each asking for its own [first_seq,
// first_seq + count) slice), the same G sequences are seen.
// Evaluation: windows of the held-out part (corpus.h: every file's tail) at offsets 0, T, 2T, ...,
// so every eval byte after the first is predicted exactly once; max_eval_sequences > 0 instead
// spreads that many windows evenly from the first to the last possible offset.
// A sequence is T+1 consecutive bytes b: inputs are b[0, T), targets b[1, T+1), as int32 token ids
// in [0, 256). fill_* write `count` sequences, row-major [count, T], into inputs and targets.
// Thread-safety: immutable after construction; fill_* are safe to call concurrently.
// Errors: InvalidArgument for context < 1, a corpus whose train or eval part is shorter than T+1
// bytes (the message gives the size needed: the exact total for a single-file corpus; for several
// files, the bytes each part lacks and the exact total as one file), negative step or sequence
// indices, eval indices past eval_sequences(), and output spans whose size is not count * T.
#pragma once

#include <cstdint>
#include <span>

#include "model/corpus.h"

namespace strait::sched {

struct DatasetOptions {
  int context = 256;                    // T, tokens per sequence
  std::uint64_t seed = 0;               // selects the training sequences
  std::int64_t max_eval_sequences = 0;  // 0: every non-overlapping eval window
};

class ByteDataset {
 public:
  ByteDataset(ByteCorpus corpus, const DatasetOptions& options);

  [[nodiscard]] const ByteCorpus& corpus() const { return corpus_; }
  [[nodiscard]] int context() const { return context_; }
  [[nodiscard]] std::uint64_t seed() const { return seed_; }

  // Offset into corpus().train() of sequence `seq` of step `step`.
  [[nodiscard]] std::int64_t train_offset(std::int64_t step, std::int64_t seq) const;
  void fill_train(std::int64_t step, std::int64_t first_seq, int count,
                  std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const;

  [[nodiscard]] std::int64_t eval_sequences() const { return eval_sequences_; }
  // Offset into corpus().eval() of eval sequence `index`.
  [[nodiscard]] std::int64_t eval_offset(std::int64_t index) const;
  void fill_eval(std::int64_t first_seq, int count, std::span<std::int32_t> inputs,
                 std::span<std::int32_t> targets) const;

 private:
  ByteCorpus corpus_;
  int context_;
  std::uint64_t seed_;
  std::int64_t eval_sequences_ = 0;
  bool eval_dense_ = true;  // windows at multiples of T rather than spread evenly
};

}  // namespace strait::sched
