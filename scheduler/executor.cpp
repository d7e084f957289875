#include "scheduler/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <limits>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {
namespace {

// Message tags: step, microbatch and direction, so a late or early message can never be taken for
// another (comm also matches on the sender). Forward-only passes use their own space (bit 36).
std::uint64_t step_tag(std::int64_t step, int microbatch, bool backward) {
  return ((static_cast<std::uint64_t>(step) & 0xfffffU) << 16) |
         (static_cast<std::uint64_t>(microbatch) << 1) | (backward ? 1U : 0U);
}

constexpr std::uint64_t kForwardOnlyTag = 1ULL << 36;

// The activation copies of a step, per microbatch. However the step ends, none may still touch the
// model's slots afterwards: the destructor waits for those in flight.
struct StepCopies {
  explicit StepCopies(std::size_t m) : offloading(m), reloading(m) {}
  StepCopies(const StepCopies&) = delete;
  StepCopies& operator=(const StepCopies&) = delete;
  ~StepCopies() {
    for (auto* list : {&offloading, &reloading}) {
      for (auto& f : *list) {
        if (f.valid()) f.wait();
      }
    }
  }
  std::vector<std::future<void>> offloading, reloading;
};

}  // namespace

PipelineExecutor::PipelineExecutor(Schedule schedule, int stage, PipelineStage& model,
                                   PipelineComms comms, int microbatch_size, int context)
    : schedule_(std::move(schedule)),
      stage_(stage),
      model_(model),
      comms_(comms),
      batch_(microbatch_size),
      context_(context) {
  const int p = schedule_.stages;
  if (stage < 0 || stage >= p) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: stage {} is outside the schedule's {} stages", stage, p));
  }
  const int pipe_size = comms_.pipeline != nullptr ? comms_.pipeline->size() : 1;
  if (pipe_size != p) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: the schedule has {} stages but the pipeline communicator "
                            "has {} ranks",
                            p, pipe_size));
  }
  if (schedule_.chunks != 1) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("executor: the schedule puts {} model chunks on each rank; the executor "
                    "runs one stage per rank (gpipe, 1f1b, zb-h1)",
                    schedule_.chunks));
  }
  if (schedule_.microbatches >= (1 << 15)) {
    throw Error(ErrorCode::InvalidArgument, "executor: at most 32767 microbatches per step");
  }
  slots_ = peak_stashed_microbatches(schedule_, stage_);
  split_backward_.resize(static_cast<std::size_t>(schedule_.microbatches));
  for (int mb = 0; mb < schedule_.microbatches; ++mb) {
    split_backward_[static_cast<std::size_t>(mb)] = has_weight_action(schedule_, stage_, mb);
  }
  if (model_.slots() < slots_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: stage {} needs {} activation slots for this schedule but "
                            "the model has {}",
                            stage_, slots_, model_.slots()));
  }
  act_elems_ = static_cast<std::size_t>(batch_) * static_cast<std::size_t>(context_) *
               static_cast<std::size_t>(model_.width());
  const auto m = static_cast<std::size_t>(schedule_.microbatches);
  const bool first = stage_ == 0;
  const bool last = stage_ == p - 1;
  in_acts_.resize(first ? 1 : m, std::vector<float>(act_elems_));
  out_acts_.resize(last ? 1 : m, std::vector<float>(act_elems_));
  grad_out_.resize(last ? 0 : m, std::vector<float>(act_elems_));
  grad_in_.resize(first ? 0 : m, std::vector<float>(act_elems_));
}

StepStats PipelineExecutor::run_step(std::int64_t step, std::span<const std::int32_t> tokens,
                                     std::span<const std::int32_t> targets,
                                     const OptimizerStep& optimizer) {
  const int p = schedule_.stages;
  const int m = schedule_.microbatches;
  const bool first = stage_ == 0;
  const bool last = stage_ == p - 1;
  const std::size_t seq_elems =
      static_cast<std::size_t>(batch_) * static_cast<std::size_t>(context_);
  if ((first && tokens.size() != seq_elems * static_cast<std::size_t>(m)) ||
      (last && targets.size() != seq_elems * static_cast<std::size_t>(m))) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("executor: step {} got {} tokens and {} targets; the first and last "
                    "stage need microbatches x B x T = {} each",
                    step, tokens.size(), targets.size(), seq_elems * static_cast<std::size_t>(m)));
  }
  const std::size_t bytes = act_elems_ * sizeof(float);
  comm::Communicator* pipe = comms_.pipeline;

  model_.zero_grads();
  // Post every receive of the step now; the schedule's RECV actions wait for them. Their deadline
  // runs from that wait, not from now: a receive posted early may rightly wait a whole step.
  std::vector<comm::Work> recv_f(static_cast<std::size_t>(m)), recv_b(static_cast<std::size_t>(m));
  for (int mb = 0; mb < m; ++mb) {
    const auto i = static_cast<std::size_t>(mb);
    if (!first) {
      recv_f[i] = pipe->irecv(in_acts_[i].data(), bytes, stage_ - 1, step_tag(step, mb, false),
                              comm::DeadlineStart::AtWait);
    }
    if (!last) {
      recv_b[i] = pipe->irecv(grad_out_[i].data(), bytes, stage_ + 1, step_tag(step, mb, true),
                              comm::DeadlineStart::AtWait);
    }
  }
  std::vector<comm::Work> sends;
  // Activation slots and offload state per microbatch. `draining`: offloaded microbatches whose
  // copy out may still read their old slot (oldest first); the slot is free once it is done.
  std::vector<int> slot_of(static_cast<std::size_t>(m), -1);
  std::vector<int> free_slots;
  for (int s = slots_ - 1; s >= 0; --s) free_slots.push_back(s);
  StepCopies copies(static_cast<std::size_t>(m));
  auto& offloading = copies.offloading;
  auto& reloading = copies.reloading;
  std::vector<StashInfo> stash_info(static_cast<std::size_t>(m));
  std::deque<int> draining;
  const auto& actions = schedule_.ranks[static_cast<std::size_t>(stage_)];
  if (store_ == nullptr && std::any_of(actions.begin(), actions.end(), [](const Action& a) {
        return a.kind == ActionKind::Offload;
      })) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: stage {}'s schedule offloads activations but no activation "
                            "store was set (set_activation_store)",
                            stage_));
  }

  StepStats stats;
  // The slot of the oldest offload still copying becomes free once its copy is done.
  auto drain_one = [&] {
    const int mb = draining.front();
    draining.pop_front();
    const auto j = static_cast<std::size_t>(mb);
    wait_copy(offloading[j], "offload", mb, stats);
    free_slots.push_back(slot_of[j]);
    slot_of[j] = -1;
  };
  auto take_slot = [&](const Action& a) {
    if (free_slots.empty() && !draining.empty()) drain_one();
    if (free_slots.empty()) {
      throw Error(ErrorCode::Internal,
                  fmt::format("executor: stage {} ran out of activation slots at {}", stage_,
                              to_string(a)));
    }
    const int slot = free_slots.back();
    free_slots.pop_back();
    return slot;
  };

  double loss_sum = 0;
  const auto now_us = [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (const Action& a : actions) {
    const auto i = static_cast<std::size_t>(a.microbatch < 0 ? 0 : a.microbatch);
    const double start_us = tracing_ ? now_us() : 0.0;
    switch (a.kind) {
      case ActionKind::RecvF: recv_f[i].wait(); break;
      case ActionKind::RecvB: recv_b[i].wait(); break;
      case ActionKind::F: {
        const int slot = take_slot(a);
        slot_of[i] = slot;
        const std::int32_t* tok = first ? tokens.data() + i * seq_elems : nullptr;
        const std::int32_t* tgt = last ? targets.data() + i * seq_elems : nullptr;
        const double loss = model_.forward(slot, tok, first ? nullptr : in_acts_[i].data(), tgt,
                                           batch_, context_, last ? nullptr : out_acts_[i].data());
        if (last) loss_sum += loss;
        break;
      }
      case ActionKind::SendF:
        sends.push_back(pipe->isend(out_acts_[i].data(), bytes, stage_ + 1,
                                    step_tag(step, a.microbatch, false)));
        break;
      case ActionKind::Offload: {
        // The slot stays taken until the copy out is done (drain_one).
        stash_info[i] = model_.release_stash(slot_of[i]);
        try {
          offloading[i] = store_->offload(a.microbatch, model_.stash(slot_of[i]));
        } catch (const std::exception&) {
          copy_failed("offload", a.microbatch);
        }
        draining.push_back(a.microbatch);
        break;
      }
      case ActionKind::Reload: {
        if (const auto it = std::find(draining.begin(), draining.end(), a.microbatch);
            it != draining.end()) {
          // Its copy out is still pending: finish it (and free its old slot) first.
          draining.erase(it);
          draining.push_front(a.microbatch);
          drain_one();
        }
        const int slot = take_slot(a);
        slot_of[i] = slot;
        try {
          reloading[i] = store_->reload(a.microbatch, model_.stash(slot));
        } catch (const std::exception&) {
          copy_failed("reload", a.microbatch);
        }
        break;
      }
      case ActionKind::B: {
        if (reloading[i].valid()) {
          wait_copy(reloading[i], "reload", a.microbatch, stats);
          model_.restore_stash(slot_of[i], stash_info[i]);
        }
        const float* dout = last ? nullptr : grad_out_[i].data();
        float* din = first ? nullptr : grad_in_[i].data();
        if (split_backward_[i]) {
          // Zero bubble: the input gradient now, the weight gradients at W (the slot stays).
          model_.backward_input(slot_of[i], dout, 1.0F / static_cast<float>(m), din);
          break;
        }
        model_.backward(slot_of[i], dout, 1.0F / static_cast<float>(m), din);
        free_slots.push_back(slot_of[i]);
        slot_of[i] = -1;
        break;
      }
      case ActionKind::W:
        model_.backward_weight(slot_of[i]);
        free_slots.push_back(slot_of[i]);
        slot_of[i] = -1;
        break;
      case ActionKind::SendB:
        sends.push_back(
            pipe->isend(grad_in_[i].data(), bytes, stage_ - 1, step_tag(step, a.microbatch, true)));
        break;
      case ActionKind::AllreduceGrad:
        for (const auto& w : sends) w.wait();
        sends.clear();
        if (sync_) {
          sync_->reduce_grads(step, model_.grads());
          stats.allreduce_bytes = sync_->bytes_sent();
        }
        break;
      case ActionKind::Optim:
        stats.grad_norm =
            sync_ ? sync_->clip_grads(model_.grads()) : std::numeric_limits<double>::quiet_NaN();
        optimizer(model_.params(), model_.grads());
        break;
    }
    if (tracing_) trace_.push_back(TraceRecord{stage_, step, a, start_us, now_us()});
  }
  for (const auto& w : sends) w.wait();
  stats.loss = last ? loss_sum / m : std::numeric_limits<double>::quiet_NaN();
  return stats;
}

void PipelineExecutor::wait_copy(std::future<void>& copy, const char* what, int microbatch,
                                 StepStats& stats) const {
  const auto start = std::chrono::steady_clock::now();
  try {
    copy.get();
  } catch (const std::exception&) {
    copy_failed(what, microbatch);
  }
  stats.offload_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void PipelineExecutor::copy_failed(const char* what, int microbatch) const {
  // Called from a catch block: names where the activation copy failed, keeping the store's code.
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("activation {} of microbatch {} on stage {} ({} store): {}",
                                      what, microbatch, stage_, store_->kind(), e.message()));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Io,
                fmt::format("activation {} of microbatch {} on stage {} ({} store): {}", what,
                            microbatch, stage_, store_->kind(), e.what()));
  }
}

double PipelineExecutor::forward_only(std::span<const std::int32_t> tokens,
                                      std::span<const std::int32_t> targets, int batch, int length,
                                      std::uint64_t tag) {
  const bool first = stage_ == 0;
  const bool last = stage_ == schedule_.stages - 1;
  if (batch < 1 || batch > batch_ || length < 1 || length > context_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("forward_only: batch {} x length {} exceeds the executor's {} x {}",
                            batch, length, batch_, context_));
  }
  const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(length);
  if ((first && tokens.size() != n) || (last && !targets.empty() && targets.size() != n)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("forward_only: {} tokens / {} targets for a {} x {} batch",
                            tokens.size(), targets.size(), batch, length));
  }
  const std::size_t bytes = n * static_cast<std::size_t>(model_.width()) * sizeof(float);
  const std::uint64_t t = kForwardOnlyTag | (tag & ((1ULL << 36) - 1));
  comm::Communicator* pipe = comms_.pipeline;
  if (!first) pipe->recv(in_acts_[0].data(), bytes, stage_ - 1, t);
  const std::int32_t* tgt = last && !targets.empty() ? targets.data() : nullptr;
  const double loss =
      model_.forward(0, first ? tokens.data() : nullptr, first ? nullptr : in_acts_[0].data(), tgt,
                     batch, length, last ? nullptr : out_acts_[0].data());
  if (!last) pipe->send(out_acts_[0].data(), bytes, stage_ + 1, t);
  return last && tgt != nullptr ? loss * static_cast<double>(n) : 0.0;
}

}  // namespace strait::sched
