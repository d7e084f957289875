// The settings of a `strait train` job (train/trainer.h), one sub-struct per concern, each
// checking its own fields (validate(): InvalidArgument naming the option and the fix). TrainConfig
// joins them (their fields read as config.stages, config.lr, ...) and its validate() runs theirs
// plus the checks that span several (the schedule against the layers, a codec against DiLoCo or
// checkpoints, the activations against this machine's memory, ...). String options are parsed
// into the enums below once, by the command line (tools/train_command.cpp).
// Thread-safety: plain values; validate() only reads (it probes paths: offload_dir, save, trace,
// metrics).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/sampling.h"
#include "model/transformer.h"
#include "offload/optimizer_offload.h"
#include "scheduler/schedule.h"
#include "train/outer_sync.h"
#include "train/placement.h"

namespace strait::train {

// Where stashed activations go between a microbatch's forward and backward.
enum class ActivationOffload : std::uint8_t { None, Cpu, Nvme };
// When AdamW's second moment stops updating (see CompressionConfig::freeze_variance).
enum class FreezeVariance : std::uint8_t { Auto, On, Off };
// What the codec compresses (see CompressionConfig::compress).
enum class CompressTarget : std::uint8_t { Gradient, Momentum };

// The option values, as the command line spells them.
std::string_view to_string(ActivationOffload where) noexcept;
std::string_view to_string(FreezeVariance mode) noexcept;
std::string_view to_string(CompressTarget target) noexcept;

// Parallelism and schedule.
struct ParallelConfig {
  int stages = 2;
  int replicas = 2;
  sched::ScheduleKind schedule = sched::ScheduleKind::OneFOneB;
  // Model chunks per rank (scheduler/schedule.h): V for interleaved, 2 for zbv and dualpipev, 1 for
  // the others; 0: the schedule's own (2 for interleaved, zbv and dualpipev). The layers are split
  // into stages x chunks pipeline stages, placed by the schedule (model/rank_model.h).
  int chunks = 0;
  int microbatches = 4;     // per replica per step
  int microbatch_size = 4;  // sequences per microbatch
  // Layers of each pipeline stage (stages x chunks entries, in model-stage order, summing to the
  // layers): an uneven split gives a slower rank fewer layers. Empty: as even as possible.
  std::vector<int> stage_layers;
  // The world rank of each (replica, stage) slot in replica-major order (train/placement.h): e.g.
  // the slowest ranks on the stage with the fewest layers, or a pipeline inside one site. Empty:
  // the identity, rank = replica * stages + stage.
  std::vector<int> placement;

  void validate() const;
  [[nodiscard]] int world_size() const { return stages * replicas; }
  // The world rank of (replica, stage), and the slot of a world rank (train/placement.h).
  [[nodiscard]] int rank_of_slot(int replica, int stage) const;
  [[nodiscard]] Slot slot_of_rank(int rank) const;
};

// Model (GPT-2 shape, byte vocabulary).
struct ModelConfig {
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int ctx = 128;

  void validate() const;
  // The transformer's shape (vocabulary 256).
  [[nodiscard]] sched::GptConfig gpt() const;
};

// Optimization.
struct OptimizerConfig {
  int steps = 600;
  double lr = 3e-3;
  int warmup_steps = 30;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;
  std::uint64_t seed = 1337;

  void validate() const;
};

// Compressed data-parallel gradient average (train/data_parallel_sync.h's GradientCompression).
struct CompressionConfig {
  std::string codec;            // codec name ("int8", "topk", ...); empty: uncompressed
  std::string codec_args;       // "key=value,..." for the codec ("fraction=0.01")
  int codec_warmup_steps = 30;  // uncompressed steps before the codec takes over
  // On: AdamW's second moment stops updating when the codec takes over (kernels::AdamWHyper::
  // freeze_variance_after; 1-bit Adam's compression stage). Auto: on with compress ==
  // Momentum, which needs it, else off (for gradient compression it did not close top-k's gap
  // on the reference transformer: docs/results/training.md, "Compressed gradient averages").
  // Off: never.
  FreezeVariance freeze_variance = FreezeVariance::Auto;
  // What the codec compresses: the gradients' average or the replicas' local AdamW momenta (as
  // 1-bit Adam; data_parallel_sync.h's GradientCompression::momentum), which freezes the variance
  // at the switch.
  CompressTarget compress = CompressTarget::Gradient;

  void validate() const;
  // The codec spec ("name" or "name:args"); empty when uncompressed.
  [[nodiscard]] std::string codec_spec() const;
  // The step after which AdamW's v is frozen (AdamWHyper::freeze_variance_after); 0: never.
  [[nodiscard]] std::int64_t freeze_variance_after() const;
};

// DiLoCo (train/outer_sync.h): outer_steps > 0 makes each replica run that many inner AdamW
// steps with no gradient average between replicas, then average the pseudo-gradients over the
// replicas (outer_codec: none, bf16, int8, int4; error feedback when lossy) and take the outer
// Nesterov step (outer_lr, outer_momentum). outer_overlap: average round t in the background and
// apply it outer_delay inner steps later (0: one round late). 0: plain data-parallel averaging
// every step.
struct DilocoConfig {
  int outer_steps = 0;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  std::string outer_codec = "none";
  bool outer_overlap = false;
  int outer_delay = 1;       // with outer_overlap: steps the average may take (OuterOptions::delay)
  bool outer_eager = false;  // with outer_overlap: eager updates (OuterOptions::eager)
  int outer_fragments = 1;   // Streaming DiLoCo's fragments: parameter groups synced in turn
  // Where the outer state (global weights, momentum) lives between rounds: Cpu (pinned RAM) or
  // Nvme (a SwapStore file per rank in offload_dir, in RAM only during the outer step).
  offload::OptimizerOffload outer_state = offload::OptimizerOffload::Cpu;
  // Quorum rounds (train/quorum_sync.h): > 0 closes a round once this many replicas sent and
  // grace_s seconds passed, late pseudo-gradients joining the next one weighted by their tokens;
  // training then ends when the rounds cover steps x replicas steps' tokens. 0: every replica.
  int quorum = 0;
  double grace_s = 0;

  void validate() const;
  // DiLoCo's settings (train/outer_sync.h); meaningful when outer_steps > 0.
  [[nodiscard]] OuterOptions outer() const;
};

// Data and offload.
struct OffloadConfig {
  std::filesystem::path data = "/usr/share/games/fortunes";
  // AdamW moments: Cpu (pinned RAM) or Nvme (files in offload_dir).
  offload::OptimizerOffload offload_optimizer = offload::OptimizerOffload::Cpu;
  std::filesystem::path offload_dir = "/var/tmp";  // where nvme keeps them (optimizer, activations)
  // Activation offload (scheduler/schedule.h's add_activation_offload): None, Cpu (pinned host
  // buffers) or Nvme (files in offload_dir); offload_prefetch: computes between a RELOAD and its
  // backward. Training gives the same bits either way; the model keeps fewer activation slots.
  ActivationOffload offload_activations = ActivationOffload::None;
  int offload_prefetch = 1;

  void validate() const;
};

// Evaluation and sampling.
struct SamplingConfig {
  int eval_sequences = 128;  // held-out sequences for the final eval loss (0: all)
  int eval_every = 0;        // also evaluate every N steps (0: only at the end)
  std::string prompt = "The ";
  int sample_bytes = 200;
  // How the sample picks each byte: top-k draws from the top_k most likely bytes at `temperature`
  // with its own seed (nanoGPT sample.py's defaults), greedy takes the most likely one.
  bool greedy = false;
  double temperature = 0.8;
  int top_k = 200;
  std::uint64_t sample_seed = 1337;

  void validate() const;
  // The sampler's settings (sample, temperature, top_k, sample_seed).
  [[nodiscard]] sched::SamplingOptions sampling() const;
};

// Output.
struct ReportConfig {
  std::filesystem::path metrics;  // JSON lines (one per step, then a summary), written by rank 0
  // Chrome trace-event JSON of replica 0's pipeline actions in every step (one pid per stage),
  // written by rank 0 at the end (scheduler/schedule_trace.h; `strait schedule --from-trace`).
  std::filesystem::path trace;
  int blas_threads = 0;  // OpenBLAS threads per rank; 0: cores / local ranks
  int log_every = 1;

  // The numbers; validate_paths: trace and metrics can be written (it creates them when absent).
  void validate() const;
  void validate_paths() const;
};

// Checkpoints (train/train_checkpoint.h, format in docs/checkpoints.md): save into `save` every
// save_every steps (0: only at the end) and at the end; resume from `resume` (a --save directory,
// whose newest checkpoint is taken, or one of its step directories).
struct CheckpointConfig {
  std::filesystem::path save;
  int save_every = 0;
  std::filesystem::path resume;

  // The numbers; validate_paths: save can hold checkpoints and resume is a directory.
  void validate() const;
  void validate_paths() const;
};

// Elastic DiLoCo replicas (comm/reform.h; torchrun's elastic conventions: the launcher hosts the
// store, TORCHELASTIC_USE_AGENT_STORE): a replica whose rank is lost is dropped at the next round
// boundary (the survivors re-form the world, agree with a Min vote whether every one of them took
// the round's outer step, redo it among themselves when not, and go on: the outer average is over
// those present); a process started with `join` is admitted at a round boundary and receives a
// survivor's state (weights, inner AdamW moments and step, outer weights and momentum) as a packed
// checkpoint over the communicator. Needs outer_steps > 0, no overlap, one fragment. With stages,
// a replica joins as `stages` processes admitted together (each gets its stage from its place
// among them and that stage's state from a survivor of the same stage,
// ReformOptions::joiners_multiple), and a replica that loses one stage's rank is dropped whole
// (its other ranks leave with an error naming it; the others re-form again without them); the
// re-formation aborts the other replicas' pipeline steps still in flight in that round
// (comm/heartbeat.h), so those replicas contribute the inner steps they completed, and the
// survivors still agree bit for bit. Heartbeats are on (STRAIT_HEARTBEAT_S, 1 s unless set).
// The membership itself: train/elastic_membership.h.
struct ElasticConfig {
  bool elastic = false;
  // Below this many replicas the job stops with an error (after a checkpoint when `save` is set).
  int min_replicas = 1;
  // This process joins a running elastic job (MASTER_ADDR / MASTER_PORT: the job's store).
  bool join = false;

  // `replicas`: the job's (min_replicas may not exceed it).
  void validate(int replicas) const;
};

struct TrainConfig : ParallelConfig,
                     ModelConfig,
                     OptimizerConfig,
                     CompressionConfig,
                     DilocoConfig,
                     OffloadConfig,
                     SamplingConfig,
                     ReportConfig,
                     CheckpointConfig,
                     ElasticConfig {
  // Checks what can be checked without the job (sizes, paths, directories): each part's own
  // checks, then those between parts; throws InvalidArgument with the fix.
  void validate() const;
};

// The job's pipeline schedule, with activation offload when asked for.
[[nodiscard]] sched::Schedule job_schedule(const TrainConfig& config);

// The layers of every model stage (stage_layers, or the even split), in model-stage order.
[[nodiscard]] std::vector<sched::LayerRange> job_layer_ranges(const TrainConfig& config);

// Learning rate at `step` (0-based): linear warm-up, then cosine decay to min_lr_ratio * lr.
double learning_rate(const TrainConfig& config, std::int64_t step);

}  // namespace strait::train
