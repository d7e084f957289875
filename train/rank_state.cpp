#include "train/rank_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "kernels/gemm.h"
#include "model/corpus.h"
#include "offload/activation_store.h"
#include "offload/optimizer_offload.h"
#include "offload/swap_store.h"
#include "scheduler/schedule_trace.h"
#include "scheduler/schedule_validate.h"
#include "train/data_parallel_sync.h"
#include "train/plan_profile.h"

namespace strait::train {
// The reference model and the scheduler are this application's vocabulary.
using namespace strait::sched;  // NOLINT(google-build-using-namespace)

namespace {

using kernels::DType;
using kernels::ReduceOp;

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
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

}  // namespace

void RankState::build_groups() {
  rank = world->rank();
  // --placement: which slot this rank runs; the groups below follow it (split's key orders each
  // group's ranks by stage and by replica).
  const Slot slot = cfg.slot_of_rank(rank);
  stage = slot.stage;
  replica = slot.replica;
  replicas = world->size() / cfg.stages;
  pipe = world->split(replica, stage);
  data = world->split(stage, replica);
  const Schedule schedule = job_schedule(cfg);
  validate_schedule(schedule);
  // The ranks holding the first and the last model stage sum the tied embedding's gradient; in a
  // V placement both are rank 0, which sums its two copies in place (RankModel::tied_copy).
  const int first_rank = rank_of(schedule, 0);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  const bool tied_member = first_rank != last_rank && (stage == first_rank || stage == last_rank);
  tied = world->split(tied_member ? replica : -1, stage);
}

void RankState::build_training() {
  const int p = cfg.stages;
  const Schedule schedule = job_schedule(cfg);
  PipelineComms comms{pipe.get(), data.get(), tied.get()};
  // DiLoCo: inside a round each replica steps on its own gradients (the tied embedding is still
  // summed and the norm clipped inside the replica); the replicas meet only in the outer step.
  const PipelineComms inner_comms =
      cfg.outer_steps > 0 ? PipelineComms{pipe.get(), nullptr, tied.get()} : comms;
  executor = std::make_unique<PipelineExecutor>(schedule, stage, model->pipeline_stages(), comms,
                                                cfg.microbatch_size, cfg.ctx);
  auto sync = std::make_unique<DataParallelSync>(
      inner_comms, stage, p, gradient_layout(*model),
      GradientCompression{cfg.codec_spec(), cfg.codec_warmup_steps,
                          cfg.compress == CompressTarget::Momentum, cfg.beta1},
      cfg.grad_clip, moments.get());
  executor->set_gradient_sync(std::move(sync));
  if (cfg.offload_activations != ActivationOffload::None)
    executor->set_activation_store(make_activation_store(cfg, rank));
  executor->set_tracing(!cfg.trace.empty() && replica == 0);
}

void RankState::build_outer() {
  const PipelineComms comms{pipe.get(), data.get(), tied.get()};
  std::optional<GradientLayout::Range> tied_range;
  if (const auto t = model->tied_wte(); t && cfg.stages > 1)
    tied_range = GradientLayout::Range{t->offset, t->count};
  std::shared_ptr<offload::SwapStore> store;
  if (cfg.outer_state == offload::OptimizerOffload::Nvme) {
    offload::SwapStoreOptions so;
    so.dir = cfg.offload_dir;
    so.tag = fmt::format("outer-rank{}", rank);
    store = std::make_shared<offload::SwapStore>(so);
  }
  outer = std::make_unique<OuterSync>(comms, stage, model->params(), tied_range, cfg.outer(),
                                      nullptr, std::move(store));
}

void RankState::build(int local_world_size) {
  build_groups();
  const Schedule schedule = job_schedule(cfg);
  // The ranks holding the first and the last model stage (both rank 0 in a V placement).
  const int first_rank = rank_of(schedule, 0);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  int n = cfg.blas_threads;
  if (n == 0) {
    n = std::max(
        1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world_size));
  }
  kernels::set_gemm_threads(n);
  threads = static_cast<unsigned>(n);

  // Only the first stage reads tokens and only the last reads targets; world rank 0 holds the
  // corpus too (it prints the baselines), whatever slot --placement gives it.
  if (stage == first_rank || stage == last_rank || rank == 0) {
    DatasetOptions dopt;
    dopt.context = cfg.ctx;
    dopt.seed = cfg.seed;
    dopt.max_eval_sequences = cfg.eval_sequences;
    dataset.emplace(ByteCorpus::load(cfg.data), dopt);
  }
  rss_before_model = process_memory_bytes(false);  // the planner's memory figure starts here
  model = std::make_unique<RankModel>(cfg.gpt(), schedule, stage, cfg.microbatch_size, cfg.seed, 1,
                                      cfg.stage_layers);
  offload::OptimizerOffloadOptions mopt;
  mopt.where = cfg.offload_optimizer;
  mopt.threads = threads;  // the update shares the cores as GEMMs do
  mopt.file.dir = cfg.offload_dir;
  mopt.file.tag = fmt::format("rank{}", rank);
  moments = offload::make_adamw_state(model->params().size(), mopt);
  groups = decay_groups(*model, cfg.weight_decay);
  build_training();
  if (cfg.outer_steps > 0) build_outer();
}

std::vector<double> RankState::activation_figures() const {
  // Activation memory of replica 0, per stage: resident slots and bytes, with and without offload.
  const int p = cfg.stages;
  std::vector<double> figures(3 * static_cast<std::size_t>(p), 0.0);
  if (replica == 0) {
    const auto at = [&](std::size_t k) -> double& {
      return figures[k * static_cast<std::size_t>(p) + static_cast<std::size_t>(stage)];
    };
    // Per rank: all its chunks' slots, and the bytes of one slot (the chunks' mean: a slot of
    // a chunk with the embedding or the head is larger).
    const Schedule plain = make_schedule(cfg.schedule, p, cfg.microbatches, cfg.chunks);
    double without = 0;
    for (int c = 0; c < model->chunks(); ++c)
      without += peak_stashed_microbatches_of_stage(plain, model->stage(c));
    at(0) = model->slots();
    at(1) = without;
    at(2) = static_cast<double>(model->slot_bytes()) / model->slots();
  }
  return figures;
}

// Every rank's trace records (replica 0's; the others have none) to rank 0, which writes the file.
void RankState::write_trace() {
  constexpr std::size_t kFields = 7;
  std::vector<double> mine;
  for (const TraceRecord& r : executor->take_trace()) {
    mine.insert(mine.end(), {static_cast<double>(r.rank), static_cast<double>(r.step),
                             static_cast<double>(static_cast<int>(r.action.kind)),
                             static_cast<double>(r.action.stage),
                             static_cast<double>(r.action.microbatch), r.start_us, r.end_us});
  }
  const auto n = static_cast<std::size_t>(world->size());
  std::vector<std::int64_t> counts(n);
  const auto count = static_cast<std::int64_t>(mine.size());
  world->allgather(&count, counts.data(), 1, DType::I64);
  std::vector<std::size_t> sizes(counts.begin(), counts.end());
  std::size_t total = 0;
  for (std::size_t c : sizes) total += c;
  std::vector<double> all(total);
  world->allgather_v(mine.data(), all.data(), sizes, DType::F64);
  if (rank != 0) return;
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
      std::string(schedule_kind_name(cfg.schedule)), cfg.stages, cfg.microbatches,
      job_schedule(cfg).chunks,
      cfg.offload_activations == ActivationOffload::None ? -1 : cfg.offload_prefetch};
  std::ofstream out(cfg.trace, std::ios::trunc);
  out << chrome_trace_json(info, records);
  out.close();
  if (!out) throw bad(fmt::format("cannot write --trace {}", cfg.trace.string()));
  fmt::print("wrote the trace of {} pipeline actions to {}\n", records.size(), cfg.trace.string());
}

double RankState::evaluate() {
  // Replicas share the held-out sequences; the last stages hold the losses.
  const int b = cfg.microbatch_size;
  const int t = cfg.ctx;
  std::int64_t total = 0;
  if (dataset) total = dataset->eval_sequences();
  world->allreduce(&total, &total, 1, DType::I64, ReduceOp::Max);  // middle stages have no data
  const std::int64_t per = (total + replicas - 1) / replicas;
  const std::int64_t begin = std::min<std::int64_t>(total, per * replica);
  const std::int64_t end = std::min<std::int64_t>(total, begin + per);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(b) * static_cast<std::size_t>(t));
  std::vector<std::int32_t> targets(tokens.size());
  double sums[2] = {0, 0};  // loss sum, positions
  std::uint64_t tag = 0;
  for (std::int64_t first = begin; first < end; first += b) {
    const int count = static_cast<int>(std::min<std::int64_t>(b, end - first));
    const auto n = static_cast<std::size_t>(count) * static_cast<std::size_t>(t);
    std::span<std::int32_t> tok(tokens.data(), n), tgt(targets.data(), n);
    if (dataset) dataset->fill_eval(first, count, tok, tgt);
    const double loss = executor->forward_only(
        executor->first_stage() ? tok : std::span<std::int32_t>{},
        executor->last_stage() ? tgt : std::span<std::int32_t>{}, count, t, tag++);
    if (executor->last_stage()) {
      sums[0] += loss;
      sums[1] += static_cast<double>(n);
    }
  }
  world->allreduce(sums, sums, 2, DType::F64, ReduceOp::Sum);
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

std::vector<std::int32_t> RankState::generate() {
  // Decoding through each replica's pipeline (the replicas hold the same weights and draw byte i
  // from the same (seed, i), so they produce the same text; running them all keeps every rank
  // equally busy, and no rank waits for another's generation). The last stage picks each byte
  // (sampling.h: top-k at a temperature, or greedy) and sends it to the first, which extends the
  // context; every stage knows the growing length.
  const Sampler sampler(cfg.sampling());
  std::vector<std::int32_t> text;
  for (const char c : cfg.prompt) text.push_back(static_cast<unsigned char>(c));
  if (cfg.sample_bytes <= 0 || text.empty()) return text;
  // The rank holding the last model stage picks the byte; rank 0 holds the first (the same rank
  // in a V placement or with one rank: then nothing is sent).
  const bool first = executor->first_stage();
  const bool last = executor->last_stage();
  const Schedule schedule = job_schedule(cfg);
  const int last_rank = rank_of(schedule, stage_count(schedule) - 1);
  const bool message = last_rank != 0;
  const std::size_t prompt_len = text.size();
  for (int i = 0; i < cfg.sample_bytes; ++i) {
    const std::size_t len = prompt_len + static_cast<std::size_t>(i);
    const int t = static_cast<int>(std::min<std::size_t>(len, static_cast<std::size_t>(cfg.ctx)));
    std::span<const std::int32_t> window;
    if (first)
      window =
          std::span<const std::int32_t>(text).subspan(text.size() - static_cast<std::size_t>(t));
    executor->forward_only(window, {}, 1, t,
                           std::uint64_t{1'000'000} + static_cast<std::uint64_t>(i));
    std::int32_t next = 0;
    if (last) {
      const std::span<const float> logits =
          model->logits(0).subspan(static_cast<std::size_t>(t - 1) * 256, 256);
      next = sampler.next(logits, static_cast<std::uint64_t>(i));
      if (message)
        pipe->send(&next, sizeof next, 0, std::uint64_t{2'000'000} + static_cast<std::uint64_t>(i));
    }
    if (first) {
      if (message)
        pipe->recv(&next, sizeof next, last_rank,
                   std::uint64_t{2'000'000} + static_cast<std::uint64_t>(i));
      text.push_back(next);
    }
  }
  // World rank 0 prints the sample: with --placement it may not hold replica 0's first stage,
  // whose text it then receives (every rank takes part: generate is called on all of them).
  const int holder = cfg.rank_of_slot(0, rank_of(schedule, 0));
  if (holder != 0) {
    text.resize(prompt_len + static_cast<std::size_t>(cfg.sample_bytes));
    world->broadcast(text.data(), text.size(), DType::I32, holder);
  }
  return text;
}

}  // namespace strait::train
