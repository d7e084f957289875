#include "model/rank_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "scheduler/executor.h"
#include "scheduler/schedule_sim.h"

namespace strait::sched {

std::vector<LayerRange> split_layers(int layers, int stages, std::span<const int> counts) {
  if (counts.empty()) return split_layers(layers, stages);
  int sum = 0;
  for (const int n : counts) {
    if (n < 1) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("layers per stage {}: every stage needs at least one layer",
                              fmt::join(counts, ",")));
    }
    sum += n;
  }
  if (static_cast<int>(counts.size()) != stages || sum != layers) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("layers per stage {}: {} stages of {} layers in all, but the model "
                            "has {} pipeline stages of {} layers in all; give one count per "
                            "stage, summing to the layers",
                            fmt::join(counts, ","), counts.size(), sum, stages, layers));
  }
  std::vector<LayerRange> out;
  int first = 0;
  for (const int n : counts) {
    out.push_back({first, first + n});
    first += n;
  }
  return out;
}

RankModel::RankModel(const GptConfig& config, const Schedule& schedule, int rank, int max_batch,
                     std::uint64_t seed, int min_slots, std::span<const int> stage_layers) {
  const int stages = stage_count(schedule);
  if (stages > config.layers) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the {} schedule needs {} model stages ({} ranks x {} chunks) but the "
                            "model has {} layers: every stage needs at least one layer; use more "
                            "layers, fewer stages or fewer chunks",
                            schedule.placement == StagePlacement::V ? "V-shaped" : "pipeline",
                            stages, schedule.stages, schedule.chunks, config.layers));
  }
  if (rank < 0 || rank >= schedule.stages) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("RankModel: rank {} is outside the schedule's {} ranks", rank,
                            schedule.stages));
  }
  const std::vector<LayerRange> ranges = split_layers(config.layers, stages, stage_layers);
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (int c = 0; c < schedule.chunks; ++c) {
    const int v = stage_of(schedule, rank, c);
    stages_.push_back(v);
    offsets.push_back(total);
    total += StageModel<float>::parameter_count(config, ranges[static_cast<std::size_t>(v)]);
  }
  params_.assign(total, 0.0F);
  grads_.assign(total, 0.0F);
  for (std::size_t c = 0; c < stages_.size(); ++c) {
    const int v = stages_[c];
    const LayerRange range = ranges[static_cast<std::size_t>(v)];
    const std::size_t n = StageModel<float>::parameter_count(config, range);
    const int slots = std::max(min_slots, peak_stashed_microbatches_of_stage(schedule, v));
    chunks_.push_back(std::make_unique<StageModel<float>>(
        config, range, max_batch, slots, seed, std::span<float>(params_).subspan(offsets[c], n),
        std::span<float>(grads_).subspan(offsets[c], n)));
    views_.push_back(std::make_unique<TransformerStage>(*chunks_.back()));
    for (TensorInfo t : chunks_.back()->tensors()) {
      t.offset += offsets[c];
      tensors_.push_back(std::move(t));
    }
    if (const auto w = chunks_.back()->tied_wte()) {
      const Slice s{w->offset + offsets[c], w->count};
      if (v == 0) first_wte_ = s.offset;
      (tied_ ? tied_copy_ : tied_) = s;
    }
    if (v == 0) first_chunk_ = static_cast<int>(c);
    if (v == stages - 1) last_chunk_ = static_cast<int>(c);
  }
}

std::vector<PipelineStage*> RankModel::pipeline_stages() {
  std::vector<PipelineStage*> out;
  for (auto& v : views_) out.push_back(v.get());
  return out;
}

bool RankModel::is_tied_copy(const TensorInfo& tensor) const noexcept {
  return tensor.name == "wte" && (!first_wte_ || tensor.offset != *first_wte_);
}

std::span<const float> RankModel::logits(int slot) const {
  if (!last_chunk_) {
    throw Error(ErrorCode::InvalidArgument,
                "RankModel::logits: this rank does not hold the model's last stage");
  }
  return chunk(*last_chunk_).logits(slot);
}

int RankModel::slots() const noexcept {
  int n = 0;
  for (const auto& c : chunks_) n += c->slots();
  return n;
}

std::size_t RankModel::slot_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += static_cast<std::size_t>(c->slots()) * c->stash_bytes();
  return n;
}

}  // namespace strait::sched
