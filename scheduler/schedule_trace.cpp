#include "scheduler/schedule_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace strait::sched {
namespace {

ActionKind kind_from_name(const std::string& name) {
  for (ActionKind k :
       {ActionKind::F, ActionKind::B, ActionKind::W, ActionKind::SendF, ActionKind::RecvF,
        ActionKind::SendB, ActionKind::RecvB, ActionKind::AllreduceGrad, ActionKind::Optim,
        ActionKind::Offload, ActionKind::Reload, ActionKind::OverlapFB}) {
    if (name == action_kind_name(k)) return k;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("trace: unknown action kind '{}' in an event's \"cat\"", name));
}

bool is_compute(ActionKind k) {
  return k == ActionKind::F || k == ActionKind::B || k == ActionKind::W;
}

}  // namespace

std::string chrome_trace_json(const TraceInfo& info, const std::vector<TraceRecord>& records) {
  nlohmann::json events = nlohmann::json::array();
  int ranks = 0;
  for (const TraceRecord& r : records) ranks = std::max(ranks, r.rank + 1);
  for (int r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"name", fmt::format("rank {}", r)}}}});
  }
  for (const TraceRecord& r : records) {
    events.push_back(
        {{"ph", "X"},
         {"name", action_string(r.action)},
         {"cat", std::string(action_kind_name(r.action.kind))},
         {"pid", r.rank},
         {"tid", 0},
         {"ts", r.start_us},
         {"dur", r.end_us - r.start_us},
         {"args",
          {{"step", r.step}, {"stage", r.action.stage}, {"microbatch", r.action.microbatch}}}});
  }
  const nlohmann::json doc = {{"traceEvents", events},
                              {"displayTimeUnit", "ms"},
                              {"otherData",
                               {{"schedule", info.schedule},
                                {"stages", info.stages},
                                {"microbatches", info.microbatches},
                                {"chunks", info.chunks},
                                {"offload_prefetch", info.offload_prefetch}}}};
  return doc.dump(1) + "\n";
}

LoadedTrace parse_chrome_trace(std::string_view json) {
  LoadedTrace out;
  try {
    const nlohmann::json doc = nlohmann::json::parse(json);
    const auto& other = doc.at("otherData");
    out.info.schedule = other.at("schedule").get<std::string>();
    out.info.stages = other.at("stages").get<int>();
    out.info.microbatches = other.at("microbatches").get<int>();
    out.info.chunks = other.at("chunks").get<int>();
    out.info.offload_prefetch = other.at("offload_prefetch").get<int>();
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("ph").get<std::string>() != "X") continue;
      TraceRecord r;
      r.rank = e.at("pid").get<int>();
      const auto& args = e.at("args");
      r.step = args.at("step").get<std::int64_t>();
      r.action = Action{kind_from_name(e.at("cat").get<std::string>()), args.at("stage").get<int>(),
                        args.at("microbatch").get<int>()};
      r.start_us = e.at("ts").get<double>();
      r.end_us = r.start_us + e.at("dur").get<double>();
      out.records.push_back(r);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("trace: not a strait Chrome trace (strait train --trace writes one): {}",
                    e.what()));
  }
  return out;
}

Timeline measured_timeline(const LoadedTrace& trace, std::int64_t step, int ranks) {
  Timeline tl;
  tl.stages.resize(static_cast<std::size_t>(ranks));
  tl.busy.assign(static_cast<std::size_t>(ranks), 0.0);
  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  for (const TraceRecord& r : trace.records) {
    if (r.step != step) continue;
    if (r.rank < 0 || r.rank >= ranks) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("trace: step {} has an event of rank {}, outside the schedule's {} "
                              "ranks",
                              step, r.rank, ranks));
    }
    first = std::min(first, r.start_us);
    last = std::max(last, r.end_us);
  }
  if (last < first) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("trace: no events of step {}", step));
  }
  for (const TraceRecord& r : trace.records) {
    if (r.step != step) continue;
    const auto ru = static_cast<std::size_t>(r.rank);
    tl.stages[ru].push_back(TimedAction{r.action, r.start_us - first, r.end_us - first});
    if (is_compute(r.action.kind)) tl.busy[ru] += r.end_us - r.start_us;
  }
  for (auto& list : tl.stages) {
    std::sort(list.begin(), list.end(),
              [](const TimedAction& a, const TimedAction& b) { return a.start < b.start; });
  }
  tl.makespan = last - first;
  return tl;
}

}  // namespace strait::sched
