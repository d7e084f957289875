#include "train/train_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule.h"

namespace strait::train {
namespace {

using nlohmann::json;

constexpr std::string_view kExpAvg = "optimizer.exp_avg.";
constexpr std::string_view kExpAvgSq = "optimizer.exp_avg_sq.";

// DiLoCo: the prefix of replica r's own tensors (none for replica 0, whose names are the plain
// model's).
std::string replica_prefix(int replica) {
  return replica == 0 ? std::string() : fmt::format("replica.{}.", replica);
}
constexpr std::string_view kOuterGlobal = "outer.global.";
constexpr std::string_view kOuterMomentum = "outer.momentum.";
constexpr std::string_view kOuterStart = "outer.start.";
constexpr std::string_view kOuterPending = "outer.pending.";
// Eager overlap, each replica's own: its last pseudo-gradient and the last average it applied.
constexpr std::string_view kOuterOwn = "outer.own.";
constexpr std::string_view kOuterLastAverage = "outer.last_average.";

// The layers of each model stage (the even split's counts when --stage-layers is not given).
std::vector<int> layer_counts(const TrainConfig& c) {
  std::vector<int> out;
  for (const sched::LayerRange& r : job_layer_ranges(c)) out.push_back(r.last - r.first);
  return out;
}

json model_json(const TrainConfig& c) {
  return {{"vocab", 256}, {"ctx", c.ctx}, {"layers", c.layers}, {"dim", c.dim}, {"heads", c.heads}};
}

}  // namespace

json train_checkpoint_meta(const TrainConfig& c, std::int64_t step) {
  const std::int64_t global_batch =
      static_cast<std::int64_t>(c.microbatches) * c.microbatch_size * c.replicas;
  return {{"step", step},
          {"model", model_json(c)},
          {"init_seed", c.seed},
          {"data",
           {{"sampler",
             "ByteDataset (model/data.h): sequence g of step s is drawn from a "
             "splitmix64 stream keyed by (seed, s, g)"},
            {"seed", c.seed},
            {"next_step", step},
            {"global_batch_sequences", global_batch},
            {"context", c.ctx},
            {"corpus", c.data.string()}}},
          {"rng",
           {{"state",
             "none beyond data.seed and data.next_step: training draws no other random "
             "numbers (no dropout)"},
            {"sample_seed", c.sample_seed}}},
          {"optimizer",
           {{"kind", "AdamW"},
            {"t", step},
            {"lr", c.lr},
            {"warmup_steps", c.warmup_steps},
            {"min_lr_ratio", c.min_lr_ratio},
            {"total_steps", c.steps},
            {"beta1", c.beta1},
            {"beta2", c.beta2},
            {"eps", kernels::AdamWHyper{}.eps},
            {"weight_decay", c.weight_decay},
            {"weight_decay_applies_to", "2-D tensors (wte, wpe, matrices)"},
            {"grad_clip", c.grad_clip}}},
          {"saved_by",
           {{"stages", c.stages},
            {"replicas", c.replicas},
            {"schedule", sched::schedule_kind_name(c.schedule)},
            {"chunks", c.chunks != 0 ? c.chunks : sched::default_chunks(c.schedule)},
            {"microbatches", c.microbatches},
            {"microbatch_size", c.microbatch_size},
            {"stage_layers", layer_counts(c)},
            // World rank of each (replica, stage) slot (--placement; the identity by default).
            {"placement", placement_or_identity(c.placement, c.world_size())},
            {"offload_optimizer", offload::to_string(c.offload_optimizer)}}}};
}

namespace {

// `replicas`: those in the job when it saved (fewer than --replicas after an elastic job lost
// some).
json outer_meta(const TrainConfig& c, bool ended, int replicas) {
  return {{"outer_steps", c.outer_steps},   {"lr", c.outer_lr},
          {"momentum", c.outer_momentum},   {"codec", c.outer_codec},
          {"overlap", c.outer_overlap},     {"delay", c.outer_delay},
          {"fragments", c.outer_fragments}, {"stages", c.stages},
          {"replicas", replicas},           {"stage_layers", layer_counts(c)},
          {"rounds_closed_at_step", ended}};
}

void save_diloco(comm::Communicator& world, const TrainConfig& c, int replica,
                 const sched::RankModel& model, offload::AdamWState& moments, std::int64_t step,
                 OuterSync& outer) {
  // Collective over the data-parallel and tied groups: before anything else, on every rank.
  const OuterSync::State state = outer.export_state();
  if (world.rank() == 0) sched::begin_checkpoint(c.save, step);
  world.barrier();
  const std::size_t n = model.params().size();
  std::vector<float> m(n), v(n);
  moments.read_moments(m, v);
  const std::string own = replica_prefix(replica);
  const auto view = [](const std::vector<float>& a, const sched::TensorInfo& t) {
    return std::span<const float>(a).subspan(t.offset, t.count);
  };
  std::vector<sched::CheckpointTensorView> tensors;
  const std::span<const float> params = model.params();
  for (const sched::TensorInfo& t : model.tensors()) {
    if (model.is_tied_copy(t)) continue;
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    tensors.push_back({own + t.name, shape, params.subspan(t.offset, t.count)});
    tensors.push_back({own + std::string(kExpAvg) + t.name, shape, view(m, t)});
    tensors.push_back({own + std::string(kExpAvgSq) + t.name, shape, view(v, t)});
    if (!state.start.empty())
      tensors.push_back({own + std::string(kOuterStart) + t.name, shape, view(state.start, t)});
    if (!state.own.empty()) {
      tensors.push_back({own + std::string(kOuterOwn) + t.name, shape, view(state.own, t)});
      tensors.push_back(
          {own + std::string(kOuterLastAverage) + t.name, shape, view(state.last_average, t)});
    }
    if (outer.local_momentum()) {  // SparseLoCo's error feedback: each replica's own
      tensors.push_back(
          {own + std::string(kOuterMomentum) + t.name, shape, view(state.momentum, t)});
    }
    if (replica == 0) {  // identical on every replica
      tensors.push_back({std::string(kOuterGlobal) + t.name, shape, view(state.global, t)});
      if (!outer.local_momentum()) {
        tensors.push_back({std::string(kOuterMomentum) + t.name, shape, view(state.momentum, t)});
      }
      if (!state.pending.empty()) {
        tensors.push_back({std::string(kOuterPending) + t.name, shape, view(state.pending, t)});
      }
    }
  }
  sched::write_checkpoint_shard(c.save, step, world.rank(), tensors);
  world.barrier();
  if (world.rank() == 0) {
    json meta = train_checkpoint_meta(c, step);
    meta["outer"] = outer_meta(c, outer.ended(), world.size() / c.stages);
    sched::commit_checkpoint(c.save, step, world.size(), meta);
  }
  world.barrier();
}

// Loads replica `replica`'s part of a DiLoCo checkpoint (see save_diloco) into model, moments
// and outer.
void load_diloco(const sched::CheckpointReader& reader, const TrainConfig& c,
                 sched::RankModel& model, offload::AdamWState& moments, OuterSync& outer,
                 int replica) {
  const json& meta = reader.meta();
  if (!meta.contains("outer")) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--resume {}: the checkpoint was saved without --outer-steps, so it "
                            "holds no DiLoCo state (outer momentum, each replica's weights and "
                            "moments); resume it without --outer-steps",
                            reader.dir().string()));
  }
  const json& saved = meta.at("outer");
  const json now = outer_meta(c, false, c.replicas);
  std::vector<std::string> wrong;
  // Streaming DiLoCo's fragments cut each stage's parameters, so the split counts too (checkpoints
  // older than --stage-layers have the even split).
  TrainConfig even = c;
  even.stage_layers.clear();
  for (const char* key : {"outer_steps", "codec", "overlap", "delay", "fragments", "stages",
                          "replicas", "stage_layers"}) {
    const std::string k = key;
    if (k == "delay" && !c.outer_overlap) continue;  // the delay of an overlapped average only
    // Older checkpoints: no --outer-delay (a whole round), the even split.
    const json then = saved.contains(k) ? saved.at(k)
                      : k == "delay"    ? json(0)
                                        : json(layer_counts(even));
    if (then == now.at(k)) continue;
    wrong.push_back(fmt::format("--{} {} (the checkpoint has {})",
                                k == "outer_steps"                 ? std::string("outer-steps")
                                : k == "stage_layers"              ? std::string("stage-layers")
                                : k == "stages" || k == "replicas" ? k
                                                                   : "outer-" + k,
                                now.at(k).dump(), then.dump()));
  }
  if (!wrong.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--resume {}: DiLoCo's state is per replica and per round, so the "
                            "run must be split as the one that saved it: {}; pass the "
                            "checkpoint's values",
                            reader.dir().string(), fmt::join(wrong, ", ")));
  }
  const std::size_t n = model.params().size();
  std::vector<float> m(n), v(n);
  OuterSync::State state;
  state.global.resize(n);
  state.momentum.resize(n);
  if (c.outer_overlap) state.start.resize(n);
  bool pending = false;
  for (const sched::TensorInfo& t : model.tensors())
    pending = pending || reader.contains(std::string(kOuterPending) + t.name);
  if (pending) state.pending.resize(n);
  const std::string own = replica_prefix(replica);
  // Saved by a run with eager overlap (older checkpoints: its estimate starts from zeros).
  bool eager = false;
  for (const sched::TensorInfo& t : model.tensors())
    eager = eager || reader.contains(own + std::string(kOuterOwn) + t.name);
  if (eager) {
    state.own.resize(n);
    state.last_average.resize(n);
  }
  const auto params = model.params();
  const auto part = [](std::vector<float>& a, const sched::TensorInfo& t) {
    return std::span<float>(a).subspan(t.offset, t.count);
  };
  for (const sched::TensorInfo& t : model.tensors()) {
    reader.read(own + t.name, params.subspan(t.offset, t.count));
    reader.read(own + std::string(kExpAvg) + t.name, part(m, t));
    reader.read(own + std::string(kExpAvgSq) + t.name, part(v, t));
    reader.read(std::string(kOuterGlobal) + t.name, part(state.global, t));
    reader.read(
        (outer.local_momentum() ? own : std::string()) + std::string(kOuterMomentum) + t.name,
        part(state.momentum, t));
    if (c.outer_overlap) reader.read(own + std::string(kOuterStart) + t.name, part(state.start, t));
    if (eager) {
      reader.read(own + std::string(kOuterOwn) + t.name, part(state.own, t));
      if (reader.contains(own + std::string(kOuterLastAverage) + t.name)) {
        reader.read(own + std::string(kOuterLastAverage) + t.name, part(state.last_average, t));
      }
    }
    if (pending) reader.read(std::string(kOuterPending) + t.name, part(state.pending, t));
  }
  moments.write_moments(m, v);
  outer.import_state(state, reader.step(), saved.at("rounds_closed_at_step").get<bool>());
}

}  // namespace

void save_checkpoint(comm::Communicator& world, const TrainConfig& c, int stage, int replica,
                     const sched::RankModel& model, offload::AdamWState& moments, std::int64_t step,
                     OuterSync* outer) {
  if (outer != nullptr) {
    save_diloco(world, c, replica, model, moments, step, *outer);
    return;
  }
  if (world.rank() == 0) sched::begin_checkpoint(c.save, step);
  world.barrier();
  if (replica == 0) {
    const std::size_t n = model.params().size();
    std::vector<float> m(n), v(n);
    moments.read_moments(m, v);
    // Views of the model's parameters and of the moments just read: nothing else is copied.
    std::vector<sched::CheckpointTensorView> tensors;
    const std::span<const float> params = model.params();
    for (const sched::TensorInfo& t : model.tensors()) {
      if (model.is_tied_copy(t)) continue;  // saved once, with the first stage
      const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
      tensors.push_back({t.name, shape, params.subspan(t.offset, t.count)});
      tensors.push_back({std::string(kExpAvg) + t.name, shape,
                         std::span<const float>(m).subspan(t.offset, t.count)});
      tensors.push_back({std::string(kExpAvgSq) + t.name, shape,
                         std::span<const float>(v).subspan(t.offset, t.count)});
    }
    sched::write_checkpoint_shard(c.save, step, stage, tensors);
  }
  world.barrier();
  if (world.rank() == 0)
    sched::commit_checkpoint(c.save, step, c.stages, train_checkpoint_meta(c, step));
  world.barrier();  // the step directory exists for everyone once save_checkpoint returns
}

namespace {

// Throws InvalidArgument naming each model field and the seed that differ from the run's.
void check_model(const json& meta, const TrainConfig& c, const std::string& where) {
  const json want = model_json(c);
  const json& got = meta.at("model");
  std::vector<std::string> wrong;
  for (const auto& [key, value] : want.items()) {
    if (got.value(key, json()) != value) {
      wrong.push_back(fmt::format("--{} {} (the checkpoint has {})", key, value.dump(),
                                  got.value(key, json()).dump()));
    }
  }
  if (!wrong.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: the checkpoint's model differs from this run's: {}; "
                            "pass the checkpoint's values",
                            where, fmt::join(wrong, ", ")));
  }
  if (meta.at("init_seed").get<std::uint64_t>() != c.seed) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: --seed {} differs from the checkpoint's {}, which fixed "
                    "its weights and data order: pass --seed {}",
                    where, c.seed, meta.at("init_seed").dump(), meta.at("init_seed").dump()));
  }
}

}  // namespace

std::vector<std::byte> pack_replica_state(const TrainConfig& c, const sched::RankModel& model,
                                          offload::AdamWState& moments, OuterSync& outer,
                                          std::int64_t step, const json& extra) {
  const OuterSync::State state = outer.export_state();
  if (!state.start.empty() || !state.pending.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                "the state of a replica with --outer-overlap cannot be sent to a joiner: drop "
                "--outer-overlap with --elastic");
  }
  const std::size_t n = model.params().size();
  std::vector<float> m(n), v(n);
  moments.read_moments(m, v);
  const auto view = [](const std::vector<float>& a, const sched::TensorInfo& t) {
    return std::span<const float>(a).subspan(t.offset, t.count);
  };
  std::vector<sched::CheckpointTensorView> tensors;
  const std::span<const float> params = model.params();
  for (const sched::TensorInfo& t : model.tensors()) {
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    tensors.push_back({t.name, shape, params.subspan(t.offset, t.count)});
    tensors.push_back({std::string(kExpAvg) + t.name, shape, view(m, t)});
    tensors.push_back({std::string(kExpAvgSq) + t.name, shape, view(v, t)});
    tensors.push_back({std::string(kOuterGlobal) + t.name, shape, view(state.global, t)});
    tensors.push_back({std::string(kOuterMomentum) + t.name, shape, view(state.momentum, t)});
  }
  json meta = train_checkpoint_meta(c, step);
  meta["outer"] = outer_meta(c, outer.ended(), c.replicas);
  meta["elastic"] = extra;
  return sched::pack_checkpoint(meta, tensors);
}

json unpack_replica_state(std::span<const std::byte> bytes, const TrainConfig& c,
                          sched::RankModel& model, offload::AdamWState& moments, OuterSync& outer) {
  const sched::CheckpointContents in = sched::unpack_checkpoint(bytes, "the joiner's state");
  check_model(in.meta, c, "--join");
  const std::size_t n = model.params().size();
  std::vector<float> m(n), v(n);
  OuterSync::State state;
  state.global.resize(n);
  state.momentum.resize(n);
  const auto part = [](std::vector<float>& a, const sched::TensorInfo& t) {
    return std::span<float>(a).subspan(t.offset, t.count);
  };
  const auto params = model.params();
  for (const sched::TensorInfo& t : model.tensors()) {
    in.read(t.name, params.subspan(t.offset, t.count));
    in.read(std::string(kExpAvg) + t.name, part(m, t));
    in.read(std::string(kExpAvgSq) + t.name, part(v, t));
    in.read(std::string(kOuterGlobal) + t.name, part(state.global, t));
    in.read(std::string(kOuterMomentum) + t.name, part(state.momentum, t));
  }
  moments.write_moments(m, v);
  const auto step = in.meta.at("step").get<std::int64_t>();
  outer.import_state(state, step, in.meta.at("outer").at("rounds_closed_at_step").get<bool>());
  return in.meta;
}

Resumed load_checkpoint(const TrainConfig& c, sched::RankModel& model, offload::AdamWState& moments,
                        OuterSync* outer, int replica) {
  const sched::CheckpointReader reader(c.resume);
  const json& meta = reader.meta();
  check_model(meta, c, fmt::format("--resume {}", reader.dir().string()));
  if (outer != nullptr) {
    load_diloco(reader, c, model, moments, *outer, replica);
  } else {
    if (meta.contains("outer")) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--resume {}: the checkpoint was saved by DiLoCo (--outer-steps {}), "
                              "whose replicas hold different weights between rounds; pass "
                              "--outer-steps {} with its other settings to continue it",
                              reader.dir().string(), meta["outer"]["outer_steps"].dump(),
                              meta["outer"]["outer_steps"].dump()));
    }
    const std::size_t n = model.params().size();
    std::vector<float> m(n), v(n);
    const auto params = model.params();
    for (const sched::TensorInfo& t : model.tensors()) {
      reader.read(t.name, params.subspan(t.offset, t.count));
      reader.read(std::string(kExpAvg) + t.name, std::span<float>(m).subspan(t.offset, t.count));
      reader.read(std::string(kExpAvgSq) + t.name, std::span<float>(v).subspan(t.offset, t.count));
    }
    moments.write_moments(m, v);
  }

  Resumed out;
  out.step = reader.step();
  const json now = train_checkpoint_meta(c, out.step);
  const auto note = [&](const char* group, const char* key, const char* option) {
    const json& then = meta.at(group).at(key);
    const json& here = now.at(group).at(key);
    if (then != here) {
      out.notes.push_back(
          fmt::format("{} {} differs from the checkpoint's {}: training goes on "
                      "with {}",
                      option, here.dump(), then.dump(), here.dump()));
    }
  };
  note("optimizer", "lr", "--lr");
  note("optimizer", "warmup_steps", "--warmup");
  note("optimizer", "min_lr_ratio", "--min-lr-ratio");
  note("optimizer", "total_steps", "--steps (the cosine schedule's length)");
  note("optimizer", "beta1", "--beta1");
  note("optimizer", "beta2", "--beta2");
  note("optimizer", "weight_decay", "--weight-decay");
  note("optimizer", "grad_clip", "--grad-clip");
  if (outer != nullptr) {
    const json& saved = meta.at("outer");
    const auto note_outer = [&](const char* key, const json& here, const char* option) {
      if (saved.at(key) != here) {
        out.notes.push_back(
            fmt::format("{} {} differs from the checkpoint's {}: training goes on "
                        "with {}",
                        option, here.dump(), saved.at(key).dump(), here.dump()));
      }
    };
    note_outer("lr", c.outer_lr, "--outer-lr");
    note_outer("momentum", c.outer_momentum, "--outer-momentum");
  }
  // Tensors are found by name, so any split resumes a plain checkpoint; the log says it changed.
  const json& saved_split = meta.at("saved_by").value("stage_layers", json());
  if (!saved_split.is_null() && saved_split != now.at("saved_by").at("stage_layers")) {
    out.notes.push_back(fmt::format(
        "the layers per stage {} differ from the checkpoint's {} (tensors are found by name, so "
        "the weights and moments load into the new split): training goes on with {}",
        now.at("saved_by").at("stage_layers").dump(), saved_split.dump(),
        now.at("saved_by").at("stage_layers").dump()));
  }
  // Tensors are found by name, never by rank, so a new placement loads each (replica, stage)'s
  // own state; the log says it changed (checkpoints older than --placement have the identity).
  const json saved_placement = meta.at("saved_by").value("placement", json());
  if (!saved_placement.is_null() && saved_placement != now.at("saved_by").at("placement")) {
    out.notes.push_back(fmt::format(
        "the placement {} differs from the checkpoint's {} (each (replica, stage) slot loads its "
        "own tensors by name, whichever rank runs it): training goes on with {}",
        now.at("saved_by").at("placement").dump(), saved_placement.dump(),
        now.at("saved_by").at("placement").dump()));
  }
  note("data", "global_batch_sequences",
       "the global batch (--microbatches x --microbatch-size x --replicas)");
  return out;
}

}  // namespace strait::train
