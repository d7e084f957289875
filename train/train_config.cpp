#include "train/train_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numbers>

#include "comm/communicator.h"
#include "comm/compress/codec_factory.h"
#include "core/error.h"
#include "kernels/adamw.h"
#include "model/rank_model.h"
#include "offload/io_engine_factory.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_validate.h"

namespace strait::train {
namespace {

using sched::Action;
using sched::ActionKind;
using sched::Schedule;

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

// The largest number of stashes a stage has out of the model at once (what the store holds).
int peak_offloaded(const Schedule& schedule, int stage) {
  int out = 0;
  int peak = 0;
  for (const Action& a : schedule.ranks[static_cast<std::size_t>(stage)]) {
    if (a.kind == ActionKind::Offload) peak = std::max(peak, ++out);
    if (a.kind == ActionKind::Reload) --out;
  }
  return peak;
}

// The offload directory must accept a new file: creating one is the only test that also holds for
// root (who ignores permission bits) on read-only or full file systems.
void check_writable(const std::filesystem::path& dir) {
  offload::check_offload_dir(dir);
  std::string probe = (dir / ".strait-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw bad(
        fmt::format("offload directory {} is not writable ({}): pass --offload-dir with a "
                    "writable directory",
                    dir.string(), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// The activations the local ranks will stash, estimated from the model's layout (per position and
// layer: about 16 C values plus two [heads, T] attention rows; the last stage adds logits and
// probabilities), against this machine's memory: fail before starting rather than die of
// bad_alloc in the middle of a step.
void check_memory(const TrainConfig& c) {
  const Schedule schedule = job_schedule(c);
  const int stages = sched::stage_count(schedule);  // model stages: ranks x chunks
  const auto ranges = job_layer_ranges(c);
  double bytes = 0;
  for (int s = 0; s < stages; ++s) {
    const auto& r = ranges[static_cast<std::size_t>(s)];
    const double per_position = (r.last - r.first) * (16.0 * c.dim + 2.0 * c.heads * c.ctx) +
                                (s == stages - 1 ? 3.0 * 256 : 0.0) + c.dim;
    // Pinned host buffers of the cpu activation store count as well (per rank: its chunks'
    // largest stash stands for each).
    const double slots =
        sched::peak_stashed_microbatches_of_stage(schedule, s) +
        (c.offload_activations == ActivationOffload::Cpu
             ? static_cast<double>(peak_offloaded(schedule, sched::rank_of(schedule, s))) /
                   schedule.chunks
             : 0.0);
    bytes += slots * c.microbatch_size * c.ctx * per_position * sizeof(float) * c.replicas;
  }
  const double available = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                           static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (available > 0 && bytes > 0.8 * available) {
    throw bad(fmt::format(
        "the activations of this job need about {:.1f} GiB but this machine has "
        "{:.1f} GiB: lower --ctx ({}), --microbatch-size ({}), --microbatches "
        "({}) or the model size",
        bytes / (1 << 30), available / (1 << 30), c.ctx, c.microbatch_size, c.microbatches));
  }
}

// --- chunks: the schedule, and the layers it splits into stages x chunks model stages ---
void check_schedule(const TrainConfig& c) {
  sched::Schedule plan;
  try {
    plan = sched::make_schedule(c.schedule, c.stages, c.microbatches, c.chunks);
  } catch (const Error& e) {
    throw bad(fmt::format("--schedule {} --stages {} --microbatches {} --chunks {}: {}",
                          sched::schedule_kind_name(c.schedule), c.stages, c.microbatches, c.chunks,
                          e.message()));
  }
  const int model_stages = sched::stage_count(plan);
  if (model_stages > c.layers) {
    throw bad(fmt::format(
        "--schedule {} with --chunks {} splits the model into {} stages x {} chunks = {} "
        "pipeline stages but --layers is {}: every stage needs at least one layer; use --layers "
        ">= {}{}",
        sched::schedule_kind_name(c.schedule), plan.chunks, c.stages, plan.chunks, model_stages,
        c.layers, model_stages,
        c.schedule == sched::ScheduleKind::Interleaved && c.layers >= c.stages
            ? fmt::format(", or --chunks {} (at most --layers / --stages)", c.layers / c.stages)
            : std::string()));
  }
  if (!c.stage_layers.empty()) {
    int sum = 0;
    bool positive = true;
    for (const int n : c.stage_layers) {
      sum += n;
      positive = positive && n >= 1;
    }
    if (static_cast<int>(c.stage_layers.size()) != model_stages || sum != c.layers || !positive) {
      throw bad(fmt::format(
          "--stage-layers {} gives {} stages {} layers, but --schedule {} --stages {} --chunks {} "
          "has {} pipeline stages and --layers is {}: give one count >= 1 per pipeline stage (in "
          "model-stage order), summing to --layers",
          fmt::join(c.stage_layers, ","), c.stage_layers.size(), sum,
          sched::schedule_kind_name(c.schedule), c.stages, plan.chunks, model_stages, c.layers));
    }
  }
  const bool local_tied_copies =
      model_stages > 1 && sched::rank_of(plan, 0) == sched::rank_of(plan, model_stages - 1);
  if (c.outer_steps > 0 && local_tied_copies) {
    throw bad(fmt::format(
        "--outer-steps with --schedule {} --stages {}: the first and the last model stage are "
        "chunks of one rank, whose two copies of the tied embedding DiLoCo's outer step does not "
        "keep equal; use --schedule 1f1b, zb-h1 or interleaved with --stages >= 2",
        sched::schedule_kind_name(c.schedule), c.stages));
  }
}

// A codec against DiLoCo and against checkpoints (neither holds the codec's residuals).
void check_codec_use(const TrainConfig& c) {
  if (c.outer_steps > 0 && !c.codec.empty()) {
    throw bad(fmt::format(
        "--codec {} compresses the per-step gradient average, which DiLoCo (--outer-steps {}) "
        "does not have: compress the outer average with --outer-codec instead",
        c.codec, c.outer_steps));
  }
  // "auto": the codec of the STRAIT_TUNE_FILE rules (`strait tune`), checked when they are read.
  if (!c.codec.empty() && c.codec != "auto") (void)comm::canonical_codec_spec(c.codec_spec());
}

void check_checkpoint_use(const TrainConfig& c) {
  if (!c.codec.empty() && (!c.save.empty() || !c.resume.empty())) {
    throw bad(
        "--codec with --save or --resume: a checkpoint does not hold the codec's error-feedback "
        "state, so a resumed run would not continue the same training; drop --codec");
  }
  // SparseLoCo's error feedback lives in the outer state, which checkpoints hold.
  if (c.outer_steps > 0 && c.outer_codec != "none" && !c.outer_codec.starts_with("sparseloco") &&
      (!c.save.empty() || !c.resume.empty())) {
    throw bad(fmt::format(
        "--outer-codec {} with --save or --resume: a lossy outer average keeps error-feedback "
        "residuals in the communicator, which a checkpoint does not hold, so a resumed run would "
        "not continue the same training; use --outer-codec none with checkpoints (or "
        "sparseloco, whose error feedback is in the outer state)",
        c.outer_codec));
  }
}

void check_quorum_use(const TrainConfig& c) {
  if (c.quorum == 0) return;
  if (c.quorum > c.replicas || c.replicas < 2 || c.stages != 1 || c.elastic || !c.save.empty() ||
      !c.resume.empty()) {
    throw bad(fmt::format(
        "--quorum {} needs 2 or more --replicas (has {}), at least the quorum, --stages 1 (has "
        "{}), and no --elastic, --save or --resume",
        c.quorum, c.replicas, c.stages));
  }
}

// Elastic membership numbers replicas by world rank / stages and quorum rounds lead from world rank
// 0 as replica 0: both assume the identity placement.
void check_placement_use(const TrainConfig& c) {
  if (identity_placement(c.placement)) return;
  const char* feature = c.elastic      ? "--elastic"
                        : c.join       ? "--join"
                        : c.quorum > 0 ? "--quorum"
                                       : nullptr;
  if (feature != nullptr) {
    throw bad(fmt::format(
        "--placement {} with {}: elastic re-formation and quorum rounds number replicas by world "
        "rank (rank = replica * stages + stage); drop --placement (or {})",
        fmt::join(c.placement, ","), feature, feature));
  }
}

void check_elastic_use(const TrainConfig& c) {
  if (!c.elastic) return;
  if (c.outer_steps == 0) {
    throw bad(
        "--elastic re-forms the job at DiLoCo's round boundaries: pass --outer-steps H (inner "
        "steps per round)");
  }
  if (c.outer_overlap || c.outer_fragments != 1) {
    throw bad(
        "--elastic with --outer-overlap or --outer-fragments: a re-formation would have to "
        "settle averages still in flight over a world that lost ranks; drop them with "
        "--elastic");
  }
  if (c.eval_every > 0) {
    throw bad(
        "--eval-every with --elastic: an evaluation between rounds is a collective that a lost "
        "replica would break outside a round boundary; drop --eval-every (the end of the run "
        "still evaluates)");
  }
}

// A path the job writes at its end, probed now (created when absent).
void check_output(const std::filesystem::path& path, std::string_view option) {
  if (path.empty()) return;
  const std::ofstream probe(path, std::ios::app);
  if (!probe) {
    throw bad(fmt::format("cannot write {} {}: {}; pass a writable path", option, path.string(),
                          std::strerror(errno)));
  }
}

}  // namespace

void ParallelConfig::validate() const {
  if (stages < 1 || replicas < 1) {
    throw bad(
        fmt::format("--stages {} and --replicas {} must both be at least 1", stages, replicas));
  }
  if (microbatches < 1 || microbatch_size < 1) {
    throw bad(fmt::format("--microbatches {} and --microbatch-size {} must be at least 1",
                          microbatches, microbatch_size));
  }
  check_placement(placement, stages, replicas, "--placement");
}

int ParallelConfig::rank_of_slot(int replica, int stage) const {
  return placement_rank(placement, stages, replica, stage);
}

Slot ParallelConfig::slot_of_rank(int rank) const {
  return placement_slot(placement, stages, rank);
}

void ModelConfig::validate() const {
  gpt().validate();
}

sched::GptConfig ModelConfig::gpt() const {
  sched::GptConfig g;
  g.vocab = 256;
  g.ctx = ctx;
  g.layers = layers;
  g.dim = dim;
  g.heads = heads;
  return g;
}

void OptimizerConfig::validate() const {
  if (steps < 0) throw bad(fmt::format("--steps {} is negative", steps));
  if (!(lr > 0) || warmup_steps < 0 || min_lr_ratio < 0 || min_lr_ratio > 1) {
    throw bad(fmt::format("--lr {} must be > 0, --warmup {} >= 0, --min-lr-ratio {} in [0, 1]", lr,
                          warmup_steps, min_lr_ratio));
  }
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.weight_decay = weight_decay;
  kernels::validate(h);
  if (!(grad_clip >= 0)) throw bad(fmt::format("--grad-clip {} must be >= 0 (0: off)", grad_clip));
}

void CompressionConfig::validate() const {
  if (codec.empty() && !codec_args.empty()) {
    throw bad(fmt::format("--codec-args {} given without --codec: name the codec they are for",
                          codec_args));
  }
  if (codec_warmup_steps < 0) {
    throw bad(fmt::format("--codec-warmup {} must be >= 0", codec_warmup_steps));
  }
  if (compress == CompressTarget::Momentum && codec.empty()) {
    throw bad("--compress momentum needs --codec: name the codec that compresses the momentum");
  }
  if (compress == CompressTarget::Momentum && freeze_variance == FreezeVariance::Off) {
    throw bad(
        "--compress momentum freezes AdamW's variance at the switch (1-bit Adam): the gradient "
        "the optimizer gets carries the compression error; drop --freeze-variance off");
  }
  if (compress == CompressTarget::Momentum && codec_warmup_steps < 1) {
    throw bad(
        "--compress momentum needs --codec-warmup >= 1: AdamW's second moment must be estimated "
        "from uncompressed steps before it is frozen");
  }
  if (freeze_variance == FreezeVariance::On && codec.empty()) {
    throw bad("--freeze-variance on needs --codec: the variance freezes when the codec takes over");
  }
  if (freeze_variance == FreezeVariance::On && codec_warmup_steps < 1) {
    throw bad(
        "--freeze-variance on needs --codec-warmup >= 1: AdamW's second moment must be estimated "
        "from uncompressed steps before it is frozen");
  }
}

std::string CompressionConfig::codec_spec() const {
  if (codec.empty() || codec_args.empty()) return codec;
  return codec + ":" + codec_args;
}

std::int64_t CompressionConfig::freeze_variance_after() const {
  const bool frozen = freeze_variance == FreezeVariance::On || compress == CompressTarget::Momentum;
  return !codec.empty() && frozen ? codec_warmup_steps : 0;
}

void DilocoConfig::validate() const {
  if (outer_steps < 0)
    throw bad(fmt::format("--outer-steps {} must be >= 0 (0: off)", outer_steps));
  if (outer_steps == 0 && (outer_overlap || outer_codec != "none" || outer_fragments != 1 ||
                           outer_state != offload::OptimizerOffload::Cpu)) {
    throw bad(
        "--outer-overlap, --outer-codec, --outer-fragments and --outer-state are DiLoCo's: pass "
        "--outer-steps H (inner steps per round) to turn it on");
  }
  if (outer_steps > 0) train::validate(outer());
  if (outer_eager && !outer_overlap) {
    throw bad("--outer-eager changes how --outer-overlap starts a round: pass --outer-overlap too");
  }
  if (quorum < 0 || !(grace_s >= 0)) {
    throw bad(fmt::format("--quorum {} must be >= 0 and --grace {} >= 0 seconds", quorum, grace_s));
  }
  if (quorum > 0 && (outer_steps == 0 || outer_overlap || outer_fragments != 1 ||
                     outer_codec != "none" || outer_state != offload::OptimizerOffload::Cpu)) {
    throw bad(
        "--quorum needs --outer-steps H, and none of --outer-overlap, --outer-fragments, "
        "--outer-codec, --outer-state nvme (a quorum round sends each replica's fp32 "
        "pseudo-gradient to the leader, replica 0)");
  }
}

OuterOptions DilocoConfig::outer() const {
  OuterOptions o;
  o.outer_steps = outer_steps;
  o.lr = outer_lr;
  o.momentum = outer_momentum;
  o.codec = outer_codec;
  o.overlap = outer_overlap;
  o.eager = outer_eager;
  o.delay = outer_delay;
  o.fragments = outer_fragments;
  return o;
}

void OffloadConfig::validate() const {
  if (offload_prefetch < 0) {
    throw bad(
        fmt::format("--offload-prefetch {} must be >= 0 (computes between a reload and its "
                    "backward)",
                    offload_prefetch));
  }
}

void SamplingConfig::validate() const {
  if (sample_bytes < 0 || eval_sequences < 0 || eval_every < 0) {
    throw bad("--sample-bytes, --eval-sequences and --eval-every must be >= 0");
  }
  sampling().validate();
  if (sample_bytes > 0 && prompt.empty()) {
    throw bad(
        "--prompt is empty: the sample needs at least one byte to start from (or pass "
        "--sample-bytes 0)");
  }
}

sched::SamplingOptions SamplingConfig::sampling() const {
  sched::SamplingOptions o;
  o.greedy = greedy;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = sample_seed;
  return o;
}

void ReportConfig::validate() const {
  if (blas_threads < 0) {
    throw bad(fmt::format("--blas-threads {} must be >= 0 (0: cores / local ranks)", blas_threads));
  }
  if (log_every < 1) throw bad(fmt::format("--log-every {} must be at least 1", log_every));
}

void ReportConfig::validate_paths() const {
  check_output(trace, "--trace");
  check_output(metrics, "--metrics");
}

void CheckpointConfig::validate() const {
  if (save_every < 0)
    throw bad(fmt::format("--save-every {} must be >= 0 (0: at the end)", save_every));
  if (save_every > 0 && save.empty())
    throw bad("--save-every needs --save DIR: name the directory");
}

namespace {

// Creates the --save directory if needed and checks that it takes a new file (InvalidArgument
// naming --save otherwise).
void check_save_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("cannot create --save directory {}: {}; pass a writable directory",
                            dir.string(), ec ? ec.message() : "not a directory"));
  }
  // Creating a file is the only test that also holds for root on read-only or full file systems.
  std::string probe = (dir / ".strait-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--save directory {} is not writable ({}): pass a writable directory",
                            dir.string(), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void CheckpointConfig::validate_paths() const {
  if (!save.empty()) check_save_dir(save);
  if (!resume.empty() && !std::filesystem::is_directory(resume)) {
    throw bad(
        fmt::format("--resume {} is not a directory: pass a --save directory of an earlier "
                    "run or one of its step-N directories",
                    resume.string()));
  }
}

void ElasticConfig::validate(int replicas) const {
  if (join && !elastic) throw bad("--join joins a running --elastic job: pass --elastic too");
  if (min_replicas != 1 && !elastic)
    throw bad("--min-replicas is the floor of an --elastic job: pass --elastic too");
  if (min_replicas < 1 || min_replicas > replicas) {
    throw bad(fmt::format("--min-replicas {} must be between 1 and --replicas {}", min_replicas,
                          replicas));
  }
}

void TrainConfig::validate() const {
  ParallelConfig::validate();
  if (stages > layers) {
    throw bad(
        fmt::format("--stages {} is more than --layers {}: every stage needs at least one "
                    "layer; use at most {} stages or more layers",
                    stages, layers, layers));
  }
  ModelConfig::validate();
  check_schedule(*this);
  OptimizerConfig::validate();
  SamplingConfig::validate();
  ReportConfig::validate();
  CompressionConfig::validate();
  OffloadConfig::validate();
  DilocoConfig::validate();
  check_codec_use(*this);
  (void)comm::CommOptions::default_timeout();  // a bad STRAIT_TIMEOUT_S fails here, once
  check_memory(*this);
  if (offload_optimizer == offload::OptimizerOffload::Nvme ||
      offload_activations == ActivationOffload::Nvme ||
      (outer_steps > 0 && outer_state == offload::OptimizerOffload::Nvme)) {
    check_writable(offload_dir);
  }
  CheckpointConfig::validate();
  check_checkpoint_use(*this);
  ElasticConfig::validate(replicas);
  check_elastic_use(*this);
  check_quorum_use(*this);
  check_placement_use(*this);
  CheckpointConfig::validate_paths();
  ReportConfig::validate_paths();
}

sched::Schedule job_schedule(const TrainConfig& c) {
  Schedule s = sched::make_schedule(c.schedule, c.stages, c.microbatches, c.chunks);
  if (c.offload_activations != ActivationOffload::None) {
    s = sched::add_activation_offload(s, c.offload_prefetch);
  }
  return s;
}

std::vector<sched::LayerRange> job_layer_ranges(const TrainConfig& c) {
  return sched::split_layers(c.layers, sched::stage_count(job_schedule(c)), c.stage_layers);
}

double learning_rate(const TrainConfig& c, std::int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / c.warmup_steps;
  const double span = std::max<std::int64_t>(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

std::string_view to_string(ActivationOffload where) noexcept {
  switch (where) {
    case ActivationOffload::None: return "none";
    case ActivationOffload::Cpu: return "cpu";
    case ActivationOffload::Nvme: return "nvme";
  }
  return "?";
}

std::string_view to_string(FreezeVariance mode) noexcept {
  switch (mode) {
    case FreezeVariance::Auto: return "auto";
    case FreezeVariance::On: return "on";
    case FreezeVariance::Off: return "off";
  }
  return "?";
}

std::string_view to_string(CompressTarget target) noexcept {
  switch (target) {
    case CompressTarget::Gradient: return "gradient";
    case CompressTarget::Momentum: return "momentum";
  }
  return "?";
}

}  // namespace strait::train
