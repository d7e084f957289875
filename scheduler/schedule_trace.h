/// \file
/// What really ran: per-action timings of pipeline steps as Chrome trace-event JSON (the format
/// chrome://tracing and Perfetto open), and back into a Timeline (scheduler/schedule_sim.h) to set
/// beside the simulated plan.
///
/// Format: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. Each action is a
/// complete event {"ph": "X", "name": "2F0" (schedule.h's action_string), "cat": "F", "pid": rank,
/// "tid": 0, "ts": start, "dur": duration, "args": {"step", "stage", "microbatch"}}, ts and dur in
/// microseconds on one clock shared by the ranks of a machine (steady_clock); "process_name"
/// metadata events name the ranks. otherData carries the schedule (name, stages, microbatches,
/// chunks, offload prefetch or -1) so the plan can be rebuilt from the file alone.
/// Thread-safety: pure functions. Errors: InvalidArgument naming what is missing or malformed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"

namespace strait::sched {

/// One action as it ran on a rank, in a step.
struct TraceRecord {
  /// The rank that ran it (the pipeline rank: Chrome's pid).
  int rank = 0;
  /// The training step it belongs to.
  std::int64_t step = 0;
  /// What ran (its stage and microbatch).
  Action action;
  /// Start in microseconds (steady clock shared by the ranks of a machine).
  double start_us = 0;
  /// End in microseconds, same clock.
  double end_us = 0;
};

/// The schedule a trace came from, enough to rebuild the plan.
struct TraceInfo {
  std::string schedule;  ///< schedule_kind_name
  /// P, pipeline ranks.
  int stages = 0;
  /// M, microbatches per step.
  int microbatches = 0;
  /// V, model stages per rank.
  int chunks = 1;
  int offload_prefetch = -1;  ///< add_activation_offload's prefetch, -1 without offload
};

/// A trace read back by parse_chrome_trace.
struct LoadedTrace {
  /// The schedule it came from (otherData).
  TraceInfo info;
  /// Every action event, in file order.
  std::vector<TraceRecord> records;
};

/// The records as Chrome trace-event JSON (see the file comment for the format).
STRAIT_API std::string chrome_trace_json(const TraceInfo& info,
                                         const std::vector<TraceRecord>& records);
/// Reads JSON written by chrome_trace_json. Errors: InvalidArgument naming what is missing or
/// malformed.
STRAIT_API LoadedTrace parse_chrome_trace(std::string_view json);

/// One step of a trace as a Timeline over `ranks` ranks: times in microseconds from the step's
/// first start, busy = F, B and W time per rank, makespan = last end - first start.
/// Errors: InvalidArgument when the step has no records or a record names a rank outside [0,
/// ranks).
STRAIT_API Timeline measured_timeline(const LoadedTrace& trace, std::int64_t step, int ranks);

}  // namespace strait::sched
