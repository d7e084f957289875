// The planner's placements (train/planner.h's candidate_placements): which world rank runs each
// (replica, stage) slot when ranks or sites are unlike.
#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "train/placement.h"
#include "train/planner.h"

namespace strait::train {
namespace {

// What a rank is to the price: its speed and its site (links come from site pairs).
using RankClass = std::pair<double, int>;

RankClass class_of(const PlanRequest& r, int rank) {
  const auto k = static_cast<std::size_t>(rank);
  return {r.speed(rank), k < r.links.site.size() ? r.links.site[k] : 0};
}

// The ranks 0..n-1 in order of (speed, site) or (site, speed), ties by rank.
std::vector<int> ranks_by(const PlanRequest& r, int n, bool site_first) {
  std::vector<int> out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
    RankClass x = class_of(r, a), y = class_of(r, b);
    if (site_first) {
      return std::make_pair(x.second, x.first) < std::make_pair(y.second, y.first);
    }
    return x < y;
  });
  return out;
}

// Stage groups (P groups of R ranks; member k is replica k's) cut from `order`: consecutive runs
// (a stage's replicas together: in one site, or of one speed) or every P-th rank (a pipeline's
// stages together).
std::vector<std::vector<int>> stage_groups(const std::vector<int>& order, int P, int R,
                                           bool pipelines) {
  std::vector<std::vector<int>> g(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) {
    for (int k = 0; k < R; ++k) {
      const int i = pipelines ? k * P + s : s * R + k;
      g[static_cast<std::size_t>(s)].push_back(order[static_cast<std::size_t>(i)]);
    }
  }
  return g;
}

// The orders of P groups over the stages worth pricing: every choice of the first and the last
// stage's group, the others by their position in `g` (slowest or first site first) or reversed.
// At most P (P - 1) x 2 orders, not P!.
std::vector<std::vector<int>> group_orders(int P) {
  std::vector<std::vector<int>> out;
  if (P == 1) return {{0}};
  for (int first = 0; first < P; ++first) {
    for (int last = 0; last < P; ++last) {
      if (last == first) continue;
      std::vector<int> middle;
      for (int g = 0; g < P; ++g) {
        if (g != first && g != last) middle.push_back(g);
      }
      for (const bool reversed : {false, true}) {
        if (reversed && middle.size() < 2) continue;
        std::vector<int> o = {first};
        if (reversed) {
          o.insert(o.end(), middle.rbegin(), middle.rend());
        } else {
          o.insert(o.end(), middle.begin(), middle.end());
        }
        o.push_back(last);
        out.push_back(std::move(o));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> candidate_placements(const Plan& p, const PlanRequest& r) {
  const int P = p.stages, R = p.replicas, n = P * R;
  std::vector<std::vector<int>> out = {{}};  // the identity
  const bool unlike_sites = r.site_count() > 1;
  if (n < 2 || (!r.unlike_speeds() && !unlike_sites)) return out;
  std::set<std::vector<RankClass>> seen;
  const auto classes = [&](const std::vector<int>& placement) {
    std::vector<RankClass> c;
    c.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      c.push_back(class_of(r, placement_rank(placement, P, i / P, i % P)));
    return c;
  };
  seen.insert(classes(placement_or_identity({}, n)));
  const auto orders = group_orders(P);
  for (const bool site_first : {false, true}) {
    const std::vector<int> order = ranks_by(r, n, site_first);
    for (const bool pipelines : {false, true}) {
      const auto groups = stage_groups(order, P, R, pipelines);
      for (const auto& o : orders) {
        std::vector<int> placement(static_cast<std::size_t>(n));
        for (int s = 0; s < P; ++s) {
          const auto& g = groups[static_cast<std::size_t>(o[static_cast<std::size_t>(s)])];
          for (int k = 0; k < R; ++k) {
            placement[static_cast<std::size_t>(k) * static_cast<std::size_t>(P) +
                      static_cast<std::size_t>(s)] = g[static_cast<std::size_t>(k)];
          }
        }
        if (seen.insert(classes(placement)).second) out.push_back(std::move(placement));
      }
    }
  }
  return out;
}

}  // namespace strait::train
