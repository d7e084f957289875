// PipelineExecutor: runs one pipeline rank's action list (scheduler/schedule.h) for a training
// step: forwards and backwards of its stage, the activation / gradient transfers with the
// neighbouring stages, the gradient all-reduce over data-parallel replicas and the optimizer step.
//
// Receives of a step are all posted when the step starts (the schedule's RECV only marks where the
// data must have arrived) and sends are non-blocking, so a stage computes while its neighbours'
// transfers are in flight; send buffers are per microbatch and live until the step's sends finish.
// ALLREDUCE_GRAD first sums the tied word-embedding gradient between the first and the last stage
// (Megatron-LM's embedding group: their two copies of wte stay identical), then averages every
// gradient over the replicas of this stage. OPTIM clips the global gradient norm (over all stages,
// the tied copy counted once) and calls the optimizer.
// Transfer buffers are per microbatch (M per direction, B x T x C floats each) whatever the
// schedule: 1F1B's memory saving, min(P - s, M) stashed microbatches, applies to the model's
// activation slots, not to these.
// Activation slots: a microbatch takes a free slot at its F and gives it back at its B; slots are
// assigned at run time, so the model needs only peak_stashed_microbatches(schedule, stage).
// Activation offload (a schedule from add_activation_offload, and set_activation_store): OFFLOAD
// hands the slot's stash (StageModel::stash) to the store and the slot becomes free once that copy
// is done; RELOAD takes a free slot and starts the copy back; B waits for that copy. An F or RELOAD
// that finds no free slot waits for the oldest offload copy still in flight. Stashes come back bit
// for bit, so training with and without offload gives the same bits.
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
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "offload/activation_store.h"
#include "scheduler/schedule.h"
#include "scheduler/transformer.h"

namespace strait::sched {

// The communicators a pipeline rank talks through (null where the group has one rank).
struct PipelineComms {
  comm::Communicator* pipeline = nullptr;  // the stages of this replica, rank = stage
  comm::Communicator* data = nullptr;      // the replicas of this stage, rank = replica
  comm::Communicator* tied = nullptr;      // first and last stage of this replica (P > 1)
};

// How the data-parallel gradient average is compressed (comm/communicator.h's
// allreduce_compressed, codecs in comm/compress/codec.h). Steps [0, warmup_steps) are averaged
// uncompressed, as PowerSGD (Vogels et al., 2019) and 1-bit Adam (Tang et al., 2021) do: early
// gradients are large and fast-changing, and a lossy start costs more accuracy than it saves time.
// Error feedback is keyed per stage ("grads/stage<s>"), so it starts with the first compressed
// step.
//
// momentum = true compresses the momentum instead of the gradient, as 1-bit Adam (Tang et al.,
// 2021, Algorithm 1) and Deep Gradient Compression's momentum correction (Lin et al., ICLR 2018)
// do: each replica clips its own gradient g (local clipping, as DGC), forms its local momentum
// b1 m + (1 - b1) g from the shared momentum m of the last step, and the replicas average that,
// compressed with error feedback. The momentum changes slowly, so far less is lost to compression
// and far less waits in the error-feedback residual than with raw gradients. The optimizer then
// gets the gradient g' = (avg - b1 m) / (1 - b1) that makes AdamW's own momentum update land on
// the compressed average (the executor keeps m in step with the optimizer's, bit for bit); g'
// carries the compression error, so AdamW's second moment must be frozen from the switch on
// (AdamWHyper::freeze_variance_after). The executor needs the optimizer's momentum at the switch
// (set_momentum). Gradients are clipped before the average in this mode, so grad_norm is this
// replica's own.
struct GradientCompression {
  std::string codec{};  // codec spec ("int8", "topk:fraction=0.01"); empty: uncompressed
  std::int64_t warmup_steps = 0;
  bool momentum = false;  // compress the momentum (1-bit Adam), not the gradient
  double beta1 = 0.9;     // the optimizer's beta1 (momentum mode)
};

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
  // rank's stage; the model holds that stage and at least peak_stashed_microbatches slots
  // (InvalidArgument otherwise).
  // microbatch_size: sequences per microbatch (B); context: T.
  PipelineExecutor(Schedule schedule, int stage, StageModel<float>& model, PipelineComms comms,
                   int microbatch_size, int context);

  // One training step. tokens/targets: [M, B, T] int32 (used by the first / last stage only;
  // others may pass empty spans). grad_clip <= 0 disables clipping.
  StepStats run_step(std::int64_t step, std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> targets, double grad_clip,
                     const OptimizerStep& optimizer);

  // Forward only (evaluation, generation) of one batch of B' <= B sequences of length T' <= T
  // through the pipeline. Last stage: returns the sum of the per-position losses (targets given)
  // and leaves the logits readable through model().logits(0); other stages return 0.
  double forward_only(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                      int batch, int length, std::uint64_t tag);

  // Applies from the next run_step() on. Every replica of a stage must use the same setting
  // (a different codec is a Mismatch error naming both ranks).
  void set_gradient_compression(GradientCompression compression) {
    compression_ = std::move(compression);
  }
  // Momentum mode: the optimizer's momentum (AdamW's m, one value per parameter, identical on
  // every replica) before the first compressed step; the executor advances its copy from then on.
  void set_momentum(std::vector<float> m) { momentum_ = std::move(m); }
  [[nodiscard]] std::span<const float> momentum() const { return momentum_; }

  // Where OFFLOAD sends stashes (required before run_step when this stage's list has OFFLOADs).
  void set_activation_store(std::unique_ptr<offload::ActivationStore> store) {
    store_ = std::move(store);
  }
  [[nodiscard]] offload::ActivationStore* activation_store() const noexcept { return store_.get(); }

  [[nodiscard]] StageModel<float>& model() noexcept { return model_; }
  [[nodiscard]] bool first_stage() const noexcept { return stage_ == 0; }
  [[nodiscard]] bool last_stage() const noexcept { return stage_ == schedule_.stages - 1; }

 private:
  void all_reduce_gradients(std::int64_t step, double grad_clip, StepStats& stats);
  // Momentum mode (GradientCompression::momentum): clips, averages the local momenta compressed
  // and leaves in grads the gradient that takes AdamW's m there; then advances momentum_ by it.
  void average_momentum(std::span<float> grads, double grad_clip, const comm::Compression& c);
  void advance_momentum(std::span<const float> grads);
  // Waits for an activation copy; a failure becomes an Error naming `what`, the microbatch, stage.
  void wait_copy(std::future<void>& copy, const char* what, int microbatch, StepStats& stats) const;
  [[noreturn]] void copy_failed(const char* what, int microbatch) const;
  double clip_gradients(double max_norm);

  Schedule schedule_;
  int stage_;
  StageModel<float>& model_;
  PipelineComms comms_;
  GradientCompression compression_;
  std::vector<float> momentum_;  // momentum mode: AdamW's m as of the last step
  bool clipped_ = false;         // this step's gradients were clipped before the average
  double norm_ = 0;              // and their norm then
  std::unique_ptr<offload::ActivationStore> store_;
  int slots_ = 0;  // activation slots this schedule needs on this stage
  int batch_;
  int context_;
  std::size_t act_elems_;  // B * T * C
  // Per microbatch: received input activations, output activations being sent, received output
  // gradients, input gradients being sent.
  std::vector<std::vector<float>> in_acts_, out_acts_, grad_out_, grad_in_;
};

}  // namespace strait::sched
