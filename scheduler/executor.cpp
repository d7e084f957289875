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

// Message tags (comm takes tags < 2^37): the step (mod 2^12), the receiving model stage (8 bits),
// the microbatch (15 bits) and the direction, so a late or early message can never be taken for
// another, nor one chunk's for another's on the same peer (comm also matches on the sender).
// Steps are collective, so messages 4096 steps apart never meet. Forward-only passes use their
// own space (bit 36).
constexpr int kMaxStages = 256;
constexpr int kMaxMicrobatches = (1 << 15) - 1;
constexpr std::uint64_t kForwardOnlyTag = 1ULL << 36;

std::uint64_t step_tag(std::int64_t step, int stage, int microbatch, bool backward) {
  return ((static_cast<std::uint64_t>(step) & 0xfffU) << 24) |
         (static_cast<std::uint64_t>(stage) << 16) | (static_cast<std::uint64_t>(microbatch) << 1) |
         (backward ? 1U : 0U);
}

std::uint64_t forward_only_tag(std::uint64_t tag, int stage) {
  return kForwardOnlyTag | ((tag & ((1ULL << 28) - 1)) << 8) | static_cast<std::uint64_t>(stage);
}

// The activation copies of a step, per (chunk, microbatch) key. However the step ends, none may
// still touch the model's slots afterwards: the destructor waits for those in flight.
struct StepCopies {
  explicit StepCopies(std::size_t n) : offloading(n), reloading(n) {}
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

PipelineExecutor::PipelineExecutor(Schedule schedule, int rank, std::vector<PipelineStage*> chunks,
                                   PipelineComms comms, int microbatch_size, int context)
    : schedule_(std::move(schedule)),
      rank_(rank),
      comms_(comms),
      batch_(microbatch_size),
      context_(context) {
  const int p = schedule_.stages;
  const int v = schedule_.chunks;
  if (rank < 0 || rank >= p) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: rank {} is outside the schedule's {} ranks", rank, p));
  }
  const int pipe_size = comms_.pipeline != nullptr ? comms_.pipeline->size() : 1;
  if (pipe_size != p) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: the schedule has {} stages but the pipeline communicator "
                            "has {} ranks",
                            p, pipe_size));
  }
  if (static_cast<int>(chunks.size()) != v ||
      std::any_of(chunks.begin(), chunks.end(), [](PipelineStage* c) { return c == nullptr; })) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: the schedule puts {} model chunks on each rank but {} "
                            "were given (one PipelineStage per chunk, none null)",
                            v, chunks.size()));
  }
  if (stage_count(schedule_) > kMaxStages) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: {} ranks x {} chunks = {} model stages; at most {}", p, v,
                            stage_count(schedule_), kMaxStages));
  }
  if (schedule_.microbatches > kMaxMicrobatches) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: at most {} microbatches per step", kMaxMicrobatches));
  }
  const int width = chunks[0]->width();
  act_elems_ = static_cast<std::size_t>(batch_) * static_cast<std::size_t>(context_) *
               static_cast<std::size_t>(width);
  const auto m = static_cast<std::size_t>(schedule_.microbatches);
  const int last_stage = stage_count(schedule_) - 1;
  for (int c = 0; c < v; ++c) {
    Chunk ch;
    ch.stage = stage_of(schedule_, rank, c);
    ch.model = chunks[static_cast<std::size_t>(c)];
    ch.first = ch.stage == 0;
    ch.last = ch.stage == last_stage;
    ch.prev_rank = ch.first ? -1 : rank_of(schedule_, ch.stage - 1);
    ch.next_rank = ch.last ? -1 : rank_of(schedule_, ch.stage + 1);
    ch.prev_local = ch.prev_rank == rank;
    ch.next_local = ch.next_rank == rank;
    ch.slots = peak_stashed_microbatches_of_stage(schedule_, ch.stage);
    if (ch.model->width() != width) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("executor: chunk {} (stage {}) passes {} floats per position but "
                              "chunk 0 passes {}: the chunks of a model share one width",
                              c, ch.stage, ch.model->width(), width));
    }
    if (ch.model->slots() < ch.slots) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("executor: stage {} needs {} activation slots for this schedule but "
                              "the model has {}",
                              ch.stage, ch.slots, ch.model->slots()));
    }
    ch.split_backward.resize(m);
    for (std::size_t mb = 0; mb < m; ++mb) {
      ch.split_backward[mb] = has_weight_action(schedule_, ch.stage, static_cast<int>(mb));
    }
    // A received input needs a buffer per microbatch; one handed over in memory is read from the
    // previous chunk's output. The first stage's forward-only input is never used.
    ch.in_acts.resize(ch.first || ch.prev_local ? 1 : m, std::vector<float>(act_elems_));
    ch.out_acts.resize(ch.last ? 1 : m, std::vector<float>(act_elems_));
    ch.grad_out.resize(ch.last || ch.next_local ? 0 : m, std::vector<float>(act_elems_));
    ch.grad_in.resize(ch.first ? 0 : m, std::vector<float>(act_elems_));
    holds_first_ = holds_first_ || ch.first;
    holds_last_ = holds_last_ || ch.last;
    chunks_.push_back(std::move(ch));
  }
  // The rank's parameters and gradients as one buffer: the chunks' must follow one another.
  for (const auto* which : {"params", "grads"}) {
    const bool params = which[0] == 'p';
    float* begin = nullptr;
    std::size_t size = 0;
    for (int c = 0; c < v; ++c) {
      const std::span<float> s = params ? chunks[static_cast<std::size_t>(c)]->params()
                                        : chunks[static_cast<std::size_t>(c)]->grads();
      if (c == 0) {
        begin = s.data();
      } else if (s.data() != begin + size) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("executor: chunk {}'s {} do not follow chunk {}'s in memory: the "
                                "gradient sync and the optimizer take a rank's {} as one buffer "
                                "(build the chunks with model/rank_model.h)",
                                c, which, c - 1, which));
      }
      size += s.size();
    }
    (params ? params_ : grads_) = std::span<float>(begin, size);
  }
}

std::size_t PipelineExecutor::chunk_index(int stage) const {
  return static_cast<std::size_t>(chunk_of(schedule_, stage));
}

// One run_step: the receives it posted, its sends in flight, which activation slot holds each
// microbatch, the offload copies and the loss so far. Its members are destroyed in reverse order,
// so the copies in flight are waited for before the sends and receives go (as before the split).
// Keys are chunk * M + microbatch.
class PipelineExecutor::Step {
 public:
  Step(PipelineExecutor& ex, std::int64_t step, std::span<const std::int32_t> tokens,
       std::span<const std::int32_t> targets)
      : ex_(ex),
        step_(step),
        tokens_(tokens),
        targets_(targets),
        m_(ex.schedule_.microbatches),
        mm_(static_cast<std::size_t>(m_)),
        seq_elems_(static_cast<std::size_t>(ex.batch_) * static_cast<std::size_t>(ex.context_)),
        bytes_(ex.act_elems_ * sizeof(float)),
        nchunks_(ex.chunks_.size()),
        loss_scale_(1.0F / static_cast<float>(m_)),
        recv_f_(nchunks_ * mm_),
        recv_b_(nchunks_ * mm_),
        slot_of_(nchunks_ * mm_, -1),
        free_slots_(nchunks_),
        copies_(nchunks_ * mm_),
        stash_info_(nchunks_ * mm_),
        draining_(nchunks_) {
    for (Chunk& ch : ex_.chunks_) ch.model->zero_grads();
    post_receives();
    for (std::size_t c = 0; c < nchunks_; ++c) {
      for (int s = ex_.chunks_[c].slots - 1; s >= 0; --s) free_slots_[c].push_back(s);
    }
  }

  // Runs one action of the rank's list.
  void run(const Action& a, const OptimizerStep& optimizer);

  // Waits for the sends still in flight; the step's stats.
  StepStats finish() {
    for (const auto& w : sends_) w.wait();
    stats_.loss = ex_.holds_last_ ? loss_sum_ / m_ : std::numeric_limits<double>::quiet_NaN();
    return stats_;
  }

 private:
  void post_receives();
  void drain_one(std::size_t c);
  int take_slot(std::size_t c, const Action& a);
  void forward(const Action& a, std::size_t c, std::size_t i, std::size_t k);
  void offload(const Action& a, std::size_t c, std::size_t k);
  void reload(const Action& a, std::size_t c, std::size_t k);
  void backward(const Action& a, std::size_t c, std::size_t i, std::size_t k);
  void free_slot(std::size_t c, std::size_t k) {
    free_slots_[c].push_back(slot_of_[k]);
    slot_of_[k] = -1;
  }

  PipelineExecutor& ex_;
  std::int64_t step_;
  std::span<const std::int32_t> tokens_, targets_;
  int m_;
  std::size_t mm_;
  std::size_t seq_elems_;  // B * T
  std::size_t bytes_;      // of one activation transfer
  std::size_t nchunks_;
  float loss_scale_;
  std::vector<comm::Work> recv_f_, recv_b_;
  std::vector<comm::Work> sends_;
  // Activation slots and offload state per key. `draining_[c]`: chunk c's offloaded microbatches
  // whose copy out may still read their old slot (oldest first); the slot is free once it is done.
  std::vector<int> slot_of_;
  std::vector<std::vector<int>> free_slots_;
  StepCopies copies_;
  std::vector<StashInfo> stash_info_;
  std::vector<std::deque<int>> draining_;
  StepStats stats_;
  double loss_sum_ = 0;
};

// Every receive of the step is posted now; the schedule's RECV actions wait for them. Their
// deadline runs from that wait, not from now: a receive posted early may rightly wait a whole step.
void PipelineExecutor::Step::post_receives() {
  comm::Communicator* pipe = ex_.comms_.pipeline;
  for (std::size_t c = 0; c < nchunks_; ++c) {
    Chunk& ch = ex_.chunks_[c];
    for (int mb = 0; mb < m_; ++mb) {
      const auto i = static_cast<std::size_t>(mb);
      if (!ch.first && !ch.prev_local) {
        recv_f_[c * mm_ + i] =
            pipe->irecv(ch.in_acts[i].data(), bytes_, ch.prev_rank,
                        step_tag(step_, ch.stage, mb, false), comm::DeadlineStart::AtWait);
      }
      if (!ch.last && !ch.next_local) {
        recv_b_[c * mm_ + i] =
            pipe->irecv(ch.grad_out[i].data(), bytes_, ch.next_rank,
                        step_tag(step_, ch.stage, mb, true), comm::DeadlineStart::AtWait);
      }
    }
  }
}

// The slot of chunk c's oldest offload still copying becomes free once its copy is done.
void PipelineExecutor::Step::drain_one(std::size_t c) {
  const int mb = draining_[c].front();
  draining_[c].pop_front();
  const std::size_t k = c * mm_ + static_cast<std::size_t>(mb);
  ex_.wait_copy(copies_.offloading[k], "offload", mb, ex_.chunks_[c].stage, stats_);
  free_slot(c, k);
}

int PipelineExecutor::Step::take_slot(std::size_t c, const Action& a) {
  if (free_slots_[c].empty() && !draining_[c].empty()) drain_one(c);
  if (free_slots_[c].empty()) {
    throw Error(ErrorCode::Internal,
                fmt::format("executor: stage {} on rank {} ran out of activation slots at {}",
                            ex_.chunks_[c].stage, ex_.rank_, action_string(a)));
  }
  const int slot = free_slots_[c].back();
  free_slots_[c].pop_back();
  return slot;
}

void PipelineExecutor::Step::forward(const Action& a, std::size_t c, std::size_t i, std::size_t k) {
  Chunk& ch = ex_.chunks_[c];
  const int slot = take_slot(c, a);
  slot_of_[k] = slot;
  const std::int32_t* tok = ch.first ? tokens_.data() + i * seq_elems_ : nullptr;
  const std::int32_t* tgt = ch.last ? targets_.data() + i * seq_elems_ : nullptr;
  const float* in = nullptr;
  if (ch.prev_local) {
    in = ex_.chunks_[ex_.chunk_index(ch.stage - 1)].out_acts[i].data();  // handed over in memory
  } else if (!ch.first) {
    in = ch.in_acts[i].data();
  }
  const double loss = ch.model->forward(slot, tok, in, tgt, ex_.batch_, ex_.context_,
                                        ch.last ? nullptr : ch.out_acts[i].data());
  if (ch.last) loss_sum_ += loss;
}

// The slot stays taken until the copy out is done (drain_one).
void PipelineExecutor::Step::offload(const Action& a, std::size_t c, std::size_t k) {
  Chunk& ch = ex_.chunks_[c];
  stash_info_[k] = ch.model->release_stash(slot_of_[k]);
  try {
    copies_.offloading[k] = ex_.store_->offload(static_cast<int>(k), ch.model->stash(slot_of_[k]));
  } catch (const std::exception&) {
    ex_.copy_failed("offload", a.microbatch, ch.stage);
  }
  draining_[c].push_back(a.microbatch);
}

void PipelineExecutor::Step::reload(const Action& a, std::size_t c, std::size_t k) {
  Chunk& ch = ex_.chunks_[c];
  if (const auto it = std::find(draining_[c].begin(), draining_[c].end(), a.microbatch);
      it != draining_[c].end()) {
    // Its copy out is still pending: finish it (and free its old slot) first.
    draining_[c].erase(it);
    draining_[c].push_front(a.microbatch);
    drain_one(c);
  }
  const int slot = take_slot(c, a);
  slot_of_[k] = slot;
  try {
    copies_.reloading[k] = ex_.store_->reload(static_cast<int>(k), ch.model->stash(slot));
  } catch (const std::exception&) {
    ex_.copy_failed("reload", a.microbatch, ch.stage);
  }
}

void PipelineExecutor::Step::backward(const Action& a, std::size_t c, std::size_t i,
                                      std::size_t k) {
  Chunk& ch = ex_.chunks_[c];
  if (copies_.reloading[k].valid()) {
    ex_.wait_copy(copies_.reloading[k], "reload", a.microbatch, ch.stage, stats_);
    ch.model->restore_stash(slot_of_[k], stash_info_[k]);
  }
  const float* dout = nullptr;
  if (ch.next_local) {
    dout = ex_.chunks_[ex_.chunk_index(ch.stage + 1)].grad_in[i].data();  // handed over in memory
  } else if (!ch.last) {
    dout = ch.grad_out[i].data();
  }
  float* din = ch.first ? nullptr : ch.grad_in[i].data();
  if (ch.split_backward[i]) {
    // Zero bubble: the input gradient now, the weight gradients at W (the slot stays).
    ch.model->backward_input(slot_of_[k], dout, loss_scale_, din);
    return;
  }
  ch.model->backward(slot_of_[k], dout, loss_scale_, din);
  free_slot(c, k);
}

void PipelineExecutor::Step::run(const Action& a, const OptimizerStep& optimizer) {
  const auto i = static_cast<std::size_t>(a.microbatch < 0 ? 0 : a.microbatch);
  const std::size_t c = ex_.chunk_index(a.stage);
  Chunk& ch = ex_.chunks_[c];
  const std::size_t k = c * mm_ + i;
  comm::Communicator* pipe = ex_.comms_.pipeline;
  switch (a.kind) {
    case ActionKind::RecvF: recv_f_[k].wait(); break;
    case ActionKind::RecvB: recv_b_[k].wait(); break;
    case ActionKind::F: forward(a, c, i, k); break;
    case ActionKind::SendF:
      sends_.push_back(pipe->isend(ch.out_acts[i].data(), bytes_, ch.next_rank,
                                   step_tag(step_, ch.stage + 1, a.microbatch, false)));
      break;
    case ActionKind::Offload: offload(a, c, k); break;
    case ActionKind::Reload: reload(a, c, k); break;
    // The pair runs as the list goes on: F, SEND_F posted, then B, whose gradient arrived during F.
    case ActionKind::OverlapFB: break;
    case ActionKind::B: backward(a, c, i, k); break;
    case ActionKind::W:
      ch.model->backward_weight(slot_of_[k]);
      free_slot(c, k);
      break;
    case ActionKind::SendB:
      sends_.push_back(pipe->isend(ch.grad_in[i].data(), bytes_, ch.prev_rank,
                                   step_tag(step_, ch.stage - 1, a.microbatch, true)));
      break;
    case ActionKind::AllreduceGrad:
      for (const auto& w : sends_) w.wait();
      sends_.clear();
      if (ex_.sync_) {
        ex_.sync_->reduce_grads(step_, ex_.grads_);
        stats_.allreduce_bytes = ex_.sync_->bytes_sent();
      }
      break;
    case ActionKind::Optim:
      stats_.grad_norm =
          ex_.sync_ ? ex_.sync_->clip_grads(ex_.grads_) : std::numeric_limits<double>::quiet_NaN();
      optimizer(ex_.params_, ex_.grads_);
      break;
  }
}

StepStats PipelineExecutor::run_step(std::int64_t step, std::span<const std::int32_t> tokens,
                                     std::span<const std::int32_t> targets,
                                     const OptimizerStep& optimizer) {
  const auto mm = static_cast<std::size_t>(schedule_.microbatches);
  const std::size_t seq_elems =
      static_cast<std::size_t>(batch_) * static_cast<std::size_t>(context_);
  if ((holds_first_ && tokens.size() != seq_elems * mm) ||
      (holds_last_ && targets.size() != seq_elems * mm)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: step {} got {} tokens and {} targets; the first and last "
                            "stage need microbatches x B x T = {} each",
                            step, tokens.size(), targets.size(), seq_elems * mm));
  }
  // Zeroes the gradients and posts the step's receives (before the store check, as it always was).
  Step st(*this, step, tokens, targets);
  const auto& actions = schedule_.ranks[static_cast<std::size_t>(rank_)];
  if (store_ == nullptr && std::any_of(actions.begin(), actions.end(), [](const Action& a) {
        return a.kind == ActionKind::Offload;
      })) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("executor: rank {}'s schedule offloads activations but no activation "
                            "store was set (set_activation_store)",
                            rank_));
  }
  const auto now_us = [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (const Action& a : actions) {
    const double start_us = tracing_ ? now_us() : 0.0;
    st.run(a, optimizer);
    if (tracing_) trace_.push_back(TraceRecord{rank_, step, a, start_us, now_us()});
  }
  return st.finish();
}

void PipelineExecutor::wait_copy(std::future<void>& copy, const char* what, int microbatch,
                                 int stage, StepStats& stats) const {
  const auto start = std::chrono::steady_clock::now();
  try {
    copy.get();
  } catch (const std::exception&) {
    copy_failed(what, microbatch, stage);
  }
  stats.offload_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void PipelineExecutor::copy_failed(const char* what, int microbatch, int stage) const {
  // Called from a catch block: names where the activation copy failed, keeping the store's code.
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("activation {} of microbatch {} on stage {} ({} store): {}",
                                      what, microbatch, stage, store_->kind(), e.message()));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Io,
                fmt::format("activation {} of microbatch {} on stage {} ({} store): {}", what,
                            microbatch, stage, store_->kind(), e.what()));
  }
}

double PipelineExecutor::forward_only(std::span<const std::int32_t> tokens,
                                      std::span<const std::int32_t> targets, int batch, int length,
                                      std::uint64_t tag) {
  if (batch < 1 || batch > batch_ || length < 1 || length > context_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("forward_only: batch {} x length {} exceeds the executor's {} x {}",
                            batch, length, batch_, context_));
  }
  const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(length);
  if ((holds_first_ && tokens.size() != n) ||
      (holds_last_ && !targets.empty() && targets.size() != n)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("forward_only: {} tokens / {} targets for a {} x {} batch",
                            tokens.size(), targets.size(), batch, length));
  }
  const std::size_t bytes = n * static_cast<std::size_t>(chunks_[0].model->width()) * sizeof(float);
  comm::Communicator* pipe = comms_.pipeline;
  double loss = 0;
  // Stage by stage, as every rank sees the same order: no cycle of blocking sends and receives.
  for (int stage = 0; stage < stage_count(schedule_); ++stage) {
    if (rank_of(schedule_, stage) != rank_) continue;
    Chunk& ch = chunks_[chunk_index(stage)];
    const float* in = nullptr;
    if (ch.prev_local) {
      in = chunks_[chunk_index(stage - 1)].out_acts[0].data();
    } else if (!ch.first) {
      pipe->recv(ch.in_acts[0].data(), bytes, ch.prev_rank, forward_only_tag(tag, stage));
      in = ch.in_acts[0].data();
    }
    const std::int32_t* tgt = ch.last && !targets.empty() ? targets.data() : nullptr;
    const double l = ch.model->forward(0, ch.first ? tokens.data() : nullptr, in, tgt, batch,
                                       length, ch.last ? nullptr : ch.out_acts[0].data());
    if (ch.last && tgt != nullptr) loss = l * static_cast<double>(n);
    if (!ch.last && !ch.next_local) {
      pipe->send(ch.out_acts[0].data(), bytes, ch.next_rank, forward_only_tag(tag, stage + 1));
    }
  }
  return loss;
}

}  // namespace strait::sched
