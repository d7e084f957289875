// RankModel: the model chunks one pipeline rank holds (scheduler/schedule.h's placement: one stage
// per rank for GPipe, 1F1B and ZB-H1; V for interleaved 1F1B, c * P + r on rank r; two in a V for
// ZB-V, r and 2P-1-r), each a StageModel of the reference GPT (model/transformer.h),
// with all their parameters in one buffer and all their gradients in another, chunk after chunk:
// what the executor's gradient sync and optimizer step (scheduler/executor.h), the optimizer state
// and checkpoints see as the rank's parameters.
//
// Layers: the model's L layers are split into P * V stages, stage v holding layers[v]: evenly
// (split_layers) or with the layer count of every stage given (uneven splits, which give a slower
// rank fewer layers: Megatron-LM's --decoder-first/last-pipeline-num-layers, or Holmes's splits
// for unlike clusters). The loss does not depend on where the pipeline is cut. Tensor names stay
// global ("h.3.attn.c_attn.weight"), so a rank's tensors are named the same whatever the split, and
// checkpoints do not depend on it. The wte of the last stage is a copy of the first stage's
// (transformer.h): is_tied_copy() says which one a checkpoint skips. Thread-safety: none; one
// thread drives a RankModel. Errors: InvalidArgument when the schedule has more stages than the
// model has layers (naming the fix), for a bad layer count per stage, or for the StageModel's own
// reasons.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/transformer.h"
#include "model/transformer_stage.h"
#include "scheduler/schedule.h"
#include "scheduler/stage.h"

namespace strait::sched {

// The stages' layer ranges for `counts[v]` layers in model stage v, in order; empty `counts`:
// split_layers(layers, stages). Throws InvalidArgument naming the fix when counts has other than
// `stages` entries, an entry below 1, or a sum other than `layers`.
std::vector<LayerRange> split_layers(int layers, int stages, std::span<const int> counts);

class RankModel {
 public:
  // Rank `rank` of `schedule` (valid) for `config`; each chunk gets
  // peak_stashed_microbatches_of_stage of its stage (at least `min_slots`), max_batch sequences per
  // microbatch, weights from `seed` (the same bits as any other split: transformer.h);
  // `stage_layers`: the layers of each model stage (split_layers' counts; empty: even).
  RankModel(const GptConfig& config, const Schedule& schedule, int rank, int max_batch,
            std::uint64_t seed, int min_slots = 1, std::span<const int> stage_layers = {});

  [[nodiscard]] int chunks() const noexcept { return static_cast<int>(chunks_.size()); }
  // The model stage chunk c holds, and the chunk.
  [[nodiscard]] int stage(int chunk) const { return stages_.at(static_cast<std::size_t>(chunk)); }
  [[nodiscard]] StageModel<float>& chunk(int c) { return *chunks_.at(static_cast<std::size_t>(c)); }
  [[nodiscard]] const StageModel<float>& chunk(int c) const {
    return *chunks_.at(static_cast<std::size_t>(c));
  }
  // The chunks as the executor runs them (PipelineExecutor's `chunks`), in chunk order.
  [[nodiscard]] std::vector<PipelineStage*> pipeline_stages();

  std::span<float> params() noexcept { return params_; }
  [[nodiscard]] std::span<const float> params() const noexcept { return params_; }
  std::span<float> grads() noexcept { return grads_; }

  // Every chunk's tensors, in buffer order, offsets into params() / grads().
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  // The wte this rank sums over the tied group (the first one in chunk order), nullopt when it
  // holds neither the first nor the last stage; and the second copy when it holds both as two
  // chunks (summed in place: train/data_parallel_sync.h's GradientLayout::tied_copy).
  [[nodiscard]] std::optional<Slice> tied_wte() const noexcept { return tied_; }
  [[nodiscard]] std::optional<Slice> tied_copy() const noexcept { return tied_copy_; }
  // True for the last stage's wte when it is a copy of the first stage's (more than one stage).
  [[nodiscard]] bool is_tied_copy(const TensorInfo& tensor) const noexcept;

  // Whether this rank holds the first / last model stage; the logits of the last stage's slot.
  [[nodiscard]] bool holds_first_stage() const noexcept { return first_chunk_.has_value(); }
  [[nodiscard]] bool holds_last_stage() const noexcept { return last_chunk_.has_value(); }
  [[nodiscard]] std::span<const float> logits(int slot) const;

  // Activation slots of all chunks, and their bytes (slots x each chunk's stash_bytes()).
  [[nodiscard]] int slots() const noexcept;
  [[nodiscard]] std::size_t slot_bytes() const noexcept;

 private:
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<int> stages_;
  std::vector<std::unique_ptr<StageModel<float>>> chunks_;
  std::vector<std::unique_ptr<TransformerStage>> views_;
  std::vector<TensorInfo> tensors_;
  std::optional<Slice> tied_, tied_copy_;
  std::optional<std::size_t> first_wte_;  // offset of the first stage's wte on this rank
  std::optional<int> first_chunk_, last_chunk_;
};

}  // namespace strait::sched
