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
  // Magnitudes as |bits|: ordered like |x| for finite x, and >= kInfBits for NaN and Inf.
  std::vector<std::uint32_t> mag(n);
  std::uint32_t max_bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mag[i] = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
    max_bits = std::max(max_bits, mag[i]);
  }
  if (max_bits >= kInfBits) {
    for (std::size_t i = 0; i < n; ++i) {
      if (mag[i] >= kInfBits) return i;
    }
  }
  if (k == 0) return std::nullopt;
  // threshold: the k-th largest magnitude. Everything above it is kept, and as many elements equal
  // to it as are still needed, lowest index first.
  std::uint32_t threshold = 0;
  std::size_t equal_quota = k;
  if (k < n) {
    const auto kth = mag.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(mag.begin(), kth, mag.end(), std::greater<>());
    threshold = *kth;
    const auto above = static_cast<std::size_t>(
        std::count_if(mag.begin(), kth, [&](std::uint32_t m) { return m > threshold; }));
    equal_quota = k - above;
  }
  std::byte* p = out.data();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t m = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
    if (m < threshold || (m == threshold && equal_quota == 0)) continue;
    if (m == threshold) --equal_quota;
    const auto index = static_cast<std::uint32_t>(i);
    std::memcpy(p, &index, 4);
    std::memcpy(p + 4, &in[i], 4);
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
