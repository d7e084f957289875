/// \file
/// validate_schedule: proves that a pipeline schedule (scheduler/schedule.h) can be executed.
///
/// Checks, in this order:
/// 1. Shape: P >= 1, M >= 1, V >= 1 (V = 2 for the V placement), one action list per rank; every
///    action names a stage in [0, P*V) that lives on the rank holding it (rank_of), a microbatch in
///    [0, M) (kNoMicrobatch for ALLREDUCE_GRAD and OPTIM), and a neighbour stage that exists on
///    another rank (no RECV_F / SEND_B on stage 0, no SEND_F / RECV_B on the last stage, none
///    between two stages of one rank).
/// 1b. Pairs: every OVERLAP_F_B is followed, among its rank's computes, by its own F and then a B
///    of another stage, with only transfers and activation copies between.
/// 2. Counts: every stage runs exactly one F and one B of every microbatch and at most one W; every
///    rank one ALLREDUCE_GRAD and one OPTIM; OFFLOAD and RELOAD of a (stage, microbatch) come as a
///    pair, at most once; every SEND has exactly one matching RECV (same direction, stage pair and
///    microbatch) on the neighbour's rank and vice versa.
/// 3. Order on each rank: RECV_F < F < SEND_F; F < B < W; RECV_B < B < SEND_B; F < OFFLOAD <
///    RELOAD < B; F of stage v-1 < F of stage v and B of v+1 < B of v when both are on this rank;
///    every B and W < ALLREDUCE_GRAD < OPTIM.
/// 4. No deadlock: all ranks are simulated with sends that complete at once (non-blocking) and
///    receives that block until the matching send has run (everything else is local), which is the
///    executor's semantics. If every unfinished rank is blocked, the order deadlocks (a cycle of
///    waits), and the error names the action each rank is stuck on.
/// Messages name the rank, the action's index in its list and the action in
/// torch.distributed.pipelining's form ("rank 1 action 4 (2W0)").
/// Thread-safety: pure function.
/// Errors: InvalidArgument whose message lists the problems found (the first few of each check).
#pragma once

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

/// Checks the schedule (see the file comment); returns when it is valid, else throws
/// InvalidArgument listing the problems.
STRAIT_API void validate_schedule(const Schedule& schedule);

/// True when `rank` runs a W for (stage, microbatch): its B then computes the input gradient only.
/// Assumes a valid schedule.
STRAIT_API bool has_weight_action(const Schedule& schedule, int stage, int microbatch);

}  // namespace strait::sched
