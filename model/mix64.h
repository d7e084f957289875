// mix64: splitmix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijection of 64-bit words with full avalanche, so nearby keys
// (seeds, steps, indices) give unrelated outputs. The model's initialisation, the data sampler and
// the text sampler derive their streams from it, so it must never change: runs are reproducible
// across versions. Thread-safety: pure.
#pragma once

#include <cstdint>

namespace strait::sched {

constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

}  // namespace strait::sched
