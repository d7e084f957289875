// Sites from measured links: ranks whose link is within `factor` of the fastest link in the job
// (bandwidth >= fastest / factor) are in the same site, taken transitively (connected components).
// The result is what hierarchical allreduce reads from STRAIT_TOPOLOGY_FILE: {"sites":
// [[0,1],[2,3]]} with each site's ranks ascending and sites ordered by their lowest rank. A job
// with one rank per site has only inter-site links, each of them "the fastest": it comes out as one
// site. Sites need at least two ranks in one of them to be told apart by bandwidth. Errors:
// InvalidArgument for a matrix that is not square or a factor below 1. Thread-safety: pure.
#pragma once

#include <vector>

namespace strait::tools::tune {

// bandwidth[i][j]: bytes/s (any unit) from rank i to j; the diagonal is ignored, as are links of
// 0 or below (not measured). A link counts with the smaller of its two directions.
std::vector<std::vector<int>> derive_sites(const std::vector<std::vector<double>>& bandwidth,
                                           double factor);

}  // namespace strait::tools::tune
