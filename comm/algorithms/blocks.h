// Blocks: a buffer cut into one block per rank of given sizes (counts and offsets in elements, or
// in bytes when the caller's element is a byte), for the ring and v-collectives. Blocks are
// packed: block r starts where block r-1 ends (MPI's v-collectives with displacements = prefix
// sums).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace strait::comm {

struct Blocks {
  std::vector<std::size_t> count;   // per block
  std::vector<std::size_t> offset;  // prefix sums of count

  // Blocks of the given sizes, packed.
  static Blocks packed(std::span<const std::size_t> counts) {
    Blocks b;
    b.count.reserve(counts.size());
    b.offset.reserve(counts.size());
    std::size_t at = 0;
    for (const std::size_t c : counts) {
      b.offset.push_back(at);
      b.count.push_back(c);
      at += c;
    }
    return b;
  }
  [[nodiscard]] std::size_t total() const {
    return count.empty() ? 0 : offset.back() + count.back();
  }
  [[nodiscard]] std::size_t largest() const {
    return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
  }
};

}  // namespace strait::comm
