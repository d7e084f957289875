// Blocks: how a buffer is cut into one block per rank (counts and offsets in elements, or in bytes
// when the caller's element is a byte), for the ring and v-collectives. Blocks are packed: block
// r starts where block r-1 ends (MPI's v-collectives with displacements = prefix sums).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace strait::comm {

struct Blocks {
  std::vector<std::size_t> count;   // per block
  std::vector<std::size_t> offset;  // prefix sums of count

  // `total` over `parts` blocks as evenly as possible: the first total % parts blocks are one
  // longer, so any total (0 included) works.
  static Blocks even(std::size_t total, int parts) {
    const auto p = static_cast<std::size_t>(parts);
    std::vector<std::size_t> counts(p, total / p);
    for (std::size_t i = 0; i < total % p; ++i) ++counts[i];
    return packed(counts);
  }
  // Blocks of the given sizes, packed; `scale` multiplies each (elements to bytes).
  static Blocks packed(std::span<const std::size_t> counts, std::size_t scale = 1) {
    Blocks b;
    b.count.reserve(counts.size());
    b.offset.reserve(counts.size());
    std::size_t at = 0;
    for (const std::size_t c : counts) {
      b.offset.push_back(at);
      b.count.push_back(c * scale);
      at += c * scale;
    }
    return b;
  }
  // `parts` blocks of `each`.
  static Blocks uniform(std::size_t each, int parts) {
    return packed(std::vector<std::size_t>(static_cast<std::size_t>(parts), each));
  }

  [[nodiscard]] std::size_t total() const {
    return count.empty() ? 0 : offset.back() + count.back();
  }
  [[nodiscard]] std::size_t largest() const {
    return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
  }
};

}  // namespace strait::comm
