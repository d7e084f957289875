#include "scheduler/schedule_csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// Reads a leading decimal number; false when there is none.
bool take_number(std::string_view& s, int& out) {
  std::size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n])) != 0) ++n;
  if (n == 0 || n > 9) return false;
  std::from_chars(s.data(), s.data() + n, out);
  s.remove_prefix(n);
  return true;
}

struct Cell {
  Action action;
  bool input_only = false;  // "I": a B whose W comes later
  bool reduce = false;      // torch's "<stage>REDUCE_GRAD"
};

Cell parse_cell(std::string_view text, int row, std::size_t col) {
  auto fail = [&](std::string_view why) -> Cell {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule CSV: rank {} (row {}), cell {} '{}': {}; write actions as "
                            "<stage><kind><microbatch> (e.g. 2F0, 1SEND_B3), or ALLREDUCE_GRAD, "
                            "OPTIM",
                            row, row + 1, col + 1, text, why));
  };
  if (text == "ALLREDUCE_GRAD") return Cell{Action{ActionKind::AllreduceGrad, -1, kNoMicrobatch}};
  if (text == "OPTIM") return Cell{Action{ActionKind::Optim, -1, kNoMicrobatch}};
  std::string_view s = text;
  int stage = 0;
  if (!take_number(s, stage)) return fail("no stage number in front");
  if (s == "REDUCE_GRAD") {
    return Cell{Action{ActionKind::AllreduceGrad, -1, kNoMicrobatch}, false, true};
  }
  // Longest names first, so that "SEND_F" is not read as an unknown "S...".
  static constexpr std::array<std::pair<std::string_view, ActionKind>, 11> kinds = {{
      {"OVERLAP_F_B", ActionKind::OverlapFB},
      {"SEND_F", ActionKind::SendF},
      {"RECV_F", ActionKind::RecvF},
      {"SEND_B", ActionKind::SendB},
      {"RECV_B", ActionKind::RecvB},
      {"OFFLOAD", ActionKind::Offload},
      {"RELOAD", ActionKind::Reload},
      {"F", ActionKind::F},
      {"B", ActionKind::B},
      {"I", ActionKind::B},
      {"W", ActionKind::W},
  }};
  for (const auto& [word, kind] : kinds) {
    if (s.substr(0, word.size()) != word) continue;
    const bool input_only = word == "I";
    s.remove_prefix(word.size());
    int mb = 0;
    if (!take_number(s, mb) || !s.empty()) return fail("no microbatch number after the kind");
    return Cell{Action{kind, stage, mb}, input_only};
  }
  return fail("unknown action kind");
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? s.npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return out;
}

}  // namespace

std::string schedule_to_csv(const Schedule& schedule) {
  validate_schedule(schedule);
  std::string out;
  for (const auto& list : schedule.ranks) {
    bool first = true;
    for (const Action& a : list) {
      if (!first) out += ',';
      first = false;
      if (a.kind == ActionKind::B && has_weight_action(schedule, a.stage, a.microbatch)) {
        out += fmt::format("{}I{}", a.stage, a.microbatch);
      } else {
        out += action_string(a);
      }
    }
    out += '\n';
  }
  return out;
}

Schedule schedule_from_csv(std::string_view text) {
  std::vector<std::vector<Cell>> rows;
  for (std::string_view line : split(text, '\n')) {
    line = trim(line);
    if (line.empty()) continue;
    std::vector<Cell> row;
    std::size_t col = 0;
    for (std::string_view cell : split(line, ',')) {
      cell = trim(cell);
      if (!cell.empty()) row.push_back(parse_cell(cell, static_cast<int>(rows.size()), col));
      ++col;
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    throw Error(ErrorCode::InvalidArgument, "schedule CSV: no rows; it needs one row per rank");
  }
  Schedule sched;
  sched.stages = static_cast<int>(rows.size());
  int max_stage = -1;
  int max_mb = -1;
  bool has_comm = false;
  for (const auto& row : rows) {
    for (const Cell& c : row) {
      max_stage = std::max(max_stage, c.reduce ? -1 : c.action.stage);
      max_mb = std::max(max_mb, c.action.microbatch);
      const ActionKind k = c.action.kind;
      has_comm = has_comm || k == ActionKind::SendF || k == ActionKind::RecvF ||
                 k == ActionKind::SendB || k == ActionKind::RecvB;
    }
  }
  const int S = max_stage + 1;
  if (S < sched.stages || S % sched.stages != 0 || max_mb < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("schedule CSV: {} rows (ranks) but stages 0..{} and microbatches "
                            "0..{}; the stages must split evenly over the ranks and there must be "
                            "at least one microbatch",
                            sched.stages, max_stage, max_mb));
  }
  sched.chunks = S / sched.stages;
  sched.microbatches = max_mb + 1;
  // Which rank holds stage P tells the placement apart.
  if (sched.chunks == 2) {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      for (const Cell& c : rows[r]) {
        if (c.action.stage == sched.stages && static_cast<int>(r) == sched.stages - 1 &&
            sched.stages > 1) {
          sched.placement = StagePlacement::V;
        }
      }
    }
  }
  sched.ranks.resize(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const int rank = static_cast<int>(r);
    const int first = stage_of(sched, rank, 0);
    auto remote = [&](int stage) {
      return stage >= 0 && stage < S && rank_of(sched, stage) != rank;
    };
    auto& list = sched.ranks[r];
    bool reduced = false;
    bool optim = false;
    for (const Cell& c : rows[r]) {
      Action a = c.action;
      if (a.kind == ActionKind::AllreduceGrad || a.kind == ActionKind::Optim) {
        bool& seen = a.kind == ActionKind::AllreduceGrad ? reduced : optim;
        if (seen && c.reduce) continue;  // torch writes one REDUCE_GRAD per stage
        seen = true;
        a.stage = first;
        list.push_back(a);
        continue;
      }
      if (!has_comm && a.kind == ActionKind::F && remote(a.stage - 1)) {
        list.push_back(Action{ActionKind::RecvF, a.stage, a.microbatch});
      }
      if (!has_comm && a.kind == ActionKind::B && remote(a.stage + 1)) {
        list.push_back(Action{ActionKind::RecvB, a.stage, a.microbatch});
      }
      list.push_back(a);
      if (!has_comm && a.kind == ActionKind::F && remote(a.stage + 1)) {
        list.push_back(Action{ActionKind::SendF, a.stage, a.microbatch});
      }
      if (!has_comm && a.kind == ActionKind::B && remote(a.stage - 1)) {
        list.push_back(Action{ActionKind::SendB, a.stage, a.microbatch});
      }
    }
    if (!reduced) list.push_back(Action{ActionKind::AllreduceGrad, first, kNoMicrobatch});
    if (!optim) list.push_back(Action{ActionKind::Optim, first, kNoMicrobatch});
  }
  // An "I" promises a W; a plain "B" with a W is the same schedule written loosely.
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (const Cell& c : rows[r]) {
      if (c.input_only && !has_weight_action(sched, c.action.stage, c.action.microbatch)) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("schedule CSV: rank {} has {}I{} (input gradient only) but no "
                                "{}W{} to compute its weight gradients; write B for a full "
                                "backward",
                                r, c.action.stage, c.action.microbatch, c.action.stage,
                                c.action.microbatch));
      }
    }
  }
  validate_schedule(sched);
  return sched;
}

}  // namespace strait::sched
