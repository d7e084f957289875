// OuterSync: DiLoCo's outer step (Douillard et al., "DiLoCo: Distributed Low-Communication
// Training of Language Models", arXiv 2311.08105, Algorithm 1), the gradient-synchronisation
// policy for replicas that talk rarely. Each data-parallel replica (its pipeline stages as usual)
// runs H inner optimizer steps on its own data with no gradient average between replicas (the
// executor's GradientSync then only sums the tied embedding inside the replica and clips); after
// the H-th, every stage averages its pseudo-gradient over the replicas of that stage,
//   delta = avg_r (w_start - w_r)                       (w_start: the round's global weights)
// through the compressed allreduce (comm/communicator.h; an int8 ring accumulates in fp32 as
// INTELLECT-1 / prime does, arXiv 2412.01152), and applies the outer Nesterov step, as
// torch.optim.SGD(momentum=mu, nesterov=True, dampening=0) does on the gradient delta:
//   m = mu * m + delta;   w_start = w_start - lr * (delta + mu * m);   w_r = w_start.
// The inner optimizer keeps its own state across rounds (it is not the caller's business here).
// The result is bit-identical on every replica (the compressed allreduce is, and the update is
// elementwise); the tied embedding's two copies (first and last stage, averaged by different
// data-parallel groups) are averaged once more over the tied group so they stay one.
//
// Overlap (OuterOptions::overlap; Streaming DiLoCo's overlap, arXiv 2501.18512, with tau =
// OuterOptions::delay inner steps): round t's pseudo-gradient p_t = g - w_r is averaged in the
// background, on the progress engine, while the next tau inner steps compute from an estimate w_e
// of the new global weights; when the average arrives (at the end of inner step s + tau, s the
// round's last) the estimate is replaced by it and the steps since kept on top,
//   m = mu * m + avg(p_t);  g' = g - lr * (avg(p_t) + mu * m);  w_r = w_r + (g' - w_e),
// and the next round's pseudo-gradient is measured from g'. With tau = H the average is applied at
// the next round's end, one round late. The estimate:
// - naive (the default): w_e = w_r, this replica's own progress stands in for the average;
// - eager (OuterOptions::eager, --outer-eager; Kale, Douillard & Donchev, "Eager Updates for
//   Overlapped Communication and Computation in DiLoCo", arXiv 2502.12996): the outer step on
//   (g, m) with the last average whose own part is replaced by the fresh pseudo-gradient,
//   avg(p_{t-1}) + (p_t - p_{t-1}) / R, taken at once and corrected when the average arrives.
// The last round's average is waited for and applied at once, so every replica ends on g.
// SparseLoCo (--outer-codec sparseloco, Sarfi et al., arXiv 2508.15706, Algorithm 1): the
// momentum array holds this replica's error-feedback accumulator e instead of Nesterov's m (so
// --outer-momentum must be 0); each round e = beta * e + p, the chunked top-k 2-bit encoding of
// e is gathered from every replica (comm/compress/sparseloco_codec.h; bytes per round and rank:
// (R - 1) * encoded_bytes), e -= decode(own encoding), and g = g - lr * avg_r decode(encoding_r),
// decoded in rank order, so bit-identical on every replica. e is per replica (checkpoints keep
// each replica's; a joiner starts at zero).
// With overlap off, H = 1, lr = 1 and mu = 0 the outer step is model averaging:
// w = w_start - avg_r (w_start - w_r) = avg_r w_r (up to fp32 rounding).
//
// A round ends after every H-th inner step, and at the last step of training (a shorter round).
// Fragments (OuterOptions::fragments, Streaming DiLoCo): the stage's parameters are cut into F
// contiguous groups, each with its own outer state, pseudo-gradient average and round schedule
// (shifted by k * H / F steps); the tied embedding is a part of its own on fragment 0's schedule.
// Each part averages its own buffer (error-feedback key "outer/stage<s>/part<i>"), in parameter
// order, the same on every replica. Not hierarchical yet: the data-parallel groups come from
// Communicator::split, which has one site, so the average is one flat ring over the replicas.
// Outer state: the global weights and the momentum (with overlap also the round's start) live in
// page-locked host memory from offload/pinned_pool.h, or for big models in a SwapStore on NVMe
// (offload/swap_store.h) between rounds, read in for the outer step and written back after it;
// the pseudo-gradient in flight always stays in RAM. Units: params and all state are fp32, one
// value per parameter of this stage. Thread-safety: one thread (the trainer's) drives an
// OuterSync; the background allreduce only touches the sync's own in-flight buffer. Errors: comm
// errors (Timeout, PeerLost, Mismatch) propagate; InvalidArgument for a codec other than none,
// bf16, int8, int4, sparseloco (with arguments), sparseloco with momentum != 0, outer_steps < 1, lr
// <= 0, momentum outside [0, 1), fragments outside [1, H], delay outside [0, H], a params span of
// the wrong size, and (lossy codecs, which check what they encode) a NaN or Inf in a
// pseudo-gradient; the store's errors (Io) with the state on NVMe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "offload/pinned_pool.h"
#include "offload/swap_store.h"
#include "train/data_parallel_sync.h"

namespace strait::train {

struct OuterOptions {
  int outer_steps = 50;        // H: inner steps per round
  double lr = 0.7;             // outer learning rate (DiLoCo's 0.7)
  double momentum = 0.9;       // Nesterov momentum mu (DiLoCo's 0.9); 0: plain outer SGD
  std::string codec = "none";  // none, bf16, int8, int4, optionally "name:key=value,..."
  bool overlap = false;        // average in the background, apply it `delay` inner steps later
  // With overlap: the inner steps the average may take to arrive (Streaming DiLoCo's tau), 1 to H;
  // 0: H (one round late). The last round's average is waited for at once. Measured over 5 seeds
  // (docs/results/diloco.md): 1 within 1% of the blocking outer step on the mean, H +3.7%.
  int delay = 1;
  // With overlap: eager updates (arXiv 2502.12996): the steps until the average arrives start from
  // the outer step taken with an estimate of it (the last average with this replica's own part
  // fresh). false: from this replica's own weights (the naive overlap).
  bool eager = false;
  // Streaming DiLoCo's fragments (arXiv 2501.18512, section 2.2): the stage's parameters cut into
  // this many contiguous groups (in layer order), fragment k's rounds shifted by k * H / F steps,
  // so that each sync sends 1/F of the stage and the link's peak load flattens. 1 <= F <= H. The
  // tied embedding (when the stage has it) syncs on fragment 0's schedule on every stage, so its
  // two copies stay one. At the last step every fragment syncs.
  int fragments = 1;
};

// Throws InvalidArgument naming the wrong field and the fix.
void validate(const OuterOptions& options);

// What end_step did.
struct OuterStepStats {
  bool round_ended = false;         // this step ended a round (of at least one fragment)
  bool applied = false;             // an outer update was applied (params replaced)
  std::int64_t round = -1;          // the round that ended (0-based: steps with a sync), or -1
  int fragments_synced = 0;         // fragments whose round ended at this step
  std::int64_t applied_rounds = 0;  // outer updates applied so far (each fragment's counted)
  std::uint64_t data_bytes = 0;     // sent over the data-parallel group since the last end_step
  std::uint64_t tied_bytes = 0;     // sent over the tied group by this call
};

class OuterSync {
 public:
  // comms.data: the replicas of this stage (null or size 1: no average, the outer step is local);
  // comms.tied: first and last stage of this replica, with `tied` the embedding's range in
  // params (nullopt elsewhere). initial: this stage's weights, identical on every replica.
  // pool: where the RAM comes from (null: a pool of its own). store: keep the outer state
  // (global weights, momentum, with overlap the round's start) in this SwapStore (NVMe) between
  // rounds, in RAM only during the outer step; null: in RAM throughout.
  OuterSync(sched::PipelineComms comms, int stage, std::span<const float> initial,
            std::optional<GradientLayout::Range> tied, OuterOptions options,
            std::shared_ptr<offload::PinnedPool> pool = nullptr,
            std::shared_ptr<offload::SwapStore> store = nullptr);
  OuterSync(const OuterSync&) = delete;
  OuterSync& operator=(const OuterSync&) = delete;
  OuterSync(OuterSync&&) = delete;
  OuterSync& operator=(OuterSync&&) = delete;
  // Waits (within the communicator's timeout) for an average still in flight; errors are dropped.
  ~OuterSync();

  // After inner step `step` (0-based) updated params: at a round's end (step + 1 a multiple of H,
  // shifted per fragment, or last) runs the outer step and may replace params. last: the final
  // step of training.
  OuterStepStats end_step(std::int64_t step, std::span<float> params, bool last);

  // The global weights after the last applied outer update (a copy; read from the store when
  // the state is on NVMe).
  [[nodiscard]] std::vector<float> global() const { return gather(0); }
  // Nesterov's momentum buffer m (a copy).
  [[nodiscard]] std::vector<float> momentum() const { return gather(1); }
  // DiLoCo's state between steps, for checkpoints (train/train_checkpoint.h) and for a
  // replica that joins: elementwise over this stage's parameters, fp32.
  struct State {
    std::vector<float> global;    // the global weights after the last applied outer update
    std::vector<float> momentum;  // Nesterov's m
    // Overlap only: the weights this replica's next pseudo-gradient is measured from (the global
    // weights), or with an average pending the estimate of the new ones it started from.
    std::vector<float> start;
    // Overlap only: the averaged pseudo-gradient to apply at the next round end, zeros in the
    // fragments with none pending (empty when no fragment has one).
    std::vector<float> pending;
    // Eager overlap only: this replica's last pseudo-gradient and the last average applied.
    std::vector<float> own;
    std::vector<float> last_average;
  };
  // Completes an average still in flight (waits for it and averages the tied copies: collective
  // over the data-parallel and tied groups, so every rank of the job calls it at the same step)
  // and returns the state. The training goes on unchanged from there.
  State export_state();
  // Replaces the state by one that export_state gave after `steps_done` inner steps of a run with
  // the same options and stage split; `ended` says that step was that run's last (its rounds all
  // closed there). The round counters follow from the step. Throws InvalidArgument for arrays of
  // the wrong size, or a pending average where none can be (or none where one must be).
  void import_state(const State& state, std::int64_t steps_done, bool ended);
  // Whether the last end_step was the last step of training (every round closed), or the
  // imported state was saved at such a step.
  [[nodiscard]] bool ended() const noexcept { return ended_; }

  // Whether the outer state lives in a SwapStore between rounds.
  [[nodiscard]] bool on_store() const noexcept { return store_ != nullptr; }
  // Its parts, in parameter order: [first, first + count) and the fragment (schedule) index.
  struct Part {
    std::size_t first = 0;
    std::size_t count = 0;
    int fragment = 0;
  };
  [[nodiscard]] std::vector<Part> parts() const;
  [[nodiscard]] const OuterOptions& options() const noexcept { return options_; }
  // The codec spec in canonical form ("none" when uncompressed).
  [[nodiscard]] const std::string& codec_spec() const noexcept { return codec_; }
  // Whether State::momentum is this replica's own (SparseLoCo's error feedback) rather than
  // identical on every replica (DiLoCo's Nesterov momentum): checkpoints then keep one per
  // replica, and a joining replica starts it at zero (clear_error_feedback).
  [[nodiscard]] bool local_momentum() const;
  // SparseLoCo: zeroes this replica's error feedback (a replica that joins has sent nothing yet;
  // a copy of another's would send that one's residual twice). No-op for the other codecs.
  void clear_error_feedback();

 private:
  // One contiguous range of the stage's parameters with its own outer state and round schedule
  // (rounds end when step + 1 + offset is a multiple of H); defined in outer_sync.cpp.
  class Fragment;

  sched::PipelineComms comms_;
  OuterOptions options_;
  std::string codec_;
  std::shared_ptr<offload::SwapStore> store_;
  std::size_t n_;
  std::vector<std::unique_ptr<Fragment>> fragments_;
  std::vector<Part> parts_;  // and where it lies
  std::int64_t rounds_ = 0;  // steps at which a fragment synced
  std::uint64_t data_bytes_seen_ = 0;
  bool ended_ = false;

  [[nodiscard]] std::vector<float> gather(std::size_t k) const;  // 0: global, 1: momentum
  [[nodiscard]] std::uint64_t data_bytes_now() const;
};

}  // namespace strait::train
