// Activation offload as a schedule transform (add_activation_offload, offloaded_microbatches;
// declared in scheduler/schedule.h): apart from the generators, because it checks its input and
// output with schedule_validate and measures stashes with schedule_sim, which both build on the
// schedule's basics (schedule.cpp), so schedule.cpp itself depends on neither.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {

namespace {

// The actions the prefetch distance counts, and among which a stash lives. A switch, so that a
// new kind must be decided on here.
bool is_compute(ActionKind kind) {
  switch (kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::W: return true;
    case ActionKind::SendF:
    case ActionKind::RecvF:
    case ActionKind::SendB:
    case ActionKind::RecvB:
    case ActionKind::AllreduceGrad:
    case ActionKind::Optim:
    case ActionKind::Offload:
    case ActionKind::Reload:
    case ActionKind::OverlapFB: return false;
  }
  return false;
}

// One rank's list with OFFLOAD / RELOAD inserted (see add_activation_offload).
std::vector<Action> offload_rank(const Schedule& sched, const std::vector<Action>& list,
                                 int prefetch) {
  const auto m = static_cast<std::size_t>(sched.microbatches);
  const auto key = [m](const Action& a) {
    return static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch);
  };
  const std::size_t keys = static_cast<std::size_t>(stage_count(sched)) * m;
  std::vector<std::size_t> f_at(keys);
  std::vector<std::size_t> computes;  // indices of F, B and W in `list`
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!is_compute(a.kind)) continue;
    computes.push_back(i);
    if (a.kind == ActionKind::F) f_at[key(a)] = i;
  }
  // after[i]: actions to insert after list[i]; before[i]: before list[i].
  std::vector<std::vector<Action>> after(list.size()), before(list.size());
  // The backward order decides the order of RELOADs that land on the same spot.
  for (const std::size_t ci : computes) {
    const Action& bwd = list[ci];
    if (bwd.kind != ActionKind::B) continue;
    // Computes strictly between F and B, as positions in `computes`.
    const auto f_pos = static_cast<std::size_t>(
        std::lower_bound(computes.begin(), computes.end(), f_at[key(bwd)]) - computes.begin());
    const auto b_pos = static_cast<std::size_t>(
        std::lower_bound(computes.begin(), computes.end(), ci) - computes.begin());
    const std::size_t between = b_pos - f_pos - 1;
    if (between <= static_cast<std::size_t>(prefetch)) continue;  // the stash is never idle
    // OFFLOAD right after F and the sends that follow it.
    std::size_t off = f_at[key(bwd)];
    while (off + 1 < list.size() &&
           (list[off + 1].kind == ActionKind::SendF || list[off + 1].kind == ActionKind::SendB)) {
      ++off;
    }
    after[off].push_back(Action{ActionKind::Offload, bwd.stage, bwd.microbatch});
    // RELOAD before the compute `prefetch` computes ahead of B, hoisted above its receives.
    std::size_t at = computes[b_pos - static_cast<std::size_t>(prefetch)];
    while (at > off + 1 &&
           (list[at - 1].kind == ActionKind::RecvF || list[at - 1].kind == ActionKind::RecvB)) {
      --at;
    }
    before[at].push_back(Action{ActionKind::Reload, bwd.stage, bwd.microbatch});
  }
  std::vector<Action> out;
  out.reserve(list.size() + 2 * keys);
  for (std::size_t i = 0; i < list.size(); ++i) {
    out.insert(out.end(), before[i].begin(), before[i].end());
    out.push_back(list[i]);
    out.insert(out.end(), after[i].begin(), after[i].end());
  }
  return out;
}

}  // namespace

Schedule add_activation_offload(const Schedule& schedule, int prefetch) {
  if (prefetch < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("activation offload: prefetch distance {} must be >= 0 (computes "
                            "between a RELOAD and its B)",
                            prefetch));
  }
  validate_schedule(schedule);
  for (const auto& list : schedule.ranks) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::Offload || a.kind == ActionKind::Reload) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("activation offload: rank {} already has {}; add offload to a "
                                "schedule once",
                                rank_of(schedule, a.stage), action_string(a)));
      }
    }
  }
  Schedule out = schedule;
  for (std::size_t r = 0; r < out.ranks.size(); ++r) {
    const int before = peak_stashed_microbatches(schedule, static_cast<int>(r));
    out.ranks[r] = offload_rank(schedule, schedule.ranks[r], prefetch);
    // Copies that would not save a slot are not worth their bandwidth.
    if (peak_stashed_microbatches(out, static_cast<int>(r)) >= before) {
      out.ranks[r] = schedule.ranks[r];
    }
  }
  validate_schedule(out);  // the transform's own promise, checked
  return out;
}

int offloaded_microbatches(const Schedule& schedule, int stage) {
  if (stage < 0 || stage >= schedule.stages ||
      static_cast<std::size_t>(stage) >= schedule.ranks.size()) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("offloaded_microbatches: rank {} is outside [0, {})", stage, schedule.stages));
  }
  const auto& list = schedule.ranks[static_cast<std::size_t>(stage)];
  return static_cast<int>(std::count_if(
      list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::Offload; }));
}

}  // namespace strait::sched
