#include "train/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "model/rank_model.h"
#include "scheduler/schedule_sim.h"
#include "train/placement.h"

namespace strait::train {
namespace {

using sched::ScheduleKind;
using sched::StageCosts;

Error bad(const std::string& what) {
  return {ErrorCode::InvalidArgument, what};
}

const MicrobatchCosts& costs_at(const PlanProfile& profile, const PlanRequest& r, int b) {
  const auto s = profile.shapes.find(shape_key(r.model, r.threads));
  if (s == profile.shapes.end() || s->second.sizes.count(b) == 0) {
    throw bad(
        fmt::format("plan: the profile has no costs for {} at microbatch size {}; profile "
                    "it first (strait plan measures what is missing)",
                    shape_key(r.model, r.threads), b));
  }
  return s->second.sizes.at(b);
}

const Learned* learned_for(const PlanProfile& p, const PlanRequest& r) {
  const auto it = p.learned.find(learned_key(r.ranks, r.threads, r.site_count()));
  return it == p.learned.end() || it->second.runs == 0 ? nullptr : &it->second;
}

// World rank of pipeline rank `stage` of replica `replica` (strait train's: train/placement.h).
int world_rank(const Plan& p, int replica, int stage) {
  return placement_rank(p.placement, p.stages, replica, stage);
}

// The slowest transfer of `bytes` between pipeline ranks a and b over the replicas.
sched::LinkCosts pipeline_link(const Plan& p, const PlanLinks& links, int a, int b, double bytes) {
  sched::LinkCosts worst{0, bytes, 0};
  double worst_t = -1;
  for (int k = 0; k < p.replicas; ++k) {
    const auto i = static_cast<std::size_t>(world_rank(p, k, a));
    const auto j = static_cast<std::size_t>(world_rank(p, k, b));
    const sched::LinkCosts l{links.latency_s[i][j], bytes, links.bandwidth[i][j]};
    if (l.transfer() > worst_t) {
      worst_t = l.transfer();
      worst = l;
    }
  }
  return worst;
}

// Ring all-reduce of `count` floats with `codec` over the replicas of pipeline rank `stage`:
// seconds, and the bytes that cross sites.
std::pair<double, double> ring_allreduce(const Plan& p, const PlanRequest& r,
                                         const PlanProfile& profile, int stage, double count,
                                         const std::string& codec) {
  const int R = p.replicas;
  if (R < 2 || count <= 0) return {0.0, 0.0};
  const auto c = profile.codecs.find(codec);
  const CodecCosts cc = c == profile.codecs.end() ? CodecCosts{} : c->second;
  double min_bw = std::numeric_limits<double>::infinity(), max_lat = 0;
  int crossings = 0;
  for (int k = 0; k < R; ++k) {
    const auto i = static_cast<std::size_t>(world_rank(p, k, stage));
    const auto j = static_cast<std::size_t>(world_rank(p, (k + 1) % R, stage));
    min_bw = std::min(min_bw, r.links.bandwidth[i][j]);
    max_lat = std::max(max_lat, r.links.latency_s[i][j]);
    if (r.links.site[i] != r.links.site[j]) ++crossings;
  }
  const double wire = count * cc.bytes_per_elem;
  const double per_link = 2.0 * (R - 1) / R * wire;
  const double t = per_link / min_bw + 2.0 * (R - 1) * max_lat +
                   2.0 * count * (cc.encode_s_per_elem + cc.decode_s_per_elem);
  return {t, crossings * per_link};  // each ring link carries per_link bytes
}

// Parameters of model stage v of the plan.
double stage_params(const Plan& p, const PlanRequest& r, int parts, int v) {
  const auto ranges = sched::split_layers(r.model.layers, parts, p.stage_layers);
  return static_cast<double>(
      sched::StageModel<float>::parameter_count(r.model, ranges[static_cast<std::size_t>(v)]));
}

// The speed of pipeline rank `stage`: its slowest replica's (the gradient sync waits for it).
double pipeline_speed(const Plan& p, const PlanRequest& r, int stage) {
  double s = std::numeric_limits<double>::infinity();
  for (int k = 0; k < p.replicas; ++k) s = std::min(s, r.speed(world_rank(p, k, stage)));
  return s;
}

struct RankFigures {
  double params = 0, activations = 0, wgrads = 0, scratch = 0, offloaded = 0;
};

// Memory of every pipeline rank (replica 0's; the replicas hold the same).
std::vector<RankFigures> rank_memory(const Plan& p, const PlanRequest& r, const MicrobatchCosts& mc,
                                     const sched::Schedule& s) {
  const int parts = p.stages * p.chunks;
  const double nc = static_cast<double>(p.microbatch_size) * r.model.ctx * r.model.dim;
  const double bt = static_cast<double>(p.microbatch_size) * r.model.ctx;
  const bool split_w = p.schedule == ScheduleKind::ZbH1 || p.schedule == ScheduleKind::ZbV;
  std::vector<RankFigures> out(static_cast<std::size_t>(p.stages));
  for (int v = 0; v < parts; ++v) {
    RankFigures& f = out[static_cast<std::size_t>(sched::rank_of(s, v))];
    const int nl = stage_layers(p, r.model.layers, v);
    const bool first = v == 0, last = v == parts - 1;
    const double stash =
        nl * mc.block_stash + (first ? mc.first_stash : 0.0) + (last ? mc.last_stash : 0.0);
    const int slots = std::max(1, sched::peak_stashed_microbatches_of_stage(s, v));
    f.params += stage_params(p, r, parts, v);
    f.activations += slots * stash;
    if (split_w) {
      const double w = 11.0 * nc * nl + (last ? bt * r.model.vocab + nc : 0.0) + (first ? nc : 0.0);
      f.wgrads += slots * w * 4.0;
    }
    f.scratch += 4.0 * (14.0 * nc + bt + (last ? bt * r.model.vocab : 0.0) +
                        static_cast<double>(r.model.ctx) * r.model.ctx);
  }
  if (p.activations == ActivationOffload::Cpu) {
    // The store holds in pinned RAM what the model's slots no longer do (the peak without
    // offload less the resident one), reusing its buffers.
    Plan plain = p;
    plain.activations = ActivationOffload::None;
    const sched::Schedule ps = plan_schedule(plain);
    for (int v = 0; v < parts; ++v) {
      const int nl = stage_layers(p, r.model.layers, v);
      const double stash = nl * mc.block_stash + (v == 0 ? mc.first_stash : 0.0) +
                           (v == parts - 1 ? mc.last_stash : 0.0);
      const int freed = std::max(1, sched::peak_stashed_microbatches_of_stage(ps, v)) -
                        std::max(1, sched::peak_stashed_microbatches_of_stage(s, v));
      // offload/pinned_pool.h: leases round up to a power of two up to 64 MiB.
      const double lease =
          stash <= 64.0 * (1 << 20) ? std::exp2(std::ceil(std::log2(stash))) : stash;
      out[static_cast<std::size_t>(sched::rank_of(s, v))].offloaded += std::max(0, freed) * lease;
    }
  }
  return out;
}

// Per model stage costs (seconds), compute stretched by `scale`.
std::vector<StageCosts> stage_costs(const Plan& p, const PlanRequest& r, const PlanProfile& prof,
                                    const MicrobatchCosts& mc, const sched::Schedule& s,
                                    double scale, bool comm) {
  const int parts = p.stages * p.chunks;
  const double msg = 4.0 * p.microbatch_size * r.model.ctx * r.model.dim;
  const auto& shape = prof.shapes.at(shape_key(r.model, r.threads));
  std::vector<StageCosts> out(static_cast<std::size_t>(parts));
  const auto mem = rank_memory(p, r, mc, s);
  for (int v = 0; v < parts; ++v) {
    StageCosts& c = out[static_cast<std::size_t>(v)];
    const int nl = stage_layers(p, r.model.layers, v);
    const bool first = v == 0, last = v == parts - 1;
    const int rank = sched::rank_of(s, v);
    const double slow = scale / pipeline_speed(p, r, rank);
    c.compute.f = slow * (nl * mc.block.f + (first ? mc.first.f : 0) + (last ? mc.last.f : 0));
    c.compute.b = slow * (nl * mc.block.b + (first ? mc.first.b : 0) + (last ? mc.last.b : 0));
    c.compute.w = slow * (nl * mc.block.w + (first ? mc.first.w : 0) + (last ? mc.last.w : 0));
    if (mc.block.fused > 0) {  // else the simulator prices a fused B at b + w
      c.compute.fused =
          slow * (nl * mc.block.fused + (first ? mc.first.fused : 0) + (last ? mc.last.fused : 0));
    }
    const double params = mem[static_cast<std::size_t>(rank)].params;
    const double adamw = slow * params * shape.adamw_s_per_param;
    double optim = adamw;
    if (p.optimizer == offload::OptimizerOffload::Nvme) {
      optim = std::max(adamw, params * 8.0 / prof.disk_read_bytes_per_s +
                                  params * 8.0 / prof.disk_write_bytes_per_s);
    }
    // ALLREDUCE_GRAD and OPTIM are per rank: priced on the rank's chunk 0 (the stage they name).
    if (sched::chunk_of(s, v) == 0) c.optim = optim;
    if (!comm) continue;
    if (v + 1 < parts && sched::rank_of(s, v + 1) != rank) {
      c.link = pipeline_link(p, r.links, rank, sched::rank_of(s, v + 1), msg);
    }
    // What validation runs' traces measured a SEND and a RECV to occupy their rank (the transport's
    // work and the wake-ups on shared cores): only pipelined plans pay it, so it sets them apart
    // from data parallelism, which the cores' load alone would price alike.
    if (const Learned* l = learned_for(prof, r); l != nullptr) {
      c.send = std::max(0.0, l->send_s);
      c.recv = std::max(0.0, l->recv_s);
    }
    const double stash =
        nl * mc.block_stash + (first ? mc.first_stash : 0.0) + (last ? mc.last_stash : 0.0);
    if (p.activations == ActivationOffload::Cpu) {
      c.offload = c.reload = stash / prof.memcpy_bytes_per_s;
    } else if (p.activations == ActivationOffload::Nvme) {
      c.offload = stash / prof.disk_write_bytes_per_s;
      c.reload = stash / prof.disk_read_bytes_per_s;
    }
    if (sched::chunk_of(s, v) == 0) {
      double ar = 0;
      if (p.outer_steps == 0) ar = ring_allreduce(p, r, prof, rank, params, p.codec).first;
      // The tied embedding between the first and the last pipeline rank.
      const int last_rank = sched::rank_of(s, parts - 1);
      if (p.stages > 1 && (rank == 0 || rank == last_rank)) {
        const auto l = pipeline_link(p, r.links, 0, last_rank, 4.0 * r.model.vocab * r.model.dim);
        ar += 2.0 * l.transfer();
      }
      c.allreduce = ar;
    }
  }
  return out;
}

double mean_busy(const sched::Timeline& t) {
  double s = 0;
  for (const double b : t.busy) s += b;
  return t.busy.empty() ? 0 : s / static_cast<double>(t.busy.size());
}

}  // namespace

Learned default_learned(int sites) {
  Learned l;
  if (sites > 1) {
    l.memory_extra_bytes = 2.7 * kMiB;
    l.memory_extra_pipeline_bytes = 0.0;
    l.memory_extra_per_stage_bytes = 2.8 * kMiB;
    l.memory_extra_nvme_bytes = 8.8 * kMiB;
    l.memory_extra_cpu_bytes = 5.8 * kMiB;
  }
  return l;
}

double memory_extra(const Learned& l, int model_stages, ActivationOffload activations) {
  return l.memory_extra_bytes + (model_stages > 1 ? l.memory_extra_pipeline_bytes : 0.0) +
         (model_stages - 1) * l.memory_extra_per_stage_bytes +
         (activations == ActivationOffload::Nvme ? l.memory_extra_nvme_bytes : 0.0) +
         (activations == ActivationOffload::Cpu ? l.memory_extra_cpu_bytes : 0.0);
}

int PlanRequest::site_count() const {
  std::vector<int> s = links.site;
  std::sort(s.begin(), s.end());
  return static_cast<int>(std::unique(s.begin(), s.end()) - s.begin());
}

double PlanRequest::speed(int rank) const {
  return rank_speed.empty() ? 1.0 : rank_speed.at(static_cast<std::size_t>(rank));
}

bool PlanRequest::unlike_speeds() const {
  return std::any_of(rank_speed.begin(), rank_speed.end(),
                     [&](double s) { return s != rank_speed.front(); });
}

int stage_layers(const Plan& p, int layers, int v) {
  if (!p.stage_layers.empty()) return p.stage_layers.at(static_cast<std::size_t>(v));
  const auto r = sched::split_layers(layers, p.stages * p.chunks)[static_cast<std::size_t>(v)];
  return r.last - r.first;
}

std::vector<int> balanced_stage_layers(const Plan& p, const PlanRequest& r,
                                       const PlanProfile& prof) {
  const MicrobatchCosts& mc = costs_at(prof, r, p.microbatch_size);
  const sched::Schedule s = sched::make_schedule(p.schedule, p.stages, p.microbatches, p.chunks);
  const int parts = p.stages * p.chunks;
  const int layers = r.model.layers;
  const auto sum = [](const FbwSeconds& x) { return x.f + x.b + x.w; };
  // time(v, n): stage v holding n layers, at its rank's speed.
  const auto time = [&](int v, int n) {
    return (n * sum(mc.block) + (v == 0 ? sum(mc.first) : 0.0) +
            (v == parts - 1 ? sum(mc.last) : 0.0)) /
           pipeline_speed(p, r, sched::rank_of(s, v));
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[v][l]: the smallest slowest-stage time of stages [0, v) holding l layers; pick[v][l]: the
  // layers of stage v - 1 there.
  std::vector<std::vector<double>> best(
      static_cast<std::size_t>(parts) + 1,
      std::vector<double>(static_cast<std::size_t>(layers) + 1, kInf));
  std::vector<std::vector<int>> pick(best.size(),
                                     std::vector<int>(static_cast<std::size_t>(layers) + 1, 0));
  best[0][0] = 0;
  for (int v = 1; v <= parts; ++v) {
    for (int l = v; l <= layers - (parts - v); ++l) {
      for (int n = 1; n <= l - (v - 1); ++n) {
        const double t = std::max(
            best[static_cast<std::size_t>(v) - 1][static_cast<std::size_t>(l - n)], time(v - 1, n));
        // Ties keep the first found (the fewest layers on stage v - 1).
        if (t < best[static_cast<std::size_t>(v)][static_cast<std::size_t>(l)]) {
          best[static_cast<std::size_t>(v)][static_cast<std::size_t>(l)] = t;
          pick[static_cast<std::size_t>(v)][static_cast<std::size_t>(l)] = n;
        }
      }
    }
  }
  std::vector<int> out(static_cast<std::size_t>(parts));
  for (int v = parts, l = layers; v > 0; l -= out[static_cast<std::size_t>(v) - 1], --v) {
    out[static_cast<std::size_t>(v) - 1] =
        pick[static_cast<std::size_t>(v)][static_cast<std::size_t>(l)];
  }
  return out;
}

std::string Plan::describe() const {
  std::string s = fmt::format("{}x{} {}", stages, replicas, sched::schedule_kind_name(schedule));
  if (chunks > 1 && schedule == ScheduleKind::Interleaved) s += fmt::format(" V={}", chunks);
  s += fmt::format(" M={} b={}", microbatches, microbatch_size);
  if (activations != ActivationOffload::None) s += fmt::format(" act={}", to_string(activations));
  if (optimizer != offload::OptimizerOffload::Cpu) {
    s += fmt::format(" opt={}", offload::to_string(optimizer));
  }
  if (!stage_layers.empty()) s += fmt::format(" layers={}", fmt::join(stage_layers, ","));
  if (!identity_placement(placement)) s += fmt::format(" place={}", fmt::join(placement, ","));
  if (codec != "none") s += " codec=" + codec;
  if (outer_steps > 0) s += fmt::format(" diloco H={} outer={}", outer_steps, outer_codec);
  return s;
}

sched::Schedule plan_schedule(const Plan& p) {
  sched::Schedule s = sched::make_schedule(p.schedule, p.stages, p.microbatches, p.chunks);
  if (p.activations != ActivationOffload::None) s = sched::add_activation_offload(s, 1);
  return s;
}

Prediction predict(const Plan& p, const PlanRequest& r, const PlanProfile& prof) {
  const MicrobatchCosts& mc = costs_at(prof, r, p.microbatch_size);
  const sched::Schedule s = plan_schedule(p);
  const Learned* learned = learned_for(prof, r);
  const auto groups = sched::data_parallel_sync_groups(p.stages, true);
  // Shared cores: the ranks' busy time over the makespan, against the cores.
  const auto plain = sched::simulate(s, stage_costs(p, r, prof, mc, s, 1.0, false),
                                     sched::data_parallel_sync_groups(p.stages, false));
  double busy = 0;
  for (const double b : plain.busy) busy += b;
  const double waiting = static_cast<double>(plain.busy.size()) * plain.makespan - busy;
  const double wait_load = learned != nullptr ? learned->wait_load : kDefaultWaitLoad;
  const double concurrency =
      (busy + wait_load * std::max(0.0, waiting)) * p.replicas * r.threads / plain.makespan;
  const double cores = learned != nullptr && learned->effective_cores > 0
                           ? learned->effective_cores
                           : static_cast<double>(std::max(1, prof.cores));
  const double load = std::max(1.0, concurrency / cores);
  const double scale = load;
  const auto full = sched::simulate(s, stage_costs(p, r, prof, mc, s, scale, true), groups);
  const auto compute = sched::simulate(s, stage_costs(p, r, prof, mc, s, scale, false),
                                       sched::data_parallel_sync_groups(p.stages, false));
  Prediction out;
  out.load = scale;
  out.concurrency = concurrency;
  // busy: replica 0's ranks, unstretched; per model stage and microbatch.
  out.profiled_stage_compute = busy / (p.stages * p.chunks) / p.microbatches;
  out.compute_s = mean_busy(full);
  double optim_only = 0;  // OPTIM in the compute-only run
  for (const auto& c : stage_costs(p, r, prof, mc, s, scale, false)) {
    optim_only = std::max(optim_only, c.optim);
  }
  out.bubble_s = std::max(0.0, compute.makespan - out.compute_s - optim_only);
  // Disk: nvme's optimizer beyond its compute, and nvme activation copies.
  const auto& shape = prof.shapes.at(shape_key(r.model, r.threads));
  const auto mem = rank_memory(p, r, mc, s);
  double disk = 0;
  for (std::size_t rank = 0; rank < mem.size(); ++rank) {
    double d = 0;
    if (p.optimizer == offload::OptimizerOffload::Nvme) {
      const double n = mem[rank].params;
      d += std::max(0.0, n * 8.0 / prof.disk_read_bytes_per_s +
                             n * 8.0 / prof.disk_write_bytes_per_s -
                             scale * n * shape.adamw_s_per_param);
    }
    disk = std::max(disk, d);
  }
  if (p.activations == ActivationOffload::Nvme) {
    const auto costs = stage_costs(p, r, prof, mc, s, scale, true);
    double d = 0;
    for (int v = 0; v < static_cast<int>(costs.size()); ++v) {
      const int rank = sched::rank_of(s, v);
      d = std::max(d, sched::offloaded_microbatches(s, rank) *
                          (costs[static_cast<std::size_t>(v)].offload +
                           costs[static_cast<std::size_t>(v)].reload) /
                          p.chunks);
    }
    disk += d;
  }
  out.disk_s = disk;
  double outer = 0, outer_cross = 0;
  if (p.outer_steps > 0) {
    for (int rank = 0; rank < p.stages; ++rank) {
      const auto [t, x] = ring_allreduce(p, r, prof, rank,
                                         mem[static_cast<std::size_t>(rank)].params, p.outer_codec);
      outer = std::max(outer, t);
      outer_cross += x;
    }
    outer /= p.outer_steps;
    outer_cross /= p.outer_steps;
  }
  out.link_s = std::max(0.0, full.makespan - compute.makespan - out.disk_s) + outer;
  const double step_scale = learned != nullptr ? learned->step_scale : 1.0;
  out.step_s = (full.makespan + outer) * step_scale;
  out.tokens_per_s = static_cast<double>(r.batch) * r.model.ctx / out.step_s;
  // Bytes across sites: activations and gradients between pipeline ranks, then the all-reduces.
  const double msg = 4.0 * p.microbatch_size * r.model.ctx * r.model.dim;
  for (int k = 0; k < p.replicas; ++k) {
    for (int v = 0; v + 1 < p.stages * p.chunks; ++v) {
      const auto a = static_cast<std::size_t>(world_rank(p, k, sched::rank_of(s, v)));
      const auto b = static_cast<std::size_t>(world_rank(p, k, sched::rank_of(s, v + 1)));
      if (r.links.site[a] != r.links.site[b]) out.cross_site_bytes += 2.0 * msg * p.microbatches;
    }
  }
  if (p.outer_steps == 0) {
    for (int rank = 0; rank < p.stages; ++rank) {
      out.cross_site_bytes +=
          ring_allreduce(p, r, prof, rank, mem[static_cast<std::size_t>(rank)].params, p.codec)
              .second;
    }
  }
  out.cross_site_bytes += outer_cross;
  // What runs measured beyond the model's figures (Learned's fit).
  const double extra = memory_extra(learned != nullptr ? *learned : default_learned(r.site_count()),
                                    p.stages * p.chunks, p.activations);
  for (const auto& f : mem) {
    const double weights = 8.0 * f.params;
    const double optimizer = p.optimizer == offload::OptimizerOffload::Cpu
                                 ? 8.0 * f.params
                                 : 2.0 * 8.0 * std::min(f.params, 512.0 * 1024.0);
    const double acts = f.activations + f.wgrads + f.offloaded;
    const double total = weights + optimizer + acts + f.scratch + extra;
    if (total > out.peak_memory) {
      out.peak_memory = total;
      out.weights = weights;
      out.optimizer = optimizer;
      out.activations = acts;
      out.other = f.scratch + extra;
    }
  }
  const double parts[] = {out.compute_s, out.bubble_s, out.link_s, out.disk_s};
  const char* names[] = {"compute", "bubble", "link", "disk"};
  out.bottleneck = names[std::max_element(std::begin(parts), std::end(parts)) - std::begin(parts)];
  return out;
}

std::vector<int> candidate_microbatch_sizes(const PlanRequest& r) {
  std::vector<int> sizes;
  for (int R = 1; R <= r.ranks; ++R) {
    if (r.ranks % R != 0 || r.batch % R != 0) continue;
    const int per = r.batch / R;
    for (int b = 1; b <= per; ++b) {
      if (per % b == 0 && per / b <= r.max_microbatches &&
          std::find(sizes.begin(), sizes.end(), b) == sizes.end()) {
        sizes.push_back(b);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

}  // namespace strait::train
