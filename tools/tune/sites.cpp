#include "tools/tune/sites.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace strait::tools::tune {

std::vector<std::vector<int>> derive_sites(const std::vector<std::vector<double>>& bandwidth,
                                           double factor) {
  const std::size_t n = bandwidth.size();
  for (const auto& row : bandwidth) {
    if (row.size() != n) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("derive_sites: the bandwidth matrix has {} rows but a row of {}", n,
                              row.size()));
    }
  }
  if (!(factor >= 1.0)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("derive_sites: factor {} is below 1 (it is how much slower than the "
                            "fastest link a link inside a site may be)",
                            factor));
  }
  const auto link = [&](std::size_t i, std::size_t j) {
    return std::min(bandwidth[i][j], bandwidth[j][i]);
  };
  double fastest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) fastest = std::max(fastest, link(i, j));
  }
  // Union-find over "fast enough" links; the root of a set is its lowest rank.
  std::vector<std::size_t> parent(n);
  std::iota(parent.begin(), parent.end(), std::size_t{0});
  const auto root = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      if (fastest > 0 && link(i, j) > 0 && link(i, j) * factor >= fastest) {
        const auto a = root(i);
        const auto b = root(j);
        parent[std::max(a, b)] = std::min(a, b);
      }
    }
  }
  std::vector<std::vector<int>> sites;
  std::vector<std::size_t> site_of_root(n, n);
  for (std::size_t i = 0; i < n; ++i) {  // ascending i: sites ordered by lowest rank
    const auto r = root(i);
    if (site_of_root[r] == n) {
      site_of_root[r] = sites.size();
      sites.emplace_back();
    }
    sites[site_of_root[r]].push_back(static_cast<int>(i));
  }
  return sites;
}

}  // namespace strait::tools::tune
