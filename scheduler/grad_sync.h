// Gradient synchronisation: what a pipeline rank does with its gradients between the step's last
// backward and the optimizer, behind one interface the executor calls at ALLREDUCE_GRAD and OPTIM
// (as torch.distributed.pipelining's runtime delegates perform_reduce_grad to the stage), so the
// executor holds no averaging, compression or clipping policy.
//
// DataParallelSync, the policy of `strait train`: at ALLREDUCE_GRAD it first sums the gradient of
// weights tied between the first and the last stage (Megatron-LM's embedding group: their two
// copies stay identical), then averages every gradient over the replicas of this stage: plain, or
// compressed through a codec (comm/communicator.h's allreduce_compressed) after warm-up steps, or
// the momentum compressed instead of the gradient (1-bit Adam). At OPTIM it clips the global
// gradient norm (over all stages, the tied copy counted once).
// Thread-safety: one thread (the executor's) drives a sync. Errors: comm errors propagate;
// InvalidArgument for a diverged (non-finite) norm or a momentum of the wrong size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "scheduler/interface.h"

namespace strait::sched {

// The communicators a pipeline rank talks through (null where the group has one rank).
struct PipelineComms {
  comm::Communicator* pipeline = nullptr;  // the stages of this replica, rank = stage
  comm::Communicator* data = nullptr;      // the replicas of this stage, rank = replica
  comm::Communicator* tied = nullptr;      // first and last stage of this replica (P > 1)
};

class GradientSync : public Interface {
 public:
  // ALLREDUCE_GRAD: every backward of step `step` is done and its sends have left; leaves in grads
  // what the optimizer should see, before clipping.
  virtual void reduce_grads(std::int64_t step, std::span<float> grads) = 0;
  // OPTIM, just before the optimizer: clips grads in place; returns the global norm before.
  virtual double clip_grads(std::span<float> grads) = 0;
  // Bytes this rank's last reduce_grads sent.
  [[nodiscard]] virtual std::uint64_t bytes_sent() const = 0;
};

// Where a stage's gradient buffer holds what the sync treats specially.
struct GradientLayout {
  // Weights tied between the first and the last stage (the word embedding); nullopt elsewhere.
  struct Range {
    std::size_t offset = 0;
    std::size_t count = 0;
  };
  std::optional<Range> tied;
  // A second copy of the tied weights in this rank's buffer, when the rank holds both the first
  // and the last of several stages as two chunks (ZB-V's rank 0, or interleaved on one rank): its
  // gradient is summed with tied's in place (a + b, the bits a two-rank all-reduce gives), the
  // norm counts it out, and it is not sent over comms.tied. nullopt elsewhere.
  std::optional<Range> tied_copy;
  // The weight matrices (PowerSGD approximates each on its own; the elementwise codecs ignore it).
  std::vector<comm::MatrixShape> matrices;
};

// How the data-parallel gradient average is compressed (codecs in comm/compress/codec.h). Steps
// [0, warmup_steps) are averaged uncompressed, as PowerSGD (Vogels et al., 2019) and 1-bit Adam
// (Tang et al., 2021) do: early gradients are large and fast-changing, and a lossy start costs
// more accuracy than it saves time. Error feedback is keyed per stage ("grads/stage<s>").
//
// momentum = true compresses the momentum instead of the gradient, as 1-bit Adam (Tang et al.,
// 2021, Algorithm 1) and Deep Gradient Compression's momentum correction (Lin et al., ICLR 2018)
// do: each replica clips its own gradient g (local clipping, as DGC), forms its local momentum
// b1 m + (1 - b1) g from the shared momentum m of the last step, and the replicas average that,
// compressed with error feedback. The momentum changes slowly, so far less is lost to compression
// and far less waits in the error-feedback residual than with raw gradients. The optimizer then
// gets the gradient g' = (avg - b1 m) / (1 - b1) that makes AdamW's own momentum update land on
// the compressed average (the sync keeps m in step with the optimizer's, bit for bit); g' carries
// the compression error, so AdamW's second moment must be frozen from the switch on
// (AdamWHyper::freeze_variance_after). The sync needs the optimizer's momentum at the switch
// (set_momentum). Gradients are clipped before the average in this mode, so the norm reported is
// this replica's own.
struct GradientCompression {
  std::string codec{};  // codec spec ("int8", "topk:fraction=0.01"); empty: uncompressed
  std::int64_t warmup_steps = 0;
  bool momentum = false;  // compress the momentum (1-bit Adam), not the gradient
  double beta1 = 0.9;     // the optimizer's beta1 (momentum mode)
};

class DataParallelSync final : public GradientSync {
 public:
  // stage / stages: this rank's place in its pipeline; max_norm <= 0 disables clipping. Every
  // replica of a stage must use the same compression (a different codec is a Mismatch error
  // naming both ranks).
  DataParallelSync(PipelineComms comms, int stage, int stages, GradientLayout layout,
                   GradientCompression compression, double max_norm);

  void reduce_grads(std::int64_t step, std::span<float> grads) override;
  double clip_grads(std::span<float> grads) override;
  [[nodiscard]] std::uint64_t bytes_sent() const override { return bytes_sent_; }

  // Momentum mode: the optimizer's momentum (AdamW's m, one value per parameter, identical on
  // every replica) before the first compressed step; the sync advances its copy from then on.
  void set_momentum(std::vector<float> m) { momentum_ = std::move(m); }
  [[nodiscard]] std::span<const float> momentum() const { return momentum_; }

 private:
  // Clips, averages the local momenta compressed and leaves in grads the gradient that takes
  // AdamW's m there; advance_momentum then moves momentum_ by it.
  void average_momentum(std::span<float> grads, const comm::Compression& c);
  void advance_momentum(std::span<const float> grads);
  double clip(std::span<float> grads) const;

  PipelineComms comms_;
  int stage_;
  int stages_;
  GradientLayout layout_;
  GradientCompression compression_;
  double max_norm_;
  std::vector<float> momentum_;  // momentum mode: AdamW's m as of the last step
  bool clipped_ = false;         // this step's gradients were clipped before the average
  double norm_ = 0;              // and their norm then
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace strait::sched
