#include "train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <thread>
#include <vector>

#include "comm/bootstrap/launch_env.h"
#include "comm/bootstrap/tcp_store.h"
#include "comm/communicator.h"
#include "comm/compress/codec.h"
#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/gemm.h"
#include "offload/activation_store.h"
#include "offload/io_engine_factory.h"
#include "offload/optimizer_offload.h"
#include "offload/swap_store.h"
#include "scheduler/executor.h"
#include "scheduler/grad_sync.h"
#include "model/baselines.h"
#include "model/checkpoint.h"
#include "model/corpus.h"
#include "model/data.h"
#include "model/rank_model.h"
#include "model/sampling.h"
#include "model/transformer.h"
#include "train/outer_sync.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_trace.h"
#include "scheduler/schedule_validate.h"
#include "train/train_checkpoint.h"

namespace strait::tools {
// The reference model and the scheduler are this application's vocabulary.
using namespace strait::sched;  // NOLINT(google-build-using-namespace)

namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;
using kernels::ReduceOp;

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

GptConfig model_config(const TrainConfig& c) {
  GptConfig g;
  g.vocab = 256;
  g.ctx = c.ctx;
  g.layers = c.layers;
  g.dim = c.dim;
  g.heads = c.heads;
  return g;
}

// The job's pipeline schedule, with activation offload when asked for.
Schedule job_schedule(const TrainConfig& c) {
  Schedule s = make_schedule(c.schedule, c.stages, c.microbatches, c.chunks);
  if (c.offload_activations != ActivationOffload::None) {
    s = add_activation_offload(s, c.offload_prefetch);
  }
  return s;
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

std::unique_ptr<offload::ActivationStore> make_activation_store(const TrainConfig& c, int rank) {
  if (c.offload_activations == ActivationOffload::Nvme) {
    offload::SwapStoreOptions o;
    o.dir = c.offload_dir;
    o.tag = fmt::format("activations-rank{}", rank);
    return offload::make_swap_activation_store(o);
  }
  // cpu. Placement::any(): unbound pages, placed by the kernel (hwloc may be missing here).
  return offload::make_host_activation_store(
      offload::pinned_pool_allocator(std::make_shared<offload::PinnedPool>()));
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
  const int stages = stage_count(schedule);  // model stages: ranks x chunks
  const auto ranges = split_layers(c.layers, stages);
  double bytes = 0;
  for (int s = 0; s < stages; ++s) {
    const auto& r = ranges[static_cast<std::size_t>(s)];
    const double per_position = (r.last - r.first) * (16.0 * c.dim + 2.0 * c.heads * c.ctx) +
                                (s == stages - 1 ? 3.0 * 256 : 0.0) + c.dim;
    // Pinned host buffers of the cpu activation store count as well (per rank: its chunks'
    // largest stash stands for each).
    const double slots =
        peak_stashed_microbatches_of_stage(schedule, s) +
        (c.offload_activations == ActivationOffload::Cpu
             ? static_cast<double>(peak_offloaded(schedule, rank_of(schedule, s))) / schedule.chunks
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

// What the gradient sync treats specially: the tied word embedding and, for PowerSGD, each 2-D
// weight as shape[0] x shape[1] (PyTorch's hook views a tensor as (shape[0], -1)).
GradientLayout gradient_layout(const RankModel& model) {
  GradientLayout layout;
  if (const auto tied = model.tied_wte())
    layout.tied = GradientLayout::Range{tied->offset, tied->count};
  if (const auto copy = model.tied_copy())
    layout.tied_copy = GradientLayout::Range{copy->offset, copy->count};
  for (const auto& t : model.tensors()) {
    if (t.shape.size() == 2) {
      layout.matrices.push_back(
          {t.offset, static_cast<std::size_t>(t.shape[0]), static_cast<std::size_t>(t.shape[1])});
    }
  }
  return layout;
}

// Contiguous runs of tensors with the same weight-decay rule become one optimizer group.
std::vector<offload::DecayGroup> decay_groups(const RankModel& model, double weight_decay) {
  std::vector<offload::DecayGroup> groups;
  for (const auto& t : model.tensors()) {
    const double wd = t.weight_decay ? weight_decay : 0.0;
    if (!groups.empty() && groups.back().weight_decay == wd &&
        groups.back().offset + groups.back().count == t.offset) {
      groups.back().count += t.count;
    } else {
      groups.push_back({t.offset, t.count, wd});
    }
  }
  return groups;
}

// "1 replica", "2 replicas".
std::string plural(std::int64_t n, std::string_view one, std::string_view many = {}) {
  if (n == 1) return fmt::format("1 {}", one);
  return many.empty() ? fmt::format("{} {}s", n, one) : fmt::format("{} {}", n, many);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024.0));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

// Bytes of the sample as printable text: bytes that are not printable ASCII or common whitespace
// are shown as \xNN so a terminal is never confused by a half-learned byte model.
std::string printable(const std::vector<std::int32_t>& tokens) {
  std::string out;
  for (const std::int32_t t : tokens) {
    const auto c = static_cast<unsigned char>(t);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// Add-one (Laplace) smoothing for the n-gram baselines: every byte keeps a non-zero probability, so
// held-out bytes unseen in training (or pairs, for the bigram) cost a finite loss.
constexpr double kBaselineSmoothing = 1.0;

// The held-out loss next to what byte frequencies alone achieve, in nats and bits per byte: the
// n-gram models' cross-entropy on the same held-out bytes, then the training split's own entropies
// (what those models score on the text they were counted on).
void print_held_out(double eval_loss, const ByteBaselines& b) {
  const auto row = [](std::string_view name, double nats) {
    fmt::print("  {:<44} {:>9.4f} {:>9.4f}\n", name, nats, bits_per_byte(nats));
  };
  fmt::print("{:<46} {:>9} {:>9}\n", fmt::format("held-out loss, {} bytes", b.positions),
             "nats/byte", "bits/byte");
  row("model", eval_loss);
  row("bigram baseline (add-one, training counts)", b.bigram_held_out);
  row("unigram baseline (add-one, training counts)", b.unigram_held_out);
  row("training split H(X_t | X_t-1) (plug-in)", b.bigram_entropy);
  row("training split H(X) (plug-in)", b.unigram_entropy);
  if (b.bigram_held_out > 0) {
    fmt::print("model vs bigram baseline: {:.1f}% {} loss\n",
               100.0 * std::abs(eval_loss / b.bigram_held_out - 1.0),
               eval_loss <= b.bigram_held_out ? "lower" : "higher");
  }
}

class Job {
 public:
  explicit Job(const TrainConfig& config) : cfg_(config) {}
  void run();

 private:
  void setup();
  double evaluate();
  std::vector<std::int32_t> generate();
  void check_momentum();
  void emit(const nlohmann::json& record);
  void write_trace();
  // pipe_, data_, tied_ and this rank's place, from world_.
  void build_groups();
  // The executor and its gradient sync over the current groups.
  void build_training();
  // DiLoCo's outer sync over the current groups, starting from the model's weights.
  void build_outer();

  // --- elastic (--elastic) ---
  // Runs a world operation; on a lost peer (PeerLost, Timeout, Aborted) marks the world broken
  // and returns false. Does nothing and returns false once it is broken.
  bool world_ok(const std::function<void()>& op);
  void mark_broken(const Error& e);
  // At a round's end: the outer step, and when the world lost ranks or processes wait to join,
  // the re-formation (see TrainConfig::elastic).
  OuterStepStats elastic_round_end(int step, bool last);
  // Re-forms the world (admitting joiners or not) and rebuilds the groups and the executor over
  // it; the outer sync is left for the caller to rebuild. Returns the lost replicas' ids.
  std::vector<int> adopt_reformed(bool admit);
  // The outer sync rebuilt over the current groups with `state`.
  void rebuild_outer(const OuterSync::State& state, std::int64_t steps_done, bool ended);
  // In the re-formed world, each stage's first rank (a survivor) sends its state to the ranks of
  // its stage (the joiners keep it). Returns the bytes sent, all stages together (on every rank).
  std::int64_t send_state(std::int64_t steps_done);
  // A joiner: receives that state; returns the step to go on from.
  int receive_state();
  // Below --min-replicas: a checkpoint (with --save), then an error.
  [[noreturn]] void stop_below_min(std::int64_t steps_done);
  // Test hooks. STRAIT_TRAIN_AWAIT_JOINER=STEP: the round boundary at step STEP waits (up to
  // half the timeout) until a process waits to join. STRAIT_TRAIN_FAULT=ID:STEP:PHASE: replica ID
  // dies by SIGKILL at step STEP (1-based) in PHASE: inner (before the step's computation),
  // allreduce (in the middle of the round's pseudo-gradient average), outer (after the outer step).
  void maybe_fault(std::string_view phase, int step);
  [[nodiscard]] std::string ids_text() const;
  // The replicas (ascending, once each) of ranks with these ids.
  [[nodiscard]] std::vector<int> replicas_of(const std::vector<int>& ids) const;

  std::shared_ptr<comm::Store> join_store_;  // a joiner's client of the job's store
  bool broken_ = false;                      // a world operation failed since the last round end
  bool pipeline_broken_ = false;  // and it was this replica's own pipeline: no more steps
  std::string broken_why_;
  int replicas_ = 1;  // replicas in the current world
  // Each rank's id: replica * stages + stage at the start (its first rank), joiners numbered on
  // in whole replicas (stages consecutive ids, admitted together), so id / stages is its replica
  // and id % stages its stage.
  std::vector<int> ids_;
  int next_id_ = 0;  // the next joiner's id
  struct Fault {
    int id = -1;
    int step = 0;
    std::string phase;
  };
  std::optional<Fault> fault_;
  int await_joiner_ = -1;  // test hook STRAIT_TRAIN_AWAIT_JOINER=STEP (see elastic_round_end)

  const TrainConfig& cfg_;
  std::unique_ptr<comm::Communicator> world_, pipe_, data_, tied_;
  int rank_ = 0, stage_ = 0, replica_ = 0;
  std::optional<ByteDataset> dataset_;
  std::unique_ptr<RankModel> model_;  // this rank's model chunks (one unless interleaved / zbv)
  DataParallelSync* sync_ = nullptr;  // owned by executor_
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<offload::AdamWState> moments_;
  std::unique_ptr<OuterSync> outer_;  // DiLoCo (--outer-steps); destroyed before its comms
  std::vector<offload::DecayGroup> groups_;
  std::vector<double> activations_;  // [slots..., slots without offload..., bytes per slot...]
  std::ofstream metrics_;
};

void Job::build_groups() {
  rank_ = world_->rank();
  stage_ = rank_ % cfg_.stages;
  replica_ = rank_ / cfg_.stages;
  replicas_ = world_->size() / cfg_.stages;
  pipe_ = world_->split(replica_, stage_);
  data_ = world_->split(stage_, replica_);
  const Schedule schedule = job_schedule(cfg_);
  validate_schedule(schedule);
  // The ranks holding the first and the last model stage sum the tied embedding's gradient; in a
  // V placement both are rank 0, which sums its two copies in place (RankModel::tied_copy).
  const int first_rank = rank_of(schedule, 0);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  const bool tied_member = first_rank != last_rank && (stage_ == first_rank || stage_ == last_rank);
  tied_ = world_->split(tied_member ? replica_ : -1, stage_);
}

void Job::build_training() {
  const int p = cfg_.stages;
  const Schedule schedule = job_schedule(cfg_);
  PipelineComms comms{pipe_.get(), data_.get(), tied_.get()};
  // DiLoCo: inside a round each replica steps on its own gradients (the tied embedding is still
  // summed and the norm clipped inside the replica); the replicas meet only in the outer step.
  const PipelineComms inner_comms =
      cfg_.outer_steps > 0 ? PipelineComms{pipe_.get(), nullptr, tied_.get()} : comms;
  executor_ = std::make_unique<PipelineExecutor>(schedule, stage_, model_->pipeline_stages(), comms,
                                                 cfg_.microbatch_size, cfg_.ctx);
  auto sync = std::make_unique<DataParallelSync>(
      inner_comms, stage_, p, gradient_layout(*model_),
      GradientCompression{cfg_.codec_spec(), cfg_.codec_warmup_steps,
                          cfg_.compress == CompressTarget::Momentum, cfg_.beta1},
      cfg_.grad_clip);
  sync_ = sync.get();
  executor_->set_gradient_sync(std::move(sync));
  if (cfg_.offload_activations != ActivationOffload::None)
    executor_->set_activation_store(make_activation_store(cfg_, rank_));
  executor_->set_tracing(!cfg_.trace.empty() && replica_ == 0);
}

void Job::build_outer() {
  const PipelineComms comms{pipe_.get(), data_.get(), tied_.get()};
  std::optional<GradientLayout::Range> tied;
  if (const auto t = model_->tied_wte(); t && cfg_.stages > 1)
    tied = GradientLayout::Range{t->offset, t->count};
  std::shared_ptr<offload::SwapStore> store;
  if (cfg_.outer_state == offload::OptimizerOffload::Nvme) {
    offload::SwapStoreOptions so;
    so.dir = cfg_.offload_dir;
    so.tag = fmt::format("outer-rank{}", rank_);
    store = std::make_shared<offload::SwapStore>(so);
  }
  outer_ = std::make_unique<OuterSync>(comms, stage_, model_->params(), tied, cfg_.outer(), nullptr,
                                       std::move(store));
}

void Job::setup() {
  cfg_.validate();
  int local_world_size = 1;
  if (cfg_.join) {
    // A joiner: no rank yet; the job's store is where the elastic launcher said.
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr == nullptr || port == nullptr) {
      throw bad(
          "--join needs MASTER_ADDR and MASTER_PORT: set them to the store address the elastic "
          "job's launcher printed (\"the job's store is at ADDR:PORT\")");
    }
    comm::TcpStoreOptions so;
    so.host = addr;
    so.port = static_cast<std::uint16_t>(std::stoi(port));
    so.connect_timeout = comm::CommOptions::default_timeout();
    so.timeout = comm::CommOptions::default_timeout();
    join_store_ = std::make_shared<comm::TcpStore>(so);
    try {
      world_ = comm::Communicator::join(join_store_);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || cfg_.stages == 1) throw;
      throw Error(ErrorCode::Timeout,
                  fmt::format("{} (with --stages {} a replica joins as {} processes started with "
                              "--join, admitted only together: were all of them started?)",
                              e.what(), cfg_.stages, cfg_.stages));
    }
  } else {
    // The world size is checked from the environment, before any connection is made: every rank
    // then reports the mistake itself, instead of some of them failing later on a connection to a
    // rank that has already exited over it.
    const comm::LaunchEnv env = comm::launch_env_from_environment();
    if (env.world_size != cfg_.world_size()) {
      throw bad(fmt::format(
          "the job has {} ranks (WORLD_SIZE={}) but --stages {} x --replicas {} needs {}: launch "
          "{} ranks (strait train does this itself when run without RANK set)",
          env.world_size, env.world_size, cfg_.stages, cfg_.replicas, cfg_.world_size(),
          cfg_.world_size()));
    }
    if (cfg_.elastic && !env.agent_store) {
      throw bad(
          "--elastic needs a store that outlives every rank (comm/reform.h): start the job with "
          "`strait train --elastic` (its launcher hosts the store) or `strait run --elastic`, "
          "which set TORCHELASTIC_USE_AGENT_STORE=True");
    }
    local_world_size = env.local_world_size;
    world_ = comm::Communicator::from_env();
    for (int r = 0; r < world_->size(); ++r) ids_.push_back(r);
    next_id_ = world_->size();
  }
  // Test hooks (see maybe_fault and elastic_round_end).
  const auto hook_int = [](const char* name, const std::string& text) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): reported below
    }
    throw bad(fmt::format("{}: {:?} is not a whole number (a test hook)", name, text));
  };
  if (const char* f = std::getenv("STRAIT_TRAIN_FAULT"); f != nullptr && cfg_.elastic) {
    const std::string spec = f;
    const auto a = spec.find(':');
    const auto b = a == std::string::npos ? a : spec.find(':', a + 1);
    if (b == std::string::npos) {
      throw bad(fmt::format("STRAIT_TRAIN_FAULT={:?} is not ID:STEP:PHASE (a test hook)", spec));
    }
    fault_ =
        Fault{hook_int("STRAIT_TRAIN_FAULT", spec.substr(0, a)),
              hook_int("STRAIT_TRAIN_FAULT", spec.substr(a + 1, b - a - 1)), spec.substr(b + 1)};
  }
  if (const char* a = std::getenv("STRAIT_TRAIN_AWAIT_JOINER"); a != nullptr && cfg_.elastic)
    await_joiner_ = hook_int("STRAIT_TRAIN_AWAIT_JOINER", a);
  build_groups();
  const Schedule schedule = job_schedule(cfg_);
  // The ranks holding the first and the last model stage (both rank 0 in a V placement).
  const int first_rank = rank_of(schedule, 0);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  const int p = cfg_.stages;

  int threads = cfg_.blas_threads;
  if (threads == 0) {
    threads = std::max(
        1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world_size));
  }
  kernels::set_gemm_threads(threads);

  // Only the first stage reads tokens and only the last reads targets (rank 0 always holds the
  // corpus: it prints the baselines).
  if (stage_ == first_rank || stage_ == last_rank) {
    DatasetOptions dopt;
    dopt.context = cfg_.ctx;
    dopt.seed = cfg_.seed;
    dopt.max_eval_sequences = cfg_.eval_sequences;
    dataset_.emplace(ByteCorpus::load(cfg_.data), dopt);
  }
  model_ = std::make_unique<RankModel>(model_config(cfg_), schedule, stage_, cfg_.microbatch_size,
                                       cfg_.seed);
  build_training();
  // Activation memory of replica 0, per stage: resident slots and bytes, with and without offload.
  activations_.assign(3 * static_cast<std::size_t>(p), 0.0);
  if (replica_ == 0) {
    const auto at = [&](std::size_t k) -> double& {
      return activations_[k * static_cast<std::size_t>(p) + static_cast<std::size_t>(stage_)];
    };
    // Per rank: all its chunks' slots, and the bytes of one slot (the chunks' mean: a slot of
    // a chunk with the embedding or the head is larger).
    const Schedule plain = make_schedule(cfg_.schedule, p, cfg_.microbatches, cfg_.chunks);
    double without = 0;
    for (int c = 0; c < model_->chunks(); ++c)
      without += peak_stashed_microbatches_of_stage(plain, model_->stage(c));
    at(0) = model_->slots();
    at(1) = without;
    at(2) = static_cast<double>(model_->slot_bytes()) / model_->slots();
  }
  offload::OptimizerOffloadOptions mopt;
  mopt.where = cfg_.offload_optimizer;
  mopt.threads = static_cast<unsigned>(threads);  // the update shares the cores as GEMMs do
  mopt.file.dir = cfg_.offload_dir;
  mopt.file.tag = fmt::format("rank{}", rank_);
  moments_ = offload::make_adamw_state(model_->params().size(), mopt);
  groups_ = decay_groups(*model_, cfg_.weight_decay);
  if (cfg_.outer_steps > 0) build_outer();
  if (rank_ == 0 && !cfg_.metrics.empty()) {
    metrics_.open(cfg_.metrics, std::ios::trunc);
    if (!metrics_) throw bad(fmt::format("cannot write --metrics {}", cfg_.metrics.string()));
  }
}

// Every rank's trace records (replica 0's; the others have none) to rank 0, which writes the file.
void Job::write_trace() {
  constexpr std::size_t kFields = 7;
  std::vector<double> mine;
  for (const TraceRecord& r : executor_->take_trace()) {
    mine.insert(mine.end(), {static_cast<double>(r.rank), static_cast<double>(r.step),
                             static_cast<double>(static_cast<int>(r.action.kind)),
                             static_cast<double>(r.action.stage),
                             static_cast<double>(r.action.microbatch), r.start_us, r.end_us});
  }
  const auto n = static_cast<std::size_t>(world_->size());
  std::vector<std::int64_t> counts(n);
  const auto count = static_cast<std::int64_t>(mine.size());
  world_->allgather(&count, counts.data(), 1, DType::I64);
  std::vector<std::size_t> sizes(counts.begin(), counts.end());
  std::size_t total = 0;
  for (std::size_t c : sizes) total += c;
  std::vector<double> all(total);
  world_->allgather_v(mine.data(), all.data(), sizes, DType::F64);
  if (rank_ != 0) return;
  std::vector<TraceRecord> records;
  records.reserve(total / kFields);
  for (std::size_t i = 0; i + kFields <= all.size(); i += kFields) {
    records.push_back(
        TraceRecord{static_cast<int>(all[i]), static_cast<std::int64_t>(all[i + 1]),
                    Action{static_cast<ActionKind>(static_cast<int>(all[i + 2])),
                           static_cast<int>(all[i + 3]), static_cast<int>(all[i + 4])},
                    all[i + 5], all[i + 6]});
  }
  const TraceInfo info{
      std::string(schedule_kind_name(cfg_.schedule)), cfg_.stages, cfg_.microbatches,
      job_schedule(cfg_).chunks,
      cfg_.offload_activations == ActivationOffload::None ? -1 : cfg_.offload_prefetch};
  std::ofstream out(cfg_.trace, std::ios::trunc);
  out << chrome_trace_json(info, records);
  out.close();
  if (!out) throw bad(fmt::format("cannot write --trace {}", cfg_.trace.string()));
  fmt::print("wrote the trace of {} pipeline actions to {}\n", records.size(), cfg_.trace.string());
}

// --- elastic (--elastic) ---

bool Job::world_ok(const std::function<void()>& op) {
  if (broken_) return false;
  try {
    op();
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout &&
        e.code() != ErrorCode::Aborted) {
      throw;
    }
    mark_broken(e);
    return false;
  }
}

void Job::mark_broken(const Error& e) {
  broken_ = true;
  broken_why_ = e.what();
  fmt::print(stderr,
             "strait train: rank {} (replica {}): a world operation failed ({}); training on alone "
             "to the round's end, where the survivors re-form\n",
             rank_, ids_.empty() ? -1 : ids_[static_cast<std::size_t>(rank_)] / cfg_.stages,
             broken_why_);
  std::fflush(stderr);
}

std::string Job::ids_text() const {
  return fmt::format("{}", fmt::join(replicas_of(ids_), ","));
}

std::vector<int> Job::replicas_of(const std::vector<int>& ids) const {
  std::vector<int> out;
  for (const int id : ids) {
    const int r = id / cfg_.stages;
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Job::maybe_fault(std::string_view phase, int step) {
  if (!fault_ || ids_.empty() || fault_->id != ids_[static_cast<std::size_t>(rank_)] ||
      fault_->step != step + 1 || fault_->phase != phase) {
    return;
  }
  fmt::print("strait train: test hook: replica {} dies (SIGKILL) at step {}, phase {}\n",
             fault_->id, step + 1, phase);
  std::fflush(nullptr);
  if (phase == "allreduce") {
    // The round's average as OuterSync posts it (the same pseudo-gradient, count, dtype and op),
    // left in flight: should it complete anyway, the others' result is the one it would have been.
    const std::vector<float> start = outer_->global();
    const std::span<const float> w = model_->params();
    std::vector<float> buf(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) buf[i] = start[i] - w[i];
    const comm::Work work =
        data_->iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Avg);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::raise(SIGKILL);
}

std::vector<int> Job::adopt_reformed(bool admit) {
  comm::ReformOptions o;
  o.admit_joiners = admit;
  o.joiners_multiple = cfg_.stages;  // a replica's stages join together, in ticket order
  std::unique_ptr<comm::Communicator> next = world_->reform(o);
  std::vector<int> ids(static_cast<std::size_t>(next->size()));
  std::vector<bool> kept(ids_.size(), false);
  for (int r = 0; r < next->size(); ++r) {
    const int former = next->former_ranks()[static_cast<std::size_t>(r)];
    if (former >= 0) kept[static_cast<std::size_t>(former)] = true;
    ids[static_cast<std::size_t>(r)] =
        former >= 0 ? ids_[static_cast<std::size_t>(former)] : next_id_++;
  }
  std::vector<int> lost;
  for (std::size_t r = 0; r < ids_.size(); ++r) {
    if (!kept[r]) lost.push_back(ids_[r]);
  }
  const int p = cfg_.stages;
  if (p > 1) {
    // A replica whose stage lost its rank cannot run its pipeline: it is dropped whole. Every
    // member knows which from the new world's membership alone; the ranks of such a replica leave,
    // the others re-form once more without them. (Joiners come in whole replicas: see ids_.)
    std::map<int, int> present;  // replica -> its stages present
    for (const int id : ids) ++present[id / p];
    std::vector<int> exclude;
    for (int r = 0; r < next->size(); ++r) {
      if (present[ids[static_cast<std::size_t>(r)] / p] < p) exclude.push_back(r);
    }
    if (!exclude.empty()) {
      const int mine = ids[static_cast<std::size_t>(next->rank())];
      if (present[mine / p] < p) {
        throw Error(
            ErrorCode::Aborted,
            fmt::format("elastic: replica {} lost a stage's rank, and a replica without "
                        "one of its {} stages cannot run its pipeline: it is dropped whole, "
                        "so this rank (stage {}) leaves the job",
                        mine / p, p, mine % p));
      }
      comm::ReformOptions without;
      without.exclude = exclude;
      without.admit_joiners = false;
      std::unique_ptr<comm::Communicator> complete = next->reform(without);
      std::vector<int> kept_ids(static_cast<std::size_t>(complete->size()));
      for (int r = 0; r < complete->size(); ++r) {
        kept_ids[static_cast<std::size_t>(r)] =
            ids[static_cast<std::size_t>(complete->former_ranks()[static_cast<std::size_t>(r)])];
      }
      for (const int r : exclude) lost.push_back(ids[static_cast<std::size_t>(r)]);
      std::sort(lost.begin(), lost.end());
      next = std::move(complete);
      ids = std::move(kept_ids);
    }
  }
  // Everything over the old world goes before it (the caller has taken the outer sync's state
  // and rebuilds it).
  outer_.reset();
  executor_.reset();
  sync_ = nullptr;
  tied_.reset();
  data_.reset();
  pipe_.reset();
  world_ = std::move(next);
  ids_ = std::move(ids);
  broken_ = false;
  pipeline_broken_ = false;
  build_groups();
  build_training();
  if (rank_ == 0 && !cfg_.metrics.empty() && !metrics_.is_open()) {
    metrics_.open(cfg_.metrics, std::ios::app);  // rank 0 of the old world was lost
  }
  return lost;
}

void Job::rebuild_outer(const OuterSync::State& state, std::int64_t steps_done, bool ended) {
  outer_.reset();
  build_outer();
  outer_->import_state(state, steps_done, ended);
}

// Each stage's state goes over its data-parallel group (the ranks of that stage, by replica) from
// the group's rank 0, a survivor: members come before joiners in the re-formed world.
std::int64_t Job::send_state(std::int64_t steps_done) {
  std::vector<std::byte> bytes;
  std::int64_t size = 0;
  const bool sender = data_->rank() == 0;
  if (sender) {
    const nlohmann::json extra = {
        {"ids", ids_},
        {"next_id", next_id_},
        {"generation", world_->generation()},
        {"from_replica", ids_[static_cast<std::size_t>(rank_)] / cfg_.stages},
        {"stage", stage_}};
    bytes = pack_replica_state(cfg_, *model_, *moments_, *outer_, steps_done, extra);
    size = static_cast<std::int64_t>(bytes.size());
  }
  data_->broadcast(&size, 1, DType::I64, 0);
  if (!sender) bytes.resize(static_cast<std::size_t>(size));
  data_->broadcast(bytes.data(), bytes.size(), DType::U8, 0);
  if (sender) {
    fmt::print("elastic: sent the state of step {} ({}, xxh3 {}) to the joiners{}\n", steps_done,
               human_bytes(static_cast<double>(size)), checkpoint_checksum(bytes),
               cfg_.stages > 1 ? fmt::format(" of stage {}", stage_) : std::string());
    std::fflush(stdout);
  }
  // The whole state the joiners received: every stage's.
  std::int64_t total = sender ? size : 0;
  world_->allreduce(&total, &total, 1, DType::I64, ReduceOp::Sum);
  return total;
}

int Job::receive_state() {
  std::int64_t size = 0;
  data_->broadcast(&size, 1, DType::I64, 0);
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  data_->broadcast(bytes.data(), bytes.size(), DType::U8, 0);
  std::int64_t total = 0;  // send_state's sum over the stages
  world_->allreduce(&total, &total, 1, DType::I64, ReduceOp::Sum);
  const nlohmann::json meta = unpack_replica_state(bytes, cfg_, *model_, *moments_, *outer_);
  if (const int from = meta.at("elastic").value("stage", 0); from != stage_) {
    throw Error(ErrorCode::Internal,
                fmt::format("elastic: the joiner of stage {} received the state of stage {}",
                            stage_, from));
  }
  ids_ = meta.at("elastic").at("ids").get<std::vector<int>>();
  next_id_ = meta.at("elastic").at("next_id").get<int>();
  const auto step = meta.at("step").get<int>();
  // What this process now holds, packed the same way: equal bytes mean an equal state.
  const std::vector<std::byte> mine =
      pack_replica_state(cfg_, *model_, *moments_, *outer_, step, meta.at("elastic"));
  const int id = ids_[static_cast<std::size_t>(rank_)];
  fmt::print(
      "elastic: joined as replica {}{} (rank {} of {}, generation {}) after step {}: received {} "
      "from replica {} (weights, AdamW moments and step, outer weights and momentum); the state "
      "held now packs to xxh3 {}\n",
      id / cfg_.stages,
      cfg_.stages > 1 ? fmt::format(" stage {}", id % cfg_.stages) : std::string(), rank_,
      world_->size(), world_->generation(), step, human_bytes(static_cast<double>(size)),
      meta.at("elastic").at("from_replica").get<int>(), checkpoint_checksum(mine));
  std::fflush(stdout);
  return step;
}

void Job::stop_below_min(std::int64_t steps_done) {
  std::string saved;
  if (!cfg_.save.empty()) {
    save_checkpoint(*world_, cfg_, stage_, replica_, *model_, *moments_, steps_done, outer_.get());
    saved = fmt::format(
        " after saving the checkpoint of step {} in {} (continue it with --resume {} "
        "--replicas {})",
        steps_done, cfg_.save.string(), cfg_.save.string(), replicas_);
  }
  throw Error(
      ErrorCode::Unavailable,
      fmt::format("elastic: {} left (replicas {}) after step {}, fewer than "
                  "--min-replicas {}: the job stops{}",
                  plural(replicas_, "replica"), ids_text(), steps_done, cfg_.min_replicas, saved));
}

OuterStepStats Job::elastic_round_end(int step, bool last) {
  const std::span<float> params = model_->params();
  const std::vector<float> at_end(params.begin(), params.end());
  // No overlap: nothing is in flight, so this is local.
  const OuterSync::State before = outer_->export_state();
  OuterStepStats stats;
  bool done = false;  // this rank took the round's outer step
  if (!broken_) {
    maybe_fault("allreduce", step);
    try {
      stats = outer_->end_step(step, params, last);
      done = true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout &&
          e.code() != ErrorCode::Aborted) {
        throw;
      }
      mark_broken(e);
    }
    maybe_fault("outer", step);
  }
  const int most = cfg_.replicas + 2;  // each attempt loses a replica or admits joiners
  for (int attempt = 0;; ++attempt) {
    if (attempt > most) {
      throw Error(ErrorCode::Aborted,
                  fmt::format("elastic: the job kept losing replicas while re-forming after step "
                              "{} ({} attempts): stopping",
                              step + 1, attempt));
    }
    if (broken_) {
      const int before_n = world_->size();
      const OuterSync::State now = outer_->export_state();
      const std::vector<int> lost = adopt_reformed(false);
      rebuild_outer(done ? now : before, done ? step + 1 : step, done && last);
      // What the interrupted round achieved: the outer step counts only if every survivor took
      // it (torchft's commit vote); else it is redone among the survivors.
      std::int64_t all_done = done ? 1 : 0;
      if (!world_ok(
              [&] { world_->allreduce(&all_done, &all_done, 1, DType::I64, ReduceOp::Min); })) {
        continue;
      }
      if (all_done == 0) {
        if (done) {
          std::copy(at_end.begin(), at_end.end(), params.begin());
          rebuild_outer(before, step, false);
          done = false;
        }
        if (!world_ok([&] { stats = outer_->end_step(step, params, last); })) continue;
        done = true;
      }
      if (rank_ == 0) {
        fmt::print(
            "elastic: after step {} lost replica{} {} ({} of {} ranks left); {} go on as "
            "generation {}: replicas {}; the round's outer average {}\n",
            step + 1, replicas_of(lost).size() == 1 ? "" : "s", fmt::join(replicas_of(lost), ","),
            world_->size(), before_n, plural(replicas_, "replica"), world_->generation(),
            ids_text(),
            all_done == 0 ? "was redone among them" : "had completed on every one of them");
        std::fflush(stdout);
        emit({{"type", "elastic"},
              {"event", "lost"},
              {"step", step + 1},
              {"lost", replicas_of(lost)},
              {"replicas", replicas_of(ids_)},
              {"generation", world_->generation()},
              {"redone", all_done == 0}});
      }
      if (replicas_ < cfg_.min_replicas) stop_below_min(step + 1);
    }
    // Processes waiting to join: rank 0 asks the store, everyone goes by its answer. With
    // stages, only whole replicas (stages processes) are admitted; the others wait.
    const auto whole = [&](std::int64_t n) { return n / cfg_.stages * cfg_.stages; };
    std::int64_t waiting = rank_ == 0 ? whole(world_->joiners_waiting()) : 0;
    if (rank_ == 0 && await_joiner_ == step + 1) {
      // Test hook: hold the round boundary (the others wait in the allreduce below, within the
      // timeout) until a replica's joiners wait, so a test's joiners are admitted whatever the
      // machine's load.
      const auto until = Clock::now() + comm::CommOptions::default_timeout() / 2;
      while (waiting == 0 && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        waiting = whole(world_->joiners_waiting());
      }
    }
    if (!world_ok([&] { world_->allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Max); }))
      continue;
    if (waiting == 0) break;
    const OuterSync::State now = outer_->export_state();
    const int before_n = world_->size();
    (void)adopt_reformed(true);
    rebuild_outer(now, step + 1, last);
    std::int64_t state_bytes = 0;
    if (!world_ok([&] { state_bytes = send_state(step + 1); })) continue;
    if (rank_ == 0) {
      fmt::print("elastic: after step {} admitted {} ({} ranks); generation {}: replicas {}\n",
                 step + 1, plural(world_->size() - before_n, "joiner"), world_->size(),
                 world_->generation(), ids_text());
      std::fflush(stdout);
      emit({{"type", "elastic"},
            {"event", "joined"},
            {"step", step + 1},
            {"replicas", replicas_of(ids_)},
            {"generation", world_->generation()},
            {"state_bytes", state_bytes}});  // the state broadcast to the joiners
    }
    break;
  }
  stats.round_ended = true;
  return stats;
}

void Job::emit(const nlohmann::json& record) {
  if (metrics_.is_open()) metrics_ << record.dump() << '\n' << std::flush;
}

// Momentum compression keeps its own copy of AdamW's m (grad_sync.h); after training it must equal
// the optimizer's bit for bit, or what was compressed was not the momentum. One read of the
// moments per run.
void Job::check_momentum() {
  const std::span<const float> mine = sync_->momentum();
  if (mine.empty()) return;
  std::vector<float> m(mine.size()), v(mine.size());
  moments_->read_moments(m, v);
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(m[i]) != std::bit_cast<std::uint32_t>(mine[i])) {
      throw Error(ErrorCode::Internal,
                  fmt::format("momentum compression at stage {}: the executor's momentum of "
                              "parameter {} is {}, the optimizer's {}: their updates differ",
                              stage_, i, mine[i], m[i]));
    }
  }
}

double Job::evaluate() {
  // Replicas share the held-out sequences; the last stages hold the losses.
  const int b = cfg_.microbatch_size;
  const int t = cfg_.ctx;
  std::int64_t total = 0;
  if (dataset_) total = dataset_->eval_sequences();
  world_->allreduce(&total, &total, 1, DType::I64, ReduceOp::Max);  // middle stages have no data
  const std::int64_t per = (total + replicas_ - 1) / replicas_;
  const std::int64_t begin = std::min<std::int64_t>(total, per * replica_);
  const std::int64_t end = std::min<std::int64_t>(total, begin + per);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(b) * static_cast<std::size_t>(t));
  std::vector<std::int32_t> targets(tokens.size());
  double sums[2] = {0, 0};  // loss sum, positions
  std::uint64_t tag = 0;
  for (std::int64_t first = begin; first < end; first += b) {
    const int count = static_cast<int>(std::min<std::int64_t>(b, end - first));
    const auto n = static_cast<std::size_t>(count) * static_cast<std::size_t>(t);
    std::span<std::int32_t> tok(tokens.data(), n), tgt(targets.data(), n);
    if (dataset_) dataset_->fill_eval(first, count, tok, tgt);
    const double loss = executor_->forward_only(
        executor_->first_stage() ? tok : std::span<std::int32_t>{},
        executor_->last_stage() ? tgt : std::span<std::int32_t>{}, count, t, tag++);
    if (executor_->last_stage()) {
      sums[0] += loss;
      sums[1] += static_cast<double>(n);
    }
  }
  world_->allreduce(sums, sums, 2, DType::F64, ReduceOp::Sum);
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

std::vector<std::int32_t> Job::generate() {
  // Decoding through each replica's pipeline (the replicas hold the same weights and draw byte i
  // from the same (seed, i), so they produce the same text; running them all keeps every rank
  // equally busy, and no rank waits for another's generation). The last stage picks each byte
  // (sampling.h: top-k at a temperature, or greedy) and sends it to the first, which extends the
  // context; every stage knows the growing length.
  const Sampler sampler(cfg_.sampling());
  std::vector<std::int32_t> text;
  for (const char c : cfg_.prompt) text.push_back(static_cast<unsigned char>(c));
  if (cfg_.sample_bytes <= 0 || text.empty()) return text;
  // The rank holding the last model stage picks the byte; rank 0 holds the first (the same rank
  // in a V placement or with one rank: then nothing is sent).
  const bool first = executor_->first_stage();
  const bool last = executor_->last_stage();
  const Schedule schedule = job_schedule(cfg_);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  const bool message = last_rank != 0;
  const std::size_t prompt_len = text.size();
  for (int i = 0; i < cfg_.sample_bytes; ++i) {
    const std::size_t len = prompt_len + static_cast<std::size_t>(i);
    const int t = static_cast<int>(std::min<std::size_t>(len, static_cast<std::size_t>(cfg_.ctx)));
    std::span<const std::int32_t> window;
    if (first)
      window =
          std::span<const std::int32_t>(text).subspan(text.size() - static_cast<std::size_t>(t));
    executor_->forward_only(window, {}, 1, t,
                            std::uint64_t{1'000'000} + static_cast<std::uint64_t>(i));
    std::int32_t next = 0;
    if (last) {
      const std::span<const float> logits =
          model_->logits(0).subspan(static_cast<std::size_t>(t - 1) * 256, 256);
      next = sampler.next(logits, static_cast<std::uint64_t>(i));
      if (message)
        pipe_->send(&next, sizeof next, 0,
                    std::uint64_t{2'000'000} + static_cast<std::uint64_t>(i));
    }
    if (first) {
      if (message)
        pipe_->recv(&next, sizeof next, last_rank,
                    std::uint64_t{2'000'000} + static_cast<std::uint64_t>(i));
      text.push_back(next);
    }
  }
  return text;
}

void Job::run() {
  const auto t0 = Clock::now();
  setup();
  const int p = cfg_.stages;
  const std::int64_t seqs = static_cast<std::int64_t>(cfg_.microbatches) * cfg_.microbatch_size;
  const double tokens_per_step = static_cast<double>(seqs * cfg_.replicas * cfg_.ctx);
  // A joiner arrives at a round boundary of a running job: no start-up collective for it.
  if (!cfg_.join) {
    world_->allreduce(activations_.data(), activations_.data(), activations_.size(), DType::F64,
                      ReduceOp::Sum);
  }
  const auto per_stage = [&](std::size_t k) {  // whole numbers, summed exactly in doubles
    const auto stages = static_cast<std::size_t>(p);
    std::vector<std::int64_t> v(stages);
    for (std::size_t s = 0; s < stages; ++s) v[s] = std::llround(activations_[k * stages + s]);
    return v;
  };
  double act_bytes[2] = {0, 0};  // one replica's resident activation slots: with, without offload
  const auto slots = per_stage(0), slots_without = per_stage(1), slot_bytes = per_stage(2);
  for (std::size_t s = 0; s < slots.size(); ++s) {
    act_bytes[0] += static_cast<double>(slots[s] * slot_bytes[s]);
    act_bytes[1] += static_cast<double>(slots_without[s] * slot_bytes[s]);
  }
  if (rank_ == 0) {
    const GptConfig g = model_config(cfg_);
    const auto& corpus = dataset_->corpus();
    fmt::print(
        "strait train: {} = {} x {}, {} schedule{}, {} of {} x {} bytes per replica per step\n",
        plural(cfg_.world_size(), "rank"), plural(p, "stage"), plural(cfg_.replicas, "replica"),
        schedule_kind_name(cfg_.schedule),
        model_->chunks() > 1 ? fmt::format(" ({} model chunks per rank: {} pipeline stages)",
                                           model_->chunks(), p * model_->chunks())
                             : std::string(),
        plural(cfg_.microbatches, "microbatch", "microbatches"),
        plural(cfg_.microbatch_size, "sequence"), cfg_.ctx);
    fmt::print(
        "model: GPT-2, {} layers, dim {}, {} heads, context {}, {:.2f} M parameters; AdamW "
        "lr {} (warm-up {} steps), weight decay {}\n",
        g.layers, g.dim, g.heads, g.ctx, static_cast<double>(g.num_params()) / 1e6, cfg_.lr,
        cfg_.warmup_steps, cfg_.weight_decay);
    fmt::print("data: {} ({} train / {} held-out)\n", cfg_.data.string(),
               human_bytes(static_cast<double>(corpus.train().size())),
               human_bytes(static_cast<double>(corpus.eval().size())));
    fmt::print("optimizer moments (--offload-optimizer {}): rank 0's {}; update on {}\n",
               offload::to_string(cfg_.offload_optimizer), moments_->describe(),
               plural(moments_->threads(), "thread"));
    if (cfg_.offload_activations != ActivationOffload::None) {
      fmt::print(
          "activations: offloaded to {} (prefetch {}): {} per replica in activation slots "
          "{} per stage, instead of {} in {}\n",
          to_string(cfg_.offload_activations), cfg_.offload_prefetch, human_bytes(act_bytes[0]),
          fmt::join(slots, "/"), human_bytes(act_bytes[1]), fmt::join(slots_without, "/"));
    } else {
      fmt::print("activations: {} per replica in activation slots {} per stage\n",
                 human_bytes(act_bytes[0]), fmt::join(slots, "/"));
    }
    if (outer_) {
      fmt::print(
          "DiLoCo: {} inner steps per round, no gradient average between replicas inside a "
          "round; pseudo-gradients averaged with codec {}{}, outer Nesterov lr {} momentum {}{}\n",
          cfg_.outer_steps, outer_->codec_spec(),
          outer_->codec_spec() == "none" ? "" : " (error feedback per stage)", cfg_.outer_lr,
          cfg_.outer_momentum,
          cfg_.outer_overlap ? "; overlapped: each round's average applied one round late" : "");
      if (cfg_.outer_fragments > 1) {
        fmt::print(
            "fragments: {} parameter groups per stage, fragment k syncing {} steps after "
            "fragment 0\n",
            cfg_.outer_fragments, fmt::format("k x {}", cfg_.outer_steps / cfg_.outer_fragments));
      }
      fmt::print("outer state (--outer-state {}): {}\n", offload::to_string(cfg_.outer_state),
                 outer_->on_store()
                     ? fmt::format("a file per rank in {}, in RAM during the outer step only",
                                   cfg_.offload_dir.string())
                     : std::string("pinned host RAM"));
    }
    if (!cfg_.codec.empty()) {
      fmt::print("{} average: {} after {} uncompressed, with error feedback per stage{}\n",
                 to_string(cfg_.compress), cfg_.codec_spec(),
                 plural(cfg_.codec_warmup_steps, "step"),
                 cfg_.freeze_variance_after() > 0 ? "; AdamW's variance frozen from then on" : "");
    }
    std::fflush(stdout);
  }

  std::vector<std::int32_t> tokens, targets;
  const auto n = static_cast<std::size_t>(seqs * cfg_.ctx);
  if (executor_->first_stage()) tokens.resize(n);
  if (executor_->last_stage()) targets.resize(n);
  std::vector<std::int32_t> scratch(n);
  double train_s = 0;  // steps only: evaluations are timed apart
  // --- checkpoints: resume ---
  int first_step = 0;
  // A joiner is admitted at the end of step joined_after (after its outer step, before the step's
  // job-wide figures): it takes part from there on, in that step's figures (contributing none).
  int joined_after = -1;
  if (cfg_.join) {
    joined_after = receive_state();
    first_step = joined_after - 1;
  }
  if (!cfg_.resume.empty()) {
    const Resumed resumed = load_checkpoint(cfg_, *model_, *moments_, outer_.get(), replica_);
    first_step = static_cast<int>(resumed.step);
    if (rank_ == 0) {
      fmt::print("resumed from {} at step {}\n", cfg_.resume.string(), first_step);
      for (const std::string& note : resumed.notes) fmt::print("note: {}\n", note);
      std::fflush(stdout);
    }
  }
  std::int64_t saved_step = -1;
  const auto save = [&](std::int64_t step) {
    const auto start = Clock::now();
    save_checkpoint(*world_, cfg_, stage_, replica_, *model_, *moments_, step, outer_.get());
    saved_step = step;
    if (rank_ == 0) {
      fmt::print("saved checkpoint of step {} in {} ({:.2f} s)\n", step, cfg_.save.string(),
                 std::chrono::duration<double>(Clock::now() - start).count());
      std::fflush(stdout);
    }
  };
  // --- end checkpoints ---
  double outer_bytes = 0, outer_wait_s = 0, outer_round_bytes = 0;  // DiLoCo's outer step
  int round_first = first_step;                                     // the round's first step
  for (int step = first_step; step < cfg_.steps; ++step) {
    const auto step_start = Clock::now();
    const bool joining = step + 1 == joined_after;  // computed by the others before this joined
    if (dataset_ && !joining) {
      dataset_->fill_train(step, replica_ * seqs, static_cast<int>(seqs),
                           tokens.empty() ? std::span<std::int32_t>(scratch) : tokens,
                           targets.empty() ? std::span<std::int32_t>(scratch) : targets);
    }
    maybe_fault("inner", step);
    const double lr = learning_rate(cfg_, step);
    kernels::AdamWHyper hyper;
    hyper.lr = lr;
    hyper.beta1 = cfg_.beta1;
    hyper.beta2 = cfg_.beta2;
    hyper.weight_decay = cfg_.weight_decay;
    hyper.freeze_variance_after = cfg_.freeze_variance_after();
    if (cfg_.compress == CompressTarget::Momentum && !cfg_.codec.empty() && cfg_.replicas > 1 &&
        step == cfg_.codec_warmup_steps) {
      // The momentum compression starts from the optimizer's own m (v is read and dropped).
      const std::size_t params = model_->params().size();
      std::vector<float> m(params), v(params);
      moments_->read_moments(m, v);
      sync_->set_momentum(std::move(m));
    }
    StepStats st;
    const auto compute = [&] {
      st = executor_->run_step(step, tokens, targets,
                               [&](std::span<float> params, std::span<const float> grads) {
                                 moments_->step(params, grads, groups_, hyper, step + 1);
                               });
    };
    bool computed = false;  // this rank's part of the step ran to the end
    if (joining || pipeline_broken_) {
      // Nothing to compute: admitted after this step, or this replica lost a stage.
    } else if (!cfg_.elastic || cfg_.stages == 1) {
      compute();
      computed = true;
    } else {
      // With stages, a lost rank of this replica breaks the step itself: the replica is then
      // dropped at the round's end, and its ranks wait for it without computing.
      const bool was_broken = broken_;
      broken_ = false;
      computed = world_ok(compute);
      if (!computed) pipeline_broken_ = true;
      broken_ = broken_ || was_broken;
    }
    // DiLoCo: at a round's end, the outer step (it may replace the weights).
    OuterStepStats outer;
    double outer_s = 0;
    if (outer_ && !joining) {
      const auto outer_start = Clock::now();
      const bool last = step + 1 == cfg_.steps;
      if (cfg_.elastic && ((step + 1) % cfg_.outer_steps == 0 || last)) {
        outer = elastic_round_end(step, last);
      } else {
        outer = outer_->end_step(step, model_->params(), last);
      }
      outer_s = std::chrono::duration<double>(Clock::now() - outer_start).count();
    }
    // Job-wide: the loss (last stages, averaged over replicas), the bytes all-reduce sent (of
    // them, those between replicas in DiLoCo's outer step) and the mean wait for the outer step.
    const double ranks = world_->size();
    // Elastic: the loss is a sum over the replicas that computed the step (agg[5] counts them:
    // not a joiner in the step it joined at, nor a replica whose pipeline step was broken or
    // aborted), divided afterwards.
    const bool counted = executor_->last_stage() && computed;
    double agg[6] = {counted ? (cfg_.elastic ? st.loss : st.loss / cfg_.replicas) : 0.0,
                     static_cast<double>(st.allreduce_bytes + outer.data_bytes + outer.tied_bytes),
                     st.offload_wait_s / ranks,
                     static_cast<double>(outer.data_bytes),
                     outer_s / ranks,
                     counted ? 1.0 : 0.0};
    if (!cfg_.elastic) {
      world_->allreduce(agg, agg, 5, DType::F64, ReduceOp::Sum);
    } else {
      // Alone until the round's end when the world is broken: this replica's own figures.
      (void)world_ok([&] { world_->allreduce(agg, agg, 6, DType::F64, ReduceOp::Sum); });
      agg[0] = agg[5] > 0 ? agg[0] / agg[5] : 0.0;
    }
    outer_bytes += agg[3];
    outer_wait_s += agg[4];
    const double dt = std::chrono::duration<double>(Clock::now() - step_start).count();
    train_s += dt;
    const offload::AdamWStepStats opt = moments_->last_step_stats();
    if (rank_ == 0) {
      if ((step + 1) % cfg_.log_every == 0 || step == 0 || step + 1 == cfg_.steps) {
        fmt::print(
            "step {:4d}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:7.0f} tok/s | "
            "allreduce {} | {:.0f} ms\n",
            step + 1, cfg_.steps, agg[0], lr, st.grad_norm, tokens_per_step / dt,
            human_bytes(agg[1]), dt * 1e3);
        std::fflush(stdout);
      }
      nlohmann::json record = {
          {"type", "step"},
          {"step", step + 1},
          {"loss", agg[0]},
          {"lr", lr},
          {"grad_norm", st.grad_norm},
          {"tokens_per_s", tokens_per_step / dt},
          {"allreduce_bytes", static_cast<std::uint64_t>(agg[1])},
          {"offload_wait_s", agg[2]},  // mean over ranks
          {"seconds", dt},
          // Rank 0's optimizer step: all of it, the update, and the wait for its I/O (nvme).
          {"optimizer_seconds", opt.total_s},
          {"optimizer_compute_seconds", opt.compute_s},
          {"optimizer_io_wait_seconds", opt.io_wait_s},
          {"optimizer_io_bytes", opt.bytes_read + opt.bytes_written},
          {"outer_bytes", static_cast<std::uint64_t>(agg[3])},  // between replicas
          {"outer_seconds", agg[4]}};                           // mean over ranks
      // Elastic: how many replicas computed the step (the loss is their mean); a rank whose world
      // is broken counts only its own until the round's end.
      if (cfg_.elastic) record["replicas_in_step"] = static_cast<int>(agg[5]);
      emit(record);
      if (outer.round_ended) {
        // Who is in: the replicas of the data-parallel groups that averaged this round.
        const int in = data_ ? data_->size() : 1;
        const std::string who =
            cfg_.elastic
                ? fmt::format("replicas {} in ({} of {}, generation {})", ids_text(), in,
                              cfg_.replicas, world_->generation())
                : fmt::format("replicas {}-{} in ({} of {})", 0, in - 1, in, cfg_.replicas);
        fmt::print(
            "round {} (steps {}-{}): {}; outer average{} {} since the "
            "last round, {} applied\n",
            outer.round + 1, round_first + 1, step + 1, who,
            cfg_.outer_fragments > 1 ? fmt::format(" of {} of {} fragments", outer.fragments_synced,
                                                   cfg_.outer_fragments)
                                     : std::string(),
            human_bytes(outer_round_bytes + agg[3]), plural(outer.applied_rounds, "outer update"));
        std::fflush(stdout);
        emit({{"type", "round"},
              {"round", outer.round + 1},
              {"first_step", round_first + 1},
              {"last_step", step + 1},
              {"replicas_in", in},
              {"fragments_synced", outer.fragments_synced},
              {"outer_bytes", static_cast<std::uint64_t>(outer_round_bytes + agg[3])},
              {"applied_rounds", outer.applied_rounds}});
      }
    }
    if (outer.round_ended) {
      round_first = step + 1;
      outer_round_bytes = 0;
    } else {
      outer_round_bytes += agg[3];
    }
    if (cfg_.eval_every > 0 && (step + 1) % cfg_.eval_every == 0 && step + 1 != cfg_.steps) {
      const double eval_loss = evaluate();
      if (rank_ == 0) {
        fmt::print("eval at step {}: loss {:.4f} nats/byte ({:.4f} bits/byte)\n", step + 1,
                   eval_loss, bits_per_byte(eval_loss));
        std::fflush(stdout);
        emit({{"type", "eval"}, {"step", step + 1}, {"eval_loss", eval_loss}});
      }
    }
    if (!cfg_.save.empty() && cfg_.save_every > 0 && (step + 1) % cfg_.save_every == 0) {
      save(step + 1);
    }
  }
  if (!cfg_.save.empty() && saved_step != std::max(first_step, cfg_.steps)) {
    save(std::max(first_step, cfg_.steps));
  }
  check_momentum();
  if (cfg_.elastic) {
    // Every replica ends on the global weights: each says what it holds.
    const std::span<const float> w = model_->params();
    const int id = ids_[static_cast<std::size_t>(rank_)];
    fmt::print(
        "elastic: replica {}{} (rank {} of {}, generation {}) ends after step {} with "
        "weights xxh3 {}\n",
        id / cfg_.stages,
        cfg_.stages > 1 ? fmt::format(" stage {}", id % cfg_.stages) : std::string(), rank_,
        world_->size(), world_->generation(), cfg_.steps, checkpoint_checksum(std::as_bytes(w)));
    std::fflush(stdout);
  }
  if (!cfg_.trace.empty()) write_trace();
  const double tps = train_s > 0 ? tokens_per_step * cfg_.steps / train_s : 0.0;
  const double eval_loss = evaluate();
  // Rank 0 (stage 0) holds the corpus: the baselines come from its counts, scored on the same
  // held-out positions as the model.
  ByteBaselines baselines;
  if (rank_ == 0) {
    baselines = held_out_baselines(*dataset_, kBaselineSmoothing);
    fmt::print("done: {} in {:.1f} s ({:.0f} tok/s)\n", plural(cfg_.steps, "step"), train_s, tps);
    if (outer_) {
      fmt::print(
          "DiLoCo: {} between replicas in the outer steps; {:.1f} s waiting for them (mean over "
          "ranks), compute utilisation {:.1f}%\n",
          human_bytes(outer_bytes), outer_wait_s,
          train_s > 0 ? 100.0 * (1.0 - outer_wait_s / train_s) : 100.0);
    }
    print_held_out(eval_loss, baselines);
    std::fflush(stdout);
    emit({{"type", "eval"}, {"step", cfg_.steps}, {"eval_loss", eval_loss}});
  }
  const std::vector<std::int32_t> sample = generate();
  world_->barrier();  // nobody tears down its endpoints while others still send
  if (rank_ == 0) {
    const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (cfg_.sample_bytes > 0) {  // --sample-bytes 0 asks for none
      fmt::print("sample ({}; {} bytes after {:?}):\n{}\n", cfg_.sampling().describe(),
                 cfg_.sample_bytes, cfg_.prompt, printable(sample));
    }
    fmt::print("total time {:.1f} s\n", total_s);
    std::fflush(stdout);
    emit({{"type", "summary"},
          {"eval_loss", eval_loss},
          {"eval_bits_per_byte", bits_per_byte(eval_loss)},
          {"eval_positions", baselines.positions},
          // nats per byte; *_held_out: add-alpha cross-entropy on the eval positions.
          {"baselines",
           {{"smoothing_alpha", baselines.alpha},
            {"unigram_entropy", baselines.unigram_entropy},
            {"bigram_entropy", baselines.bigram_entropy},
            {"unigram_held_out", baselines.unigram_held_out},
            {"bigram_held_out", baselines.bigram_held_out}}},
          {"sampling", cfg_.sampling().describe()},
          {"seconds", total_s},
          {"train_seconds", train_s},
          {"tokens_per_s", tps},
          {"codec", cfg_.codec_spec()},
          {"codec_warmup_steps", cfg_.codec_warmup_steps},
          {"freeze_variance_after", cfg_.freeze_variance_after()},
          {"compress", to_string(cfg_.compress)},
          {"outer_steps", cfg_.outer_steps},
          {"outer_lr", cfg_.outer_lr},
          {"outer_momentum", cfg_.outer_momentum},
          {"outer_codec", outer_ ? outer_->codec_spec() : std::string()},
          {"outer_overlap", cfg_.outer_overlap},
          {"outer_fragments", cfg_.outer_fragments},
          {"outer_state", offload::to_string(cfg_.outer_state)},
          {"outer_bytes", static_cast<std::uint64_t>(outer_bytes)},
          // Time in inner steps / training time (the outer step's wait, mean over ranks, is not).
          {"compute_utilisation", train_s > 0 ? 1.0 - outer_wait_s / train_s : 1.0},
          {"offload_optimizer", offload::to_string(cfg_.offload_optimizer)},
          {"offload_activations", to_string(cfg_.offload_activations)},
          {"offload_prefetch", cfg_.offload_prefetch},
          {"activation_slots", slots},
          {"activation_slots_without_offload", slots_without},
          {"activation_bytes", act_bytes[0]},
          {"activation_bytes_without_offload", act_bytes[1]},
          {"sample", printable(sample)}});
  }
}

}  // namespace

void TrainConfig::validate() const {
  if (stages < 1 || replicas < 1) {
    throw bad(
        fmt::format("--stages {} and --replicas {} must both be at least 1", stages, replicas));
  }
  if (stages > layers) {
    throw bad(
        fmt::format("--stages {} is more than --layers {}: every stage needs at least one "
                    "layer; use at most {} stages or more layers",
                    stages, layers, layers));
  }
  model_config(*this).validate();
  if (microbatches < 1 || microbatch_size < 1) {
    throw bad(fmt::format("--microbatches {} and --microbatch-size {} must be at least 1",
                          microbatches, microbatch_size));
  }
  // --- chunks: the schedule, and the layers it splits into stages x chunks model stages ---
  sched::Schedule plan;
  try {
    plan = sched::make_schedule(schedule, stages, microbatches, chunks);
  } catch (const Error& e) {
    throw bad(fmt::format("--schedule {} --stages {} --microbatches {} --chunks {}: {}",
                          sched::schedule_kind_name(schedule), stages, microbatches, chunks,
                          e.message()));
  }
  if (sched::stage_count(plan) > layers) {
    throw bad(fmt::format(
        "--schedule {} with --chunks {} splits the model into {} stages x {} chunks = {} "
        "pipeline stages but --layers is {}: every stage needs at least one layer; use --layers "
        ">= {}{}",
        sched::schedule_kind_name(schedule), plan.chunks, stages, plan.chunks,
        sched::stage_count(plan), layers, sched::stage_count(plan),
        schedule == sched::ScheduleKind::Interleaved && layers >= stages
            ? fmt::format(", or --chunks {} (at most --layers / --stages)", layers / stages)
            : std::string()));
  }
  const bool local_tied_copies =
      sched::stage_count(plan) > 1 &&
      sched::rank_of(plan, 0) == sched::rank_of(plan, sched::stage_count(plan) - 1);
  if (outer_steps > 0 && local_tied_copies) {
    throw bad(fmt::format(
        "--outer-steps with --schedule {} --stages {}: the first and the last model stage are "
        "chunks of one rank, whose two copies of the tied embedding DiLoCo's outer step does not "
        "keep equal; use --schedule 1f1b, zb-h1 or interleaved with --stages >= 2",
        sched::schedule_kind_name(schedule), stages));
  }
  // --- end chunks ---
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
  if (sample_bytes < 0 || eval_sequences < 0 || eval_every < 0) {
    throw bad("--sample-bytes, --eval-sequences and --eval-every must be >= 0");
  }
  sampling().validate();
  if (sample_bytes > 0 && prompt.empty()) {
    throw bad(
        "--prompt is empty: the sample needs at least one byte to start from (or pass "
        "--sample-bytes 0)");
  }
  if (!(grad_clip >= 0)) throw bad(fmt::format("--grad-clip {} must be >= 0 (0: off)", grad_clip));
  if (blas_threads < 0) {
    throw bad(fmt::format("--blas-threads {} must be >= 0 (0: cores / local ranks)", blas_threads));
  }
  if (log_every < 1) throw bad(fmt::format("--log-every {} must be at least 1", log_every));
  if (codec.empty() && !codec_args.empty()) {
    throw bad(fmt::format("--codec-args {} given without --codec: name the codec they are for",
                          codec_args));
  }
  if (offload_prefetch < 0) {
    throw bad(
        fmt::format("--offload-prefetch {} must be >= 0 (computes between a reload and its "
                    "backward)",
                    offload_prefetch));
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
  if (outer_steps < 0)
    throw bad(fmt::format("--outer-steps {} must be >= 0 (0: off)", outer_steps));
  if (outer_steps == 0 && (outer_overlap || outer_codec != "none" || outer_fragments != 1 ||
                           outer_state != offload::OptimizerOffload::Cpu)) {
    throw bad(
        "--outer-overlap, --outer-codec, --outer-fragments and --outer-state are DiLoCo's: pass "
        "--outer-steps H (inner steps per round) to turn it on");
  }
  if (outer_steps > 0) {
    sched::validate(outer());
    if (!codec.empty()) {
      throw bad(fmt::format(
          "--codec {} compresses the per-step gradient average, which DiLoCo (--outer-steps {}) "
          "does not have: compress the outer average with --outer-codec instead",
          codec, outer_steps));
    }
  }
  // "auto": the codec of the STRAIT_TUNE_FILE rules (`strait tune`), checked when they are read.
  if (!codec.empty() && codec != "auto") (void)comm::canonical_codec_spec(codec_spec());
  (void)comm::CommOptions::default_timeout();  // a bad STRAIT_TIMEOUT_S fails here, once
  check_memory(*this);
  if (offload_optimizer == offload::OptimizerOffload::Nvme ||
      offload_activations == ActivationOffload::Nvme ||
      (outer_steps > 0 && outer_state == offload::OptimizerOffload::Nvme)) {
    check_writable(offload_dir);
  }
  // --- checkpoints ---
  if (save_every < 0)
    throw bad(fmt::format("--save-every {} must be >= 0 (0: at the end)", save_every));
  if (save_every > 0 && save.empty())
    throw bad("--save-every needs --save DIR: name the directory");
  if (!codec.empty() && (!save.empty() || !resume.empty())) {
    throw bad(
        "--codec with --save or --resume: a checkpoint does not hold the codec's error-feedback "
        "state, so a resumed run would not continue the same training; drop --codec");
  }
  if (outer_steps > 0 && outer_codec != "none" && (!save.empty() || !resume.empty())) {
    throw bad(fmt::format(
        "--outer-codec {} with --save or --resume: a lossy outer average keeps error-feedback "
        "residuals in the communicator, which a checkpoint does not hold, so a resumed run would "
        "not continue the same training; use --outer-codec none with checkpoints",
        outer_codec));
  }
  if (join && !elastic) throw bad("--join joins a running --elastic job: pass --elastic too");
  if (min_replicas != 1 && !elastic)
    throw bad("--min-replicas is the floor of an --elastic job: pass --elastic too");
  if (min_replicas < 1 || min_replicas > replicas) {
    throw bad(fmt::format("--min-replicas {} must be between 1 and --replicas {}", min_replicas,
                          replicas));
  }
  if (elastic) {
    if (outer_steps == 0) {
      throw bad(
          "--elastic re-forms the job at DiLoCo's round boundaries: pass --outer-steps H (inner "
          "steps per round)");
    }
    if (outer_overlap || outer_fragments != 1) {
      throw bad(
          "--elastic with --outer-overlap or --outer-fragments: a re-formation would have to "
          "settle averages still in flight over a world that lost ranks; drop them with "
          "--elastic");
    }
    if (eval_every > 0) {
      throw bad(
          "--eval-every with --elastic: an evaluation between rounds is a collective that a lost "
          "replica would break outside a round boundary; drop --eval-every (the end of the run "
          "still evaluates)");
    }
  }
  if (!save.empty()) check_save_dir(save);
  if (!resume.empty() && !std::filesystem::is_directory(resume)) {
    throw bad(
        fmt::format("--resume {} is not a directory: pass a --save directory of an earlier "
                    "run or one of its step-N directories",
                    resume.string()));
  }
  // --- end checkpoints ---
  if (!trace.empty()) {
    const std::ofstream probe(trace, std::ios::app);
    if (!probe) {
      throw bad(fmt::format("cannot write --trace {}: {}; pass a writable path", trace.string(),
                            std::strerror(errno)));
    }
  }
  if (!metrics.empty()) {
    const std::ofstream probe(metrics, std::ios::app);
    if (!probe) {
      throw bad(fmt::format("cannot write --metrics {}: {}; pass a writable path", metrics.string(),
                            std::strerror(errno)));
    }
  }
}

std::int64_t TrainConfig::freeze_variance_after() const {
  const bool frozen = freeze_variance == FreezeVariance::On || compress == CompressTarget::Momentum;
  return !codec.empty() && frozen ? codec_warmup_steps : 0;
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

OuterOptions TrainConfig::outer() const {
  OuterOptions o;
  o.outer_steps = outer_steps;
  o.lr = outer_lr;
  o.momentum = outer_momentum;
  o.codec = outer_codec;
  o.overlap = outer_overlap;
  o.fragments = outer_fragments;
  return o;
}

SamplingOptions TrainConfig::sampling() const {
  SamplingOptions o;
  o.greedy = greedy;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = sample_seed;
  return o;
}

std::string TrainConfig::codec_spec() const {
  if (codec.empty() || codec_args.empty()) return codec;
  return codec + ":" + codec_args;
}

double learning_rate(const TrainConfig& c, std::int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / c.warmup_steps;
  const double span = std::max<std::int64_t>(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

void run_training_rank(const TrainConfig& config) {
  Job job(config);
  job.run();
}

}  // namespace strait::tools
