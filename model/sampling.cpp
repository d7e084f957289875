#include "model/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/mix64.h"

namespace strait::sched {
namespace {

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

void SamplingOptions::validate() const {
  if (greedy) return;
  if (!(std::isfinite(temperature) && temperature > 0.0)) {
    throw bad(fmt::format(
        "--temperature {} must be a finite number > 0 (0.8 by default; --sample greedy for the "
        "argmax)",
        temperature));
  }
  if (top_k < 1) {
    throw bad(
        fmt::format("--top-k {} must be at least 1 (1 is greedy; 256 or more: every byte)", top_k));
  }
}

std::string SamplingOptions::describe() const {
  if (greedy) return "greedy";
  return fmt::format("top-k {}, temperature {}, seed {}", top_k, temperature, seed);
}

Sampler::Sampler(const SamplingOptions& options) : options_(options) {
  options_.validate();
}

double Sampler::uniform(std::uint64_t draw) const {
  const std::uint64_t bits = mix64(mix64(options_.seed) ^ draw);
  return static_cast<double>(bits >> 11U) * 0x1.0p-53;
}

std::int32_t Sampler::next(std::span<const float> logits, std::uint64_t draw) const {
  if (logits.empty()) throw bad("Sampler::next: no logits");
  if (std::any_of(logits.begin(), logits.end(), [](float l) { return std::isnan(l); })) {
    throw bad("Sampler::next: a logit is NaN");
  }
  if (options_.greedy) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                     logits.begin());
  }
  // The k largest, equal logits by index; then their softmax at the temperature, in double.
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = std::min(order.size(), static_cast<std::size_t>(options_.top_k));
  const auto before = [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)];
    const float lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    before);
  const double top = logits[static_cast<std::size_t>(order[0])];
  if (std::isinf(top)) throw bad("Sampler::next: the largest logit is infinite");
  std::vector<double> weights(k);
  double total = 0.0;
  for (std::size_t i = 0; i < k; ++i) {
    const double l = logits[static_cast<std::size_t>(order[i])];
    weights[i] = std::exp((l - top) / options_.temperature);  // <= 1: no overflow
    total += weights[i];
  }
  // Inverse CDF: the first token whose cumulative weight exceeds u * total.
  const double target = uniform(draw) * total;
  double cumulative = 0.0;
  for (std::size_t i = 0; i < k; ++i) {
    cumulative += weights[i];
    if (target < cumulative) return order[i];
  }
  return order[k - 1];  // u * total rounded up to the sum
}

}  // namespace strait::sched
