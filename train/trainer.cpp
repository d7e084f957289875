#include "train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/adamw.h"
#include "model/baselines.h"
#include "train/membership.h"
#include "train/plan_profile.h"
#include "train/quorum_sync.h"
#include "train/rank_state.h"
#include "train/train_checkpoint.h"
#include "train/train_report.h"

namespace strait::train {
// The reference model and the scheduler are this application's vocabulary.
using namespace strait::sched;  // NOLINT(google-build-using-namespace)

namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;
using kernels::ReduceOp;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One process of the job: its pieces (RankState), who is in (Membership), what it reports
// (Reporter), and the loop of steps over them.
class Job {
 public:
  explicit Job(const TrainConfig& config)
      : cfg_(config), state_(config), report_(config), members_(state_, report_) {}
  void run();

 private:
  void setup();
  // The step to start from: 0, a joiner's, or a resumed checkpoint's.
  int first_step();
  void save(std::int64_t step);
  // One training step: the batch, the pipeline's forward, backward and optimizer step, DiLoCo's
  // outer step, the job-wide figures.
  StepFigures step(int step);
  void load_batch(int step, bool joining);
  [[nodiscard]] kernels::AdamWHyper hyper(int step) const;
  // What the step sums over the world: its loss, bytes and waits (see step()).
  StepFigures aggregate(int step, const StepStats& st, bool computed, const OuterStepStats& outer,
                        double outer_s);
  // Quorum rounds: this replica's round end (every H of its own steps), through quorum_.
  OuterStepStats quorum_round(int step);
  // After a step: the round's line, an evaluation, a checkpoint.
  void after_step(const StepFigures& f, const OuterStepStats& outer);
  // The last checkpoint, the trace, the held-out loss, the sample, the summary.
  void finish(int first, Clock::time_point t0);

  const TrainConfig& cfg_;
  RankState state_;
  Reporter report_;
  Membership members_;
  ActivationTotals activations_;
  std::vector<std::int32_t> tokens_, targets_, scratch_;  // this replica's share of the batch
  // A joiner is admitted at the end of step joined_after_ (after its outer step, before the step's
  // job-wide figures): it takes part from there on, in that step's figures (contributing none).
  int joined_after_ = -1;
  std::int64_t saved_step_ = -1;
  RunTotals totals_;              // train_s: steps only, evaluations are timed apart
  double outer_round_bytes_ = 0;  // DiLoCo: the outer bytes of the round so far
  int round_first_ = 0;           // the round's first step
  OuterStepStats last_outer_;     // the last step's outer step
  // --quorum: the rounds (replica 0 leads), whether the leader ended training, and (leader) the
  // tokens of the rounds closed so far. Replicas then run different numbers of steps.
  std::unique_ptr<QuorumSync> quorum_;
  bool stopped_ = false;
  double quorum_tokens_ = 0;
  Clock::time_point t0_ = Clock::now();
};

void Job::setup() {
  cfg_.validate();
  const int local_world_size = members_.connect();
  state_.build(local_world_size);
  report_.open(state_.rank);
  std::vector<double> figures = state_.activation_figures();
  // A joiner arrives at a round boundary of a running job: no start-up collective for it.
  if (!cfg_.join) {
    state_.world->allreduce(figures.data(), figures.data(), figures.size(), DType::F64,
                            ReduceOp::Sum);
  }
  activations_ = activation_totals(figures, cfg_.stages);
  if (cfg_.quorum > 0) {
    quorum_ = std::make_unique<QuorumSync>(
        *state_.data, state_.model->params(),
        QuorumOptions{cfg_.quorum, cfg_.grace_s, cfg_.outer_lr, cfg_.outer_momentum});
  }
  report_.start(state_, activations_);
  const auto n = static_cast<std::size_t>(cfg_.microbatches) *
                 static_cast<std::size_t>(cfg_.microbatch_size) *
                 static_cast<std::size_t>(cfg_.ctx);
  if (state_.executor->first_stage()) tokens_.resize(n);
  if (state_.executor->last_stage()) targets_.resize(n);
  scratch_.resize(n);
}

int Job::first_step() {
  int first = 0;
  if (cfg_.join) {
    joined_after_ = members_.receive_state();
    first = joined_after_ - 1;
  }
  if (!cfg_.resume.empty()) {
    const Resumed resumed =
        load_checkpoint(cfg_, *state_.model, *state_.moments, state_.outer.get(), state_.replica);
    first = static_cast<int>(resumed.step);
    if (state_.rank == 0) {
      fmt::print("resumed from {} at step {}\n", cfg_.resume.string(), first);
      for (const std::string& note : resumed.notes) fmt::print("note: {}\n", note);
      std::fflush(stdout);
    }
  }
  return first;
}

void Job::save(std::int64_t step) {
  const auto start = Clock::now();
  save_checkpoint(*state_.world, cfg_, state_.stage, state_.replica, *state_.model, *state_.moments,
                  step, state_.outer.get());
  saved_step_ = step;
  if (state_.rank == 0) {
    fmt::print("saved checkpoint of step {} in {} ({:.2f} s)\n", step, cfg_.save.string(),
               seconds_since(start));
    std::fflush(stdout);
  }
}

void Job::load_batch(int step, bool joining) {
  if (!state_.dataset || joining) return;
  const std::int64_t seqs = static_cast<std::int64_t>(cfg_.microbatches) * cfg_.microbatch_size;
  state_.dataset->fill_train(step, state_.replica * seqs, static_cast<int>(seqs),
                             tokens_.empty() ? std::span<std::int32_t>(scratch_) : tokens_,
                             targets_.empty() ? std::span<std::int32_t>(scratch_) : targets_);
}

kernels::AdamWHyper Job::hyper(int step) const {
  kernels::AdamWHyper h;
  h.lr = learning_rate(cfg_, step);
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.weight_decay = cfg_.weight_decay;
  h.freeze_variance_after = cfg_.freeze_variance_after();
  return h;
}

StepFigures Job::step(int step) {
  const auto start = Clock::now();
  const bool joining = step + 1 == joined_after_;  // computed by the others before this joined
  load_batch(step, joining);
  members_.maybe_fault("inner", step);
  const kernels::AdamWHyper h = hyper(step);
  StepStats st;
  const bool computed = !joining && members_.compute([&] {
    st = state_.executor->run_step(
        step, tokens_, targets_, [&](std::span<float> params, std::span<const float> grads) {
          state_.moments->step(params, grads, state_.groups, h, step + 1);
        });
  });
  // DiLoCo: at a round's end, the outer step (it may replace the weights).
  OuterStepStats outer;
  double outer_s = 0;
  if (quorum_) {
    const auto outer_start = Clock::now();
    if ((step + 1) % cfg_.outer_steps == 0) {
      outer = quorum_round(step);
    } else {
      quorum_->poll(cfg_.outer_steps - (step + 1) % cfg_.outer_steps, cfg_.outer_steps);
    }
    outer_s = seconds_since(outer_start);
  } else if (state_.outer && !joining) {
    const auto outer_start = Clock::now();
    const bool last = step + 1 == cfg_.steps;
    if (cfg_.elastic && ((step + 1) % cfg_.outer_steps == 0 || last)) {
      outer = members_.round_end(step, last);
    } else {
      outer = state_.outer->end_step(step, state_.model->params(), last);
    }
    outer_s = seconds_since(outer_start);
  }
  StepFigures f = aggregate(step, st, computed, outer, outer_s);
  f.lr = h.lr;
  f.seconds = seconds_since(start);
  last_outer_ = outer;
  return f;
}

OuterStepStats Job::quorum_round(int step) {
  const double per_step = static_cast<double>(cfg_.microbatches) * cfg_.microbatch_size * cfg_.ctx;
  const double tokens = per_step * cfg_.outer_steps;
  const double budget = per_step * cfg_.steps * cfg_.replicas;
  // The leader ends training when this round would about reach the budget.
  const bool stop = state_.rank == 0 && quorum_tokens_ + tokens * cfg_.replicas >= budget;
  const std::uint64_t sent = state_.data->stats().send_bytes;
  const QuorumSync::Round r = quorum_->end_round(state_.model->params(), tokens, stop);
  quorum_tokens_ += r.tokens;
  stopped_ = r.stop;
  OuterStepStats o;
  o.round_ended = o.applied = true;
  o.round = r.version - 1;
  o.applied_rounds = r.version;
  o.data_bytes = state_.data->stats().send_bytes - sent;
  if (state_.rank == 0) {
    const double t = seconds_since(t0_);
    fmt::print(
        "quorum round {} at {:.2f} s (replica 0's step {}): replicas {} in, {:.0f} tokens{}{}\n",
        r.version, t, step + 1, fmt::join(r.included, ","), r.tokens,
        r.lost.empty() ? "" : fmt::format(", lost {}", fmt::join(r.lost, ",")),
        r.stop ? fmt::format("; training ends: {:.0f} tokens", quorum_tokens_) : "");
    std::fflush(stdout);
    report_.emit({{"type", "quorum_round"},
                  {"version", r.version},
                  {"seconds", t},
                  {"step", step + 1},
                  {"included", r.included},
                  {"lost", r.lost},
                  {"tokens", r.tokens},
                  {"total_tokens", quorum_tokens_},
                  {"stop", r.stop}});
  }
  return o;
}

StepFigures Job::aggregate(int step, const StepStats& st, bool computed,
                           const OuterStepStats& outer, double outer_s) {
  // Job-wide: the loss (last stages, averaged over replicas), the bytes all-reduce sent (of
  // them, those between replicas in DiLoCo's outer step) and the mean wait for the outer step.
  const double ranks = state_.world->size();
  // Elastic: the loss is a sum over the replicas that computed the step (agg[5] counts them:
  // not a joiner in the step it joined at, nor a replica whose pipeline step was broken or
  // aborted), divided afterwards.
  const bool counted = state_.executor->last_stage() && computed;
  double agg[6] = {counted ? (cfg_.elastic ? st.loss : st.loss / cfg_.replicas) : 0.0,
                   static_cast<double>(st.allreduce_bytes + outer.data_bytes + outer.tied_bytes),
                   st.offload_wait_s / ranks,
                   static_cast<double>(outer.data_bytes),
                   outer_s / ranks,
                   counted ? 1.0 : 0.0};
  if (quorum_) {
    agg[0] = st.loss;  // this replica's own: a job-wide sum would wait for the slowest
  } else if (!cfg_.elastic) {
    state_.world->allreduce(agg, agg, 5, DType::F64, ReduceOp::Sum);
  } else {
    // Alone until the round's end when the world is broken: this replica's own figures.
    (void)members_.world_ok(
        [&] { state_.world->allreduce(agg, agg, 6, DType::F64, ReduceOp::Sum); });
    agg[0] = agg[5] > 0 ? agg[0] / agg[5] : 0.0;
  }
  StepFigures f;
  f.step = step;
  f.loss = agg[0];
  f.grad_norm = st.grad_norm;
  f.allreduce_bytes = agg[1];
  f.offload_wait_s = agg[2];
  f.outer_bytes = agg[3];
  f.outer_s = agg[4];
  f.replicas_in_step = static_cast<int>(agg[5]);
  return f;
}

void Job::after_step(const StepFigures& f, const OuterStepStats& outer) {
  const int step = f.step;
  if (outer.round_ended && !quorum_) {
    // Who is in: the replicas of the data-parallel groups that averaged this round.
    const int in = state_.data ? state_.data->size() : 1;
    if (state_.rank == 0) {
      report_.round(outer, round_first_, step, members_.round_members(in), in,
                    outer_round_bytes_ + f.outer_bytes);
    }
    round_first_ = step + 1;
    outer_round_bytes_ = 0;
  } else {
    outer_round_bytes_ += f.outer_bytes;
  }
  if (cfg_.eval_every > 0 && (step + 1) % cfg_.eval_every == 0 && step + 1 != cfg_.steps &&
      !quorum_) {  // an evaluation is collective: quorum rounds evaluate at the end only
    report_.eval(step + 1, state_.evaluate());
  }
  if (!cfg_.save.empty() && cfg_.save_every > 0 && (step + 1) % cfg_.save_every == 0) {
    save(step + 1);
  }
}

void Job::finish(int first, Clock::time_point t0) {
  if (!cfg_.save.empty() && saved_step_ != std::max(first, cfg_.steps)) {
    save(std::max(first, cfg_.steps));
  }
  if (cfg_.elastic) members_.report_end();
  if (!cfg_.trace.empty()) state_.write_trace();
  if (!cfg_.metrics.empty() && !cfg_.elastic) {
    // What the model, its state and the steps added to each rank's memory (strait plan compares
    // it with its prediction): the largest rank's peak resident growth since before the model.
    double grown = process_memory_bytes(true) - state_.rss_before_model;
    state_.world->allreduce(&grown, &grown, 1, DType::F64, ReduceOp::Max);
    report_.emit({{"type", "memory"}, {"peak_rank_growth_bytes", grown}});
  }
  const double eval_loss = state_.evaluate();
  const ByteBaselines baselines = report_.held_out(state_, totals_, eval_loss);
  const std::vector<std::int32_t> sample = state_.generate();
  state_.world->barrier();  // nobody tears down its endpoints while others still send
  totals_.total_s = seconds_since(t0);
  report_.finish(state_, totals_, eval_loss, baselines, activations_, sample);
}

void Job::run() {
  const auto t0 = Clock::now();
  setup();
  const int first = first_step();
  round_first_ = first;
  t0_ = t0;
  for (int s = first; quorum_ ? !stopped_ : s < cfg_.steps; ++s) {
    const StepFigures f = step(s);
    totals_.outer_bytes += f.outer_bytes;
    totals_.outer_wait_s += f.outer_s;
    totals_.train_s += f.seconds;
    report_.step(f, state_.moments->last_step_stats());
    after_step(f, last_outer_);
  }
  finish(first, t0);
}

}  // namespace

void run_training_rank(const TrainConfig& config) {
  Job job(config);
  job.run();
}

}  // namespace strait::train
