// PipelineExecutor: runs one pipeline rank's action list (scheduler/schedule.h) for a training
// step over the model chunks that rank holds (PipelineStage, scheduler/stage.h; one per chunk: V
// of them for interleaved 1F1B and ZB-V, one otherwise): forwards and backwards of its chunks, the
// activation / gradient transfers with the neighbouring stages, the gradient synchronisation at
// ALLREDUCE_GRAD and the optimizer step at OPTIM. Both are injected (scheduler/grad_sync.h's
// interface, an OptimizerStep), as torch.distributed.pipelining's runtime delegates
// perform_reduce_grad to the stage: the executor holds no averaging, compression or clipping
// policy.
//
// Chunks: chunk c of rank r is the model stage stage_of(schedule, r, c) (interleaved: c * P + r,
// Megatron-LM's round robin; ZB-V: r and 2P-1-r). Messages are addressed by (peer, receiving
// stage, microbatch, direction, step) in the tag, so two chunks talking to the same peer are never
// confused. Where stage v + 1 is on the same rank as v (ZB-V's turn at rank P-1, or P = 1), the
// activations and gradients are handed over in memory: no message.
// Receives of a step are all posted when the step starts (the schedule's RECV only marks where the
// data must have arrived) and sends are non-blocking, so a stage computes while its neighbours'
// transfers are in flight; send buffers are per microbatch and live until the step's sends finish.
// Transfer buffers are per chunk and microbatch (M per direction, B x T x width floats each)
// whatever the schedule: 1F1B's memory saving, min(P - s, M) stashed microbatches, applies to the
// chunks' activation slots, not to these.
// Zero-bubble schedules (ZB-H1, ZB-V): a B with a W for the same (stage, microbatch) runs
// backward_input, and the W backward_weight, which gives backward's bits.
// Activation slots: a microbatch takes a free slot of its chunk at its F and gives it back at its B
// (its W when it has one); slots are assigned at run time, so chunk c needs only
// peak_stashed_microbatches_of_stage(schedule, stage of c).
// Activation offload (a schedule from add_activation_offload, and set_activation_store): OFFLOAD
// hands the slot's stash (PipelineStage::stash) to the store, keyed chunk * M + microbatch, and the
// slot becomes free once that copy is done; RELOAD takes a free slot and starts the copy back; B
// waits for that copy. An F or RELOAD that finds no free slot in its chunk waits for the oldest
// offload copy of that chunk still in flight. Stashes come back bit for bit, so training with and
// without offload gives the same bits.
// Gradients: ALLREDUCE_GRAD and OPTIM see the rank's parameters and gradients as one buffer, the
// chunks' one after the other (model/rank_model.h lays them out so); the executor checks
// that the chunks' buffers are adjacent.
// Thread-safety: one thread drives an executor. Errors: comm errors (PeerLost, Timeout, Mismatch)
// propagate with the operation and ranks named; InvalidArgument for inconsistent sizes; a failed
// activation copy is an Error with the store's code (Io, ...) naming the microbatch, the stage and
// the store. A step that fails waits for its copies in flight before it throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "offload/activation_store.h"
#include "scheduler/grad_sync.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_trace.h"
#include "scheduler/stage.h"

namespace strait::sched {

// Applies the update to params from grads (already averaged and clipped).
using OptimizerStep = std::function<void(std::span<float> params, std::span<const float> grads)>;

struct StepStats {
  double loss = 0;       // last stage: mean loss over the step's microbatches; else NaN
  double grad_norm = 0;  // global gradient norm before clipping
  std::uint64_t allreduce_bytes = 0;  // sent by this rank's gradient all-reduces in the step
  double offload_wait_s = 0;  // time the step waited for activation copies (offload / reload)
};

class PipelineExecutor {
 public:
  // `schedule` must be valid (validate_schedule) with stages == pipeline size, at most 256 model
  // stages and 32767 microbatches; `rank` is this rank of the pipeline; chunks[c] (non-null, V of
  // them) holds the model stage stage_of(schedule, rank, c) with at least
  // peak_stashed_microbatches_of_stage of it, and their params() / grads() follow one another in
  // memory (InvalidArgument otherwise, naming the fix). Only comms.pipeline is used here; the
  // others are the gradient sync's. microbatch_size: sequences per microbatch (B); context: T.
  PipelineExecutor(Schedule schedule, int rank, std::vector<PipelineStage*> chunks,
                   PipelineComms comms, int microbatch_size, int context);
  // One chunk per rank (GPipe, 1F1B, ZB-H1).
  PipelineExecutor(Schedule schedule, int rank, PipelineStage& model, PipelineComms comms,
                   int microbatch_size, int context)
      : PipelineExecutor(std::move(schedule), rank, std::vector<PipelineStage*>{&model}, comms,
                         microbatch_size, context) {}

  // One training step. tokens/targets: [M, B, T] int32 (used by the first / last stage only;
  // others may pass empty spans).
  StepStats run_step(std::int64_t step, std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> targets, const OptimizerStep& optimizer);

  // Forward only (evaluation, generation) of one batch of B' <= B sequences of length T' <= T
  // through the pipeline, stage by stage (tokens: the rank holding stage 0; targets: the rank
  // holding the last). The rank holding the last stage returns the sum of the per-position losses
  // (targets given) and leaves the logits in slot 0 of that chunk; other ranks return 0. `tag`
  // (< 2^28) tells passes apart.
  double forward_only(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                      int batch, int length, std::uint64_t tag);

  // What ALLREDUCE_GRAD and OPTIM do with the gradients; applies from the next run_step() on.
  // Without one, the step keeps each rank's own gradients unclipped (grad_norm is NaN).
  void set_gradient_sync(std::unique_ptr<GradientSync> sync) { sync_ = std::move(sync); }
  [[nodiscard]] GradientSync* gradient_sync() const noexcept { return sync_.get(); }

  // Where OFFLOAD sends stashes (required before run_step when this stage's list has OFFLOADs).
  void set_activation_store(std::unique_ptr<offload::ActivationStore> store) {
    store_ = std::move(store);
  }
  [[nodiscard]] offload::ActivationStore* activation_store() const noexcept { return store_.get(); }

  // Tracing (`strait train --trace`): while on, run_step records every action's start and end
  // (steady_clock, microseconds) with this rank; take_trace() hands them over.
  void set_tracing(bool on) noexcept { tracing_ = on; }
  [[nodiscard]] std::vector<TraceRecord> take_trace() { return std::exchange(trace_, {}); }

  // Whether this rank holds the model's first stage (it reads tokens) and its last (targets, loss).
  [[nodiscard]] bool first_stage() const noexcept { return holds_first_; }
  [[nodiscard]] bool last_stage() const noexcept { return holds_last_; }

 private:
  // Per chunk: its stage, its model, and its transfer buffers per microbatch (received input
  // activations, output activations being sent or handed over, received output gradients, input
  // gradients being sent or handed over; empty where the stage has none).
  struct Chunk {
    int stage = 0;
    PipelineStage* model = nullptr;
    int slots = 0;
    bool first = false;       // stage 0
    bool last = false;        // stage P*V - 1
    bool prev_local = false;  // stage - 1 is on this rank: its output is handed over in memory
    bool next_local = false;  // stage + 1 is on this rank
    int prev_rank = -1;       // ranks of stage - 1 and stage + 1 (-1: none)
    int next_rank = -1;
    std::vector<bool> split_backward;  // per microbatch: B then a later W
    std::vector<std::vector<float>> in_acts, out_acts, grad_out, grad_in;
  };
  // One run_step's state (posted receives, sends, activation slots, offload copies) and its
  // actions; defined in executor.cpp.
  class Step;
  // The chunk that runs `stage` (which is on this rank).
  [[nodiscard]] std::size_t chunk_index(int stage) const;
  // Waits for an activation copy; a failure becomes an Error naming `what`, the microbatch, stage.
  void wait_copy(std::future<void>& copy, const char* what, int microbatch, int stage,
                 StepStats& stats) const;
  [[noreturn]] void copy_failed(const char* what, int microbatch, int stage) const;

  Schedule schedule_;
  int rank_;
  std::vector<Chunk> chunks_;
  bool holds_first_ = false;
  bool holds_last_ = false;
  std::span<float> params_;  // all chunks', one after the other
  std::span<float> grads_;
  PipelineComms comms_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<offload::ActivationStore> store_;
  bool tracing_ = false;
  std::vector<TraceRecord> trace_;
  int batch_;
  int context_;
  std::size_t act_elems_;  // B * T * width
};

}  // namespace strait::sched
