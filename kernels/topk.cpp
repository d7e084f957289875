#include "kernels/topk.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "core/error.h"

namespace strait::kernels {
namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffU;
constexpr std::uint32_t kInfBits = 0x7f800000U;

void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

std::size_t topk_count(double fraction, std::size_t count) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    invalid(fmt::format("kernels::topk_count: fraction {} is not in (0, 1]", fraction));
  }
  if (count == 0) return 0;
  const double p = fraction * static_cast<double>(count);
  const double nearest = std::round(p);
  const double k = std::abs(p - nearest) <= 1e-9 * std::max(1.0, p) ? nearest : std::ceil(p);
  return std::clamp(static_cast<std::size_t>(k), std::size_t{1}, count);
}

std::optional<std::size_t> topk_encode(std::span<const float> in, std::size_t k,
                                       std::span<std::byte> out) {
  const std::size_t n = in.size();
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    invalid(
        fmt::format("kernels::topk_encode: {} elements; indices are u32, so split the tensor", n));
  }
  if (k > n) invalid(fmt::format("kernels::topk_encode: k = {} > count = {}", k, n));
  if (out.size() != k * kTopkPairBytes) {
    invalid(fmt::format("kernels::topk_encode: out holds {} bytes, {} pairs need {}", out.size(), k,
                        k * kTopkPairBytes));
  }
  if (k == 0) {
    for (std::size_t i = 0; i < n; ++i) {
      if ((std::bit_cast<std::uint32_t>(in[i]) & kAbsMask) >= kInfBits) return i;
    }
    return std::nullopt;
  }
  // Candidates: every element whose magnitude (as |bits|: ordered like |x| for finite x, and
  // >= kInfBits for NaN and Inf) reaches a bound estimated from a strided sample, set a little
  // below the sample's k-th largest so that at least k elements reach it (as Deep Gradient
  // Compression estimates its threshold, Lin et al. 2018). The exact k-th largest is then found
  // among the candidates only, which include every element of the top k. A bound too high (fewer
  // than k candidates) falls back to all elements. The result does not depend on the sample.
  std::uint32_t bound = 0;
  constexpr std::size_t kSample = 1 << 16;
  if (n > 4 * kSample) {
    std::vector<std::uint32_t> sample(kSample);
    const std::size_t stride = n / kSample;
    for (std::size_t j = 0; j < kSample; ++j) {
      sample[j] = std::bit_cast<std::uint32_t>(in[j * stride]) & kAbsMask;
    }
    const double expected = static_cast<double>(k) * kSample / static_cast<double>(n);
    const auto rank = static_cast<std::size_t>(expected * 1.25 + 4.0 * std::sqrt(expected) + 8.0);
    if (rank < kSample) {
      const auto at = sample.begin() + static_cast<std::ptrdiff_t>(rank);
      std::nth_element(sample.begin(), at, sample.end(), std::greater<>());
      bound = *at;
    }
  }
  struct Candidate {
    std::uint32_t index;
    std::uint32_t mag;
  };
  // Zeros are candidates only through the fallback: a sparse input (a previous result fed back in)
  // would otherwise make every element one.
  const bool sampled = bound != 0;
  bound = std::max(bound, 1U);
  std::vector<Candidate> candidates;
  candidates.reserve(sampled ? 2 * k + 1024 : n);
  std::uint32_t max_bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t m = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
    max_bits = std::max(max_bits, m);
    if (m >= bound) candidates.push_back({static_cast<std::uint32_t>(i), m});
  }
  if (max_bits >= kInfBits) {
    for (std::size_t i = 0; i < n; ++i) {
      if ((std::bit_cast<std::uint32_t>(in[i]) & kAbsMask) >= kInfBits) return i;
    }
  }
  if (candidates.size() < k) {  // the estimate was too high: every element is a candidate
    candidates.clear();
    for (std::size_t i = 0; i < n; ++i) {
      candidates.push_back(
          {static_cast<std::uint32_t>(i), std::bit_cast<std::uint32_t>(in[i]) & kAbsMask});
    }
  }
  // threshold: the k-th largest magnitude. Everything above it is kept, and as many elements equal
  // to it as are still needed, lowest index first.
  std::vector<std::uint32_t> mags(candidates.size());
  for (std::size_t j = 0; j < candidates.size(); ++j) mags[j] = candidates[j].mag;
  const auto kth = mags.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(mags.begin(), kth, mags.end(), std::greater<>());
  const std::uint32_t threshold = *kth;
  const auto above = static_cast<std::size_t>(
      std::count_if(mags.begin(), kth, [&](std::uint32_t m) { return m > threshold; }));
  std::size_t equal_quota = k - above;
  std::byte* p = out.data();
  for (const Candidate& c : candidates) {  // in index order
    if (c.mag < threshold || (c.mag == threshold && equal_quota == 0)) continue;
    if (c.mag == threshold) --equal_quota;
    std::memcpy(p, &c.index, 4);
    std::memcpy(p + 4, &in[c.index], 4);
    p += kTopkPairBytes;
  }
  return std::nullopt;
}

void topk_decode(std::span<const std::byte> in, std::span<float> out, Accumulate acc) {
  if (in.size() % kTopkPairBytes != 0) {
    invalid(fmt::format("kernels::topk_decode: {} bytes is not a whole number of 8-byte pairs",
                        in.size()));
  }
  if (acc == Accumulate::No) std::fill(out.begin(), out.end(), 0.0F);
  const std::size_t k = in.size() / kTopkPairBytes;
  std::int64_t previous = -1;
  for (std::size_t j = 0; j < k; ++j) {
    std::uint32_t index = 0;
    float value = 0.0F;
    std::memcpy(&index, in.data() + j * kTopkPairBytes, 4);
    std::memcpy(&value, in.data() + j * kTopkPairBytes + 4, 4);
    if (index >= out.size() || static_cast<std::int64_t>(index) <= previous) {
      invalid(fmt::format(
          "kernels::topk_decode: pair {} has index {} ({}); indices must "
          "increase and stay below the count {}",
          j, index, index >= out.size() ? "out of range" : "not increasing", out.size()));
    }
    previous = index;
    out[index] = acc == Accumulate::Yes ? out[index] + value : value;
  }
}

}  // namespace strait::kernels
