#include "model/data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/mix64.h"

namespace strait::sched {
namespace {

// Uniform in [0, n) from the splitmix64 stream seeded with `key`: values below 2^64 mod n are
// rejected so that the remaining range is a multiple of n (no modulo bias).
std::uint64_t uniform_below(std::uint64_t key, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;
  for (std::uint64_t i = 0;; ++i) {
    const std::uint64_t x = mix64(key + i * 0x9e3779b97f4a7c15ULL);
    if (x >= threshold) return x % n;
  }
}

std::int64_t eval_size_for(std::int64_t total, double fraction) {
  return static_cast<std::int64_t>(held_out_size(static_cast<std::size_t>(total), fraction));
}

// Smallest single-text corpus (one file, or from_bytes) whose train and eval parts both hold
// `need` bytes under the corpus's own rounding rule. Both part sizes are non-decreasing in the
// total (the eval part grows by 0 or 1 byte per byte added), so a linear search upwards from a
// lower bound is exact. The bound: both parts together hold the total, so it is at least 2 * need;
// eval = floor(n f) >= need needs n >= need / f, and train = n - floor(n f) >= need needs
// n > (need - 1) / (1 - f); the -2 absorbs the rounding of the floating-point quotients.
std::int64_t min_total_size(std::int64_t need, double fraction) {
  const auto lower = static_cast<std::int64_t>(std::max(
      {2.0 * static_cast<double>(need), std::floor(static_cast<double>(need) / fraction) - 2.0,
       std::floor(static_cast<double>(need - 1) / (1.0 - fraction)) - 2.0}));
  for (std::int64_t n = std::max<std::int64_t>(lower, 2);; ++n) {
    const std::int64_t e = eval_size_for(n, fraction);
    if (e >= need && n - e >= need) return n;
  }
}

void check_output(const char* what, std::span<std::int32_t> out, int count, int context) {
  const std::size_t want = static_cast<std::size_t>(count) * static_cast<std::size_t>(context);
  if (out.size() != want) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("ByteDataset: {} has {} elements, expected count * context = {} * {} "
                            "= {}",
                            what, out.size(), count, context, want));
  }
}

void fill(std::span<const std::uint8_t> part, std::int64_t offset, int context, std::size_t row,
          std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  const auto T = static_cast<std::size_t>(context);
  const std::uint8_t* src = part.data() + offset;
  std::int32_t* in = inputs.data() + row * T;
  std::int32_t* tg = targets.data() + row * T;
  for (std::size_t t = 0; t < T; ++t) {
    in[t] = src[t];
    tg[t] = src[t + 1];
  }
}

}  // namespace

ByteDataset::ByteDataset(ByteCorpus corpus, const DatasetOptions& options)
    : corpus_(std::move(corpus)), context_(options.context), seed_(options.seed) {
  if (context_ < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("context length {} must be at least 1", context_));
  }
  if (options.max_eval_sequences < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("max_eval_sequences {} must be >= 0 (0 = every eval window)",
                            options.max_eval_sequences));
  }
  const std::int64_t need = std::int64_t{context_} + 1;
  const auto train = static_cast<std::int64_t>(corpus_.train().size());
  const auto eval = static_cast<std::int64_t>(corpus_.eval().size());
  if (train < need || eval < need) {
    const double percent = corpus_.eval_fraction() * 100.0;
    const std::int64_t single = min_total_size(need, corpus_.eval_fraction());
    const std::size_t files = corpus_.files().size();
    std::string split, needed;
    if (files <= 1) {
      split = fmt::format("the last {:g}%", percent);
      needed = fmt::format("the corpus must have at least {} bytes", single);
    } else {
      // Several files each hold out their own tail, so no one total size is necessary or
      // sufficient: name what each part lacks, and the size that works as a single file.
      split = fmt::format("the last {:g}% of each of its {} files, joined by the separator",
                          percent, files);
      std::vector<std::string> short_parts;
      if (train < need) {
        short_parts.push_back(fmt::format("the training part is {} bytes short", need - train));
      }
      if (eval < need) {
        short_parts.push_back(fmt::format("the held-out part is {} bytes short", need - eval));
      }
      needed = fmt::format("{} (as a single file it would need at least {} bytes)",
                           fmt::join(short_parts, " and "), single);
    }
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("data corpus {} is too short for context length {}: it has {} bytes, "
                    "{} for training and {} held out for eval ({}), and each part needs "
                    "at least {} bytes, so {}: pass a larger --data corpus or a shorter "
                    "context",
                    corpus_.source(), context_, train + eval, train, eval, split, need, needed));
  }
  const std::int64_t dense = (eval - 1) / context_;
  if (options.max_eval_sequences == 0 || options.max_eval_sequences >= dense) {
    eval_sequences_ = dense;
  } else {
    eval_sequences_ = options.max_eval_sequences;
    eval_dense_ = false;
  }
}

std::int64_t ByteDataset::train_offset(std::int64_t step, std::int64_t seq) const {
  if (step < 0 || seq < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("ByteDataset: step {} and sequence {} must be >= 0", step, seq));
  }
  const std::uint64_t key = mix64(mix64(mix64(seed_) ^ static_cast<std::uint64_t>(step)) ^
                                  static_cast<std::uint64_t>(seq));
  const auto starts = static_cast<std::uint64_t>(corpus_.train().size()) -
                      static_cast<std::uint64_t>(context_);  // offsets 0 .. size - (T+1)
  return static_cast<std::int64_t>(uniform_below(key, starts));
}

void ByteDataset::fill_train(std::int64_t step, std::int64_t first_seq, int count,
                             std::span<std::int32_t> inputs,
                             std::span<std::int32_t> targets) const {
  if (count < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("ByteDataset::fill_train: count {} must be >= 0", count));
  }
  check_output("inputs", inputs, count, context_);
  check_output("targets", targets, count, context_);
  for (int i = 0; i < count; ++i) {
    fill(corpus_.train(), train_offset(step, first_seq + i), context_, static_cast<std::size_t>(i),
         inputs, targets);
  }
}

std::int64_t ByteDataset::eval_offset(std::int64_t index) const {
  if (index < 0 || index >= eval_sequences_) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("ByteDataset: eval sequence {} is outside [0, {})", index, eval_sequences_));
  }
  if (eval_dense_) return index * context_;
  if (eval_sequences_ == 1) return 0;
  // index * span / (n - 1) without overflowing: split span into quotient and remainder.
  const auto span = static_cast<std::int64_t>(corpus_.eval().size()) - context_ - 1;
  const std::int64_t n1 = eval_sequences_ - 1;
  return index * (span / n1) + index * (span % n1) / n1;
}

void ByteDataset::fill_eval(std::int64_t first_seq, int count, std::span<std::int32_t> inputs,
                            std::span<std::int32_t> targets) const {
  if (count < 0 || first_seq < 0 || first_seq + count > eval_sequences_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("ByteDataset::fill_eval: sequences [{}, {}) are outside the eval set "
                            "[0, {})",
                            first_seq, first_seq + count, eval_sequences_));
  }
  check_output("inputs", inputs, count, context_);
  check_output("targets", targets, count, context_);
  for (int i = 0; i < count; ++i) {
    fill(corpus_.eval(), eval_offset(first_seq + i), context_, static_cast<std::size_t>(i), inputs,
         targets);
  }
}

}  // namespace strait::sched
