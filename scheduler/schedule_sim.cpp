#include "scheduler/schedule_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {
namespace {

void check_cost(const char* what, double t, bool zero_ok) {
  if (!std::isfinite(t) || t < 0.0 || (t == 0.0 && !zero_ok)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule simulation: {} = {} must be a finite time {} 0", what, t,
                            zero_ok ? ">=" : ">"));
  }
}

// keys[stage * M + mb] is true when that (stage, microbatch) has a W somewhere in the schedule.
std::vector<bool> weight_keys(const Schedule& sched) {
  const auto m = static_cast<std::size_t>(sched.microbatches);
  std::vector<bool> out(static_cast<std::size_t>(stage_count(sched)) * m, false);
  for (const auto& list : sched.ranks) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::W) {
        out[static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch)] = true;
      }
    }
  }
  return out;
}

void check_rank(const Schedule& sched, int rank, const char* what) {
  if (rank < 0 || rank >= sched.stages) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: rank {} is outside [0, {})", what, rank, sched.stages));
  }
}

}  // namespace

Timeline simulate(const Schedule& sched, const ActionCosts& costs) {
  return simulate(sched, std::vector<ActionCosts>(
                             static_cast<std::size_t>(std::max(0, stage_count(sched))), costs));
}

Timeline simulate(const Schedule& sched, const std::vector<ActionCosts>& per_stage) {
  if (per_stage.size() != static_cast<std::size_t>(std::max(0, stage_count(sched)))) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule simulation: {} per-stage costs for {} stages",
                            per_stage.size(), stage_count(sched)));
  }
  for (const ActionCosts& costs : per_stage) {
    check_cost("f", costs.f, false);
    check_cost("b", costs.b, false);
    check_cost("w", costs.w, true);
  }
  validate_schedule(sched);  // afterwards every RECV has one SEND and the walk below terminates

  const auto P = static_cast<std::size_t>(sched.stages);
  const auto M = static_cast<std::size_t>(sched.microbatches);
  const auto S = static_cast<std::size_t>(stage_count(sched));
  const std::vector<bool> split = weight_keys(sched);
  // When each message was sent; negative = not yet. [0] forward by sender stage, [1] backward.
  std::array<std::vector<double>, 2> sent = {std::vector<double>(S * M, -1.0),
                                             std::vector<double>(S * M, -1.0)};
  Timeline tl;
  tl.stages.resize(P);
  tl.busy.assign(P, 0.0);
  std::vector<double> clock(P, 0.0);
  auto message = [&](const Action& a) -> std::vector<double>& {
    return sent[a.kind == ActionKind::SendF || a.kind == ActionKind::RecvF ? 0 : 1];
  };
  auto sender = [](const Action& a) {
    return static_cast<std::size_t>(a.kind == ActionKind::RecvF ? a.stage - 1 : a.stage + 1);
  };
  auto key = [M](const Action& a) {
    return static_cast<std::size_t>(a.stage) * M + static_cast<std::size_t>(a.microbatch);
  };
  auto cost = [&](const Action& a) -> const ActionCosts& {
    return per_stage[static_cast<std::size_t>(a.stage)];
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t r = 0; r < P; ++r) {
      const auto& list = sched.ranks[r];
      auto& out = tl.stages[r];
      while (out.size() < list.size()) {
        const Action& a = list[out.size()];
        const double start = clock[r];
        double end = start;
        bool blocked = false;
        bool compute = false;
        switch (a.kind) {
          case ActionKind::F:
            end = start + cost(a).f;
            compute = true;
            break;
          case ActionKind::B:
            end = start + cost(a).b + (split[key(a)] ? 0.0 : cost(a).w);
            compute = true;
            break;
          case ActionKind::W:
            end = start + cost(a).w;
            compute = true;
            break;
          case ActionKind::SendF:
          case ActionKind::SendB: message(a)[key(a)] = start; break;
          case ActionKind::RecvF:
          case ActionKind::RecvB: {
            const double sent_at =
                message(a)[sender(a) * M + static_cast<std::size_t>(a.microbatch)];
            blocked = sent_at < 0.0;
            end = std::max(start, sent_at);
            break;
          }
          case ActionKind::AllreduceGrad:
          case ActionKind::Optim:
          case ActionKind::Offload:
          case ActionKind::Reload: break;
        }
        if (blocked) break;  // its send has not run yet: let the sender catch up
        if (compute) tl.busy[r] += end - start;
        out.push_back(TimedAction{a, start, end});
        clock[r] = end;
        tl.makespan = std::max(tl.makespan, end);
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < P; ++r) {
    if (tl.stages[r].size() != sched.ranks[r].size()) {
      throw Error(ErrorCode::Internal, "schedule simulation stalled on a validated schedule");
    }
  }
  return tl;
}

Timeline simulate(const Schedule& sched, double time_f, double time_b) {
  return simulate(sched, ActionCosts{time_f, time_b, 0.0});
}

std::vector<double> stage_bubble_fractions(const Schedule& sched, const ActionCosts& costs) {
  return stage_bubble_fractions(
      sched,
      std::vector<ActionCosts>(static_cast<std::size_t>(std::max(0, stage_count(sched))), costs));
}

std::vector<double> stage_bubble_fractions(const Schedule& sched,
                                           const std::vector<ActionCosts>& costs) {
  const Timeline tl = simulate(sched, costs);
  std::vector<double> out;
  out.reserve(tl.busy.size());
  for (double busy : tl.busy) out.push_back((tl.makespan - busy) / tl.makespan);
  return out;
}

std::vector<double> stage_bubble_fractions(const Schedule& sched, double time_f, double time_b) {
  return stage_bubble_fractions(sched, ActionCosts{time_f, time_b, 0.0});
}

double bubble_fraction(const Schedule& sched, const ActionCosts& costs) {
  const std::vector<double> f = stage_bubble_fractions(sched, costs);
  double sum = 0.0;
  for (double x : f) sum += x;
  return sum / static_cast<double>(f.size());
}

double bubble_fraction(const Schedule& sched, double time_f, double time_b) {
  return bubble_fraction(sched, ActionCosts{time_f, time_b, 0.0});
}

int peak_stashed_microbatches(const Schedule& sched, int stage) {
  validate_schedule(sched);
  check_rank(sched, stage, "peak_stashed_microbatches");
  const std::vector<bool> split = weight_keys(sched);
  const auto m = static_cast<std::size_t>(sched.microbatches);
  int live = 0;
  int peak = 0;
  for (const Action& a : sched.ranks[static_cast<std::size_t>(stage)]) {
    switch (a.kind) {
      case ActionKind::F:
      case ActionKind::Reload: peak = std::max(peak, ++live); break;
      case ActionKind::B:
        if (!split[static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch)])
          --live;
        break;
      case ActionKind::W:
      case ActionKind::Offload: --live; break;
      case ActionKind::SendF:
      case ActionKind::RecvF:
      case ActionKind::SendB:
      case ActionKind::RecvB:
      case ActionKind::AllreduceGrad:
      case ActionKind::Optim: break;
    }
  }
  return peak;
}

int peak_stashed_weight_inputs(const Schedule& sched, int stage) {
  validate_schedule(sched);
  check_rank(sched, stage, "peak_stashed_weight_inputs");
  const std::vector<bool> split = weight_keys(sched);
  const auto m = static_cast<std::size_t>(sched.microbatches);
  int live = 0;
  int peak = 0;
  for (const Action& a : sched.ranks[static_cast<std::size_t>(stage)]) {
    if (a.kind == ActionKind::B &&
        split[static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch)]) {
      peak = std::max(peak, ++live);
    }
    if (a.kind == ActionKind::W) --live;
  }
  return peak;
}

}  // namespace strait::sched
