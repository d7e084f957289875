// validate_schedule: proves that a pipeline schedule (scheduler/schedule.h) can be executed.
//
// Checks, in this order:
// 1. Shape: P >= 1, M >= 1, one action list per stage; every action names the stage that holds
//    it, a microbatch in [0, M) (kNoMicrobatch for ALLREDUCE_GRAD and OPTIM), and a neighbour that
//    exists (no RECV_F / SEND_B on stage 0, no SEND_F / RECV_B on the last stage).
// 2. Counts: every stage runs exactly one F and one B of every microbatch, and one ALLREDUCE_GRAD
//    and one OPTIM; OFFLOAD and RELOAD of a microbatch come as a pair, at most once; every SEND has
//    exactly one matching RECV (same direction and microbatch) on the neighbour stage and vice
//    versa.
// 3. Order on each stage: RECV_F(mb) < F(mb) < SEND_F(mb); F(mb) < B(mb); RECV_B(mb) < B(mb) <
//    SEND_B(mb); F(mb) < OFFLOAD(mb) < RELOAD(mb) < B(mb); every B < ALLREDUCE_GRAD < OPTIM.
// 4. No deadlock: all stages are simulated with sends that complete at once (non-blocking) and
//    receives that block until the matching send has run (OFFLOAD / RELOAD are local). If every
//    unfinished stage is blocked, the order deadlocks, and the error names the action each stage is
//    stuck on.
// Thread-safety: pure function.
// Errors: InvalidArgument whose message lists the problems found (the first few of each check).
#pragma once

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

STRAIT_API void validate_schedule(const Schedule& schedule);

}  // namespace strait::sched
