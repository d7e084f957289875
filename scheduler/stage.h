// PipelineStage: what the executor (scheduler/executor.h) needs of the model part one pipeline rank
// holds, and nothing more: forward and backward of a microbatch into an activation slot, the
// flat parameter and gradient buffers, and the slot's stash bytes for activation offload.
// The executor never sees a transformer; model/transformer_stage.h puts the reference GPT
// behind this face (torch.distributed.pipelining's PipelineStage plays the same part for
// schedules.py's runtime).
//
// Activations crossing a stage boundary are [B, T, width()] floats; token ids and targets are
// [B, T] int32 (first stage: tokens in; last stage: targets in, a loss out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "scheduler/interface.h"

namespace strait::sched {

// What a released stash's bytes do not say: the microbatch's shape and whether it has a loss.
struct StashInfo {
  int B = 0;
  int T = 0;
  bool has_loss = false;
};

class PipelineStage : public Interface {
 public:
  // Floats per position of the activations this stage receives and sends.
  [[nodiscard]] virtual int width() const = 0;
  // Activation slots: microbatches whose forward can wait for their backward at once.
  [[nodiscard]] virtual int slots() const = 0;

  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual void zero_grads() = 0;

  // Forward of one microbatch into `slot`. Exactly one of tokens (first stage) and in_acts (other
  // stages) is given; out_acts is null on the last stage, which returns the mean loss over the
  // B * T positions of `targets` (NaN without targets); the others return 0.
  virtual double forward(int slot, const std::int32_t* tokens, const float* in_acts,
                         const std::int32_t* targets, int B, int T, float* out_acts) = 0;
  // Backward of the microbatch in `slot`, accumulating into grads() and freeing the slot.
  // dout_acts: null on the last stage (which propagates loss_scale * mean loss); din_acts: null on
  // the first stage.
  virtual void backward(int slot, const float* dout_acts, float loss_scale, float* din_acts) = 0;
  // The same backward in two halves, for zero-bubble schedules (Qi et al., ICLR 2024): B computes
  // din_acts only and keeps the slot; W, which may run later, accumulates the weight gradients
  // and frees it. B then W gives backward's bits.
  virtual void backward_input(int slot, const float* dout_acts, float loss_scale,
                              float* din_acts) = 0;
  virtual void backward_weight(int slot) = 0;

  // Activation offload: the slot's stash bytes (fixed address), taking a forward off the books
  // while a copy of its bytes may be in flight, and declaring them back (bit for bit).
  virtual std::span<std::byte> stash(int slot) = 0;
  virtual StashInfo release_stash(int slot) = 0;
  virtual void restore_stash(int slot, const StashInfo& info) = 0;
};

}  // namespace strait::sched
