#include "scheduler/schedule_validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strait::sched {
namespace {

constexpr std::size_t kMaxProblems = 12;

constexpr std::size_t slot(ActionKind kind) {
  switch (kind) {
    case ActionKind::F: return 0;
    case ActionKind::B: return 1;
    case ActionKind::SendF: return 2;
    case ActionKind::RecvF: return 3;
    case ActionKind::SendB: return 4;
    case ActionKind::RecvB: return 5;
    case ActionKind::AllreduceGrad: return 6;
    case ActionKind::Optim: return 7;
    case ActionKind::Offload: return 8;
    case ActionKind::Reload: return 9;
  }
  return 0;
}
constexpr std::size_t kSlots = 10;

bool has_microbatch(ActionKind kind) {
  return kind != ActionKind::AllreduceGrad && kind != ActionKind::Optim;
}

class Problems {
 public:
  template <class... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    if (list_.size() < kMaxProblems) list_.push_back(fmt::format(f, std::forward<Args>(args)...));
    ++count_;
  }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  [[noreturn]] void raise(const Schedule& s) const {
    std::string msg = fmt::format("invalid pipeline schedule ({} stages, {} microbatches): {}",
                                  s.stages, s.microbatches, fmt::join(list_, "; "));
    if (count_ > list_.size()) msg += fmt::format("; and {} more", count_ - list_.size());
    throw Error(ErrorCode::InvalidArgument, msg);
  }

 private:
  std::vector<std::string> list_;
  std::size_t count_ = 0;
};

// positions[slot][mb] = indices in the stage's list where that action occurs.
struct StageIndex {
  std::array<std::vector<std::vector<std::size_t>>, kSlots> positions;
  std::vector<std::size_t> allreduce;
  std::vector<std::size_t> optim;
};

std::string name(ActionKind kind, int mb) {
  return to_string(Action{kind, 0, mb});
}

void check_shape_and_index(const Schedule& sched, std::vector<StageIndex>& index,
                           Problems& problems) {
  const int P = sched.stages;
  const int M = sched.microbatches;
  index.resize(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) {
    StageIndex& idx = index[static_cast<std::size_t>(s)];
    for (auto& per_mb : idx.positions) per_mb.resize(static_cast<std::size_t>(M));
    const auto& list = sched.ranks[static_cast<std::size_t>(s)];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.stage != s) {
        problems.add("stage {} action {} ({}) names stage {}", s, i, to_string(a), a.stage);
      }
      if (!has_microbatch(a.kind)) {
        if (a.microbatch != kNoMicrobatch) {
          problems.add("stage {} action {} ({}) must not name a microbatch", s, i,
                       action_kind_name(a.kind));
          continue;
        }
        (a.kind == ActionKind::AllreduceGrad ? idx.allreduce : idx.optim).push_back(i);
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= M) {
        problems.add("stage {} action {} ({}) names microbatch {}, outside [0, {})", s, i,
                     action_kind_name(a.kind), a.microbatch, M);
        continue;
      }
      const bool first = s == 0;
      const bool last = s == P - 1;
      if ((first && (a.kind == ActionKind::RecvF || a.kind == ActionKind::SendB)) ||
          (last && (a.kind == ActionKind::SendF || a.kind == ActionKind::RecvB))) {
        problems.add("stage {} action {} ({}) has no neighbour stage to talk to", s, i,
                     to_string(a));
        continue;
      }
      idx.positions[slot(a.kind)][static_cast<std::size_t>(a.microbatch)].push_back(i);
    }
  }
}

void check_counts(const Schedule& sched, const std::vector<StageIndex>& index, Problems& problems) {
  const int P = sched.stages;
  for (int s = 0; s < P; ++s) {
    const StageIndex& idx = index[static_cast<std::size_t>(s)];
    for (int mb = 0; mb < sched.microbatches; ++mb) {
      const auto m = static_cast<std::size_t>(mb);
      for (ActionKind k : {ActionKind::F, ActionKind::B}) {
        const std::size_t n = idx.positions[slot(k)][m].size();
        if (n != 1) {
          problems.add("stage {} runs {} {} times; it must run exactly once", s, name(k, mb), n);
        }
      }
    }
    for (int mb = 0; mb < sched.microbatches; ++mb) {
      const auto m = static_cast<std::size_t>(mb);
      const std::size_t offloads = idx.positions[slot(ActionKind::Offload)][m].size();
      const std::size_t reloads = idx.positions[slot(ActionKind::Reload)][m].size();
      if (offloads > 1 || reloads > 1 || offloads != reloads) {
        problems.add(
            "stage {} has {} {} and {} {}; a stash that leaves the model once must come back "
            "once (one of each, or neither)",
            s, offloads, name(ActionKind::Offload, mb), reloads, name(ActionKind::Reload, mb));
      }
    }
    if (idx.allreduce.size() != 1 || idx.optim.size() != 1) {
      problems.add("stage {} has {} ALLREDUCE_GRAD and {} OPTIM; it needs exactly one of each", s,
                   idx.allreduce.size(), idx.optim.size());
    }
  }
  // Each message (direction, sender stage, microbatch) needs exactly one SEND and one RECV.
  struct Link {
    ActionKind send;
    ActionKind recv;
    int delta;  // receiver stage - sender stage
  };
  for (const Link link : {Link{ActionKind::SendF, ActionKind::RecvF, +1},
                          Link{ActionKind::SendB, ActionKind::RecvB, -1}}) {
    for (int from = 0; from < P; ++from) {
      const int to = from + link.delta;
      if (to < 0 || to >= P) continue;
      for (int mb = 0; mb < sched.microbatches; ++mb) {
        const auto m = static_cast<std::size_t>(mb);
        const std::size_t sends =
            index[static_cast<std::size_t>(from)].positions[slot(link.send)][m].size();
        const std::size_t recvs =
            index[static_cast<std::size_t>(to)].positions[slot(link.recv)][m].size();
        const std::string send_name = name(link.send, mb);
        const std::string recv_name = name(link.recv, mb);
        if (sends > 1) problems.add("stage {} has {} {}; expected one", from, sends, send_name);
        if (recvs > 1) problems.add("stage {} has {} {}; expected one", to, recvs, recv_name);
        if (sends == 0 && recvs == 0) {
          problems.add(
              "stage {} never sends microbatch {} to stage {} (no {} on stage {}, no {} "
              "on stage {})",
              from, mb, to, send_name, from, recv_name, to);
        } else if (sends == 0) {
          problems.add("{} on stage {} has no matching {} on stage {}", recv_name, to, send_name,
                       from);
        } else if (recvs == 0) {
          problems.add("{} on stage {} has no matching {} on stage {}", send_name, from, recv_name,
                       to);
        }
      }
    }
  }
}

void check_order(const Schedule& sched, const std::vector<StageIndex>& index, Problems& problems) {
  const int P = sched.stages;
  for (int s = 0; s < P; ++s) {
    const StageIndex& idx = index[static_cast<std::size_t>(s)];
    // Only single occurrences have a well-defined position; the count check reported the rest.
    auto pos = [&](ActionKind k, int mb) -> const std::vector<std::size_t>& {
      return idx.positions[slot(k)][static_cast<std::size_t>(mb)];
    };
    auto require_before = [&](ActionKind first, ActionKind second, int mb, const char* why) {
      const auto& a = pos(first, mb);
      const auto& b = pos(second, mb);
      if (a.size() == 1 && b.size() == 1 && a[0] > b[0]) {
        problems.add("stage {} runs {} (action {}) before {} (action {}): {}", s, name(second, mb),
                     b[0], name(first, mb), a[0], why);
      }
    };
    std::size_t last_b = 0;
    int last_b_mb = kNoMicrobatch;
    for (int mb = 0; mb < sched.microbatches; ++mb) {
      if (s > 0) require_before(ActionKind::RecvF, ActionKind::F, mb, "its input is not there");
      if (s < P - 1) {
        require_before(ActionKind::F, ActionKind::SendF, mb, "it sends what is not computed");
        require_before(ActionKind::RecvB, ActionKind::B, mb, "its output gradient is not there");
      }
      require_before(ActionKind::F, ActionKind::B, mb, "a backward needs its forward");
      require_before(ActionKind::F, ActionKind::Offload, mb, "it offloads a stash not yet made");
      require_before(ActionKind::Offload, ActionKind::Reload, mb,
                     "it reloads a stash that was never offloaded");
      require_before(ActionKind::Reload, ActionKind::B, mb,
                     "the backward needs its stash back in the model");
      if (s > 0)
        require_before(ActionKind::B, ActionKind::SendB, mb, "it sends what is not computed");
      const auto& b = pos(ActionKind::B, mb);
      if (b.size() == 1 && (last_b_mb == kNoMicrobatch || b[0] > last_b)) {
        last_b = b[0];
        last_b_mb = mb;
      }
    }
    if (idx.allreduce.size() == 1 && idx.optim.size() == 1) {
      if (last_b_mb != kNoMicrobatch && idx.allreduce[0] < last_b) {
        problems.add(
            "stage {} runs ALLREDUCE_GRAD (action {}) before B{} (action {}): gradients "
            "are reduced only once every backward is done",
            s, idx.allreduce[0], last_b_mb, last_b);
      }
      if (idx.optim[0] < idx.allreduce[0]) {
        problems.add("stage {} runs OPTIM (action {}) before ALLREDUCE_GRAD (action {})", s,
                     idx.optim[0], idx.allreduce[0]);
      }
    }
  }
}

// Sends complete at once; a receive blocks until its matching send has run. Assumes the counts
// check passed, so every receive has exactly one send.
void check_deadlock(const Schedule& sched, Problems& problems) {
  const auto P = static_cast<std::size_t>(sched.stages);
  const auto M = static_cast<std::size_t>(sched.microbatches);
  // sent[0] forward messages by sender stage, sent[1] backward ones.
  std::array<std::vector<bool>, 2> sent = {std::vector<bool>(P * M), std::vector<bool>(P * M)};
  std::vector<std::size_t> pc(P, 0);
  auto done = [&](std::size_t s) { return pc[s] == sched.ranks[s].size(); };
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t s = 0; s < P; ++s) {
      const auto& list = sched.ranks[s];
      while (!done(s)) {
        const Action& a = list[pc[s]];
        const auto mb = static_cast<std::size_t>(a.microbatch);
        if (a.kind == ActionKind::RecvF && !sent[0][(s - 1) * M + mb]) break;
        if (a.kind == ActionKind::RecvB && !sent[1][(s + 1) * M + mb]) break;
        if (a.kind == ActionKind::SendF) sent[0][s * M + mb] = true;
        if (a.kind == ActionKind::SendB) sent[1][s * M + mb] = true;
        ++pc[s];
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (std::size_t s = 0; s < P; ++s) {
    if (done(s)) {
      stuck.push_back(fmt::format("stage {} finished", s));
      continue;
    }
    const Action& a = sched.ranks[s][pc[s]];
    const bool fwd = a.kind == ActionKind::RecvF;
    stuck.push_back(
        fmt::format("stage {} is blocked at action {} ({}) waiting for {} from stage {}", s, pc[s],
                    to_string(a), name(fwd ? ActionKind::SendF : ActionKind::SendB, a.microbatch),
                    fwd ? s - 1 : s + 1));
  }
  for (std::size_t s = 0; s < P; ++s) {
    if (!done(s)) {
      problems.add("the order deadlocks with blocking receives: {}", fmt::join(stuck, ", "));
      return;
    }
  }
}

}  // namespace

void validate_schedule(const Schedule& sched) {
  Problems problems;
  if (sched.stages < 1 || sched.microbatches < 1 ||
      sched.ranks.size() != static_cast<std::size_t>(sched.stages)) {
    problems.add(
        "it needs stages >= 1, microbatches >= 1 and one action list per stage, got {} "
        "action lists",
        sched.ranks.size());
    problems.raise(sched);
  }
  std::vector<StageIndex> index;
  check_shape_and_index(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_counts(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_order(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_deadlock(sched, problems);
  if (!problems.empty()) problems.raise(sched);
}

}  // namespace strait::sched
