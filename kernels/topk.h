// Top-k sparsification kernels (CPU, scalar: selection is memory- and branch-bound, SIMD buys
// little): keep the k elements of largest magnitude, ties broken by the lower index.
//
// Wire: k pairs (u32 index, f32 value), 8 bytes each, in increasing index order, unaligned,
// little-endian. Values are copied exactly, so compensated - decode is exactly zero on the kept
// elements and the input elsewhere (what error feedback stores).
// Cost: one pass to copy magnitudes (and find NaN/Inf), nth_element (linear on average), one pass
// to emit; O(count) scratch.
// Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for size mismatches, k > count, count >= 2^32 (indices are u32), and on
// decode for an index out of range or not increasing (bytes from a peer are checked).
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "kernels/quantize.h"

namespace strait::kernels {

// k = ceil(fraction * count) for 0 < fraction <= 1, at least 1 when count > 0. A product within
// 1e-9 relative of an integer counts as that integer (0.1 * 30 is 3.0000000000000004 in double).
std::size_t topk_count(double fraction, std::size_t count);

inline constexpr std::size_t kTopkPairBytes = 8;

// Returns the index of the first NaN or +-Inf (out unspecified), else nullopt.
[[nodiscard]] std::optional<std::size_t> topk_encode(std::span<const float> in, std::size_t k,
                                                     std::span<std::byte> out);
// out.size() is the dense count; every element not in the pairs is zero (Accumulate::No) or left
// as it was (Accumulate::Yes).
void topk_decode(std::span<const std::byte> in, std::span<float> out, Accumulate acc);

}  // namespace strait::kernels
