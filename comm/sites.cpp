#include "comm/sites.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/params.h"

namespace strait::comm {
namespace {

constexpr std::string_view kListForm =
    "STRAIT_SITES takes the site index of each world rank, comma-separated, one entry per rank "
    "(e.g. STRAIT_SITES=0,0,1,1 for 2 sites of 2 ranks), or 'measure'";
constexpr std::string_view kJsonForm =
    "the topology file holds {\"sites\": [[0, 1], [2, 3]]}: the world ranks of each site, every "
    "rank 0 .. WORLD_SIZE-1 exactly once";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

Error invalid(std::string_view source, const std::string& why, std::string_view form) {
  return Error(ErrorCode::InvalidArgument, fmt::format("{}: {}; {}", source, why, form));
}

}  // namespace

Sites Sites::single(int world) {
  Sites s;
  s.site_of.assign(static_cast<std::size_t>(world), 0);
  return s;
}

Sites Sites::parse_list(std::string_view text, int world, std::string_view source) {
  std::vector<int> raw;
  std::string_view rest = text;
  for (;;) {
    const auto comma = rest.find(',');
    const std::string_view token = trim(rest.substr(0, comma));
    int v = -1;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (token.empty() || ec != std::errc() || end != token.data() + token.size() || v < 0) {
      throw invalid(source,
                    fmt::format("entry {} ('{}') is not a non-negative integer", raw.size(), token),
                    kListForm);
    }
    raw.push_back(v);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (raw.size() != static_cast<std::size_t>(world)) {
    throw invalid(source,
                  fmt::format("{} entries for a world of {} ranks (WORLD_SIZE); give one site "
                              "index per rank",
                              raw.size(), world),
                  kListForm);
  }
  // Dense numbering in increasing order of the given indices.
  std::map<int, int> dense;
  for (const int v : raw) dense.emplace(v, 0);
  int next = 0;
  for (auto& [v, d] : dense) d = next++;
  Sites s;
  s.source = std::string(source);
  for (const int v : raw) s.site_of.push_back(dense.at(v));
  return s;
}

Sites Sites::parse_json(std::string_view text, int world, std::string_view source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw invalid(source, fmt::format("not valid JSON ({})", e.what()), kJsonForm);
  }
  if (!doc.is_object() || !doc.contains("sites") || !doc["sites"].is_array()) {
    throw invalid(source, "no \"sites\" array", kJsonForm);
  }
  Sites s;
  s.source = std::string(source);
  s.site_of.assign(static_cast<std::size_t>(world), -1);
  int index = 0;
  for (const auto& site : doc["sites"]) {
    if (!site.is_array() || site.empty()) {
      throw invalid(source, fmt::format("sites[{}] is not a non-empty array of ranks", index),
                    kJsonForm);
    }
    for (const auto& rank : site) {
      if (!rank.is_number_integer()) {
        throw invalid(source, fmt::format("sites[{}] holds {}, not a rank", index, rank.dump()),
                      kJsonForm);
      }
      const auto r = rank.get<std::int64_t>();
      if (r < 0 || r >= world) {
        throw invalid(source,
                      fmt::format("sites[{}] names rank {}, outside 0 .. {} (WORLD_SIZE is {})",
                                  index, r, world - 1, world),
                      kJsonForm);
      }
      auto& slot = s.site_of[static_cast<std::size_t>(r)];
      if (slot != -1) {
        throw invalid(
            source,
            fmt::format("rank {} is listed twice (in sites[{}] and sites[{}])", r, slot, index),
            kJsonForm);
      }
      slot = index;
    }
    ++index;
  }
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (s.site_of[static_cast<std::size_t>(r)] == -1) missing.push_back(r);
  }
  if (!missing.empty()) {
    throw invalid(source,
                  fmt::format("rank(s) {} are in no site (WORLD_SIZE is {})",
                              fmt::join(missing, ", "), world),
                  kJsonForm);
  }
  return s;
}

std::optional<Sites> Sites::from_environment(int world,
                                             const std::optional<std::vector<int>>& options_sites) {
  if (options_sites) {
    const std::string text = fmt::format("{}", fmt::join(*options_sites, ","));
    return parse_list(text, world, "CommOptions::sites");
  }
  if (const auto v = params::text("STRAIT_SITES")) {
    if (*v == "measure") return std::nullopt;
    return parse_list(*v, world, fmt::format("STRAIT_SITES={}", *v));
  }
  if (const auto file = params::text("STRAIT_TOPOLOGY_FILE")) {
    const std::string& path = *file;
    std::ifstream in(path);
    std::stringstream text;
    if (in.is_open()) text << in.rdbuf();
    if (!in.is_open() || in.bad()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("STRAIT_TOPOLOGY_FILE={}: cannot read it ({}); unset it or name a "
                              "JSON file such as {{\"sites\": [[0, 1], [2, 3]]}}",
                              path, std::strerror(errno)));
    }
    return parse_json(text.str(), world, fmt::format("STRAIT_TOPOLOGY_FILE={}", path));
  }
  return single(world);
}

int Sites::count() const {
  return site_of.empty() ? 0 : *std::max_element(site_of.begin(), site_of.end()) + 1;
}

std::vector<std::vector<int>> Sites::members() const {
  std::vector<std::vector<int>> out(static_cast<std::size_t>(count()));
  for (std::size_t r = 0; r < site_of.size(); ++r) {
    out[static_cast<std::size_t>(site_of[r])].push_back(static_cast<int>(r));
  }
  return out;
}

std::uint64_t Sites::hash() const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFF;
      h *= 0x100000001b3ULL;
    }
  };
  mix(site_of.size());
  for (const int s : site_of) mix(static_cast<std::uint64_t>(s));
  return h;
}

std::string Sites::describe() const {
  std::vector<std::string> parts;
  for (const auto& m : members()) parts.push_back(fmt::format("[{}]", fmt::join(m, ", ")));
  return fmt::format("[{}] (from {})", fmt::join(parts, ", "), source);
}

Sites cluster_by_bandwidth(const std::vector<std::vector<double>>& bandwidth, double factor) {
  const std::size_t n = bandwidth.size();
  for (const auto& row : bandwidth) {
    if (row.size() != n) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("cluster_by_bandwidth: the bandwidth matrix has {} rows but a row "
                              "of {}",
                              n, row.size()));
    }
  }
  if (!(factor >= 1.0)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("cluster_by_bandwidth: factor {} is below 1 (it is how much slower "
                            "than the fastest link a link inside a site may be)",
                            factor));
  }
  const auto link = [&](std::size_t i, std::size_t j) {
    return std::min(bandwidth[i][j], bandwidth[j][i]);
  };
  double fastest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) fastest = std::max(fastest, link(i, j));
  }
  // Union-find over the fast links; the root of a component is its lowest rank.
  std::vector<std::size_t> parent(n);
  std::iota(parent.begin(), parent.end(), std::size_t{0});
  const auto find = [&parent](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      if (fastest > 0 && link(i, j) > 0 && link(i, j) * factor >= fastest) {
        const std::size_t a = find(i);
        const std::size_t b = find(j);
        parent[std::max(a, b)] = std::min(a, b);
      }
    }
  }
  // Components are numbered by their lowest rank, which comes first in rank order.
  Sites s;
  s.source = fmt::format("links within {}x of the fastest, {:.4g}", factor, fastest);
  std::map<std::size_t, int> index;
  for (std::size_t r = 0; r < n; ++r) {
    const auto [it, added] = index.emplace(find(r), static_cast<int>(index.size()));
    s.site_of.push_back(it->second);
  }
  return s;
}

}  // namespace strait::comm
