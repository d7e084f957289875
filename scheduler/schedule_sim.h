// Costing a pipeline schedule (scheduler/schedule.h) without running it: an idealised time
// simulation, the pipeline bubble, and the activation memory it needs.
//
// Model: every stage starts at time 0 and runs its actions in order. F costs time_f and B costs
// time_b (same on every stage); SEND, RECV, ALLREDUCE_GRAD, OPTIM, OFFLOAD and RELOAD cost
// nothing (the copies overlap compute), and a RECV
// ends at the later of its own start and the time its matching SEND ran (links are free). The
// step's makespan is the latest end of any action; a stage's bubble is the part of the makespan
// in which it computes nothing. For GPipe and 1F1B with time_f = time_b every stage's bubble
// fraction is (P-1)/(M+P-1) (Huang et al. 2019; Narayanan et al. 2021).
// Thread-safety: pure functions.
// Errors: InvalidArgument for a schedule that validate_schedule() rejects, and for costs that are
// not finite and > 0.
#pragma once

#include <vector>

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
};

struct Timeline {
  std::vector<std::vector<TimedAction>> stages;  // same order as Schedule::ranks
  std::vector<double> busy;                      // per stage: total F and B time
  double makespan = 0.0;
};

STRAIT_API Timeline simulate(const Schedule& schedule, double time_f, double time_b);

// Per stage: (makespan - busy) / makespan.
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule, double time_f,
                                                      double time_b);

// Idle time over all stages / (P * makespan): the mean of stage_bubble_fractions().
STRAIT_API double bubble_fraction(const Schedule& schedule, double time_f, double time_b);

// The largest number of microbatches whose forward has run on `stage` but whose backward has not
// (their activations are stashed) and whose stash is in the model, not offloaded (between an
// OFFLOAD and its RELOAD): the number of activation slots that stage must allocate. GPipe: M.
// 1F1B: min(P - stage, M). With add_activation_offload(..., d): at most d + 1. An OFFLOAD's slot
// counts as free from the OFFLOAD on; the executor waits for its copy before reusing it.
// Errors also for a stage outside [0, P).
STRAIT_API int peak_stashed_microbatches(const Schedule& schedule, int stage);

}  // namespace strait::sched
