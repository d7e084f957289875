// PipelineExecutor: runs one pipeline rank's action list (scheduler/schedule.h) for a training
// step over a PipelineStage (scheduler/stage.h): forwards and backwards of its stage, the
// activation / gradient transfers with the neighbouring stages, the gradient synchronisation at
// ALLREDUCE_GRAD and the optimizer step at OPTIM. Both are injected (scheduler/grad_sync.h, an
// OptimizerStep), as torch.distributed.pipelining's runtime delegates perform_reduce_grad to the
// stage: the executor holds no averaging, compression or clipping policy.
//
// Receives of a step are all posted when the step starts (the schedule's RECV only marks where the
// data must have arrived) and sends are non-blocking, so a stage computes while its neighbours'
// transfers are in flight; send buffers are per microbatch and live until the step's sends finish.
// Transfer buffers are per microbatch (M per direction, B x T x width floats each) whatever the
// schedule: 1F1B's memory saving, min(P - s, M) stashed microbatches, applies to the stage's
// activation slots, not to these.
// Zero-bubble schedules (ZB-H1): a B with a W for the same microbatch runs backward_input, and the
// W backward_weight, which gives backward's bits. Schedules with several chunks per rank
// (interleaved, ZB-V) are refused (InvalidArgument): the executor holds one stage.
// Activation slots: a microbatch takes a free slot at its F and gives it back at its B (its W when
// it has one); slots are
// assigned at run time, so the stage needs only peak_stashed_microbatches(schedule, stage).
// Activation offload (a schedule from add_activation_offload, and set_activation_store): OFFLOAD
// hands the slot's stash (PipelineStage::stash) to the store and the slot becomes free once that
// copy is done; RELOAD takes a free slot and starts the copy back; B waits for that copy. An F or
// RELOAD that finds no free slot waits for the oldest offload copy still in flight. Stashes come
// back bit for bit, so training with and without offload gives the same bits.
// Thread-safety: one thread drives an executor. Errors: comm errors (PeerLost, Timeout, Mismatch)
// propagate with the operation and ranks named; InvalidArgument for inconsistent sizes; a failed
// activation copy is an Error with the store's code (Io, ...) naming the microbatch, the stage and
// the store. A step that fails waits for its copies in flight before it throws.
#pragma once

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
  // `schedule` must be valid (validate_schedule) with stages == pipeline size; `stage` is this
  // rank's stage; `model` holds that stage and at least peak_stashed_microbatches slots
  // (InvalidArgument otherwise). Only comms.pipeline is used here; the others are the gradient
  // sync's.
  // microbatch_size: sequences per microbatch (B); context: T.
  PipelineExecutor(Schedule schedule, int stage, PipelineStage& model, PipelineComms comms,
                   int microbatch_size, int context);

  // One training step. tokens/targets: [M, B, T] int32 (used by the first / last stage only;
  // others may pass empty spans).
  StepStats run_step(std::int64_t step, std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> targets, const OptimizerStep& optimizer);

  // Forward only (evaluation, generation) of one batch of B' <= B sequences of length T' <= T
  // through the pipeline. Last stage: returns the sum of the per-position losses (targets given)
  // and leaves the logits in the stage's slot 0; other stages return 0.
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
  // (steady_clock, microseconds) with this stage as the rank; take_trace() hands them over.
  void set_tracing(bool on) noexcept { tracing_ = on; }
  [[nodiscard]] std::vector<TraceRecord> take_trace() { return std::exchange(trace_, {}); }

  [[nodiscard]] bool first_stage() const noexcept { return stage_ == 0; }
  [[nodiscard]] bool last_stage() const noexcept { return stage_ == schedule_.stages - 1; }

 private:
  // Waits for an activation copy; a failure becomes an Error naming `what`, the microbatch, stage.
  void wait_copy(std::future<void>& copy, const char* what, int microbatch, StepStats& stats) const;
  [[noreturn]] void copy_failed(const char* what, int microbatch) const;

  Schedule schedule_;
  int stage_;
  PipelineStage& model_;
  PipelineComms comms_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<offload::ActivationStore> store_;
  bool tracing_ = false;
  std::vector<TraceRecord> trace_;
  int slots_ = 0;  // activation slots this schedule needs on this stage
  // Per microbatch: B computes the input gradient only and a later W the weight gradients.
  std::vector<bool> split_backward_;
  int batch_;
  int context_;
  std::size_t act_elems_;  // B * T * width
  // Per microbatch: received input activations, output activations being sent, received output
  // gradients, input gradients being sent.
  std::vector<std::vector<float>> in_acts_, out_acts_, grad_out_, grad_in_;
};

}  // namespace strait::sched
