// Costing a pipeline schedule (scheduler/schedule.h) without running it: an idealised time
// simulation, the pipeline bubble, and the activation memory it needs.
//
// Model: every rank starts at time 0 and runs its actions in order. F, B and W cost
// ActionCosts::f, b and w (per action, i.e. per model chunk: a rank with V chunks runs V times as
// many actions, so give each a V-th of a whole rank's cost to compare with V = 1). A B that has no
// W (it computes the weight gradients too) costs b + w. SEND, RECV, ALLREDUCE_GRAD, OPTIM, OFFLOAD
// and RELOAD cost nothing (the copies overlap compute), and a RECV ends at the later of its own
// start and the time its matching SEND ran (links are free). The step's makespan is the latest
// end of any action; a rank's bubble is the part of the makespan in which it computes nothing.
// Closed forms the tests hold the simulator to (f, b, w per action, b+w for a fused B):
// - GPipe and 1F1B: bubble (P-1)/(M+P-1) on every rank, makespan (M+P-1)(f+b+w) (Huang et al.
//   2019, arXiv:1811.06965; Narayanan et al. 2021, arXiv:2104.04473 sec. 2.2).
// - Interleaved 1F1B with V chunks, M a multiple of P: makespan (V*M + P-1)(f+b+w), bubble
//   (P-1)/(V*M+P-1) (Narayanan et al. 2021, sec. 2.2.1: the bubble shrinks by V).
// - ZB-H1 with f = b = w: makespan 3M + P-1 for M >= P, bubble (P-1)/(3M+P-1) (Qi et al. 2023,
//   arXiv:2401.10241, sec. 3.1: (P-1)(f+b-w) per rank against 1F1B's (P-1)(f+b+w)).
// Thread-safety: pure functions.
// Errors: InvalidArgument for a schedule that validate_schedule() rejects, and for costs that are
// not finite, f and b > 0 and w >= 0 (w = 0 prices a fused B at b).
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
  std::vector<std::vector<TimedAction>> stages;  // per rank, same order as Schedule::ranks
  std::vector<double> busy;                      // per rank: total F, B and W time
  double makespan = 0.0;
};

STRAIT_API Timeline simulate(const Schedule& schedule, const ActionCosts& costs);
// Per model stage costs (costs[v] for the actions of stage v; size P * V), e.g. measured ones:
// the first and last stages of a transformer carry the embedding and the head.
STRAIT_API Timeline simulate(const Schedule& schedule, const std::vector<ActionCosts>& costs);
// simulate(schedule, {time_f, time_b, 0}): fused backwards cost time_b.
STRAIT_API Timeline simulate(const Schedule& schedule, double time_f, double time_b);

// Per rank: (makespan - busy) / makespan.
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule,
                                                      const ActionCosts& costs);
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule,
                                                      const std::vector<ActionCosts>& costs);
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule, double time_f,
                                                      double time_b);

// Idle time over all ranks / (P * makespan): the mean of stage_bubble_fractions().
STRAIT_API double bubble_fraction(const Schedule& schedule, const ActionCosts& costs);
STRAIT_API double bubble_fraction(const Schedule& schedule, double time_f, double time_b);

// The largest number of (stage, microbatch) stashes rank `stage` holds in the model at once: from
// F to W (to B when there is no W), minus those offloaded (between an OFFLOAD and its RELOAD).
// That is the number of activation slots the rank must allocate, each a chunk's activations.
// GPipe: M. 1F1B: min(P - rank, M). ZB-H1: at most P. ZB-V: at most 2P chunk slots (P stages'
// worth, 1F1B's rank-0 peak). With add_activation_offload(..., d): at most d + 1 plus the stashes
// waiting between B and W. An OFFLOAD's slot counts as free from the OFFLOAD on; the executor
// waits for its copy before reusing it.
// Errors also for a rank outside [0, P).
STRAIT_API int peak_stashed_microbatches(const Schedule& schedule, int stage);

// The largest number of stashes rank `stage` keeps only for a W (its B has run, its W not yet):
// the "W inputs" zero-bubble schedules hold back. 0 for schedules without W.
STRAIT_API int peak_stashed_weight_inputs(const Schedule& schedule, int stage);

}  // namespace strait::sched
