#include "scheduler/schedule_print.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {
namespace {

void end_line(std::string& out) {
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
}

}  // namespace

std::string label(const Schedule& schedule, const Action& action) {
  return schedule.chunks == 1 ? to_string(action) : action_string(action);
}

std::string format_schedule(const Schedule& schedule, ScheduleDetail detail) {
  validate_schedule(schedule);
  std::string out;
  for (std::size_t s = 0; s < schedule.ranks.size(); ++s) {
    out += fmt::format("{} {}:", schedule.chunks == 1 ? "stage" : "rank", s);
    for (const Action& a : schedule.ranks[s]) {
      // Offload actions are shown with the compute: they are what the memory use follows.
      const bool compute = a.kind == ActionKind::F || a.kind == ActionKind::B ||
                           a.kind == ActionKind::W || a.kind == ActionKind::Offload ||
                           a.kind == ActionKind::Reload;
      if (detail == ScheduleDetail::All || compute) {
        out += ' ';
        out += label(schedule, a);
      }
    }
    out += '\n';
  }
  return out;
}

std::string format_timeline(const Schedule& schedule, int time_f, int time_b, int time_w) {
  if (time_f < 1 || time_b < 1 || time_w < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("format_timeline: time_f = {}, time_b = {} and time_w = {} must be "
                            "whole time units, >= 1 (>= 0 for time_w)",
                            time_f, time_b, time_w));
  }
  const Timeline tl =
      simulate(schedule, ActionCosts{static_cast<double>(time_f), static_cast<double>(time_b),
                                     static_cast<double>(time_w)});
  // Integer costs and free communication make every start and end a whole number.
  const auto columns = static_cast<std::size_t>(tl.makespan);
  std::vector<std::vector<std::string>> grid(tl.stages.size(),
                                             std::vector<std::string>(columns, "."));
  std::size_t width = fmt::format("{}", columns - 1).size();
  for (std::size_t s = 0; s < tl.stages.size(); ++s) {
    for (const TimedAction& t : tl.stages[s]) {
      if (t.action.kind != ActionKind::F && t.action.kind != ActionKind::B &&
          t.action.kind != ActionKind::W) {
        continue;
      }
      const std::string text = label(schedule, t.action);
      width = std::max(width, text.size());
      for (auto c = static_cast<std::size_t>(t.start); c < static_cast<std::size_t>(t.end); ++c) {
        grid[s][c] = text;
      }
    }
  }
  const char* row = schedule.chunks == 1 ? "stage" : "rank";
  const std::string last_label = fmt::format("{} {}", row, tl.stages.size() - 1);
  const std::size_t label_width = std::max(last_label.size(), std::string_view("time").size());
  std::string out = fmt::format("{:<{}}", "time", label_width);
  for (std::size_t c = 0; c < columns; ++c) out += fmt::format(" {:<{}}", c, width);
  end_line(out);
  for (std::size_t s = 0; s < grid.size(); ++s) {
    out += fmt::format("{:<{}}", fmt::format("{} {}", row, s), label_width);
    for (const std::string& cell : grid[s]) out += fmt::format(" {:<{}}", cell, width);
    end_line(out);
  }
  double mean = 0.0;
  std::string per_stage;
  for (std::size_t s = 0; s < tl.busy.size(); ++s) {
    const double f = (tl.makespan - tl.busy[s]) / tl.makespan;
    mean += f / static_cast<double>(tl.busy.size());
    per_stage += fmt::format(" {:.3f}", f);
  }
  out += fmt::format("bubble fraction {:.3f} (per stage:{}) over {} time units\n", mean, per_stage,
                     columns);
  return out;
}

}  // namespace strait::sched
