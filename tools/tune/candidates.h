// What `strait tune` times for allreduce: every allreduce algorithm registered in this build
// (comm/algorithms/selection.cpp's table; a segmented one once per segment size), and every
// codec through allreduce_compressed (comm/compress/codec.h) but "none", which is the plain
// allreduce (what allreduce_compressed with codec "auto" runs for "none"). A new algorithm or
// codec is a candidate as soon as it is registered; its accuracy level is one line in budget.cpp.
// Thread-safety: pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/algorithms/selection.h"

namespace strait::tools::tune {

struct Candidate {
  std::string label{};          // "ring@seg=8K", "int8": as printed and in the config
  comm::Selection algorithm{};  // an algorithm candidate: the algorithm and its parameters
  std::string codec{};          // a codec candidate: the spec passed to allreduce_compressed
  int level = 0;                // a codec's accuracy level (budget.h); 0 for algorithms
  [[nodiscard]] bool is_codec() const noexcept { return !codec.empty(); }
};

// The algorithms first (registration order; segmented ones once per entry of `segments`, 0 for
// unsegmented), then the codecs in accuracy order.
std::vector<Candidate> allreduce_candidates(std::span<const std::uint64_t> segments);

}  // namespace strait::tools::tune
