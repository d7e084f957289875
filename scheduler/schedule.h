/// \file
/// Pipeline schedules as data: per pipeline rank, the ordered list of actions it runs in one
/// training step (forward / backward / weight-gradient of a microbatch on a model chunk, the
/// point-to-point transfers between neighbouring stages, activation offload, the data-parallel
/// gradient all-reduce and the optimizer step).
///
/// A schedule is produced by a generator here, checked by validate_schedule()
/// (scheduler/schedule_validate.h), costed by simulate() (scheduler/schedule_sim.h), drawn by
/// scheduler/schedule_print.h, exchanged as CSV (scheduler/schedule_csv.h) and run by the executor,
/// which is the only part that touches comm/.
///
/// Stages, ranks and chunks (P ranks, V chunks per rank, M microbatches). The model is cut into
/// P * V consecutive *stages* 0 .. P*V-1; each rank holds V of them, its *chunks*. Where stage v
/// lives is the schedule's placement:
/// - Loop (GPipe, 1F1B, interleaved 1F1B; Megatron-LM's virtual pipeline): stage v is chunk v / P
///   of rank v % P, so the microbatch loops over the ranks V times.
/// - V (ZB-V and DualPipeV, V = 2 only): stage v < P is chunk 0 of rank v, stage v >= P is chunk 1
///   of rank 2P-1-v; the microbatch goes down the ranks and back up, so rank 0 holds the first and
///   the last stage and rank P-1 the two middle ones.
/// With V = 1 both are the same and stage v is rank v.
/// Every Action names the *stage* it runs (the model chunk whose forward, backward or weight
/// gradient it is), as torch.distributed.pipelining's _Action does; the rank is the list it is in,
/// and rank_of(schedule, stage) must agree (validate_schedule checks it).
///
/// Conventions:
/// - Forward activations flow v -> v+1, gradients v+1 -> v. SEND_F on stage v matches RECV_F with
///   the same microbatch on stage v+1; SEND_B on stage v+1 matches RECV_B on stage v. The stage of
///   a RECV is the receiver's, of a SEND the sender's. When v and v+1 are on the same rank (ZB-V's
///   turn at rank P-1) the data stays in the rank: there is no SEND / RECV, and the order on the
///   rank (F of v before F of v+1, B of v+1 before B of v) carries the dependency.
/// - A RECV marks the point where the data must have arrived: the executor posts the matching
///   non-blocking receive as early as it has a buffer for it and waits only here. A SEND is
///   posted non-blocking; its buffer is released when it completes. The generators place each
///   RECV right before the compute that consumes it and each SEND right after the compute that
///   produces it, which is Megatron-LM's order (send_forward_recv_backward etc.).
/// - B is the backward of a microbatch on a stage. When the same rank also has a W for that
///   (stage, microbatch), B computes only the gradient w.r.t. the stage's input (what SEND_B
///   sends) and W, later, the weight gradients (zero-bubble pipelines, Qi et al. 2023,
///   arXiv:2401.10241); without a W, B computes both. A microbatch's stash lives from its F to its
///   W (or its B when it has no W).
/// - ALLREDUCE_GRAD (the gradient all-reduce over data-parallel replicas of this rank's chunks) and
///   then OPTIM are the last two actions of every rank; their microbatch is kNoMicrobatch and their
///   stage is the rank's first stage (chunk 0).
/// Thread-safety: plain values; the functions are pure.
/// Errors: InvalidArgument for P < 1, M < 1, V < 1, a V the schedule does not support, M that the
/// schedule cannot split (interleaved: M a multiple of P when V > 1), or an unknown schedule name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.h"

namespace strait::sched {

/// Every switch over ActionKind is exhaustive without a default, so -Wswitch points at each place
/// that must learn a new kind.
enum class ActionKind : std::uint8_t {
  F,              ///< forward of one microbatch on one stage
  B,              ///< backward of one microbatch on one stage (input gradient only if a W follows)
  W,              ///< weight gradient of a microbatch whose B ran (zero-bubble schedules)
  SendF,          ///< send F's output activations to stage + 1
  RecvF,          ///< receive the input activations from stage - 1
  SendB,          ///< send the gradient w.r.t. this stage's input to stage - 1
  RecvB,          ///< receive the gradient w.r.t. this stage's output from stage + 1
  AllreduceGrad,  ///< all-reduce this stage's gradients over its data-parallel replicas
  Optim,          ///< optimizer step of this stage's parameters
  /// Activation offload (add_activation_offload below): OFFLOAD starts moving the microbatch's
  /// stash (what its B needs, kept since its F) out of the model to an activation store; RELOAD
  /// starts bringing it back into a free activation slot. Both are asynchronous: the executor waits
  /// for a RELOAD's copy only at the B, and for an OFFLOAD's copy only when it needs the slot.
  Offload,
  Reload,
  /// OVERLAP_F_B (DualPipe's F&B pair; torch.distributed.pipelining's OVERLAP_F_B): pairs the F it
  /// names (its stage and microbatch) with the B that follows it. On the rank's list the next
  /// compute (F, B, W) after it is that F and the one after that a B of another stage; only
  /// transfers and activation copies lie between (validate_schedule checks it). It computes nothing
  /// itself: the executor runs the pair back to back, F, its SEND_F posted, then the B, whose
  /// output gradient was received during the F (see scheduler/executor.h), and the simulator prices
  /// it so (F&B = F
  /// + B). On a GPU the two would share the device; on a CPU rank there is no idle unit to give
  /// the second half, so only the transfers of one overlap the compute of the other.
  OverlapFB,
};

/// Action::microbatch of the per-rank actions (ALLREDUCE_GRAD, OPTIM), which belong to no
/// microbatch.
inline constexpr int kNoMicrobatch = -1;

/// One step of a rank's list: what runs, on which model stage, for which microbatch.
struct Action {
  /// What runs.
  ActionKind kind = ActionKind::F;
  int stage = 0;  ///< the model stage (chunk) it runs, in [0, P*V); see the header comment
  /// Microbatch index in [0, M); kNoMicrobatch for ALLREDUCE_GRAD and OPTIM.
  int microbatch = kNoMicrobatch;

  /// Equal when kind, stage and microbatch are.
  friend bool operator==(const Action&, const Action&) = default;
};

/// "F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "ALLREDUCE_GRAD", "OPTIM", "OFFLOAD",
/// "RELOAD", "OVERLAP_F_B".
STRAIT_API std::string_view action_kind_name(ActionKind kind) noexcept;
/// The kind's name followed by the microbatch, e.g. "F3", "RECV_B0", "OPTIM": the short form, for
/// one rank's list when every rank holds one stage.
STRAIT_API std::string to_string(const Action& action);
/// torch.distributed.pipelining's form: stage, kind, microbatch, e.g. "2F0", "1SEND_B3", "0W7";
/// "ALLREDUCE_GRAD" and "OPTIM" (per rank) carry neither.
STRAIT_API std::string action_string(const Action& action);

/// How model stages map to ranks (see the file comment): Loop (stage v on rank v % P) or V (rank r
/// holds stages r and 2P-1-r).
enum class StagePlacement : std::uint8_t { Loop, V };

/// A pipeline schedule as data: per rank, the ordered list of actions it runs in one step.
struct Schedule {
  int stages = 0;        ///< P, pipeline ranks (the number of model stages is P * chunks)
  int microbatches = 0;  ///< M, microbatches per step
  int chunks = 1;        ///< V, model stages per rank
  /// How model stages map to ranks.
  StagePlacement placement = StagePlacement::Loop;
  /// ranks[r] is the ordered action list of rank r; ranks.size() == stages.
  std::vector<std::vector<Action>> ranks;
};

/// Time of one action on one chunk, for the simulator (scheduler/schedule_sim.h) and for the
/// zero-bubble generators, which plan with them. A B without a W (it computes the weight gradients
/// too) costs `fused` when it is set, else b + w.
struct ActionCosts {
  double f = 1.0;  ///< forward of one microbatch on one chunk
  double b = 1.0;  ///< backward w.r.t. the input (B of a zero-bubble schedule)
  double w = 0.0;  ///< weight gradient (W)
  /// A fused B (input and weight gradients in one pass); 0: b + w. Measured on CPU it is ~4% below
  /// b + w (the split saves the weights' gradients that W reads back cold:
  /// docs/results/training.md).
  double fused = 0.0;
  /// What a B that also computes W costs.
  [[nodiscard]] double fused_b() const noexcept { return fused > 0.0 ? fused : b + w; }
};

/// P * V.
STRAIT_API int stage_count(const Schedule& schedule) noexcept;
/// The rank that holds model stage `stage` and its chunk index there (see the header comment), and
/// back. No range checks: callers pass stages in [0, P*V), ranks in [0, P), chunks in [0, V).
STRAIT_API int rank_of(const Schedule& schedule, int stage) noexcept;
/// The chunk index on its rank of model stage `stage` (see rank_of).
STRAIT_API int chunk_of(const Schedule& schedule, int stage) noexcept;
/// The model stage of chunk `chunk` on rank `rank` (the inverse of rank_of and chunk_of).
STRAIT_API int stage_of(const Schedule& schedule, int rank, int chunk) noexcept;

/// GPipe (Huang et al., 2019, arXiv:1811.06965): every stage runs all M forwards, then all M
/// backwards in reverse microbatch order. Peak activations stashed per stage: M.
STRAIT_API Schedule make_gpipe(int stages, int microbatches);

/// 1F1B, i.e. PipeDream-Flush (Narayanan et al., 2021, arXiv:2006.09503) and Megatron-LM's
/// non-interleaved schedule (Narayanan et al., SC'21, arXiv:2104.04473): stage s runs
/// w = min(P-s-1, M) warm-up forwards, then M-w pairs of (one forward, one backward), then the
/// remaining w backwards, all in microbatch order. Same bubble as GPipe, but peak activations
/// stashed on stage s are min(P-s, M) instead of M.
STRAIT_API Schedule make_1f1b(int stages, int microbatches);

/// Interleaved 1F1B (Narayanan et al., SC'21, arXiv:2104.04473, sec. 2.2; Megatron-LM's
/// forward_backward_pipelining_with_interleaving): V chunks per rank in Loop placement. Rank r runs
/// its forwards in groups of P microbatches, chunk by chunk (microbatches g*P .. g*P+P-1 on chunk
/// 0, then the same on chunk 1, ...), and its backwards in the same order with the chunks reversed;
/// (P-r-1)*2 + (V-1)*P warm-up forwards (capped at M*V), then one forward / one backward pairs,
/// then the remaining backwards. Bubble (P-1)/(V*M + P-1) of the step with chunk costs F/V, B/V
/// (the paper's (1/V) * (P-1)/M over the ideal time). V = 1 is make_1f1b.
/// Errors: InvalidArgument when V > 1 and M is not a multiple of P (the groups would not fill the
/// pipeline; Megatron refuses the same), naming the nearest valid M.
STRAIT_API Schedule make_interleaved_1f1b(int stages, int microbatches, int chunks);

/// ZB-H1 (Qi et al., ICLR 2024, arXiv:2401.10241, sec. 3.1): 1F1B with B split into B and W. Each
/// rank runs its F's and B's in 1F1B's order; its W's are placed by list scheduling on plan_costs
/// (F = B = W by default; links free): a rank runs its oldest pending W when the next F or B is not
/// ready, or when that F would hold more than P stashes (a stash lives from F to W). So the W's
/// fill the cool-down where 1F1B waits for gradients, every rank holds at most P stashes (1F1B's
/// peak, on its rank 0), and with F = B = W the step is 3M + P-1 units for M >= P: bubble
/// (P-1)/(3M+P-1) against 1F1B's 3(P-1)/(3M + 3(P-1)), a third (tested). plan_costs: the F, B, W
/// times the list scheduling plans with (default: all equal).
/// Stage 0 (here and in make_zb_v): a W that directly follows its own B is fused into it (the B
/// computes both; no W). Nobody waits for stage 0's input gradient, so the plan is the same, and
/// the split's own cost (B + W measured 1.03-1.11x the fused B) is not paid where it buys nothing.
/// With P = 2 that is every W of rank 0.
STRAIT_API Schedule make_zb_h1(int stages, int microbatches,
                               const ActionCosts& plan_costs = ActionCosts{1.0, 1.0, 1.0});

/// ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv:2405.15362, sec. 4): two
/// chunks per rank in V placement, B split into B and W, built by list scheduling on plan_costs
/// (F = B = W by default; links free) under a memory limit of 2P chunk stashes per rank (1F1B's P
/// stage-sized stashes, a chunk being half a stage): each rank, whenever it is free, runs the ready
/// B of the later chunk first (it unblocks the rest of the backward chain), else the next F if the
/// limit allows (the later chunk first; chunk 0 leaves one slot for chunk 1), else the oldest
/// pending W, in the spirit of the paper's greedy V schedule. With F = B = W per chunk the step is
/// at least 6M + P-1 chunk units (a middle rank waits P-1 chunk forwards for its first input); this
/// one reaches that for P <= 2 and P = 4 and stays within (P-1)/2 units of it otherwise, below
/// ZB-H1's 6M + 2(P-1) (tested for M >= 2P).
/// plan_costs as for make_zb_h1 (measured costs give a schedule for them: the paper's point).
STRAIT_API Schedule make_zb_v(int stages, int microbatches,
                              const ActionCosts& plan_costs = ActionCosts{1.0, 1.0, 1.0});

/// DualPipeV (DeepSeek's DualPipe cut in half, github.com/deepseek-ai/DualPipe dualpipev.py;
/// torch's ScheduleDualPipeV): two chunks per rank in V placement, as ZB-V, in eight phases per
/// rank r (chunk 0 is stage r, chunk 1 stage 2P-1-r):
///  1. 2(P-r-1) F of chunk 0;  2. r+1 times F0 F1;  3. P-r-1 times B1 (split) W F1;
///  4. M-2P+r+1 times (F0 & B1) (F1 & B0), "&" an OVERLAP_F_B pair with a full B (the last rank
///     runs its first F0 B1 unpaired);  5. P-r-1 times B1 (F1 & B0);  6. r+1 times B1 B0, split
///     from the middle one on;  7. P-r-1 times W B0 (split);  8. r+1 W.
/// F's and B's of a chunk run in microbatch order, W's oldest first. Peak stashes per rank: 2P+1
/// chunks (DualPipe's PP+1 with PP = 2P model stages), one more than ZB-V. With f = b = w per chunk
/// and F&B = f + b + w (the pair back to back, as a CPU runs it) the step is 6M + P-1 units, the
/// bound ZB-V's greedy plan reaches only for P <= 2 and P = 4. With other costs either may win
/// (`strait schedule --schedule all --costs F,B,W` prices both). On a GPU, F&B < f + b + w (two
/// streams) would shorten the steady phase further.
/// Errors: InvalidArgument for M < 2P (the steady phase would be empty), naming the least M.
STRAIT_API Schedule make_dualpipev(int stages, int microbatches);

/// The schedule generators make_schedule knows.
enum class ScheduleKind : std::uint8_t { GPipe, OneFOneB, Interleaved, ZbH1, ZbV, DualPipeV };

/// "gpipe", "1f1b", "interleaved", "zb-h1", "zbv" or "dualpipev".
STRAIT_API std::string_view schedule_kind_name(ScheduleKind kind) noexcept;
/// Case-insensitive names as above; InvalidArgument listing the choices otherwise.
STRAIT_API ScheduleKind parse_schedule_kind(std::string_view name);
/// The schedule's own number of chunks per rank: 2 for interleaved, zbv and dualpipev, 1 otherwise.
STRAIT_API int default_chunks(ScheduleKind kind) noexcept;
/// chunks: V for interleaved (any V >= 1); must be 1 for gpipe, 1f1b and zb-h1 and 2 for zbv and
/// dualpipev (0 = the schedule's own, default_chunks).
/// plan_costs: passed to the zero-bubble generators; the others do not depend on costs.
STRAIT_API Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks = 0,
                                  const ActionCosts& plan_costs = ActionCosts{1.0, 1.0, 1.0});

/// Activation offload as a transform of any valid schedule without OFFLOAD / RELOAD: on each rank,
/// every microbatch whose stash would sit idle between its F and its B gets an OFFLOAD right after
/// its F (and the SEND_F that follows it), and a RELOAD `prefetch` compute actions (F, B, W) ahead
/// of its B, so the copy back overlaps that much compute. A RELOAD goes before any receives that
/// directly precede the compute it is placed in front of, so it also overlaps their wait. "Idle"
/// means more than `prefetch` computes lie between the F and the B: then at least one compute
/// overlaps the OFFLOAD's copy as well. prefetch = 0 reloads right before the B (and its RECV_B).
/// A stage whose resident peak this would not lower keeps its list as it was: copies that save no
/// slot are not made (1F1B's stage P - 2 with prefetch >= 1, for instance).
/// The result passes validate_schedule(), and peak_stashed_microbatches() of it, the number of
/// activation slots the stage needs resident, is at most min(its peak without offload,
/// prefetch + 1): during any compute, the resident stashes are its own and those whose B is among
/// the next `prefetch` computes. GPipe drops from M to min(M, prefetch + 1), 1F1B's stage s from
/// min(P - s, M) to min(P - s, M, prefetch + 1); 1F1B's last stage (F and B adjacent) offloads
/// nothing.
/// Chunks and W: a stash is keyed by (stage, microbatch); computes are F, B and W. The copy leaves
/// after F and is back before B (which, like W, reads it), so a stash between its B and its W stays
/// resident: W's inputs are what zero-bubble schedules trade memory for, and the bounds above hold
/// for them plus those stashes (peak_stashed_weight_inputs). Offloading them between B and W too
/// would need the model to release a slot whose W is pending, which it does not.
/// Errors: InvalidArgument for prefetch < 0, an invalid schedule, or one that already offloads.
/// Defined in schedule_offload.cpp.
STRAIT_API Schedule add_activation_offload(const Schedule& schedule, int prefetch);

/// OFFLOAD actions on rank `stage` (the stashes that leave the model during a step).
STRAIT_API int offloaded_microbatches(const Schedule& schedule, int stage);

}  // namespace strait::sched
