// DataParallelSync, the gradient policy of `strait train` behind scheduler/grad_sync.h's
// sched::GradientSync: at ALLREDUCE_GRAD it first sums the gradient of weights tied between the
// first and the last stage (Megatron-LM's embedding group: their two copies stay identical), then
// averages every gradient over the replicas of this stage: plain, or compressed through a codec
// (comm/communicator.h's allreduce_compressed) after warm-up steps, or the momentum compressed
// instead of the gradient (1-bit Adam). At OPTIM it clips the global gradient norm (over all
// stages, the tied copy counted once).
// Thread-safety: one thread (the executor's) drives a sync. Errors: comm errors propagate;
// InvalidArgument for a diverged (non-finite) norm, or momentum mode without the optimizer or
// with one of the wrong size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "offload/adamw_state.h"
#include "scheduler/grad_sync.h"

namespace strait::train {

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
// the compressed average; g' carries the compression error, so AdamW's second moment must be
// frozen from the switch on (AdamWHyper::freeze_variance_after). m has one owner, the optimizer
// (its AdamWState, identical on every replica): the sync reads it at each compressed step and
// keeps no copy. Gradients are clipped before the average in this mode, so the norm reported is
// this replica's own.
struct GradientCompression {
  std::string codec{};  // codec spec ("int8", "topk:fraction=0.01"); empty: uncompressed
  std::int64_t warmup_steps = 0;
  bool momentum = false;  // compress the momentum (1-bit Adam), not the gradient
  double beta1 = 0.9;     // the optimizer's beta1 (momentum mode)
};

class DataParallelSync final : public sched::GradientSync {
 public:
  // stage / stages: this rank's place in its pipeline; max_norm <= 0 disables clipping. Every
  // replica of a stage must use the same compression (a different codec is a Mismatch error
  // naming both ranks). optimizer: the AdamW state whose m momentum mode compresses (borrowed:
  // it must outlive the sync; unused, and may be null, otherwise).
  DataParallelSync(sched::PipelineComms comms, int stage, int stages, GradientLayout layout,
                   GradientCompression compression, double max_norm,
                   offload::AdamWState* optimizer = nullptr);

  void reduce_grads(std::int64_t step, std::span<float> grads) override;
  double clip_grads(std::span<float> grads) override;
  [[nodiscard]] std::uint64_t bytes_sent() const override { return bytes_sent_; }

 private:
  // Clips, averages the local momenta compressed and leaves in grads the gradient that takes
  // AdamW's m there.
  void average_momentum(std::span<float> grads, const comm::Compression& c);
  double clip(std::span<float> grads) const;

  sched::PipelineComms comms_;
  int stage_;
  int stages_;
  GradientLayout layout_;
  GradientCompression compression_;
  double max_norm_;
  offload::AdamWState* optimizer_;  // momentum mode: the owner of AdamW's m
  bool clipped_ = false;            // this step's gradients were clipped before the average
  double norm_ = 0;                 // and their norm then
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace strait::train
