// Pipeline schedules as data: per pipeline rank, the ordered list of actions it runs in one
// training step (forward / backward of a microbatch, the point-to-point transfers between
// neighbouring stages, the data-parallel gradient all-reduce and the optimizer step).
//
// A schedule is produced by a generator here, checked by validate_schedule()
// (scheduler/schedule_validate.h), costed by simulate() (scheduler/schedule_sim.h), drawn by
// scheduler/schedule_print.h and run by the executor, which is the only part that touches comm/.
//
// Conventions (P stages, M microbatches; stage s runs on pipeline rank s):
// - Forward activations flow s -> s+1, gradients s+1 -> s. SEND_F on stage s matches RECV_F with
//   the same microbatch on stage s+1; SEND_B on stage s matches RECV_B on stage s-1.
// - Every action's `stage` is the stage that executes it (the receiver for a RECV).
// - A RECV marks the point where the data must have arrived: the executor posts the matching
//   non-blocking receive as early as it has a buffer for it and waits only here. A SEND is
//   posted non-blocking; its buffer is released when it completes. The generators place each
//   RECV right before the compute that consumes it and each SEND right after the compute that
//   produces it, which is Megatron-LM's order (send_forward_recv_backward etc.).
// - ALLREDUCE_GRAD (the gradient all-reduce over data-parallel replicas of this stage) and then
//   OPTIM are the last two actions of every stage; their microbatch is kNoMicrobatch.
// Thread-safety: plain values; the functions are pure.
// Errors: InvalidArgument for P < 1, M < 1 or an unknown schedule name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.h"

namespace strait::sched {

// W (weight-gradient half of B, for zero-bubble schedules) joins this list with the issue that
// generates it; every switch over ActionKind is exhaustive without a default, so -Wswitch points at
// each place that must learn a new kind.
enum class ActionKind : std::uint8_t {
  F,              // forward of one microbatch on one stage
  B,              // backward (input and weight gradients) of one microbatch on one stage
  SendF,          // send F's output activations to stage + 1
  RecvF,          // receive the input activations from stage - 1
  SendB,          // send the gradient w.r.t. this stage's input to stage - 1
  RecvB,          // receive the gradient w.r.t. this stage's output from stage + 1
  AllreduceGrad,  // all-reduce this stage's gradients over its data-parallel replicas
  Optim,          // optimizer step of this stage's parameters
  // Activation offload (add_activation_offload below): OFFLOAD starts moving the microbatch's
  // stash (what its B needs, kept since its F) out of the model to an activation store; RELOAD
  // starts bringing it back into a free activation slot. Both are asynchronous: the executor waits
  // for a RELOAD's copy only at the B, and for an OFFLOAD's copy only when it needs the slot.
  Offload,
  Reload,
};

inline constexpr int kNoMicrobatch = -1;

struct Action {
  ActionKind kind = ActionKind::F;
  int stage = 0;
  int microbatch = kNoMicrobatch;

  friend bool operator==(const Action&, const Action&) = default;
};

// "F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "ALLREDUCE_GRAD", "OPTIM", "OFFLOAD", "RELOAD".
STRAIT_API std::string_view action_kind_name(ActionKind kind) noexcept;
// The kind's name followed by the microbatch, e.g. "F3", "RECV_B0", "OPTIM".
STRAIT_API std::string to_string(const Action& action);

struct Schedule {
  int stages = 0;        // P, pipeline stages (= pipeline ranks)
  int microbatches = 0;  // M, microbatches per step
  // ranks[s] is the ordered action list of stage s; ranks.size() == stages.
  std::vector<std::vector<Action>> ranks;
};

// GPipe (Huang et al., 2019, arXiv:1811.06965): every stage runs all M forwards, then all M
// backwards in reverse microbatch order. Peak activations stashed per stage: M.
STRAIT_API Schedule make_gpipe(int stages, int microbatches);

// 1F1B, i.e. PipeDream-Flush (Narayanan et al., 2021, arXiv:2006.09503) and Megatron-LM's
// non-interleaved schedule (Narayanan et al., SC'21, arXiv:2104.04473): stage s runs
// w = min(P-s-1, M) warm-up forwards, then M-w pairs of (one forward, one backward), then the
// remaining w backwards, all in microbatch order. Same bubble as GPipe, but peak activations
// stashed on stage s are min(P-s, M) instead of M.
STRAIT_API Schedule make_1f1b(int stages, int microbatches);

enum class ScheduleKind : std::uint8_t { GPipe, OneFOneB };

// "gpipe" or "1f1b".
STRAIT_API std::string_view schedule_kind_name(ScheduleKind kind) noexcept;
// Case-insensitive "gpipe" | "1f1b"; InvalidArgument listing the choices otherwise.
STRAIT_API ScheduleKind parse_schedule_kind(std::string_view name);
STRAIT_API Schedule make_schedule(ScheduleKind kind, int stages, int microbatches);

// Activation offload as a transform of any valid schedule without OFFLOAD / RELOAD: on each stage,
// every microbatch whose stash would sit idle between its F and its B gets an OFFLOAD right after
// its F (and the SEND_F that follows it), and a RELOAD `prefetch` compute actions (F or B) ahead of
// its B, so the copy back overlaps that much compute. A RELOAD goes before any receives that
// directly precede the compute it is placed in front of, so it also overlaps their wait. "Idle"
// means more than `prefetch` computes lie between the F and the B: then at least one compute
// overlaps the OFFLOAD's copy as well. prefetch = 0 reloads right before the B (and its RECV_B).
// A stage whose resident peak this would not lower keeps its list as it was: copies that save no
// slot are not made (1F1B's stage P - 2 with prefetch >= 1, for instance).
// The result passes validate_schedule(), and peak_stashed_microbatches() of it, the number of
// activation slots the stage needs resident, is at most min(its peak without offload,
// prefetch + 1): during any compute, the resident stashes are its own and those whose B is among
// the next `prefetch` computes. GPipe drops from M to min(M, prefetch + 1), 1F1B's stage s from
// min(P - s, M) to min(P - s, M, prefetch + 1); 1F1B's last stage (F and B adjacent) offloads
// nothing.
// Schedules to come: a stash is keyed by (stage list, microbatch) and lives from F to B. A
// zero-bubble W (which also reads the stash) must become its end of life, and interleaved
// schedules (several chunks per rank) need the chunk in the key; -Wswitch points at the transform
// when such a kind is added.
// Errors: InvalidArgument for prefetch < 0, an invalid schedule, or one that already offloads.
STRAIT_API Schedule add_activation_offload(const Schedule& schedule, int prefetch);

// OFFLOAD actions on `stage` (the microbatches whose stash leaves the model during a step).
STRAIT_API int offloaded_microbatches(const Schedule& schedule, int stage);

}  // namespace strait::sched
