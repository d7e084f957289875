#include "tools/tune/decide.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "tools/tune/budget.h"

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

Decision decide(const Measurements& m, int max_level, double tolerance) {
  check(m);
  if (!(tolerance >= 0)) bad(fmt::format("tolerance {} is below 0", tolerance));
  Decision d;
  // Among `pool`, the first by (level, order) of those within the tolerance of the fastest.
  struct Entry {
    double us = 0;
    int level = 0;
    std::size_t order = 0;  // 0: "none", else candidate index + 1
  };
  const auto pick = [&](const std::vector<Entry>& pool) {
    double fastest = std::numeric_limits<double>::infinity();
    for (const auto& e : pool) fastest = std::min(fastest, e.us);
    std::optional<Entry> best;
    for (const auto& e : pool) {
      if (e.us > fastest * (1 + tolerance)) continue;
      if (!best || std::tie(e.level, e.order) < std::tie(best->level, best->order)) best = e;
    }
    return best.value();  // the pool is not empty: its fastest is within the tolerance
  };
  for (std::size_t s = 0; s < m.sizes.size(); ++s) {
    SizeChoice choice{.bytes = m.sizes[s]};
    std::vector<Entry> algorithms;
    std::vector<Entry> allowed;
    std::optional<Entry> fastest_refused;
    for (std::size_t c = 0; c < m.candidates.size(); ++c) {
      const double t = m.time_us[c][s];
      if (!measured(t)) continue;
      const Entry e{t, m.candidates[c].level, c + 1};
      if (!m.candidates[c].is_codec()) {
        algorithms.push_back(e);
      } else if (e.level <= max_level) {
        allowed.push_back(e);
      } else if (!fastest_refused || std::tie(e.us, e.level, e.order) <
                                         std::tie(fastest_refused->us, fastest_refused->level,
                                                  fastest_refused->order)) {
        fastest_refused = e;
      }
    }
    if (algorithms.empty()) bad(fmt::format("no algorithm was measured at {} bytes", m.sizes[s]));
    const Entry algorithm = pick(algorithms);
    choice.algorithm = algorithm.order - 1;
    choice.algorithm_us = algorithm.us;
    allowed.push_back(Entry{algorithm.us, kLossless, 0});  // "none": that algorithm
    const Entry codec = pick(allowed);
    if (codec.order != 0) choice.codec = codec.order - 1;
    choice.codec_us = codec.us;
    if (fastest_refused && fastest_refused->us * (1 + tolerance) < choice.codec_us) {
      choice.over_budget = fastest_refused->order - 1;
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
