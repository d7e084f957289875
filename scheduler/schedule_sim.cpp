#include "scheduler/schedule_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
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

// Every cost of a stage is a finite time >= 0; F and B take some.
void check_stage_costs(const StageCosts& costs) {
  check_cost("f", costs.compute.f, false);
  check_cost("b", costs.compute.b, false);
  check_cost("w", costs.compute.w, true);
  check_cost("fused", costs.compute.fused, true);
  check_cost("send", costs.send, true);
  check_cost("recv", costs.recv, true);
  check_cost("link latency", costs.link.latency, true);
  check_cost("link bytes", costs.link.bytes, true);
  check_cost("link bandwidth", costs.link.bandwidth, true);
  check_cost("offload", costs.offload, true);
  check_cost("reload", costs.reload, true);
  check_cost("allreduce", costs.allreduce, true);
  check_cost("optim", costs.optim, true);
}

// [0][r]: the index of rank r's ALLREDUCE_GRAD group (-1: none); [1]: OPTIM's. A rank outside
// [0, P) or in two groups of a kind is an InvalidArgument.
std::array<std::vector<int>, 2> group_index(const SyncGroups& groups, std::size_t P) {
  std::array<std::vector<int>, 2> group_of = {std::vector<int>(P, -1), std::vector<int>(P, -1)};
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& list = k == 0 ? groups.allreduce_grad : groups.optim;
    for (std::size_t g = 0; g < list.size(); ++g) {
      for (const int r : list[g]) {
        if (r < 0 || static_cast<std::size_t>(r) >= P ||
            group_of[k][static_cast<std::size_t>(r)] >= 0) {
          throw Error(ErrorCode::InvalidArgument,
                      fmt::format("schedule simulation: {} group {} names rank {}, which is "
                                  "outside [0, {}) or already in a group",
                                  k == 0 ? "ALLREDUCE_GRAD" : "OPTIM", g, r, P));
        }
        group_of[k][static_cast<std::size_t>(r)] = static_cast<int>(g);
      }
    }
  }
  return group_of;
}

// The walk stops when no rank can move; a rank with actions left waits for a collective forever.
void check_complete(const Schedule& sched, const Timeline& tl) {
  for (std::size_t r = 0; r < tl.stages.size(); ++r) {
    if (tl.stages[r].size() != sched.ranks[r].size()) {
      throw Error(
          ErrorCode::InvalidArgument,
          fmt::format("schedule simulation: rank {} cannot run action {} ({}): a "
                      "collective's group waits for a rank that never reaches it",
                      r, tl.stages[r].size(), action_string(sched.ranks[r][tl.stages[r].size()])));
    }
  }
}

// A rank's messages to another cross their link one at a time (bytes / bandwidth each, in the
// sender's program order, which is their time order), so a burst of sends queues on a slow link
// instead of crossing it at once. Latency is not occupancy.
class LinkQueues {
 public:
  explicit LinkQueues(std::size_t ranks) : ranks_(ranks), free_(ranks * ranks, 0.0) {}
  // When a message that rank `from` finished posting at `posted` can be received by rank `to`.
  double arrival(std::size_t from, std::size_t to, double posted, const LinkCosts& l) {
    double& free = free_[from * ranks_ + to];
    const double leaves = std::max(posted, free);
    free = leaves + (l.transfer() - l.latency);
    return leaves + l.transfer();
  }

 private:
  std::size_t ranks_;
  std::vector<double> free_;
};

}  // namespace

SyncGroups data_parallel_sync_groups(int ranks, bool clip_norm) {
  SyncGroups g;
  if (ranks > 1) g.allreduce_grad.push_back({0, ranks - 1});
  if (clip_norm && ranks > 1) {
    std::vector<int> all(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) all[static_cast<std::size_t>(r)] = r;
    g.optim.push_back(std::move(all));
  }
  return g;
}

Timeline simulate(const Schedule& sched, const ActionCosts& costs) {
  return simulate(sched, std::vector<ActionCosts>(
                             static_cast<std::size_t>(std::max(0, stage_count(sched))), costs));
}

Timeline simulate(const Schedule& sched, const std::vector<ActionCosts>& per_stage) {
  std::vector<StageCosts> full(per_stage.size());
  for (std::size_t v = 0; v < per_stage.size(); ++v) full[v].compute = per_stage[v];
  return simulate(sched, full, SyncGroups{});
}

Timeline simulate(const Schedule& sched, const std::vector<StageCosts>& per_stage,
                  const SyncGroups& groups) {
  if (per_stage.size() != static_cast<std::size_t>(std::max(0, stage_count(sched)))) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule simulation: {} per-stage costs for {} stages",
                            per_stage.size(), stage_count(sched)));
  }
  for (const StageCosts& costs : per_stage) check_stage_costs(costs);
  validate_schedule(sched);  // afterwards every RECV has one SEND and the walk below terminates

  const auto P = static_cast<std::size_t>(sched.stages);
  const auto M = static_cast<std::size_t>(sched.microbatches);
  const auto S = static_cast<std::size_t>(stage_count(sched));
  const std::array<std::vector<int>, 2> group_of = group_index(groups, P);
  // When each rank reached its collective (negative = not yet), by [kind][rank].
  std::array<std::vector<double>, 2> arrived = {std::vector<double>(P, -1.0),
                                                std::vector<double>(P, -1.0)};
  const std::vector<bool> split = weight_keys(sched);
  // When each message can be received; negative = not sent yet. [0] forward by sender stage,
  // [1] backward.
  std::array<std::vector<double>, 2> sent = {std::vector<double>(S * M, -1.0),
                                             std::vector<double>(S * M, -1.0)};
  LinkQueues links(P);
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
  auto cost = [&](const Action& a) -> const StageCosts& {
    return per_stage[static_cast<std::size_t>(a.stage)];
  };
  // A collective of rank r: its end once every member of r's group has arrived, or -1.
  auto collective_end = [&](std::size_t kind, std::size_t r, double start, double own) {
    if (arrived[kind][r] < 0.0) arrived[kind][r] = start;
    const int g = group_of[kind][r];
    if (g < 0) return start + own;
    double last = start;
    for (const int m :
         (kind == 0 ? groups.allreduce_grad : groups.optim)[static_cast<std::size_t>(g)]) {
      const double t = arrived[kind][static_cast<std::size_t>(m)];
      if (t < 0.0) return -1.0;
      last = std::max(last, t);
    }
    return last + own;
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
            end += cost(a).compute.f;
            compute = true;
            break;
          case ActionKind::B:
            end += split[key(a)] ? cost(a).compute.b : cost(a).compute.fused_b();
            compute = true;
            break;
          case ActionKind::W:
            end += cost(a).compute.w;
            compute = true;
            break;
          case ActionKind::SendF:
          case ActionKind::SendB:
            end += cost(a).send;
            message(a)[key(a)] =
                links.arrival(r,
                              static_cast<std::size_t>(rank_of(
                                  sched, a.kind == ActionKind::SendF ? a.stage + 1 : a.stage - 1)),
                              end, cost(a).link);
            break;
          case ActionKind::RecvF:
          case ActionKind::RecvB: {
            const std::size_t from = sender(a);
            const double ready = message(a)[from * M + static_cast<std::size_t>(a.microbatch)];
            blocked = ready < 0.0;
            end = std::max(start, ready) + cost(a).recv;
            break;
          }
          case ActionKind::AllreduceGrad:
          case ActionKind::Optim: {
            const std::size_t kind = a.kind == ActionKind::AllreduceGrad ? 0 : 1;
            end = collective_end(kind, r, start, kind == 0 ? cost(a).allreduce : cost(a).optim);
            blocked = end < 0.0;
            break;
          }
          case ActionKind::Offload: end += cost(a).offload; break;
          case ActionKind::Reload: end += cost(a).reload; break;
          case ActionKind::OverlapFB: break;  // marks a pair; its F and B are priced
        }
        if (blocked) break;  // its send, or a member of its collective, has not run yet
        if (compute) tl.busy[r] += end - start;
        out.push_back(TimedAction{a, start, end});
        clock[r] = end;
        tl.makespan = std::max(tl.makespan, end);
        progress = true;
      }
    }
  }
  check_complete(sched, tl);
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

std::vector<double> stage_bubble_fractions(const Schedule& sched,
                                           const std::vector<StageCosts>& costs,
                                           const SyncGroups& groups) {
  const Timeline tl = simulate(sched, costs, groups);
  std::vector<double> out;
  out.reserve(tl.busy.size());
  for (double busy : tl.busy) out.push_back((tl.makespan - busy) / tl.makespan);
  return out;
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

namespace {

// A mean of measured durations (0 when there are none).
struct Mean {
  double sum = 0;
  int n = 0;
  void add(double x) {
    sum += x;
    ++n;
  }
  [[nodiscard]] double get() const { return n > 0 ? sum / n : 0.0; }
};

// measured_stage_costs in its passes, one member each, run in this order: the compute and copy
// actions and the SENDs, then the transfers (which need the SENDs), then the collectives (which
// need every rank's arrival). Each stage's costs are means over its actions.
class CostTally {
 public:
  CostTally(const Schedule& sched, const Timeline& measured)
      : P_(checked_ranks(sched, measured)),
        S_(static_cast<std::size_t>(std::max(0, stage_count(sched)))),
        M_(static_cast<std::size_t>(sched.microbatches)),
        measured_(measured),
        split_(weight_keys(sched)),
        mean_(S_),
        sends_{std::vector<const TimedAction*>(S_ * M_, nullptr),
               std::vector<const TimedAction*>(S_ * M_, nullptr)},
        arrival_{std::vector<double>(P_, -1.0), std::vector<double>(P_, -1.0)} {}
  void tally_actions();
  void tally_transfers();
  void tally_collectives(const SyncGroups& groups);
  [[nodiscard]] std::vector<StageCosts> costs() const;

 private:
  // The schedule's ranks, checked against the timeline's before anything is allocated.
  static std::size_t checked_ranks(const Schedule& sched, const Timeline& measured) {
    const auto P = static_cast<std::size_t>(sched.stages);
    if (measured.stages.size() != P) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("measured_stage_costs: the timeline has {} ranks, the schedule {}",
                              measured.stages.size(), P));
    }
    return P;
  }
  // kB: B's with a W (input gradient only); kBFull: B's without (both gradients).
  enum Kind : std::size_t {
    kF,
    kB,
    kBFull,
    kW,
    kSend,
    kRecv,
    kLatency,
    kOffload,
    kReload,
    kAll,
    kOpt,
    kN
  };
  [[nodiscard]] bool in_range(const Action& a) const {
    return a.stage >= 0 && static_cast<std::size_t>(a.stage) < S_ &&
           (a.microbatch == kNoMicrobatch || static_cast<std::size_t>(a.microbatch) < M_);
  }
  // A RECV and the SEND it pairs with: [0] the sender stage's message, or null.
  [[nodiscard]] const TimedAction* matching_send(const Action& a) const {
    const bool fwd = a.kind == ActionKind::RecvF;
    const int from = fwd ? a.stage - 1 : a.stage + 1;
    if (from < 0 || static_cast<std::size_t>(from) >= S_) return nullptr;
    return sends_[fwd ? 0 : 1]
                 [static_cast<std::size_t>(from) * M_ + static_cast<std::size_t>(a.microbatch)];
  }
  // fn(recv, send) for every RECV in range whose SEND was measured.
  template <typename Fn>
  void for_each_recv(const Fn& fn) const {
    for (const auto& list : measured_.stages) {
      for (const TimedAction& t : list) {
        if ((t.action.kind != ActionKind::RecvF && t.action.kind != ActionKind::RecvB) ||
            !in_range(t.action)) {
          continue;
        }
        if (const TimedAction* send = matching_send(t.action); send != nullptr) fn(t, *send);
      }
    }
  }

  std::size_t P_, S_, M_;
  const Timeline& measured_;
  std::vector<bool> split_;  // weight_keys
  std::vector<std::array<Mean, kN>> mean_;
  // The SENDs by direction and (sender stage, microbatch), to pair with their RECVs.
  std::array<std::vector<const TimedAction*>, 2> sends_;
  // When each rank began its ALLREDUCE_GRAD [0] / OPTIM [1] (-1: none).
  std::array<std::vector<double>, 2> arrival_;
};

void CostTally::tally_actions() {
  for (std::size_t r = 0; r < P_; ++r) {
    for (const TimedAction& t : measured_.stages[r]) {
      const Action& a = t.action;
      if (!in_range(a)) continue;
      const auto v = static_cast<std::size_t>(a.stage);
      const double d = t.end - t.start;
      switch (a.kind) {
        case ActionKind::F: mean_[v][kF].add(d); break;
        case ActionKind::B:
          mean_[v][split_[v * M_ + static_cast<std::size_t>(a.microbatch)] ? kB : kBFull].add(d);
          break;
        case ActionKind::W: mean_[v][kW].add(d); break;
        case ActionKind::SendF:
        case ActionKind::SendB:
          mean_[v][kSend].add(d);
          sends_[a.kind == ActionKind::SendF ? 0 : 1]
                [v * M_ + static_cast<std::size_t>(a.microbatch)] = &t;
          break;
        case ActionKind::Offload: mean_[v][kOffload].add(d); break;
        case ActionKind::Reload: mean_[v][kReload].add(d); break;
        case ActionKind::AllreduceGrad:
        case ActionKind::Optim:
          arrival_[a.kind == ActionKind::AllreduceGrad ? 0 : 1][r] = t.start;
          break;
        case ActionKind::RecvF:
        case ActionKind::RecvB:
        case ActionKind::OverlapFB: break;
      }
    }
  }
  for (std::size_t v = 0; v < S_; ++v) {
    if (mean_[v][kF].n == 0 || mean_[v][kB].n + mean_[v][kBFull].n == 0) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("measured_stage_costs: the timeline has no F or no B of stage {}: "
                              "give it a complete step",
                              v));
    }
  }
}

// Transfers seen whole (the receiver was waiting before the send began) give an upper bound
// of each sender stage's transfer time; RECVs that began after it found their data there and
// show what a receive costs by itself; the latency is then the whole-seen transfers less that.
void CostTally::tally_transfers() {
  std::vector<Mean> whole(S_);
  for_each_recv([&](const TimedAction& t, const TimedAction& send) {
    if (t.start <= send.start) {
      whole[static_cast<std::size_t>(send.action.stage)].add(t.end - send.end);
    }
  });
  for_each_recv([&](const TimedAction& t, const TimedAction& send) {
    if (t.start >=
        send.end + std::max(0.0, whole[static_cast<std::size_t>(send.action.stage)].get())) {
      mean_[static_cast<std::size_t>(t.action.stage)][kRecv].add(t.end - t.start);
    }
  });
  // A stage whose receives all waited borrows the other stages' figure (the same code path).
  Mean pooled;
  for (std::size_t v = 0; v < S_; ++v) {
    pooled.sum += mean_[v][kRecv].sum;
    pooled.n += mean_[v][kRecv].n;
  }
  for (std::size_t v = 0; v < S_; ++v) {
    if (mean_[v][kRecv].n == 0 && pooled.n > 0) mean_[v][kRecv].add(pooled.get());
  }
  for_each_recv([&](const TimedAction& t, const TimedAction& send) {
    if (t.start <= send.start) {
      mean_[static_cast<std::size_t>(send.action.stage)][kLatency].add(std::max(
          0.0, t.end - send.end - mean_[static_cast<std::size_t>(t.action.stage)][kRecv].get()));
    }
  });
}

// Collectives: each member's end past the group's last arrival.
void CostTally::tally_collectives(const SyncGroups& groups) {
  std::array<std::vector<double>, 2> arrival_max = arrival_;
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& list = k == 0 ? groups.allreduce_grad : groups.optim;
    for (const auto& group : list) {
      double last = -1.0;
      for (const int m : group) {
        if (m >= 0 && static_cast<std::size_t>(m) < P_) {
          last = std::max(last, arrival_[k][static_cast<std::size_t>(m)]);
        }
      }
      for (const int m : group) {
        if (m >= 0 && static_cast<std::size_t>(m) < P_) {
          arrival_max[k][static_cast<std::size_t>(m)] = last;
        }
      }
    }
  }
  for (std::size_t r = 0; r < P_; ++r) {
    for (const TimedAction& t : measured_.stages[r]) {
      const Action& a = t.action;
      if ((a.kind != ActionKind::AllreduceGrad && a.kind != ActionKind::Optim) || !in_range(a)) {
        continue;
      }
      const std::size_t k = a.kind == ActionKind::AllreduceGrad ? 0 : 1;
      mean_[static_cast<std::size_t>(a.stage)][k == 0 ? kAll : kOpt].add(
          std::max(0.0, t.end - std::max(t.start, arrival_max[k][r])));
    }
  }
}

std::vector<StageCosts> CostTally::costs() const {
  std::vector<StageCosts> out(S_);
  for (std::size_t v = 0; v < S_; ++v) {
    const auto& m = mean_[v];
    // The simulator prices a full B at b + w: b is chosen so that the stage's B's, split and full,
    // take their measured total (DualPipeV mixes both on one stage).
    const double w = m[kW].get();
    const double n_b = static_cast<double>(m[kB].n + m[kBFull].n);
    const double b = (m[kB].sum + m[kBFull].sum - static_cast<double>(m[kBFull].n) * w) / n_b;
    out[v].compute = ActionCosts{m[kF].get(), std::max(b, 1e-9), w};
    out[v].send = m[kSend].get();
    out[v].recv = m[kRecv].get();
    out[v].link.latency = m[kLatency].get();
    out[v].offload = m[kOffload].get();
    out[v].reload = m[kReload].get();
    out[v].allreduce = m[kAll].get();
    out[v].optim = m[kOpt].get();
  }
  return out;
}

}  // namespace

std::vector<StageCosts> measured_stage_costs(const Schedule& sched, const Timeline& measured,
                                             const SyncGroups& groups) {
  CostTally tally(sched, measured);
  tally.tally_actions();
  tally.tally_transfers();
  tally.tally_collectives(groups);
  return tally.costs();
}

namespace {

// The peak of live activation stashes over rank `rank`'s actions, of every chunk or only of model
// stage `only` (see peak_stashed_microbatches).
int peak_live_stashes(const Schedule& sched, int rank, std::optional<int> only) {
  const std::vector<bool> split = weight_keys(sched);
  const auto m = static_cast<std::size_t>(sched.microbatches);
  int live = 0;
  int peak = 0;
  for (const Action& a : sched.ranks[static_cast<std::size_t>(rank)]) {
    if (only && a.stage != *only) continue;
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
      case ActionKind::Optim:
      case ActionKind::OverlapFB: break;
    }
  }
  return peak;
}

}  // namespace

int peak_stashed_microbatches(const Schedule& sched, int stage) {
  validate_schedule(sched);
  check_rank(sched, stage, "peak_stashed_microbatches");
  return peak_live_stashes(sched, stage, std::nullopt);
}

int peak_stashed_microbatches_of_stage(const Schedule& sched, int model_stage) {
  validate_schedule(sched);
  if (model_stage < 0 || model_stage >= stage_count(sched)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("peak_stashed_microbatches_of_stage: stage {} is outside the "
                            "schedule's {} model stages",
                            model_stage, stage_count(sched)));
  }
  return peak_live_stashes(sched, rank_of(sched, model_stage), model_stage);
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
