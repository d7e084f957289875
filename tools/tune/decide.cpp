#include "tools/tune/decide.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace strait::tools::tune {
namespace {

[[noreturn]] void bad(const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, fmt::format("tuner decision: {}", why));
}

void check(const Measurements& m) {
  if (m.world_size < 1) bad(fmt::format("world size {} (need >= 1)", m.world_size));
  if (m.sizes.empty()) bad("no sizes were measured");
  for (std::size_t s = 1; s < m.sizes.size(); ++s) {
    if (m.sizes[s - 1] >= m.sizes[s]) bad("the sizes are not strictly ascending");
  }
  if (m.time_us.size() != m.candidates.size()) {
    bad(fmt::format("{} rows of times for {} candidates", m.time_us.size(), m.candidates.size()));
  }
  for (std::size_t c = 0; c < m.time_us.size(); ++c) {
    if (m.time_us[c].size() != m.sizes.size()) {
      bad(fmt::format("candidate {} has {} times for {} sizes", m.candidates[c].label,
                      m.time_us[c].size(), m.sizes.size()));
    }
  }
}

bool measured(double t) {
  return std::isfinite(t) && t >= 0;
}

}  // namespace

std::uint64_t range_border(std::uint64_t a, std::uint64_t b) {
  const long double g = std::sqrt(static_cast<long double>(a) * static_cast<long double>(b));
  const auto whole = static_cast<std::uint64_t>(g);
  const int top = whole == 0 ? 0 : std::bit_width(whole) - 1;
  const std::uint64_t quantum = top >= 2 ? (std::uint64_t{1} << (top - 2)) : 1;
  const std::uint64_t border = whole / quantum * quantum;
  if (border <= a) return a + 1;
  return border > b ? b : border;
}

Decision decide(const Measurements& m, int max_level) {
  check(m);
  Decision d;
  for (std::size_t s = 0; s < m.sizes.size(); ++s) {
    SizeChoice choice{.bytes = m.sizes[s]};
    std::optional<std::size_t> best_algorithm;
    for (std::size_t c = 0; c < m.candidates.size(); ++c) {
      const double t = m.time_us[c][s];
      if (m.candidates[c].is_codec() || !measured(t)) continue;
      if (!best_algorithm || t < m.time_us[*best_algorithm][s]) best_algorithm = c;
    }
    if (!best_algorithm) {
      bad(fmt::format("no algorithm was measured at {} bytes", m.sizes[s]));
    }
    choice.algorithm = *best_algorithm;
    choice.algorithm_us = m.time_us[*best_algorithm][s];
    choice.codec_us = choice.algorithm_us;
    // (time, level, order) ranks the choices; "none" is (algorithm_us, lossless, 0), codec c is
    // (its time, its level, c + 1): a codec must be strictly faster, or as fast and less lossy.
    auto best = std::tuple(choice.algorithm_us, 0, std::size_t{0});
    std::optional<std::tuple<double, int, std::size_t>> fastest_refused_key;
    std::optional<std::size_t> fastest_refused;
    for (std::size_t c = 0; c < m.candidates.size(); ++c) {
      const double t = m.time_us[c][s];
      if (!m.candidates[c].is_codec() || !measured(t)) continue;
      const auto key = std::tuple(t, m.candidates[c].level, c + 1);
      if (m.candidates[c].level > max_level) {
        if (!fastest_refused_key || key < *fastest_refused_key) {
          fastest_refused_key = key;
          fastest_refused = c;
        }
      } else if (key < best) {
        best = key;
        choice.codec = c;
        choice.codec_us = t;
      }
    }
    if (fastest_refused && m.time_us[*fastest_refused][s] < choice.codec_us) {
      choice.over_budget = fastest_refused;
    }
    d.sizes.push_back(choice);
  }

  // Merge equal neighbours into ranges.
  const auto codec_of = [&](const SizeChoice& c) {
    return c.codec ? m.candidates[*c.codec].codec : std::string("none");
  };
  const auto same = [&](const SizeChoice& a, const SizeChoice& b) {
    const auto& x = m.candidates[a.algorithm].algorithm;
    const auto& y = m.candidates[b.algorithm].algorithm;
    return x.algorithm == y.algorithm && x.params == y.params && codec_of(a) == codec_of(b);
  };
  for (std::size_t s = 0; s < d.sizes.size(); ++s) {
    const SizeChoice& c = d.sizes[s];
    if (s > 0 && same(d.sizes[s - 1], c)) continue;
    if (!d.rules.empty()) d.rules.back().max_bytes = range_border(m.sizes[s - 1], m.sizes[s]);
    comm::SelectionRule rule;
    rule.collective = "allreduce";
    rule.min_ranks = m.world_size;
    rule.max_ranks = m.world_size;
    rule.min_bytes = d.rules.empty() ? 0 : d.rules.back().max_bytes;
    rule.max_bytes = comm::SelectionRule::kInf;
    rule.selection = m.candidates[c.algorithm].algorithm;
    rule.codec = codec_of(c);
    d.rules.push_back(std::move(rule));
  }
  return d;
}

}  // namespace strait::tools::tune
