#include "tools/tune/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/algorithms/selection.h"

namespace strait::tools::tune {
namespace {

std::string matrix(const std::vector<std::vector<double>>& v, std::string_view title) {
  std::string out = fmt::format("{}\n{:>6}", title, "");
  for (std::size_t j = 0; j < v.size(); ++j) out += fmt::format(" {:>10}", j);
  out += '\n';
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += fmt::format("{:>6}", i);
    for (std::size_t j = 0; j < v.size(); ++j) {
      out += i == j ? fmt::format(" {:>10}", "-") : fmt::format(" {:>10.1f}", v[i][j]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace

std::string format_links(const comm::Links& links, const std::vector<std::vector<int>>& sites,
                         double site_factor) {
  return matrix(links.latency_us, "latency (us, one way, median of 8-byte ping-pongs / 2)") +
         matrix(links.bandwidth_MBps, "bandwidth (MB/s, one way, best of the bulk transfers)") +
         fmt::format("sites (links within {}x of the fastest): {}\n", site_factor,
                     fmt::format("{}", sites));
}

std::string format_decision(const Measurements& m, const Decision& d, std::string_view max_codec) {
  const double n = m.world_size;
  const double bus = n > 1 ? 2 * (n - 1) / n : 1;
  std::string out = fmt::format(
      "allreduce, {} ranks, f32 sum; time: the slowest rank's median, us; busbw: GB/s\n"
      "{:>8}  {:<22} {:>10} {:>7}  {:<10} {:>10} {:>8}  {}\n",
      m.world_size, "size", "algorithm", "time", "busbw", fmt::format("codec<={}", max_codec),
      "time", "speed-up", "faster, over budget");
  for (std::size_t s = 0; s < d.sizes.size(); ++s) {
    const SizeChoice& c = d.sizes[s];
    const double busbw = static_cast<double>(c.bytes) / (c.algorithm_us * 1e-6) * bus / 1e9;
    std::string refused = "-";
    if (c.over_budget) {
      const double t = m.time_us[*c.over_budget][s];
      refused = fmt::format("{} {:.1f} us ({:.2f}x)", m.candidates[*c.over_budget].label, t,
                            c.algorithm_us / t);
    }
    out += fmt::format("{:>8}  {:<22} {:>10.1f} {:>7.3f}  {:<10} {:>10.1f} {:>7.2f}x  {}\n",
                       comm::format_rule_size(c.bytes), m.candidates[c.algorithm].label,
                       c.algorithm_us, busbw,
                       c.codec ? m.candidates[*c.codec].label : std::string("none"), c.codec_us,
                       c.algorithm_us / c.codec_us, refused);
  }
  out += "rules:\n";
  for (const auto& r : d.rules) out += fmt::format("  {}\n", r.describe());
  return out;
}

}  // namespace strait::tools::tune
