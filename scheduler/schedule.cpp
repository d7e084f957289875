#include "scheduler/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "scheduler/schedule_validate.h"

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

// Appends the actions of one stage, keeping the communication rules in one place.
class StageBuilder {
 public:
  StageBuilder(int stage, int stages, std::vector<Action>& out)
      : stage_(stage), last_(stage == stages - 1), out_(out) {}

  void forward(int mb) {
    if (stage_ > 0) push(ActionKind::RecvF, mb);
    push(ActionKind::F, mb);
    if (!last_) push(ActionKind::SendF, mb);
  }
  void backward(int mb) {
    if (!last_) push(ActionKind::RecvB, mb);
    push(ActionKind::B, mb);
    if (stage_ > 0) push(ActionKind::SendB, mb);
  }
  void finish() {
    push(ActionKind::AllreduceGrad, kNoMicrobatch);
    push(ActionKind::Optim, kNoMicrobatch);
  }

 private:
  void push(ActionKind kind, int mb) { out_.push_back(Action{kind, stage_, mb}); }

  int stage_;
  bool last_;
  std::vector<Action>& out_;
};

Schedule empty_schedule(int stages, int microbatches) {
  Schedule s;
  s.stages = stages;
  s.microbatches = microbatches;
  s.ranks.resize(static_cast<std::size_t>(stages));
  return s;
}

}  // namespace

std::string_view action_kind_name(ActionKind kind) noexcept {
  switch (kind) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::SendF: return "SEND_F";
    case ActionKind::RecvF: return "RECV_F";
    case ActionKind::SendB: return "SEND_B";
    case ActionKind::RecvB: return "RECV_B";
    case ActionKind::AllreduceGrad: return "ALLREDUCE_GRAD";
    case ActionKind::Optim: return "OPTIM";
    case ActionKind::Offload: return "OFFLOAD";
    case ActionKind::Reload: return "RELOAD";
  }
  return "?";
}

std::string to_string(const Action& action) {
  if (action.microbatch == kNoMicrobatch) return std::string(action_kind_name(action.kind));
  return fmt::format("{}{}", action_kind_name(action.kind), action.microbatch);
}

Schedule make_gpipe(int stages, int microbatches) {
  check_shape("gpipe", stages, microbatches);
  Schedule sched = empty_schedule(stages, microbatches);
  for (int s = 0; s < stages; ++s) {
    StageBuilder b(s, stages, sched.ranks[static_cast<std::size_t>(s)]);
    for (int mb = 0; mb < microbatches; ++mb) b.forward(mb);
    for (int mb = microbatches - 1; mb >= 0; --mb) b.backward(mb);
    b.finish();
  }
  return sched;
}

Schedule make_1f1b(int stages, int microbatches) {
  check_shape("1f1b", stages, microbatches);
  Schedule sched = empty_schedule(stages, microbatches);
  for (int s = 0; s < stages; ++s) {
    StageBuilder b(s, stages, sched.ranks[static_cast<std::size_t>(s)]);
    const int warmup = std::min(stages - s - 1, microbatches);
    int next_f = 0;
    int next_b = 0;
    for (; next_f < warmup; ++next_f) b.forward(next_f);
    while (next_f < microbatches) {
      b.forward(next_f++);
      b.backward(next_b++);
    }
    while (next_b < microbatches) b.backward(next_b++);
    b.finish();
  }
  return sched;
}

std::string_view schedule_kind_name(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    if (lower == schedule_kind_name(k)) return k;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown pipeline schedule '{}': choose one of gpipe, 1f1b", name));
}

Schedule make_schedule(ScheduleKind kind, int stages, int microbatches) {
  switch (kind) {
    case ScheduleKind::GPipe: return make_gpipe(stages, microbatches);
    case ScheduleKind::OneFOneB: return make_1f1b(stages, microbatches);
  }
  throw Error(ErrorCode::Internal, "make_schedule: unhandled schedule kind");
}

namespace {

// The actions the prefetch distance counts, and between which a stash lives. A switch, so that a
// new kind (zero bubble's W, which also reads the stash) must be decided on here.
bool is_compute(ActionKind kind) {
  switch (kind) {
    case ActionKind::F:
    case ActionKind::B: return true;
    case ActionKind::SendF:
    case ActionKind::RecvF:
    case ActionKind::SendB:
    case ActionKind::RecvB:
    case ActionKind::AllreduceGrad:
    case ActionKind::Optim:
    case ActionKind::Offload:
    case ActionKind::Reload: return false;
  }
  return false;
}

// Stashes in the model at most (schedule_sim.h's peak_stashed_microbatches for one list).
int resident_peak(const std::vector<Action>& list) {
  int live = 0;
  int peak = 0;
  for (const Action& a : list) {
    if (a.kind == ActionKind::F || a.kind == ActionKind::Reload) peak = std::max(peak, ++live);
    if (a.kind == ActionKind::B || a.kind == ActionKind::Offload) --live;
  }
  return peak;
}

// One stage's list with OFFLOAD / RELOAD inserted (see add_activation_offload).
std::vector<Action> offload_stage(const std::vector<Action>& list, int stage, int microbatches,
                                  int prefetch) {
  const auto m = static_cast<std::size_t>(microbatches);
  std::vector<std::size_t> f_at(m), b_at(m);
  std::vector<std::size_t> computes;  // indices of F and B in `list`
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!is_compute(a.kind)) continue;
    computes.push_back(i);
    (a.kind == ActionKind::F ? f_at : b_at)[static_cast<std::size_t>(a.microbatch)] = i;
  }
  // after[i]: actions to insert after list[i]; before[i]: before list[i].
  std::vector<std::vector<Action>> after(list.size()), before(list.size());
  // The backward order decides the order of RELOADs that land on the same spot.
  for (const std::size_t ci : computes) {
    const Action& bwd = list[ci];
    if (bwd.kind != ActionKind::B) continue;
    const auto mb = static_cast<std::size_t>(bwd.microbatch);
    // Computes strictly between F(mb) and B(mb), as positions in `computes`.
    const auto f_pos = static_cast<std::size_t>(
        std::lower_bound(computes.begin(), computes.end(), f_at[mb]) - computes.begin());
    const auto b_pos = static_cast<std::size_t>(
        std::lower_bound(computes.begin(), computes.end(), b_at[mb]) - computes.begin());
    const std::size_t between = b_pos - f_pos - 1;
    if (between <= static_cast<std::size_t>(prefetch)) continue;  // the stash is never idle
    // OFFLOAD right after F and the sends that follow it.
    std::size_t off = f_at[mb];
    while (off + 1 < list.size() &&
           (list[off + 1].kind == ActionKind::SendF || list[off + 1].kind == ActionKind::SendB)) {
      ++off;
    }
    after[off].push_back(Action{ActionKind::Offload, stage, bwd.microbatch});
    // RELOAD before the compute `prefetch` computes ahead of B, hoisted above its receives.
    std::size_t at = computes[b_pos - static_cast<std::size_t>(prefetch)];
    while (at > off + 1 &&
           (list[at - 1].kind == ActionKind::RecvF || list[at - 1].kind == ActionKind::RecvB)) {
      --at;
    }
    before[at].push_back(Action{ActionKind::Reload, stage, bwd.microbatch});
  }
  std::vector<Action> out;
  out.reserve(list.size() + 2 * m);
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
                    fmt::format("activation offload: stage {} already has {}; add offload to a "
                                "schedule once",
                                a.stage, to_string(a)));
      }
    }
  }
  Schedule out = schedule;
  for (std::size_t s = 0; s < out.ranks.size(); ++s) {
    auto list =
        offload_stage(schedule.ranks[s], static_cast<int>(s), schedule.microbatches, prefetch);
    // Copies that would not save a slot are not worth their bandwidth.
    if (resident_peak(list) < resident_peak(schedule.ranks[s])) out.ranks[s] = std::move(list);
  }
  validate_schedule(out);  // the transform's own promise, checked
  return out;
}

int offloaded_microbatches(const Schedule& schedule, int stage) {
  if (stage < 0 || stage >= schedule.stages ||
      static_cast<std::size_t>(stage) >= schedule.ranks.size()) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("offloaded_microbatches: stage {} is outside [0, {})", stage, schedule.stages));
  }
  const auto& list = schedule.ranks[static_cast<std::size_t>(stage)];
  return static_cast<int>(std::count_if(
      list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::Offload; }));
}

}  // namespace strait::sched
