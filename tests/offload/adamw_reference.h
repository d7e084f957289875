// Shared by the AdamW state tests: exact comparison, random inputs, decay groups whose borders
// fall inside chunks, and the in-memory reference (kernels::adamw_step over whole groups) that
// every offloaded state must match bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/adamw.h"
#include "offload/adamw_state_file.h"

namespace strait::offload::testing {

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Three groups with different decay whose borders fall inside chunks (and an empty one for n < 3).
inline std::vector<DecayGroup> three_groups(std::size_t n) {
  const std::size_t a = n / 3;
  const std::size_t b = n / 2;
  return {{0, a, 0.1}, {a, b - a, 0.0}, {b, n - b, 0.01}};
}

// The reference: the same kernel over whole groups, all in memory.
struct InMemory {
  std::vector<float> p, m, v;
  void step(const std::vector<float>& g, const std::vector<DecayGroup>& groups,
            const kernels::AdamWHyper& hyper, std::int64_t t) {
    for (const DecayGroup& grp : groups) {
      kernels::AdamWHyper h = hyper;
      h.weight_decay = grp.weight_decay;
      const auto sub = [&](auto& vec) { return std::span(vec).subspan(grp.offset, grp.count); };
      kernels::adamw_step(sub(p), std::span<const float>(g).subspan(grp.offset, grp.count), sub(m),
                          sub(v), h, t);
    }
  }
};

}  // namespace strait::offload::testing
