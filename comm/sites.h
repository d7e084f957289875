/// \file
/// Sites: which ranks of a job share a fast network (a cluster, a machine, a data centre) and which
/// are joined only by slow wide-area links, for the hierarchical allreduce
/// (comm/algorithms/hierarchical_allreduce.h).
///
/// Where the sites come from, first match wins (the world communicator reads them at creation):
///   1. CommOptions::sites (site index of each world rank);
///   2. STRAIT_SITES="0,0,1,1": the site index of each world rank, comma-separated (any
///      non-negative integers; they are renumbered 0.. in increasing order);
///      STRAIT_SITES=measure: measured at creation (Communicator::create: comm/links.h's probe,
///      then cluster_by_bandwidth);
///   3. STRAIT_TOPOLOGY_FILE=path: JSON {"sites": [[0, 1], [2, 3]]}, the world ranks of each site,
///      every rank exactly once (sites numbered in the order listed);
///   4. none of these: one site holding every rank.
/// STRAIT_SITES wins over STRAIT_TOPOLOGY_FILE as STRAIT_TUNE wins over STRAIT_TUNE_FILE: a user's
/// one-off setting overrides the file a tool (`strait tune`) wrote.
/// Errors: InvalidArgument naming the source and the fix (a rank missing or listed twice, a count
/// that is not WORLD_SIZE, bad JSON, a non-integer entry). Every rank must see the same sites:
/// Communicator::create compares them (and the stream count) across ranks and fails with Mismatch.
/// Thread-safety: values; the functions read the environment and files only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.h"

namespace strait::comm {

/// Which site (group of ranks on a fast network) each world rank is in (see the file comment).
struct STRAIT_API Sites {
  /// site_of[r]: the site (0 .. count() - 1) of world rank r.
  std::vector<int> site_of;
  /// Where they came from ("STRAIT_SITES", "STRAIT_TOPOLOGY_FILE=...", "measured", ...).
  std::string source = "one site (no STRAIT_SITES or STRAIT_TOPOLOGY_FILE)";

  /// Every rank in site 0.
  static Sites single(int world);
  /// "0,0,1,1". Site indices are renumbered densely in increasing order.
  static Sites parse_list(std::string_view text, int world, std::string_view source);
  /// {"sites": [[0,1],[2,3]]}.
  static Sites parse_json(std::string_view text, int world, std::string_view source);
  /// From options_sites (CommOptions::sites), else STRAIT_SITES, else STRAIT_TOPOLOGY_FILE, else
  /// one site; nullopt when STRAIT_SITES=measure (the communicator measures them).
  static std::optional<Sites> from_environment(
      int world, const std::optional<std::vector<int>>& options_sites);

  /// Number of sites (the largest index in site_of plus one).
  [[nodiscard]] int count() const;
  /// The world ranks of each site, in increasing order.
  [[nodiscard]] std::vector<std::vector<int>> members() const;
  /// FNV-1a over site_of: ranks compare it to find that they disagree.
  [[nodiscard]] std::uint64_t hash() const noexcept;
  /// "[[0, 1], [2, 3]] (from STRAIT_SITES)".
  [[nodiscard]] std::string describe() const;
};

/// Sites from measured links, the one rule of STRAIT_SITES=measure and of `strait tune`:
/// bandwidth[i][j] is from rank i to j (any unit, e.g. comm/links.h's MB/s); the diagonal is
/// ignored, as are links of 0 or below (not measured), and a link counts with the smaller of its
/// two directions. A link is fast when link * factor >= fastest, the fastest link in the job; sites
/// are the connected components of the fast links (so a rank with no fast link is a site of its
/// own), numbered by their lowest rank. A job with one rank per site has only inter-site links,
/// each of them "the fastest": it comes out as one site. Default factor 4: shared memory or a LAN
/// next to a WAN differ by 10-1000x, while two ranks of one cluster rarely differ by more than 2x.
/// Errors: InvalidArgument for a matrix that is not square or a factor below 1.
STRAIT_API Sites cluster_by_bandwidth(const std::vector<std::vector<double>>& bandwidth,
                                      double factor = 4.0);

}  // namespace strait::comm
