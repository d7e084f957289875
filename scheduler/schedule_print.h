/// \file
/// Text views of a pipeline schedule (scheduler/schedule.h), for `strait schedule` and for logs.
///
/// format_schedule: one line per stage listing its actions in order,
///   "stage 0: F0 F1 F2 B0 B1 B2"                                  (ScheduleDetail::Compute,
///   "stage 0: F0 OFFLOAD0 F1 OFFLOAD1 F2 RELOAD1 B2 RELOAD0 B1 B0"  which shows offloads too)
///   "stage 0: F0 SEND_F0 F1 SEND_F1 ... RECV_B0 B0 ... ALLREDUCE_GRAD OPTIM" (ScheduleDetail::All)
/// Rows are "stage s" when every rank holds one stage, "rank r" otherwise, and actions are then
/// written with their stage ("2F0", schedule.h's action_string).
/// format_timeline: the simulated time-line (scheduler/schedule_sim.h) as a grid, one row per rank
///   and one column per time unit; F takes time_f columns, B time_b (time_b + time_w when it has no
///   W), W time_w, idle columns show "." (OFFLOAD
///   and RELOAD take no time and are not drawn), e.g.
///     time     0  1  2  3  4  5
///     stage 0  F0 F1 .  B0 .  B1
///     stage 1  .  F0 B0 F1 B1 .
///   followed by the bubble fraction, mean and per stage.
/// Thread-safety: pure functions.
/// Errors: InvalidArgument for an invalid schedule, and for time_f or time_b < 1 or time_w < 0.
#pragma once

#include <cstdint>
#include <string>

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

/// What format_schedule lists: compute and offload actions only, or every action.
enum class ScheduleDetail : std::uint8_t { Compute, All };

/// One line per stage (or rank) listing its actions in order (see the file comment).
STRAIT_API std::string format_schedule(const Schedule& schedule,
                                       ScheduleDetail detail = ScheduleDetail::Compute);

/// The simulated time-line as a text grid, time_f / time_b / time_w columns per F / B / W (see the
/// file comment).
STRAIT_API std::string format_timeline(const Schedule& schedule, int time_f = 1, int time_b = 1,
                                       int time_w = 0);

/// How format_schedule and format_timeline write one action (to_string or action_string).
STRAIT_API std::string label(const Schedule& schedule, const Action& action);

}  // namespace strait::sched
