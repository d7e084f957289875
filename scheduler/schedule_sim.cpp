#include "scheduler/schedule_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {
namespace {

void check_cost(const char* what, double t) {
  if (!std::isfinite(t) || t <= 0.0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule simulation: {} = {} must be a finite time > 0", what, t));
  }
}

}  // namespace

Timeline simulate(const Schedule& sched, double time_f, double time_b) {
  check_cost("time_f", time_f);
  check_cost("time_b", time_b);
  validate_schedule(sched);  // afterwards every RECV has one SEND and the walk below terminates

  const auto P = static_cast<std::size_t>(sched.stages);
  const auto M = static_cast<std::size_t>(sched.microbatches);
  // When each message was sent; negative = not yet. [0] forward by sender, [1] backward.
  std::array<std::vector<double>, 2> sent = {std::vector<double>(P * M, -1.0),
                                             std::vector<double>(P * M, -1.0)};
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
  auto mb = [](const Action& a) { return static_cast<std::size_t>(a.microbatch); };
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t s = 0; s < P; ++s) {
      const auto& list = sched.ranks[s];
      auto& out = tl.stages[s];
      while (out.size() < list.size()) {
        const Action& a = list[out.size()];
        const double start = clock[s];
        double end = start;
        bool blocked = false;
        switch (a.kind) {
          case ActionKind::F: end = start + time_f; break;
          case ActionKind::B: end = start + time_b; break;
          case ActionKind::SendF:
          case ActionKind::SendB: message(a)[s * M + mb(a)] = start; break;
          case ActionKind::RecvF:
          case ActionKind::RecvB: {
            const double sent_at = message(a)[sender(a) * M + mb(a)];
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
        if (a.kind == ActionKind::F || a.kind == ActionKind::B) tl.busy[s] += end - start;
        out.push_back(TimedAction{a, start, end});
        clock[s] = end;
        tl.makespan = std::max(tl.makespan, end);
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < P; ++s) {
    if (tl.stages[s].size() != sched.ranks[s].size()) {
      throw Error(ErrorCode::Internal, "schedule simulation stalled on a validated schedule");
    }
  }
  return tl;
}

std::vector<double> stage_bubble_fractions(const Schedule& sched, double time_f, double time_b) {
  const Timeline tl = simulate(sched, time_f, time_b);
  std::vector<double> out;
  out.reserve(tl.busy.size());
  for (double busy : tl.busy) out.push_back((tl.makespan - busy) / tl.makespan);
  return out;
}

double bubble_fraction(const Schedule& sched, double time_f, double time_b) {
  const std::vector<double> f = stage_bubble_fractions(sched, time_f, time_b);
  double sum = 0.0;
  for (double x : f) sum += x;
  return sum / static_cast<double>(f.size());
}

int peak_stashed_microbatches(const Schedule& sched, int stage) {
  validate_schedule(sched);
  if (stage < 0 || stage >= sched.stages) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("peak_stashed_microbatches: stage {} is outside [0, {})", stage, sched.stages));
  }
  int live = 0;
  int peak = 0;
  for (const Action& a : sched.ranks[static_cast<std::size_t>(stage)]) {
    if (a.kind == ActionKind::F || a.kind == ActionKind::Reload) peak = std::max(peak, ++live);
    if (a.kind == ActionKind::B || a.kind == ActionKind::Offload) --live;
  }
  return peak;
}

}  // namespace strait::sched
