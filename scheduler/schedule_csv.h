/// \file
/// Exchanging pipeline schedules (scheduler/schedule.h) as CSV, in the spirit of
/// torch.distributed.pipelining's _dump_csv / _load_csv: one row per rank, one cell per action,
/// each written as stage, kind, microbatch ("2F0", "0SEND_F3", "1W7"; schedule.h's action_string).
///
/// Kinds written: F, B (a backward with no W: input and weight gradients), I (a backward whose W
/// comes later: the input gradient only, torch's BACKWARD_INPUT), W, SEND_F, RECV_F, SEND_B,
/// RECV_B, OFFLOAD, RELOAD, and ALLREDUCE_GRAD and OPTIM without stage or microbatch.
/// Read, beyond those: torch's "<stage>REDUCE_GRAD" as the rank's ALLREDUCE_GRAD. Rows without
/// ALLREDUCE_GRAD / OPTIM (torch's schedules end at the last backward) get them appended, and a
/// file without any SEND / RECV (torch's compute-only dumps) gets them inserted where the
/// generators put them: each RECV right before the compute that consumes it, each SEND right after
/// the compute that produces it.
/// The shape is read back from the actions: P = rows, P*V = 1 + the largest stage, M = 1 + the
/// largest microbatch, and the V placement when V = 2 and stage P is on rank P-1.
/// Thread-safety: pure functions.
/// Errors: InvalidArgument naming the row (rank), the cell and what was wrong for a cell that is
/// not an action or a shape that does not fit; the loaded schedule must pass validate_schedule.
#pragma once

#include <string>
#include <string_view>

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

/// The schedule as CSV text: one row per rank, one cell per action (see the file comment).
STRAIT_API std::string schedule_to_csv(const Schedule& schedule);
/// Parses CSV written by schedule_to_csv or torch's _dump_csv. Errors: InvalidArgument (see the
/// file comment).
STRAIT_API Schedule schedule_from_csv(std::string_view text);

}  // namespace strait::sched
