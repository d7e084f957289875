#include "scheduler/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <deque>
#include <limits>
#include <utility>

#include "core/error.h"

namespace strait::sched {
namespace {

void check_shape(std::string_view what, int stages, int microbatches) {
  if (stages < 1 || microbatches < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} schedule: got {} stages and {} microbatches; both must be at "
                            "least 1",
                            what, stages, microbatches));
  }
}

Schedule empty_schedule(int stages, int microbatches, int chunks = 1,
                        StagePlacement placement = StagePlacement::Loop) {
  Schedule s;
  s.stages = stages;
  s.microbatches = microbatches;
  s.chunks = chunks;
  s.placement = placement;
  s.ranks.resize(static_cast<std::size_t>(stages));
  return s;
}

// Appends the actions of one rank, keeping the communication rules in one place: a SEND / RECV
// exists only where the neighbouring stage lives on another rank.
class RankBuilder {
 public:
  RankBuilder(Schedule& sched, int rank)
      : sched_(sched), rank_(rank), out_(sched.ranks[static_cast<std::size_t>(rank)]) {}

  void forward(int stage, int mb) {
    if (remote(stage - 1)) push(ActionKind::RecvF, stage, mb);
    push(ActionKind::F, stage, mb);
    if (remote(stage + 1)) push(ActionKind::SendF, stage, mb);
  }
  void backward(int stage, int mb) {
    if (remote(stage + 1)) push(ActionKind::RecvB, stage, mb);
    push(ActionKind::B, stage, mb);
    if (remote(stage - 1)) push(ActionKind::SendB, stage, mb);
  }
  void weight(int stage, int mb) { push(ActionKind::W, stage, mb); }
  // An OVERLAP_F_B pair: the F, then the B, each with its transfers.
  void overlapped(int f_stage, int f_mb, int b_stage, int b_mb) {
    push(ActionKind::OverlapFB, f_stage, f_mb);
    forward(f_stage, f_mb);
    backward(b_stage, b_mb);
  }
  void finish() {
    const int first = stage_of(sched_, rank_, 0);
    push(ActionKind::AllreduceGrad, first, kNoMicrobatch);
    push(ActionKind::Optim, first, kNoMicrobatch);
  }

 private:
  // A neighbouring stage that exists and lives on another rank.
  [[nodiscard]] bool remote(int stage) const {
    return stage >= 0 && stage < stage_count(sched_) && rank_of(sched_, stage) != rank_;
  }
  void push(ActionKind kind, int stage, int mb) { out_.push_back(Action{kind, stage, mb}); }

  const Schedule& sched_;
  int rank_;
  std::vector<Action>& out_;
};

}  // namespace

int stage_count(const Schedule& s) noexcept {
  return s.stages * s.chunks;
}

int rank_of(const Schedule& s, int stage) noexcept {
  if (s.placement == StagePlacement::V && stage >= s.stages) return 2 * s.stages - 1 - stage;
  return stage % s.stages;
}

int chunk_of(const Schedule& s, int stage) noexcept {
  return stage / s.stages;
}

int stage_of(const Schedule& s, int rank, int chunk) noexcept {
  if (s.placement == StagePlacement::V && chunk == 1) return 2 * s.stages - 1 - rank;
  return chunk * s.stages + rank;
}

namespace {}  // namespace

std::string_view action_kind_name(ActionKind kind) noexcept {
  switch (kind) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::W: return "W";
    case ActionKind::SendF: return "SEND_F";
    case ActionKind::RecvF: return "RECV_F";
    case ActionKind::SendB: return "SEND_B";
    case ActionKind::RecvB: return "RECV_B";
    case ActionKind::AllreduceGrad: return "ALLREDUCE_GRAD";
    case ActionKind::Optim: return "OPTIM";
    case ActionKind::Offload: return "OFFLOAD";
    case ActionKind::Reload: return "RELOAD";
    case ActionKind::OverlapFB: return "OVERLAP_F_B";
  }
  return "?";
}

std::string to_string(const Action& action) {
  if (action.microbatch == kNoMicrobatch) return std::string(action_kind_name(action.kind));
  return fmt::format("{}{}", action_kind_name(action.kind), action.microbatch);
}

std::string action_string(const Action& action) {
  if (action.microbatch == kNoMicrobatch) return std::string(action_kind_name(action.kind));
  return fmt::format("{}{}{}", action.stage, action_kind_name(action.kind), action.microbatch);
}

Schedule make_gpipe(int stages, int microbatches) {
  check_shape("gpipe", stages, microbatches);
  Schedule sched = empty_schedule(stages, microbatches);
  for (int s = 0; s < stages; ++s) {
    RankBuilder b(sched, s);
    for (int mb = 0; mb < microbatches; ++mb) b.forward(s, mb);
    for (int mb = microbatches - 1; mb >= 0; --mb) b.backward(s, mb);
    b.finish();
  }
  return sched;
}

Schedule make_1f1b(int stages, int microbatches) {
  check_shape("1f1b", stages, microbatches);
  return make_interleaved_1f1b(stages, microbatches, 1);
}

Schedule make_interleaved_1f1b(int stages, int microbatches, int chunks) {
  check_shape("interleaved", stages, microbatches);
  if (chunks < 1) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("interleaved schedule: {} chunks per rank; it needs at least 1", chunks));
  }
  if (chunks > 1 && microbatches % stages != 0) {
    const int up = (microbatches / stages + 1) * stages;
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("interleaved schedule: {} microbatches is not a multiple of the {} "
                    "stages, so the chunk groups of {} microbatches would not fill the "
                    "pipeline; use {} microbatches{}, or --chunks 1",
                    microbatches, stages, stages, up,
                    microbatches > stages ? fmt::format(" or {}", microbatches / stages * stages)
                                          : std::string()));
  }
  Schedule sched = empty_schedule(stages, microbatches, chunks);
  const int P = stages;
  const int V = chunks;
  const int total = microbatches * V;  // (chunk, microbatch) pairs per rank
  // The k-th forward / backward of a rank: groups of P microbatches, chunk by chunk.
  auto which = [&](int k, bool backward) {
    const int group = k / (P * V);
    const int in_group = k % (P * V);
    const int chunk = backward ? V - 1 - in_group / P : in_group / P;
    return std::pair{chunk, V == 1 ? k : group * P + in_group % P};
  };
  for (int r = 0; r < P; ++r) {
    RankBuilder b(sched, r);
    const int warmup = std::min(V == 1 ? P - r - 1 : (P - r - 1) * 2 + (V - 1) * P, total);
    int next_f = 0;
    int next_b = 0;
    auto fwd = [&] {
      const auto [c, mb] = which(next_f++, false);
      b.forward(stage_of(sched, r, c), mb);
    };
    auto bwd = [&] {
      const auto [c, mb] = which(next_b++, true);
      b.backward(stage_of(sched, r, c), mb);
    };
    while (next_f < warmup) fwd();
    while (next_f < total) {
      fwd();
      bwd();
    }
    while (next_b < total) bwd();
    b.finish();
  }
  return sched;
}

namespace {

// List scheduling on unit costs (F = B = W = 1, free links), the way the zero-bubble papers
// build their schedules: time advances in whole units; at each unit every idle rank starts the
// best action whose inputs are ready, by the policy below, and a W only when no F or B can run (or
// the memory limit asks for one). A stash lives from F to W.
struct GreedyPolicy {
  int cap = 0;  // stashes a rank may hold (F run, W not yet)
  // ZB-H1: F and B in 1F1B's order on each rank; only the W's move. Otherwise (ZB-V) the ready B
  // of the latest stage, else the next F (the later chunk first).
  bool one_f_one_b_order = false;
  bool reserve_for_chunk1 = false;  // chunk-0 forwards leave one slot free for chunk 1's
};

// The planning costs are finite, F and B take time and W none or some (InvalidArgument otherwise).
void check_plan_costs(const ActionCosts& costs, std::string_view what) {
  if (!(costs.f > 0.0) || !(costs.b > 0.0) || !(costs.w >= 0.0) || !std::isfinite(costs.f) ||
      !std::isfinite(costs.b) || !std::isfinite(costs.w)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} schedule: planning costs F = {}, B = {}, W = {} must be finite, F "
                            "and B > 0, W >= 0",
                            what, costs.f, costs.b, costs.w));
  }
}

// Per rank, 1F1B's order of its M forwards and backwards (true = B): P - r - 1 warm-up forwards
// (at most M), then F B pairs, then the remaining backwards.
std::vector<std::vector<bool>> one_f_one_b_orders(int P, int M) {
  std::vector<std::vector<bool>> order(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    auto& o = order[static_cast<std::size_t>(r)];
    const int warmup = std::min(P - r - 1, M);
    o.assign(static_cast<std::size_t>(warmup), false);
    for (int k = warmup; k < M; ++k) {
      o.push_back(false);
      o.push_back(true);
    }
    o.resize(2 * static_cast<std::size_t>(M), true);
  }
  return order;
}

// Stage 0's input gradient goes nowhere (no SEND_B), so a W that directly follows its own B there
// (no compute between) only costs the split's overhead: the B computes both instead. The plan is
// unchanged (a fused B costs b + w, what B then W took) and the stash is freed one action earlier.
void fuse_first_stage_weights(Schedule& sched) {
  auto& list = sched.ranks[static_cast<std::size_t>(rank_of(sched, 0))];
  const auto is_compute = [](const Action& a) {
    return a.kind == ActionKind::F || a.kind == ActionKind::B || a.kind == ActionKind::W;
  };
  std::vector<Action> out;
  out.reserve(list.size());
  std::ptrdiff_t last_compute = -1;  // in `out`
  for (const Action& a : list) {
    if (a.kind == ActionKind::W && a.stage == 0 && last_compute >= 0 &&
        out[static_cast<std::size_t>(last_compute)] == Action{ActionKind::B, 0, a.microbatch}) {
      continue;
    }
    if (is_compute(a)) last_compute = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(a);
  }
  list = std::move(out);
}

Schedule greedy_zero_bubble(Schedule sched, const GreedyPolicy& policy, const ActionCosts& costs,
                            std::string_view what) {
  check_plan_costs(costs, what);
  const int P = sched.stages;
  const int M = sched.microbatches;
  const int S = stage_count(sched);
  const auto idx = [M](int stage, int mb) {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(M) +
           static_cast<std::size_t>(mb);
  };
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // End times; kNever = not run yet.
  std::vector<double> f_end(idx(S, 0), kNever), b_end(idx(S, 0), kNever);
  std::vector<int> next_f(static_cast<std::size_t>(S), 0);  // forwards run in microbatch order
  std::vector<int> next_b(static_cast<std::size_t>(S), 0);  // and so do backwards
  std::vector<std::deque<std::pair<int, int>>> pending_w(static_cast<std::size_t>(P));
  std::vector<int> live(static_cast<std::size_t>(P), 0);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0.0);
  std::vector<bool> waiting(static_cast<std::size_t>(P), false);  // stalled until an action ends
  std::vector<std::size_t> left_on(static_cast<std::size_t>(P), 3 * idx(sched.chunks, 0));
  // 1F1B's F / B order per rank (true = B), for one_f_one_b_order; pos = the next one.
  const std::vector<std::vector<bool>> order =
      policy.one_f_one_b_order ? one_f_one_b_orders(P, M)
                               : std::vector<std::vector<bool>>(static_cast<std::size_t>(P));
  std::vector<std::size_t> pos(static_cast<std::size_t>(P), 0);
  std::vector<RankBuilder> builders;
  builders.reserve(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) builders.emplace_back(sched, r);
  // Event-driven: the rank that is free first decides next (ties: the lower rank).
  for (;;) {
    int r = -1;
    for (int q = 0; q < P; ++q) {
      const auto qu = static_cast<std::size_t>(q);
      if (left_on[qu] > 0 && (r < 0 || free_at[qu] < free_at[static_cast<std::size_t>(r)])) r = q;
    }
    if (r < 0) break;
    const auto ru = static_cast<std::size_t>(r);
    const double t = free_at[ru];
    if (t == kNever) {
      throw Error(ErrorCode::Internal,
                  fmt::format("{} schedule: list scheduling stalled at P = {}, M = {} with a "
                              "limit of {} stashes per rank",
                              what, P, M, policy.cap));
    }
    waiting[ru] = false;
    RankBuilder& b = builders[ru];
    double cost = 0.0;
    auto try_backward = [&](int v) {
      const int mb = next_b[static_cast<std::size_t>(v)];
      if (mb >= M) return false;
      const double ready = v == S - 1 ? f_end[idx(v, mb)] : b_end[idx(v + 1, mb)];
      if (ready > t) return false;
      b.backward(v, mb);
      b_end[idx(v, mb)] = t + costs.b;
      cost = costs.b;
      ++next_b[static_cast<std::size_t>(v)];
      pending_w[ru].emplace_back(v, mb);
      return true;
    };
    auto try_forward = [&](int v, int limit) {
      const int mb = next_f[static_cast<std::size_t>(v)];
      if (mb >= M || live[ru] >= limit) return false;
      if (v > 0 && f_end[idx(v - 1, mb)] > t) return false;
      b.forward(v, mb);
      f_end[idx(v, mb)] = t + costs.f;
      cost = costs.f;
      ++next_f[static_cast<std::size_t>(v)];
      ++live[ru];
      return true;
    };
    bool done = false;
    if (policy.one_f_one_b_order) {
      const auto& o = order[ru];
      if (pos[ru] < o.size()) {
        done = o[pos[ru]] ? try_backward(r) : try_forward(r, policy.cap);
        if (done) ++pos[ru];
      }
    } else {
      for (int c = sched.chunks - 1; c >= 0 && !done; --c) {
        done = try_backward(stage_of(sched, r, c));
      }
      for (int c = sched.chunks - 1; c >= 0 && !done; --c) {
        const int limit = policy.reserve_for_chunk1 && c == 0 ? policy.cap - 1 : policy.cap;
        done = try_forward(stage_of(sched, r, c), limit);
      }
    }
    if (!done && !pending_w[ru].empty()) {
      const auto [v, mb] = pending_w[ru].front();
      pending_w[ru].pop_front();
      b.weight(v, mb);
      cost = costs.w;
      --live[ru];
      done = true;
    }
    if (done) {
      free_at[ru] = t + cost;
      --left_on[ru];
      // Ranks waiting for something look again when this ends.
      for (int q = 0; q < P; ++q) {
        const auto qu = static_cast<std::size_t>(q);
        if (waiting[qu] && t + cost < free_at[qu]) free_at[qu] = t + cost;
      }
      continue;
    }
    // Nothing is ready: wait for the next completion of what has been started.
    double next = kNever;
    for (const auto* ends : {&f_end, &b_end}) {
      for (double e : *ends) {
        if (e > t && e < next) next = e;
      }
    }
    waiting[ru] = true;
    free_at[ru] = next;
  }
  for (int r = 0; r < P; ++r) builders[static_cast<std::size_t>(r)].finish();
  fuse_first_stage_weights(sched);
  return sched;
}

}  // namespace

Schedule make_zb_h1(int stages, int microbatches, const ActionCosts& plan_costs) {
  check_shape("zb-h1", stages, microbatches);
  return greedy_zero_bubble(empty_schedule(stages, microbatches),
                            GreedyPolicy{.cap = stages, .one_f_one_b_order = true}, plan_costs,
                            "zb-h1");
}

Schedule make_zb_v(int stages, int microbatches, const ActionCosts& plan_costs) {
  check_shape("zbv", stages, microbatches);
  return greedy_zero_bubble(empty_schedule(stages, microbatches, 2, StagePlacement::V),
                            GreedyPolicy{.cap = 2 * stages, .reserve_for_chunk1 = true}, plan_costs,
                            "zbv");
}

namespace {

// One rank of DualPipeV: the phases of make_dualpipev's comment, with per-chunk counters of the
// next F and B and a queue of the B's whose W is pending.
class DualPipeVRank {
 public:
  DualPipeVRank(Schedule& sched, int rank)
      : b_(sched, rank), stage_{stage_of(sched, rank, 0), stage_of(sched, rank, 1)} {}

  void f(int c) { b_.forward(stage_[c], next_f_[c]++); }
  // split: the B computes the input gradient only and its W joins the queue.
  void b(int c, bool split) {
    const int mb = next_b_[c]++;
    b_.backward(stage_[c], mb);
    if (split) pending_w_.emplace_back(stage_[c], mb);
  }
  void w() {
    const auto [stage, mb] = pending_w_.front();
    pending_w_.pop_front();
    b_.weight(stage, mb);
  }
  // F of chunk fc paired with a full B of chunk bc.
  void overlapped(int fc, int bc) {
    b_.overlapped(stage_[fc], next_f_[fc]++, stage_[bc], next_b_[bc]++);
  }
  void finish() { b_.finish(); }

 private:
  RankBuilder b_;
  std::array<int, 2> stage_;
  std::array<int, 2> next_f_{0, 0};
  std::array<int, 2> next_b_{0, 0};
  std::deque<std::pair<int, int>> pending_w_;
};

}  // namespace

Schedule make_dualpipev(int stages, int microbatches) {
  check_shape("dualpipev", stages, microbatches);
  const int P = stages;
  const int M = microbatches;
  if (M < 2 * P) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("dualpipev schedule: {} microbatches for {} ranks; it needs at least "
                            "2 x ranks = {} (one per model stage) to fill its steady phase",
                            M, P, 2 * P));
  }
  Schedule sched = empty_schedule(P, M, 2, StagePlacement::V);
  for (int r = 0; r < P; ++r) {
    DualPipeVRank x(sched, r);
    const int rest = P - r - 1;  // ranks after this one
    for (int i = 0; i < 2 * rest; ++i) x.f(0);
    for (int i = 0; i <= r; ++i) {
      x.f(0);
      x.f(1);
    }
    for (int i = 0; i < rest; ++i) {
      x.b(1, true);
      x.w();
      x.f(1);
    }
    for (int i = 0; i < M - 2 * P + r + 1; ++i) {
      if (i == 0 && rest == 0) {
        // The turn of the V: F0's output feeds B1's own F1 right here; DeepSeek leaves these two
        // unpaired to shorten the bubble.
        x.f(0);
        x.b(1, false);
      } else {
        x.overlapped(0, 1);
      }
      x.overlapped(1, 0);
    }
    for (int i = 0; i < rest; ++i) {
      x.b(1, false);
      x.overlapped(1, 0);
    }
    // Splitting the second half of these backwards lets the W's fill the cool-down.
    const int h = (r + 1) / 2;
    for (int i = 0; i <= r; ++i) {
      x.b(1, i > h || (i == h && r % 2 == 1));
      x.b(0, i >= h);
    }
    for (int i = 0; i < rest; ++i) {
      x.w();
      x.b(0, true);
    }
    for (int i = 0; i <= r; ++i) x.w();
    x.finish();
  }
  return sched;
}

namespace {
constexpr std::array kKinds = {ScheduleKind::GPipe,       ScheduleKind::OneFOneB,
                               ScheduleKind::Interleaved, ScheduleKind::ZbH1,
                               ScheduleKind::ZbV,         ScheduleKind::DualPipeV};
}  // namespace

int default_chunks(ScheduleKind kind) noexcept {
  return kind == ScheduleKind::Interleaved || kind == ScheduleKind::ZbV ||
                 kind == ScheduleKind::DualPipeV
             ? 2
             : 1;
}

std::string_view schedule_kind_name(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZbH1: return "zb-h1";
    case ScheduleKind::ZbV: return "zbv";
    case ScheduleKind::DualPipeV: return "dualpipev";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<std::string_view> names;
  for (ScheduleKind k : kKinds) {
    if (lower == schedule_kind_name(k)) return k;
    names.push_back(schedule_kind_name(k));
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown pipeline schedule '{}': choose one of {}", name,
                          fmt::join(names, ", ")));
}

Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks,
                       const ActionCosts& plan_costs) {
  const int own = default_chunks(kind);
  if (chunks == 0) chunks = own;
  if (kind != ScheduleKind::Interleaved && chunks != own) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} schedule: {} chunks per rank asked for, but it runs exactly {}; "
                            "only interleaved takes --chunks",
                            schedule_kind_name(kind), chunks, own));
  }
  switch (kind) {
    case ScheduleKind::GPipe: return make_gpipe(stages, microbatches);
    case ScheduleKind::OneFOneB: return make_1f1b(stages, microbatches);
    case ScheduleKind::Interleaved: return make_interleaved_1f1b(stages, microbatches, chunks);
    case ScheduleKind::ZbH1: return make_zb_h1(stages, microbatches, plan_costs);
    case ScheduleKind::ZbV: return make_zb_v(stages, microbatches, plan_costs);
    case ScheduleKind::DualPipeV: return make_dualpipev(stages, microbatches);
  }
  throw Error(ErrorCode::Internal, "make_schedule: unhandled schedule kind");
}

}  // namespace strait::sched
