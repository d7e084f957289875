#include "tools/tune/config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace strait::tools::tune {
namespace {

// Non-finite times (not measured) become null.
nlohmann::json number(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json config_json(const TuneResult& r) {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& rule : r.decision.rules) {
    nlohmann::json j = {{"collective", rule.collective}};
    j["ranks"] = rule.min_ranks == rule.max_ranks
                     ? std::to_string(rule.min_ranks)
                     : fmt::format("{}-{}", rule.min_ranks, rule.max_ranks);
    j["bytes"] = fmt::format("{}-{}", comm::format_rule_size(rule.min_bytes),
                             comm::format_rule_size(rule.max_bytes));
    if (rule.selection.algorithm != nullptr) {
      j["algorithm"] = std::string(rule.selection.algorithm->name);
      if (rule.selection.algorithm->segmented && rule.selection.params.segment_bytes != 0) {
        j["seg"] = comm::format_rule_size(rule.selection.params.segment_bytes);
      }
    }
    if (!rule.codec.empty()) j["codec"] = rule.codec;
    rules.push_back(std::move(j));
  }
  nlohmann::json times = nlohmann::json::object();
  const auto& m = r.measurements;
  for (std::size_t c = 0; c < m.candidates.size(); ++c) {
    nlohmann::json row = nlohmann::json::array();
    for (const double t : m.time_us[c]) row.push_back(number(t));
    times[m.candidates[c].label] = std::move(row);
  }
  return {
      {"rules", std::move(rules)},
      {"sites", r.sites},
      {"links", {{"latency_us", r.links.latency_us}, {"bandwidth_MBps", r.links.bandwidth_MBps}}},
      {"tuner",
       {{"world_size", m.world_size},
        {"max_codec", r.max_codec},
        {"site_factor", r.site_factor},
        {"sizes_bytes", m.sizes},
        {"time_us", std::move(times)}}}};
}

void write_config(const std::filesystem::path& path, const nlohmann::json& config) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << config.dump(2) << '\n';
    out.close();
    if (!out) {
      throw Error(ErrorCode::Io, fmt::format("cannot write {} ({}): check that its folder exists "
                                             "and is writable, or pass another --output",
                                             tmp.string(), std::strerror(errno)));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    throw Error(ErrorCode::Io, fmt::format("cannot rename {} to {}: {}", tmp.string(),
                                           path.string(), ec.message()));
  }
}

}  // namespace strait::tools::tune
