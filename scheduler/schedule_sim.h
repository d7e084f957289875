/// \file
/// Costing a pipeline schedule (scheduler/schedule.h) without running it: an idealised time
/// simulation, the pipeline bubble, and the activation memory it needs.
///
/// Model: every rank starts at time 0 and runs its actions in order, each occupying the rank for
/// its cost (StageCosts, per model stage: the costs of the stage an action names).
/// - F, B and W cost compute.f, b and w (per action, i.e. per model chunk: a rank with V
///   chunks runs V times as many actions, so give each a V-th of a whole rank's cost to compare
///   with V = 1). A B that has no W (it computes the weight gradients too) costs b + w.
/// - A SEND occupies its rank for `send` (posting it; the copy overlaps what follows), and its
///   message can be received link.transfer() = latency + bytes / bandwidth after it leaves: when
///   the SEND ends, or later when the link to that rank is still carrying the rank's previous
///   message (a rank's messages to another cross one at a time, bytes / bandwidth each). A RECV
///   ends `recv` after the later of its own start and its message's arrival.
/// - OFFLOAD and RELOAD occupy the rank for `offload` / `reload` (starting the copy; the copies
///   themselves overlap compute).
/// - ALLREDUCE_GRAD and OPTIM: with SyncGroups, one collective per group of ranks: each member's
///   action ends its own cost (`allreduce`, `optim`) after the last member has arrived; a rank in
///   no group just takes its cost. strait train's groups are data_parallel_sync_groups().
/// With every communication cost 0 (the default) links are free and the closed forms below hold.
/// The step's makespan is the latest end of any action; a rank's bubble is the part of the
/// makespan in which it computes nothing (F, B, W), so time in transfers, waits, the all-reduce and
/// the optimizer counts as bubble, as it does in a measured trace (scheduler/schedule_trace.h).
/// Closed forms the tests hold the simulator to (f, b, w per action, b+w for a fused B, free
/// links):
/// - GPipe and 1F1B: bubble (P-1)/(M+P-1) on every rank, makespan (M+P-1)(f+b+w) (Huang et al.
///   2019, arXiv:1811.06965; Narayanan et al. 2021, arXiv:2104.04473 sec. 2.2).
/// - Interleaved 1F1B with V chunks, M a multiple of P: makespan (V*M + P-1)(f+b+w), bubble
///   (P-1)/(V*M+P-1) (Narayanan et al. 2021, sec. 2.2.1: the bubble shrinks by V).
/// - ZB-H1 with f = b = w: makespan 3M + P-1 for M >= P, bubble (P-1)/(3M+P-1) (Qi et al. 2023,
///   arXiv:2401.10241, sec. 3.1: (P-1)(f+b-w) per rank against 1F1B's (P-1)(f+b+w)).
/// - OVERLAP_F_B takes no time: its F and B run back to back (F&B = f + b + w, the B being full).
///   DualPipeV with f = b = w and M >= 2P: makespan 6M + P-1 chunk units, bubble P-1 units per
///   rank (derived from the phases; tested), the bound ZB-V's greedy plan reaches only for P <= 2
///   and P = 4.
/// - GPipe with a transfer time t per message and nothing else priced, its bytes / bandwidth at
///   most f (so no message waits for the link): makespan (M+P-1)(f+b+w) + 2(P-1)t (the forward
///   and the backward wave each cross P-1 links; derived here, tested). 1F1B with links priced,
///   and messages queueing on a slow link: hand-computed timelines in
///   tests/scheduler/schedule_test.cpp.
/// Thread-safety: pure functions.
/// Errors: InvalidArgument for a schedule that validate_schedule() rejects, for costs that are
/// not finite, f and b > 0 and every other cost >= 0 (w = 0 prices a fused B at b), a cost vector
/// whose size is not the number of stages, and sync groups naming a rank outside [0, P) or a rank
/// twice.
#pragma once

#include <vector>

#include "core/export.h"
#include "scheduler/schedule.h"

namespace strait::sched {

/// One action placed in time by the simulator (or measured: measured_timeline).
struct TimedAction {
  /// The action, as in the schedule.
  Action action;
  /// When the rank started it (the time unit of the costs).
  double start = 0.0;
  /// When it ended.
  double end = 0.0;
};

/// A simulated (or measured) step: every rank's actions in time.
struct Timeline {
  std::vector<std::vector<TimedAction>> stages;  ///< per rank, same order as Schedule::ranks
  std::vector<double> busy;                      ///< per rank: total F, B and W time
  /// The step's length: the latest end of any action.
  double makespan = 0.0;
};

/// One message between neighbouring stages.
struct LinkCosts {
  double latency = 0.0;    ///< per message, from the SEND's end to the data being at the receiver
  double bytes = 0.0;      ///< the message's size
  double bandwidth = 0.0;  ///< bytes per time unit; 0 = unlimited (bytes cost nothing)
  /// latency + bytes / bandwidth: when a sent message can be received after its SEND ends.
  [[nodiscard]] double transfer() const noexcept {
    return latency + (bandwidth > 0.0 ? bytes / bandwidth : 0.0);
  }
};

/// What every kind of action of one model stage costs (see the model above). Times are in any one
/// unit (strait schedule --from-trace uses microseconds).
struct StageCosts {
  ActionCosts compute{};   ///< F, B, W
  double send = 0.0;       ///< a SEND_F / SEND_B occupies its rank this long
  double recv = 0.0;       ///< a RECV_F / RECV_B occupies its rank this long once its data is there
  LinkCosts link{};        ///< the messages this stage sends
  double offload = 0.0;    ///< an OFFLOAD occupies its rank this long
  double reload = 0.0;     ///< a RELOAD likewise
  double allreduce = 0.0;  ///< ALLREDUCE_GRAD, after its group's last member arrived
  double optim = 0.0;      ///< OPTIM, likewise
};

/// Which ranks' ALLREDUCE_GRAD (and OPTIM) actions are one collective: each inner vector is a group
/// of ranks that all wait for the group's last arrival. Ranks in no group do not wait.
struct SyncGroups {
  /// Groups of ranks whose ALLREDUCE_GRAD actions are one collective.
  std::vector<std::vector<int>> allreduce_grad;
  /// Groups of ranks whose OPTIM actions are one collective.
  std::vector<std::vector<int>> optim;
};

/// The synchronisation strait train's DataParallelSync (train/data_parallel_sync.h) adds within one
/// pipeline of P ranks: ALLREDUCE_GRAD sums the tied word embedding between rank 0 and rank P-1
/// (when P > 1), and OPTIM, when clipping (max_norm > 0), first all-reduces the gradient norm over
/// all P ranks. The data-parallel average over replicas is priced by `allreduce` alone (the
/// replicas of a stage run in step).
STRAIT_API SyncGroups data_parallel_sync_groups(int ranks, bool clip_norm = true);

/// The uniform model: every stage's F, B, W cost `costs`; links and collectives free.
STRAIT_API Timeline simulate(const Schedule& schedule, const ActionCosts& costs);
/// The full model: costs[v] for the actions of stage v (size P * V), and the collectives of groups.
STRAIT_API Timeline simulate(const Schedule& schedule, const std::vector<StageCosts>& costs,
                             const SyncGroups& groups);
/// Per model stage costs (costs[v] for the actions of stage v; size P * V), e.g. measured ones:
/// the first and last stages of a transformer carry the embedding and the head.
STRAIT_API Timeline simulate(const Schedule& schedule, const std::vector<ActionCosts>& costs);
/// simulate(schedule, {time_f, time_b, 0}): fused backwards cost time_b.
STRAIT_API Timeline simulate(const Schedule& schedule, double time_f, double time_b);

/// Per rank: (makespan - busy) / makespan.
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule,
                                                      const ActionCosts& costs);
/// Per rank, with per model stage costs (as simulate()).
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule,
                                                      const std::vector<ActionCosts>& costs);
/// Per rank, with the full model (as simulate()).
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule,
                                                      const std::vector<StageCosts>& costs,
                                                      const SyncGroups& groups);
/// Per rank, with F costing time_f and fused backwards time_b.
STRAIT_API std::vector<double> stage_bubble_fractions(const Schedule& schedule, double time_f,
                                                      double time_b);

/// Idle time over all ranks / (P * makespan): the mean of stage_bubble_fractions().
STRAIT_API double bubble_fraction(const Schedule& schedule, const ActionCosts& costs);
/// The mean bubble with F costing time_f and fused backwards time_b.
STRAIT_API double bubble_fraction(const Schedule& schedule, double time_f, double time_b);

/// Per model stage (size P * V), the mean cost of every kind of action in a measured step
/// (measured_timeline of scheduler/schedule_trace.h, or any Timeline), for simulate() to replay:
/// - compute: the mean F and W durations (w = 0 when the stage ran no W: its B held them), and b
///   such that the stage's B's, split ones priced b and full ones b + w, take their measured total
///   (the mean B when all are split or all full; DualPipeV mixes both).
/// - send, offload, reload: the mean durations of those actions.
/// - recv: the mean duration of the stage's RECVs that found their data there (they started after
///   their SEND's end plus the transfer time seen whole below); when all of a stage's receives
///   waited, the mean over the other stages' (0 when no receive anywhere found its data there).
/// - link.latency: over the messages the stage sent whose RECV started no later than their SEND
///   (the receiver waited for the whole transfer, so it is seen whole), the mean of RECV end - SEND
///   end - the receiving stage's recv; bytes and bandwidth stay 0. 0 when none was seen whole.
///   For a receive that waits, recv and latency add up, so replaying a simulated timeline's costs
///   reproduces that timeline (tested) even where the split between them is not observable.
/// - allreduce, optim: per rank, the action's end minus the latest start of its group's members
/// (its
///   own start when in no group): the cost past the collective's wait.
/// Errors: InvalidArgument when a stage ran no F or no B (naming the stage), or the Timeline does
/// not have the schedule's ranks.
STRAIT_API std::vector<StageCosts> measured_stage_costs(const Schedule& schedule,
                                                        const Timeline& measured,
                                                        const SyncGroups& groups);

/// The largest number of (stage, microbatch) stashes rank `stage` holds in the model at once: from
/// F to W (to B when there is no W), minus those offloaded (between an OFFLOAD and its RELOAD).
/// That is the number of activation slots the rank must allocate, each a chunk's activations.
/// GPipe: M. 1F1B: min(P - rank, M). ZB-H1: at most P. ZB-V: at most 2P chunk slots (P stages'
/// worth, 1F1B's rank-0 peak). DualPipeV: at most 2P + 1 (a pair's F stashes before its B frees).
/// With add_activation_offload(..., d): at most d + 1 plus the stashes waiting between B and W. An
/// OFFLOAD's slot counts as free from the OFFLOAD on; the executor waits for its copy before
/// reusing it. Errors also for a rank outside [0, P).
STRAIT_API int peak_stashed_microbatches(const Schedule& schedule, int stage);
/// The same for model stage `model_stage` alone (one chunk of its rank): the slots that chunk
/// needs. Equal to peak_stashed_microbatches for one chunk per rank. Errors also for a stage
/// outside [0, stage_count).
STRAIT_API int peak_stashed_microbatches_of_stage(const Schedule& schedule, int model_stage);

/// The largest number of stashes rank `stage` keeps only for a W (its B has run, its W not yet):
/// the "W inputs" zero-bubble schedules hold back. 0 for schedules without W.
STRAIT_API int peak_stashed_weight_inputs(const Schedule& schedule, int stage);

}  // namespace strait::sched
