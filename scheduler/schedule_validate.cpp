#include "scheduler/schedule_validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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
    case ActionKind::W: return 2;
    case ActionKind::SendF: return 3;
    case ActionKind::RecvF: return 4;
    case ActionKind::SendB: return 5;
    case ActionKind::RecvB: return 6;
    case ActionKind::Offload: return 7;
    case ActionKind::Reload: return 8;
    case ActionKind::AllreduceGrad:
    case ActionKind::Optim:
    case ActionKind::OverlapFB: return 9;  // not indexed by (stage, microbatch)
  }
  return 0;
}
constexpr std::size_t kSlots = 9;

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
    std::string msg =
        fmt::format("invalid pipeline schedule ({} ranks x {} chunks, {} microbatches): {}",
                    s.stages, s.chunks, s.microbatches, fmt::join(list_, "; "));
    if (count_ > list_.size()) msg += fmt::format("; and {} more", count_ - list_.size());
    throw Error(ErrorCode::InvalidArgument, msg);
  }

 private:
  std::vector<std::string> list_;
  std::size_t count_ = 0;
};

// positions[slot][stage * M + mb] = indices in the holding rank's list where that action occurs.
struct Index {
  std::array<std::vector<std::vector<std::size_t>>, kSlots> positions;
  std::vector<std::vector<std::size_t>> allreduce, optim;  // per rank
  std::size_t m = 0;

  [[nodiscard]] const std::vector<std::size_t>& at(ActionKind k, int stage, int mb) const {
    return positions[slot(k)][static_cast<std::size_t>(stage) * m + static_cast<std::size_t>(mb)];
  }
};

std::string name(ActionKind kind, int stage, int mb) {
  return action_string(Action{kind, stage, mb});
}

// A neighbour stage that exists and lives on another rank than `stage`.
bool remote(const Schedule& s, int stage, int neighbour) {
  return neighbour >= 0 && neighbour < stage_count(s) && rank_of(s, neighbour) != rank_of(s, stage);
}

void check_shape_and_index(const Schedule& sched, Index& index, Problems& problems) {
  const int P = sched.stages;
  const int M = sched.microbatches;
  const int S = stage_count(sched);
  index.m = static_cast<std::size_t>(M);
  for (auto& per_key : index.positions) per_key.resize(static_cast<std::size_t>(S) * index.m);
  index.allreduce.resize(static_cast<std::size_t>(P));
  index.optim.resize(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    const auto& list = sched.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.stage < 0 || a.stage >= S) {
        problems.add("rank {} action {} ({}) names stage {}, outside [0, {})", r, i,
                     action_string(a), a.stage, S);
        continue;
      }
      if (rank_of(sched, a.stage) != r) {
        problems.add("rank {} action {} ({}) runs stage {}, which lives on rank {}", r, i,
                     action_string(a), a.stage, rank_of(sched, a.stage));
        continue;
      }
      if (!has_microbatch(a.kind)) {
        if (a.microbatch != kNoMicrobatch) {
          problems.add("rank {} action {} ({}) must not name a microbatch", r, i,
                       action_kind_name(a.kind));
          continue;
        }
        (a.kind == ActionKind::AllreduceGrad ? index.allreduce
                                             : index.optim)[static_cast<std::size_t>(r)]
            .push_back(i);
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= M) {
        problems.add("rank {} action {} ({}) names microbatch {}, outside [0, {})", r, i,
                     action_string(a), a.microbatch, M);
        continue;
      }
      if (a.kind == ActionKind::OverlapFB) continue;  // check_overlaps
      const bool to_prev = a.kind == ActionKind::RecvF || a.kind == ActionKind::SendB;
      const bool to_next = a.kind == ActionKind::SendF || a.kind == ActionKind::RecvB;
      if ((to_prev && !remote(sched, a.stage, a.stage - 1)) ||
          (to_next && !remote(sched, a.stage, a.stage + 1))) {
        problems.add(
            "rank {} action {} ({}) has no neighbour stage on another rank to talk to (data "
            "between stages of one rank stays in the rank)",
            r, i, action_string(a));
        continue;
      }
      index
          .positions[slot(a.kind)][static_cast<std::size_t>(a.stage) * index.m +
                                   static_cast<std::size_t>(a.microbatch)]
          .push_back(i);
    }
  }
}

bool is_compute(ActionKind k) {
  return k == ActionKind::F || k == ActionKind::B || k == ActionKind::W;
}

// An OVERLAP_F_B pairs the next two computes of its rank: its own F, then a B of another stage.
// Between them only transfers and activation copies (no W, no other pair, no ALLREDUCE / OPTIM).
void check_overlaps(const Schedule& sched, Problems& problems) {
  for (int r = 0; r < sched.stages; ++r) {
    const auto& list = sched.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& pair = list[i];
      if (pair.kind != ActionKind::OverlapFB) continue;
      std::vector<const Action*> next;  // the next two computes, or what stops the pair
      for (std::size_t j = i + 1; j < list.size() && next.size() < 2; ++j) {
        const ActionKind k = list[j].kind;
        if (is_compute(k) || k == ActionKind::OverlapFB || !has_microbatch(k)) {
          next.push_back(&list[j]);
        }
      }
      const Action f{ActionKind::F, pair.stage, pair.microbatch};
      const bool ok = next.size() == 2 && *next[0] == f && next[1]->kind == ActionKind::B &&
                      next[1]->stage != pair.stage;
      if (!ok) {
        problems.add(
            "rank {} action {} ({}) must be followed by {} and then a B of another stage, with "
            "only transfers or activation copies between; found {}",
            r, i, action_string(pair), action_string(f),
            next.empty() ? std::string("nothing")
                         : fmt::format("{}{}", action_string(*next[0]),
                                       next.size() > 1 ? ", " + action_string(*next[1]) : ""));
      }
    }
  }
}

void check_counts(const Schedule& sched, const Index& index, Problems& problems) {
  const int S = stage_count(sched);
  for (int v = 0; v < S; ++v) {
    const int r = rank_of(sched, v);
    for (int mb = 0; mb < sched.microbatches; ++mb) {
      for (ActionKind k : {ActionKind::F, ActionKind::B}) {
        const std::size_t n = index.at(k, v, mb).size();
        if (n != 1) {
          problems.add("rank {} runs {} {} times; it must run exactly once", r, name(k, v, mb), n);
        }
      }
      if (const std::size_t n = index.at(ActionKind::W, v, mb).size(); n > 1) {
        problems.add("rank {} runs {} {} times; at most once", r, name(ActionKind::W, v, mb), n);
      }
      const std::size_t offloads = index.at(ActionKind::Offload, v, mb).size();
      const std::size_t reloads = index.at(ActionKind::Reload, v, mb).size();
      if (offloads > 1 || reloads > 1 || offloads != reloads) {
        problems.add(
            "rank {} has {} {} and {} {}; a stash that leaves the model once must come back "
            "once (one of each, or neither)",
            r, offloads, name(ActionKind::Offload, v, mb), reloads,
            name(ActionKind::Reload, v, mb));
      }
    }
  }
  for (int r = 0; r < sched.stages; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    if (index.allreduce[ru].size() != 1 || index.optim[ru].size() != 1) {
      problems.add("rank {} has {} ALLREDUCE_GRAD and {} OPTIM; it needs exactly one of each", r,
                   index.allreduce[ru].size(), index.optim[ru].size());
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
    for (int from = 0; from < S; ++from) {
      const int to = from + link.delta;
      if (!remote(sched, from, to)) continue;
      const int from_rank = rank_of(sched, from);
      const int to_rank = rank_of(sched, to);
      for (int mb = 0; mb < sched.microbatches; ++mb) {
        const std::size_t sends = index.at(link.send, from, mb).size();
        const std::size_t recvs = index.at(link.recv, to, mb).size();
        const std::string send_name = name(link.send, from, mb);
        const std::string recv_name = name(link.recv, to, mb);
        if (sends > 1) problems.add("rank {} has {} {}; expected one", from_rank, sends, send_name);
        if (recvs > 1) problems.add("rank {} has {} {}; expected one", to_rank, recvs, recv_name);
        if (sends == 0 && recvs == 0) {
          problems.add(
              "stage {} never sends microbatch {} to stage {} (no {} on rank {}, no {} on rank {})",
              from, mb, to, send_name, from_rank, recv_name, to_rank);
        } else if (sends == 0) {
          problems.add("{} on rank {} has no matching {} on rank {}", recv_name, to_rank, send_name,
                       from_rank);
        } else if (recvs == 0) {
          problems.add("{} on rank {} has no matching {} on rank {}", send_name, from_rank,
                       recv_name, to_rank);
        }
      }
    }
  }
}

void check_order(const Schedule& sched, const Index& index, Problems& problems) {
  const int S = stage_count(sched);
  // Latest B or W per rank, for the ALLREDUCE_GRAD check.
  std::vector<std::pair<std::size_t, std::string>> last_grad(
      static_cast<std::size_t>(sched.stages));
  std::vector<bool> any_grad(static_cast<std::size_t>(sched.stages), false);
  for (int v = 0; v < S; ++v) {
    const int r = rank_of(sched, v);
    // Only single occurrences have a well-defined position; the count check reported the rest.
    auto require = [&](ActionKind first, int first_stage, ActionKind second, int second_stage,
                       int mb, const char* why) {
      const auto& a = index.at(first, first_stage, mb);
      const auto& b = index.at(second, second_stage, mb);
      if (a.size() == 1 && b.size() == 1 && a[0] > b[0]) {
        problems.add("rank {} runs {} (action {}) before {} (action {}): {}", r,
                     name(second, second_stage, mb), b[0], name(first, first_stage, mb), a[0], why);
      }
    };
    for (int mb = 0; mb < sched.microbatches; ++mb) {
      using K = ActionKind;
      if (remote(sched, v, v - 1)) require(K::RecvF, v, K::F, v, mb, "its input is not there");
      if (v > 0 && !remote(sched, v, v - 1)) {
        require(K::F, v - 1, K::F, v, mb, "its input, from the same rank, is not computed");
        require(K::B, v, K::B, v - 1, mb, "its output gradient, from the same rank, is not there");
      }
      if (remote(sched, v, v + 1)) {
        require(K::F, v, K::SendF, v, mb, "it sends what is not computed");
        require(K::RecvB, v, K::B, v, mb, "its output gradient is not there");
      }
      require(K::F, v, K::B, v, mb, "a backward needs its forward");
      require(K::B, v, K::W, v, mb, "a weight gradient needs its backward's output gradient");
      require(K::F, v, K::Offload, v, mb, "it offloads a stash not yet made");
      require(K::Offload, v, K::Reload, v, mb, "it reloads a stash that was never offloaded");
      require(K::Reload, v, K::B, v, mb, "the backward needs its stash back in the model");
      if (remote(sched, v, v - 1))
        require(K::B, v, K::SendB, v, mb, "it sends what is not computed");
      for (K k : {K::B, K::W}) {
        const auto& pos = index.at(k, v, mb);
        const auto ru = static_cast<std::size_t>(r);
        if (pos.size() == 1 && (!any_grad[ru] || pos[0] > last_grad[ru].first)) {
          last_grad[ru] = {pos[0], name(k, v, mb)};
          any_grad[ru] = true;
        }
      }
    }
  }
  for (int r = 0; r < sched.stages; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    if (index.allreduce[ru].size() != 1 || index.optim[ru].size() != 1) continue;
    if (any_grad[ru] && index.allreduce[ru][0] < last_grad[ru].first) {
      problems.add(
          "rank {} runs ALLREDUCE_GRAD (action {}) before {} (action {}): gradients are reduced "
          "only once every backward and weight gradient is done",
          r, index.allreduce[ru][0], last_grad[ru].second, last_grad[ru].first);
    }
    if (index.optim[ru][0] < index.allreduce[ru][0]) {
      problems.add("rank {} runs OPTIM (action {}) before ALLREDUCE_GRAD (action {})", r,
                   index.optim[ru][0], index.allreduce[ru][0]);
    }
  }
}

// Sends complete at once; a receive blocks until its matching send has run. Assumes the counts
// check passed, so every receive has exactly one send.
void check_deadlock(const Schedule& sched, Problems& problems) {
  const auto P = static_cast<std::size_t>(sched.stages);
  const auto M = static_cast<std::size_t>(sched.microbatches);
  const auto S = static_cast<std::size_t>(stage_count(sched));
  // sent[0] forward messages by sender stage, sent[1] backward ones.
  std::array<std::vector<bool>, 2> sent = {std::vector<bool>(S * M), std::vector<bool>(S * M)};
  std::vector<std::size_t> pc(P, 0);
  auto done = [&](std::size_t r) { return pc[r] == sched.ranks[r].size(); };
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t r = 0; r < P; ++r) {
      const auto& list = sched.ranks[r];
      while (!done(r)) {
        const Action& a = list[pc[r]];
        const auto mb = static_cast<std::size_t>(a.microbatch);
        const auto v = static_cast<std::size_t>(a.stage);
        if (a.kind == ActionKind::RecvF && !sent[0][(v - 1) * M + mb]) break;
        if (a.kind == ActionKind::RecvB && !sent[1][(v + 1) * M + mb]) break;
        if (a.kind == ActionKind::SendF) sent[0][v * M + mb] = true;
        if (a.kind == ActionKind::SendB) sent[1][v * M + mb] = true;
        ++pc[r];
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  bool all_done = true;
  for (std::size_t r = 0; r < P; ++r) {
    if (done(r)) {
      stuck.push_back(fmt::format("rank {} finished", r));
      continue;
    }
    all_done = false;
    const Action& a = sched.ranks[r][pc[r]];
    const bool fwd = a.kind == ActionKind::RecvF;
    const int from = fwd ? a.stage - 1 : a.stage + 1;
    stuck.push_back(fmt::format(
        "rank {} is blocked at action {} ({}) waiting for {} from rank {}", r, pc[r],
        action_string(a), name(fwd ? ActionKind::SendF : ActionKind::SendB, from, a.microbatch),
        rank_of(sched, from)));
  }
  if (!all_done) {
    problems.add("the order deadlocks with blocking receives (a cycle of waits): {}",
                 fmt::join(stuck, ", "));
  }
}

}  // namespace

void validate_schedule(const Schedule& sched) {
  Problems problems;
  if (sched.stages < 1 || sched.microbatches < 1 || sched.chunks < 1 ||
      (sched.placement == StagePlacement::V && sched.chunks != 2) ||
      sched.ranks.size() != static_cast<std::size_t>(sched.stages)) {
    problems.add(
        "it needs ranks >= 1, microbatches >= 1, chunks >= 1 (exactly 2 in the V placement) and "
        "one action list per rank, got {} action lists",
        sched.ranks.size());
    problems.raise(sched);
  }
  Index index;
  check_shape_and_index(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_overlaps(sched, problems);
  if (!problems.empty()) problems.raise(sched);
  check_counts(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_order(sched, index, problems);
  if (!problems.empty()) problems.raise(sched);
  check_deadlock(sched, problems);
  if (!problems.empty()) problems.raise(sched);
}

bool has_weight_action(const Schedule& sched, int stage, int microbatch) {
  if (stage < 0 || stage >= stage_count(sched)) return false;
  const auto& list = sched.ranks[static_cast<std::size_t>(rank_of(sched, stage))];
  return std::find(list.begin(), list.end(), Action{ActionKind::W, stage, microbatch}) !=
         list.end();
}

}  // namespace strait::sched
