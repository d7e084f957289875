// TransformerStage: the reference GPT's stage (model/transformer.h) behind the
// executor's PipelineStage face (scheduler/stage.h), so the executor runs it without knowing what a
// transformer is. A thin view: the model stays the caller's, and every call goes straight to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/transformer.h"
#include "scheduler/stage.h"

namespace strait::sched {

class TransformerStage final : public PipelineStage {
 public:
  explicit TransformerStage(StageModel<float>& model) : model_(model) {}

  [[nodiscard]] StageModel<float>& model() noexcept { return model_; }

  [[nodiscard]] int width() const override { return model_.config().dim; }
  [[nodiscard]] int slots() const override { return model_.slots(); }
  std::span<float> params() override { return model_.params(); }
  std::span<float> grads() override { return model_.grads(); }
  void zero_grads() override { model_.zero_grads(); }

  double forward(int slot, const std::int32_t* tokens, const float* in_acts,
                 const std::int32_t* targets, int B, int T, float* out_acts) override {
    const bool last = model_.is_last();
    if (tokens != nullptr) {
      if (last) return model_.forward(slot, tokens, targets, B, T);
      model_.forward(slot, tokens, B, T, out_acts);
      return 0;
    }
    if (last) return model_.forward(slot, in_acts, targets, B, T);
    model_.forward(slot, in_acts, B, T, out_acts);
    return 0;
  }
  void backward(int slot, const float* dout_acts, float loss_scale, float* din_acts) override {
    model_.backward(slot, dout_acts, loss_scale, din_acts);
  }
  void backward_input(int slot, const float* dout_acts, float loss_scale,
                      float* din_acts) override {
    model_.backward_input(slot, dout_acts, loss_scale, din_acts);
  }
  void backward_weight(int slot) override { model_.backward_weight(slot); }

  std::span<std::byte> stash(int slot) override { return model_.stash(slot); }
  StashInfo release_stash(int slot) override {
    const auto s = model_.release_stash(slot);
    return {s.B, s.T, s.has_loss};
  }
  void restore_stash(int slot, const StashInfo& info) override {
    model_.restore_stash(slot, {info.B, info.T, info.has_loss});
  }

 private:
  StageModel<float>& model_;
};

}  // namespace strait::sched
