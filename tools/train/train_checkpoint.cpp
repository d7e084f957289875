#include "tools/train/train_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>  // mkstemp
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule.h"

namespace strait::tools {
namespace {

using nlohmann::json;

constexpr std::string_view kExpAvg = "optimizer.exp_avg.";
constexpr std::string_view kExpAvgSq = "optimizer.exp_avg_sq.";

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
             "ByteDataset (scheduler/model/data.h): sequence g of step s is drawn from a "
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
            {"chunks", c.chunks != 0 ? c.chunks
                       : c.schedule == sched::ScheduleKind::Interleaved ||
                               c.schedule == sched::ScheduleKind::ZbV
                           ? 2
                           : 1},
            {"microbatches", c.microbatches},
            {"microbatch_size", c.microbatch_size},
            {"offload_optimizer", offload::to_string(c.offload_optimizer)}}}};
}

void save_checkpoint(comm::Communicator& world, const TrainConfig& c, int stage, int replica,
                     const sched::RankModel& model, offload::AdamWState& moments,
                     std::int64_t step) {
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

Resumed load_checkpoint(const TrainConfig& c, sched::RankModel& model,
                        offload::AdamWState& moments) {
  const sched::CheckpointReader reader(c.resume);
  const json& meta = reader.meta();
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
                fmt::format("--resume {}: the checkpoint's model differs from this run's: {}; "
                            "pass the checkpoint's values",
                            reader.dir().string(), fmt::join(wrong, ", ")));
  }
  if (meta.at("init_seed").get<std::uint64_t>() != c.seed) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--resume {}: --seed {} differs from the checkpoint's {}, which fixed "
                            "its weights and data order: pass --seed {}",
                            reader.dir().string(), c.seed, meta.at("init_seed").dump(),
                            meta.at("init_seed").dump()));
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
  note("data", "global_batch_sequences",
       "the global batch (--microbatches x --microbatch-size x --replicas)");
  return out;
}

}  // namespace strait::tools
