// Near-equal partitions of a range of elements, as the algorithms cut their buffers: part i of
// `parts` over `total` elements holds total / parts elements, one more for the first total % parts
// parts, so any count works (0 included: every part is then empty) and sizes differ by at most 1.
#pragma once

#include <algorithm>
#include <cstddef>

namespace strait::comm {

struct Part {
  std::size_t offset = 0;  // in elements, from the start of the range
  std::size_t count = 0;   // elements
};

constexpr Part part(std::size_t total, std::size_t parts, std::size_t i) noexcept {
  const std::size_t base = total / parts;
  const std::size_t extra = total % parts;
  return Part{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// The parts i .. j - 1 as one range (they are contiguous).
constexpr Part parts(std::size_t total, std::size_t n, std::size_t i, std::size_t j) noexcept {
  const std::size_t begin = part(total, n, i).offset;
  const std::size_t end = j < n ? part(total, n, j).offset : total;
  return Part{begin, end - begin};
}

}  // namespace strait::comm
