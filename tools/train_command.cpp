#include "tools/train_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/params.h"
#include "model/corpus.h"
#include "model/data.h"
#include "offload/optimizer_offload.h"
#include "scheduler/schedule.h"
#include "tools/launcher.h"
#include "tools/plan_command.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace strait::tools {
namespace {

using namespace strait::train;  // NOLINT(google-build-using-namespace): the library this command
                                // drives

constexpr const char* kFooter = R"(
Without RANK in the environment, `strait train` checks its settings and starts
stages x replicas ranks of itself on this machine (as `strait run` does); under torchrun, Slurm or
`strait run` it runs as the rank the environment names. Rank = replica * stages + stage unless
--placement R0,R1,... names the rank of each (replica, stage) slot, e.g. --stages 2 --replicas 2
--placement 0,2,1,3 runs stage 0 of both replicas on ranks 0 and 1 (the losses do not change).
Each step prints the loss (mean over the global batch), the learning rate, the global gradient
norm, tokens per second and the bytes the gradient all-reduces sent (all ranks together). The end
prints the held-out loss in nats and bits per byte next to byte n-gram baselines (unigram and
bigram models counted on the training split, add-one smoothed, scored on the same held-out bytes;
and the training split's own entropies), the time taken, and a sample drawn as nanoGPT's
sample.py does (top-k 200 at temperature 0.8, from --sample-seed: the same seed and weights give
the same bytes whatever the ranks layout; --sample greedy for the argmax).
The AdamW moments (8 bytes per parameter; the fp32 weights are the master weights and stay in the
model) live in locked host RAM with --offload-optimizer cpu, or with nvme in a file per rank under
--offload-dir, streamed in chunks through io_uring and O_DIRECT (where the file system allows)
while the multithreaded AdamW updates the previous chunk. Both give bit-identical results;
--metrics records each step's optimizer time and how long it waited for the disk.
--offload-activations cpu|nvme moves a microbatch's stashed activations out of its stage after the
forward and back before the backward (--offload-prefetch computes ahead): the losses are
bit-identical, and each stage keeps at most prefetch + 1 activation slots instead of up to
microbatches.
--outer-steps H turns on DiLoCo (Douillard et al. 2023): replicas train alone for H steps, then
average their pseudo-gradients (start-of-round weights minus current ones; --outer-codec) and take
an outer Nesterov step; a line per round says which replicas took part and what the average sent.
--elastic (with --outer-steps) lets replicas leave and join at round boundaries: the
launcher hosts the store (and prints its address), a lost replica is dropped by the others at the
next round boundary, `strait train --elastic --join` with MASTER_ADDR/MASTER_PORT set to that
address and the job's other settings is admitted at one and receives a survivor's state;
--min-replicas N stops the job below N replicas (after a checkpoint with --save). With --stages > 1
a replica that loses one stage's rank is dropped whole, and a replica joins as --stages processes
started with --join (admitted together once all of them wait; each takes a stage and receives that
stage's state from a survivor).
Environment: STRAIT_TIMEOUT_S (collective timeout, default 300), STRAIT_IO_ENGINE=posix|uring,
STRAIT_HEARTBEAT_S (with --elastic 1 unless set).)";

// The same data checks a rank makes, made once before any process starts.
void check_data(const TrainConfig& c) {
  sched::DatasetOptions d;
  d.context = c.ctx;
  d.seed = c.seed;
  const sched::ByteDataset dataset(sched::ByteCorpus::load(c.data), d);
  (void)dataset;
}

// The options whose values are words, as given; CLI::IsMember has checked those it can.
struct Choices {
  std::string schedule = "1f1b";
  std::string freeze_variance = "auto";
  std::string compress = "gradient";
  std::string offload_optimizer = "cpu";
  std::string offload_activations = "none";
  std::string sample = "topk";
  std::string outer_state = "cpu";
};

// The one place where the words become TrainConfig's enums; an unknown schedule or optimizer
// place is an InvalidArgument naming the option and the choices.
void parse_choices(const Choices& w, TrainConfig& c) {
  c.schedule = sched::parse_schedule_kind(w.schedule);
  c.offload_optimizer = offload::parse_optimizer_offload(w.offload_optimizer);
  c.freeze_variance = w.freeze_variance == "on"    ? FreezeVariance::On
                      : w.freeze_variance == "off" ? FreezeVariance::Off
                                                   : FreezeVariance::Auto;
  c.compress = w.compress == "momentum" ? CompressTarget::Momentum : CompressTarget::Gradient;
  c.offload_activations = w.offload_activations == "cpu"    ? ActivationOffload::Cpu
                          : w.offload_activations == "nvme" ? ActivationOffload::Nvme
                                                            : ActivationOffload::None;
  c.greedy = w.sample == "greedy";
  c.outer_state = offload::parse_optimizer_offload(w.outer_state);
}

// Seeds are unsigned: a leading minus is refused with a message that says so.
CLI::Validator non_negative_integer() {
  return {[](const std::string& v) {
            return !v.empty() && v.front() == '-' ? std::string("must be a non-negative integer")
                                                  : std::string();
          },
          "UINT"};
}

std::string self_executable(const std::string& argv0) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? argv0 : exe.string();
}

// What `strait train`'s flags fill: the config, the options spelled as words (parsed into its
// enums once, by parse_choices) and the paths as given.
struct TrainOptions {
  TrainConfig config;
  Choices words;
  std::string data = TrainConfig{}.data.string();
  std::string offload_dir = TrainConfig{}.offload_dir.string();
  std::string metrics, trace;
  std::string plan;          // --plan auto | FILE
  std::string save, resume;  // --- checkpoints
  double timeout_s = 0;
  CLI::Option* offload_dir_option = nullptr;

  // The config with the words and paths in it.
  TrainConfig finish() {
    parse_choices(words, config);
    config.data = data;
    config.offload_dir = offload_dir;
    config.metrics = metrics;
    config.save = save;      // --- checkpoints
    config.resume = resume;  // --- checkpoints
    config.trace = trace;
    return config;
  }
};

// The pipeline and data-parallel layout and the schedule.
void add_parallel_options(CLI::App* train, TrainOptions& o) {
  train->add_option(
      "--plan", o.plan,
      "Take the layout, schedule, offload and codec from a plan: auto (strait plan's "
      "best for --stages x --replicas ranks and this batch) or a strait plan --output "
      "FILE; it overrides those flags");
  train->add_option("--stages", o.config.stages, "Pipeline stages")->capture_default_str();
  train->add_option("--replicas", o.config.replicas, "Data-parallel replicas")
      ->capture_default_str();
  train
      ->add_option("--schedule", o.words.schedule,
                   "Pipeline schedule: 1f1b, gpipe, interleaved, zb-h1, zbv or dualpipev "
                   "(interleaved, zbv and dualpipev hold several model chunks per rank: the "
                   "layers are split into stages x chunks pipeline stages)")
      ->capture_default_str();
  train
      ->add_option("--chunks", o.config.chunks,
                   "Model chunks per rank: any V >= 1 for interleaved (default 2), 2 for zbv "
                   "and dualpipev, 1 for the others (0: the schedule's own)")
      ->capture_default_str();
  train->add_option("--microbatches", o.config.microbatches, "Microbatches per replica per step")
      ->capture_default_str();
  train->add_option("--microbatch-size", o.config.microbatch_size, "Sequences per microbatch")
      ->capture_default_str();
  train
      ->add_option("--stage-layers", o.config.stage_layers,
                   "Layers of each pipeline stage, e.g. 3,1 (stages x chunks counts in model-stage "
                   "order, summing to --layers): an uneven split gives a slower rank fewer layers; "
                   "default: as even as possible")
      ->delimiter(',');
  train
      ->add_option("--placement", o.config.placement,
                   "World rank of each (replica, stage) slot in replica-major order, a permutation "
                   "of 0..stages x replicas - 1, e.g. 0,2,1,3 (stage 0 on ranks 0 and 1: the "
                   "cheapest stage on slow ranks, "
                   "or a pipeline inside one site); default: rank = replica x stages + stage")
      ->delimiter(',');
}

// The model and its optimizer.
void add_model_options(CLI::App* train, TrainOptions& o) {
  train->add_option("--layers", o.config.layers, "Transformer blocks")->capture_default_str();
  train->add_option("--dim", o.config.dim, "Model width (channels)")->capture_default_str();
  train->add_option("--heads", o.config.heads, "Attention heads")->capture_default_str();
  train->add_option("--ctx", o.config.ctx, "Context length in bytes")->capture_default_str();
  train->add_option("--steps", o.config.steps, "Optimizer steps")->capture_default_str();
  train->add_option("--lr", o.config.lr, "Peak AdamW learning rate")->capture_default_str();
  train->add_option("--warmup", o.config.warmup_steps, "Linear warm-up steps")
      ->capture_default_str();
  train
      ->add_option("--min-lr-ratio", o.config.min_lr_ratio,
                   "Final learning rate / peak (cosine decay)")
      ->capture_default_str();
  train
      ->add_option("--weight-decay", o.config.weight_decay,
                   "AdamW decoupled weight decay (matrices)")
      ->capture_default_str();
  train->add_option("--beta1", o.config.beta1, "AdamW beta1")->capture_default_str();
  train->add_option("--beta2", o.config.beta2, "AdamW beta2")->capture_default_str();
  train->add_option("--grad-clip", o.config.grad_clip, "Global gradient-norm clip (0: off)")
      ->capture_default_str();
  train->add_option("--seed", o.config.seed, "Seed of the initial weights and the data order")
      ->check(non_negative_integer())
      ->capture_default_str();
}

// The compressed data-parallel average.
void add_compression_options(CLI::App* train, TrainOptions& o) {
  train
      ->add_option("--codec", o.config.codec,
                   "Compress the data-parallel gradient average with this codec (bf16, fp16, "
                   "int8, int4, onebit, topk, powersgd, or auto: the one STRAIT_TUNE_FILE's "
                   "rules give; default: uncompressed)")
      ->capture_default_str();
  train
      ->add_option("--codec-args", o.config.codec_args,
                   "Codec arguments, e.g. fraction=0.01 or block=64")
      ->capture_default_str();
  train
      ->add_option("--codec-warmup", o.config.codec_warmup_steps,
                   "Uncompressed steps before the codec takes over")
      ->capture_default_str();
  train
      ->add_option("--freeze-variance", o.words.freeze_variance,
                   "Freeze AdamW's second moment when the codec takes over, as 1-bit Adam "
                   "does (auto: only with --compress momentum, which needs it)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  train
      ->add_option("--compress", o.words.compress,
                   "What the codec compresses: the gradient average, or each replica's AdamW "
                   "momentum (1-bit Adam; far closer to uncompressed training for topk and "
                   "onebit)")
      ->check(CLI::IsMember({"gradient", "momentum"}))
      ->capture_default_str();
}

// DiLoCo.
void add_diloco_options(CLI::App* train, TrainOptions& o) {
  train
      ->add_option("--outer-steps", o.config.outer_steps,
                   "DiLoCo: inner AdamW steps per round, each replica on its own data with no "
                   "gradient average, then the outer step on the averaged pseudo-gradients (0: "
                   "off, plain data-parallel)")
      ->capture_default_str();
  train->add_option("--outer-lr", o.config.outer_lr, "DiLoCo's outer (Nesterov) learning rate")
      ->capture_default_str();
  train->add_option("--outer-momentum", o.config.outer_momentum, "DiLoCo's outer Nesterov momentum")
      ->capture_default_str();
  train
      ->add_option("--outer-codec", o.config.outer_codec,
                   "Codec of the pseudo-gradient average: none, bf16, int8 or int4 (with error "
                   "feedback), optionally with arguments (int8:block=128), or SparseLoCo's "
                   "sparseloco[:density=0.02,chunk=4096,bits=2,beta=0.95] (chunked top-k at 2 "
                   "bits, decayed error feedback in place of the outer momentum: pass "
                   "--outer-momentum 0)")
      ->capture_default_str();
  train
      ->add_option("--outer-state", o.words.outer_state,
                   "Where DiLoCo's outer state (global weights, momentum) lives between rounds: "
                   "cpu (pinned RAM) or nvme (a file per rank under --offload-dir)")
      ->check(CLI::IsMember({"cpu", "nvme"}))
      ->capture_default_str();
  train
      ->add_option("--outer-fragments", o.config.outer_fragments,
                   "Streaming DiLoCo: cut each stage's parameters into this many groups synced in "
                   "turn, H / F steps apart, to flatten the link's peak load (1: all at once)")
      ->capture_default_str();
  train
      ->add_option("--quorum", o.config.quorum,
                   "Quorum rounds (--stages 1): a round closes once this many replicas sent and "
                   "--grace seconds passed, a late replica's pseudo-gradient joins the next one "
                   "weighted by its tokens; training ends at steps x replicas steps' tokens (0: "
                   "every replica, in lockstep)")
      ->capture_default_str();
  train
      ->add_option("--grace", o.config.grace_s,
                   "Quorum rounds: seconds the leader (replica 0) waits after its own round end")
      ->capture_default_str();
  CLI::Option* overlap = train->add_flag(
      "--outer-overlap", o.config.outer_overlap,
      "Average each round's pseudo-gradients in the background while the next inner "
      "steps compute, and apply the average --outer-delay steps later (Streaming "
      "DiLoCo's overlap)");
  train
      ->add_option("--outer-delay", o.config.outer_delay,
                   "With --outer-overlap: inner steps the average may take to arrive, 1 to "
                   "--outer-steps (Streaming DiLoCo's tau; a step waits for it if it is later); 0: "
                   "a whole round, applied one round late")
      ->needs(overlap)
      ->capture_default_str();
  train->add_flag("--outer-eager", o.config.outer_eager,
                  "With --outer-overlap: eager updates (arXiv 2502.12996): until the average "
                  "arrives, compute from the outer step on an estimate of it (the last average "
                  "with this replica's own part fresh), then replace the estimate by it");
}

// The data and what is offloaded.
void add_offload_options(CLI::App* train, TrainOptions& o) {
  train->add_option("--data", o.data, "Text file or directory of text files")
      ->capture_default_str();
  train
      ->add_option("--offload-optimizer", o.words.offload_optimizer,
                   "Where the AdamW moments live: cpu (pinned host RAM) or nvme (a file per rank "
                   "under --offload-dir, streamed through io_uring)")
      ->capture_default_str();
  o.offload_dir_option =
      train
          ->add_option("--offload-dir", o.offload_dir,
                       "Directory for the per-rank optimizer-state files (--offload-optimizer "
                       "nvme)")
          ->capture_default_str();
  train
      ->add_option("--offload-activations", o.words.offload_activations,
                   "Move each microbatch's stashed activations out of the model between its "
                   "forward and backward: none, cpu (pinned RAM) or nvme (files in --offload-dir); "
                   "same results, fewer resident activation slots")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}))
      ->capture_default_str();
  train
      ->add_option("--offload-prefetch", o.config.offload_prefetch,
                   "Computes (forwards / backwards) between reloading a microbatch's activations "
                   "and its backward; resident slots per stage are at most this + 1")
      ->capture_default_str();
}

// Evaluation and the sample.
void add_sampling_options(CLI::App* train, TrainOptions& o) {
  train
      ->add_option("--eval-sequences", o.config.eval_sequences,
                   "Held-out sequences for the eval loss (0: the whole held-out tail)")
      ->capture_default_str();
  train
      ->add_option("--eval-every", o.config.eval_every,
                   "Also evaluate every N steps (0: at the end)")
      ->capture_default_str();
  train->add_option("--prompt", o.config.prompt, "Prompt of the sample")->capture_default_str();
  train->add_option("--sample-bytes", o.config.sample_bytes, "Bytes to generate at the end")
      ->capture_default_str();
  train
      ->add_option("--sample", o.words.sample,
                   "How the sample picks each byte: topk (drawn from the --top-k most likely at "
                   "--temperature) or greedy (the most likely)")
      ->check(CLI::IsMember({"topk", "greedy"}))
      ->capture_default_str();
  train
      ->add_option("--temperature", o.config.temperature,
                   "Sampling temperature: the logits are divided by it (lower: closer to greedy)")
      ->capture_default_str();
  train->add_option("--top-k", o.config.top_k, "Draw from the k most likely bytes (1: greedy)")
      ->capture_default_str();
  train
      ->add_option("--sample-seed", o.config.sample_seed,
                   "Seed of the sample's draws (the same seed and weights give the same bytes)")
      ->check(non_negative_integer())
      ->capture_default_str();
}

// Metrics, trace and logs.
void add_output_options(CLI::App* train, TrainOptions& o) {
  train->add_option("--metrics", o.metrics, "Write one JSON line per step (and a summary) here");
  train->add_option("--trace", o.trace,
                    "Write replica 0's per-rank action timeline as Chrome trace JSON here "
                    "(chrome://tracing, Perfetto, strait schedule --from-trace)");
  train
      ->add_option("--blas-threads", o.config.blas_threads,
                   "OpenBLAS threads per rank (0: cores / local ranks)")
      ->capture_default_str();
  train->add_option("--log-every", o.config.log_every, "Print every N steps")
      ->capture_default_str();
}

// Checkpoints.
void add_checkpoint_options(CLI::App* train, TrainOptions& o) {
  // --- checkpoints (docs/checkpoints.md) ---
  train->add_option("--save", o.save,
                    "Save checkpoints (weights, AdamW state, step, sampler position) into this "
                    "directory, atomically: at the end and every --save-every steps");
  train
      ->add_option("--save-every", o.config.save_every,
                   "Also save every N steps (0: only at the end)")
      ->capture_default_str();
  train->add_option("--resume", o.resume,
                    "Continue from a checkpoint: a --save directory (its newest) or one of its "
                    "step-N directories; any --stages / --replicas split may resume it");
  // --- end checkpoints ---
}

// Elastic replicas and the collective timeout.
void add_elastic_options(CLI::App* train, TrainOptions& o) {
  train->add_flag("--elastic", o.config.elastic,
                  "DiLoCo replicas that may leave and join: a lost replica is dropped at the next "
                  "round boundary, a --join process admitted at one (needs --outer-steps; the "
                  "launcher hosts the store)");
  train
      ->add_option("--min-replicas", o.config.min_replicas,
                   "With --elastic: stop (after a checkpoint with --save) when fewer replicas are "
                   "left")
      ->capture_default_str();
  train->add_flag("--join", o.config.join,
                  "Join the running --elastic job whose store is at MASTER_ADDR:MASTER_PORT (the "
                  "same settings as the job's) at its next round boundary");
  train
      ->add_option("--timeout", o.timeout_s,
                   "Seconds before a stuck collective fails (sets STRAIT_TIMEOUT_S; default 300)")
      ->check(CLI::Range(0.001, 1e6));
}

// Parent: fail fast on bad settings, then start the ranks; returns their exit code.
int launch_ranks(const TrainConfig& c, const TrainOptions& o,
                 const std::vector<std::string>& argv) {
  c.validate();
  check_data(c);
  if (o.offload_dir_option->count() > 0 && c.offload_optimizer != offload::OptimizerOffload::Nvme &&
      c.offload_activations != ActivationOffload::Nvme &&
      (c.outer_steps == 0 || c.outer_state != offload::OptimizerOffload::Nvme)) {
    fmt::print(stderr,
               "strait train: note: --offload-dir is unused: the optimizer state stays in "
               "RAM (--offload-optimizer {}) and activations are not offloaded to disk; pass "
               "--offload-optimizer nvme or --offload-activations nvme to use it\n",
               o.words.offload_optimizer);
  }
  LaunchOptions launch_options;
  launch_options.nproc = c.world_size();
  launch_options.command = argv;
  launch_options.command[0] = self_executable(argv[0]);
  launch_options.elastic = c.elastic;
  return launch(launch_options);
}

// --plan: auto plans in the parent (before any rank starts) and hands the ranks the plan file in
// its place; a FILE's plan overrides the layout, schedule, offload and codec flags.
// Returns the plan file it wrote for auto (removed once the ranks are done), else an empty path.
std::filesystem::path apply_plan_option(const std::string& plan, TrainConfig& c,
                                        std::vector<std::string>& args) {
  std::filesystem::path file = plan;
  if (plan == "auto") {
    if (std::getenv("RANK") != nullptr || c.join) {
      throw Error(ErrorCode::InvalidArgument,
                  "--plan auto plans before the ranks start, so it needs strait train to start "
                  "them; under another launcher write a plan with strait plan --output FILE and "
                  "pass --plan FILE");
    }
    file = plan_for_train(c);
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--plan=auto") args[i] = "--plan=" + file.string();
      if (args[i] == "--plan" && i + 1 < args.size() && args[i + 1] == "auto") {
        args[i + 1] = file.string();
      }
    }
  }
  apply_plan(read_plan_file(file), c);
  return plan == "auto" ? file : std::filesystem::path();
}

// A rank (or a joiner): trains; returns the exit code (2 for a bad setting).
int run_rank(const TrainConfig& c, const char* rank_env) {
  if (c.join) c.validate();  // a joiner runs on its own, without a launcher
  const std::string rank =
      rank_env != nullptr ? fmt::format("rank {}", rank_env) : std::string("joiner");
  try {
    run_training_rank(c);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "strait train: {}: {}\n", rank, e.what());
    return e.code() == ErrorCode::InvalidArgument ? 2 : 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "strait train: {}: out of memory: lower --ctx, --microbatch-size, "
               "--microbatches, --dim or --layers, or use more stages\n",
               rank);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "strait train: {}: unexpected error: {}\n", rank, e.what());
    return 1;
  }
}

}  // namespace

void add_train_command(CLI::App& app, const std::vector<std::string>& argv, int& exit_code) {
  CLI::App* train = app.add_subcommand(
      "train",
      "Train the reference GPT on a text corpus across local pipeline stages and "
      "data-parallel replicas");
  train->footer(kFooter);
  auto o = std::make_shared<TrainOptions>();
  add_parallel_options(train, *o);
  add_model_options(train, *o);
  add_compression_options(train, *o);
  add_diloco_options(train, *o);
  add_offload_options(train, *o);
  add_sampling_options(train, *o);
  add_output_options(train, *o);
  add_checkpoint_options(train, *o);
  add_elastic_options(train, *o);
  train->callback([o, argv, &exit_code] {
    TrainConfig c = o->finish();
    std::vector<std::string> args = argv;
    const std::filesystem::path auto_plan =
        o->plan.empty() ? std::filesystem::path() : apply_plan_option(o->plan, c, args);
    if (o->timeout_s > 0) ::setenv("STRAIT_TIMEOUT_S", fmt::format("{}", o->timeout_s).c_str(), 1);
    // Elastic jobs need a lost peer known before the next allreduce times out (comm/heartbeat.h).
    if (c.elastic && !params::is_set("STRAIT_HEARTBEAT_S")) ::setenv("STRAIT_HEARTBEAT_S", "1", 1);
    const char* rank_env = std::getenv("RANK");
    exit_code = rank_env == nullptr && !c.join ? launch_ranks(c, *o, args) : run_rank(c, rank_env);
    if (!auto_plan.empty()) std::filesystem::remove(auto_plan);
  });
}

}  // namespace strait::tools
