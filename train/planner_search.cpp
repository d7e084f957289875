// The planner's search, its plan file and what it learns from measured runs (train/planner.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "train/placement.h"
#include "train/planner.h"

namespace strait::train {
namespace {

using sched::ScheduleKind;

Error bad(const std::string& what) {
  return {ErrorCode::InvalidArgument, what};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The schedules (with their chunks) a pipeline of P ranks and M microbatches can run.
std::vector<std::pair<ScheduleKind, int>> schedules_for(int P, int M, int layers) {
  // One stage has no bubble to fill: a split backward (zero-bubble schedules) only costs (its W
  // reads its inputs back cold), and GPipe stashes M microbatches for 1F1B's time. Priced, they
  // differ from 1F1B by the profile's noise alone (validation chose 1x4 zbv at +10% once).
  if (P == 1) return {{ScheduleKind::OneFOneB, 1}};
  std::vector<std::pair<ScheduleKind, int>> out = {
      {ScheduleKind::GPipe, 1}, {ScheduleKind::OneFOneB, 1}, {ScheduleKind::ZbH1, 1}};
  if (P > 1) {
    for (int V = 2; V <= 4; ++V) {
      if (M % P == 0 && P * V <= layers) out.emplace_back(ScheduleKind::Interleaved, V);
    }
  }
  if (2 * P <= layers) out.emplace_back(ScheduleKind::ZbV, 2);
  return out;
}

bool offload_changes(const Plan& p) {
  const sched::Schedule s = plan_schedule(p);
  for (int r = 0; r < p.stages; ++r) {
    if (sched::offloaded_microbatches(s, r) > 0) return true;
  }
  return false;
}

// The fastest allowed gradient codec for the layout (priced on 1F1B without offload).
std::string best_codec(Plan p, const PlanRequest& r, const PlanProfile& prof) {
  if (p.replicas < 2 || r.codecs.empty()) return "none";
  p.schedule = ScheduleKind::OneFOneB;
  p.chunks = 1;
  std::string best = r.codecs.front();
  double best_t = std::numeric_limits<double>::infinity();
  for (const auto& c : r.codecs) {
    p.codec = c;
    const double t = predict(p, r, prof).step_s;
    if (t < best_t * 0.99) {  // ties go to the less lossy codec (listed first)
      best_t = t;
      best = c;
    }
  }
  return best;
}

// Whether strait train accepts the plan (TrainConfig::validate: e.g. DiLoCo needs the tied
// embedding's first and last stage on one rank or on two, not zbv's turn).
bool trains(const Plan& p, const PlanRequest& r) {
  TrainConfig c;
  c.layers = r.model.layers;
  c.dim = r.model.dim;
  c.heads = r.model.heads;
  c.ctx = r.model.ctx;
  apply_plan(p, c);
  try {
    c.validate();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The placements the search carries for a layout: the identity and at most two others that beat
// it on `base` (1F1B, no offload) with the split balanced for each (Holmes's placement and split
// chosen jointly); none others when every rank is alike.
std::vector<std::vector<int>> good_placements(Plan base, const PlanRequest& r,
                                              const PlanProfile& prof) {
  std::vector<std::vector<int>> out = {{}};
  const auto candidates = candidate_placements(base, r);
  if (candidates.size() < 2) return out;
  base.schedule = ScheduleKind::OneFOneB;
  base.chunks = 1;
  const auto priced = [&](const std::vector<int>& placement) {
    Plan q = base;
    q.placement = placement;
    if (r.unlike_speeds() && q.stages > 1) q.stage_layers = balanced_stage_layers(q, r, prof);
    return predict(q, r, prof).step_s;
  };
  const double identity = priced({});
  std::vector<std::pair<double, std::size_t>> better;
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    const double t = priced(candidates[i]);
    if (t < identity * (1 - 1e-9)) better.emplace_back(t, i);
  }
  std::stable_sort(better.begin(), better.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t k = 0; k < std::min<std::size_t>(2, better.size()); ++k)
    out.push_back(candidates[better[k].second]);
  return out;
}

}  // namespace

std::vector<ScoredPlan> search_plans(const PlanRequest& r, const PlanProfile& prof) {
  std::vector<ScoredPlan> out;
  double smallest_peak = std::numeric_limits<double>::infinity();
  std::string smallest;
  std::set<int> sites(r.links.site.begin(), r.links.site.end());
  const auto consider_split = [&](const Plan& p) {
    if (!trains(p, r)) return;
    Prediction pred = predict(p, r, prof);
    Plan q = p;
    if (r.memory_per_rank > 0 && pred.peak_memory > r.memory_per_rank) {
      q.optimizer = offload::OptimizerOffload::Nvme;  // the moments to disk, then try again
      pred = predict(q, r, prof);
    }
    if (pred.peak_memory < smallest_peak) {
      smallest_peak = pred.peak_memory;
      smallest = q.describe();
    }
    if (r.memory_per_rank > 0 && pred.peak_memory > r.memory_per_rank) return;
    out.push_back({q, pred});
  };
  // Unlike ranks: the even split and the one that balances the stages' times at their speeds.
  const auto consider = [&](const Plan& p) {
    consider_split(p);
    if (!r.unlike_speeds() || p.stages < 2) return;
    Plan u = p;
    u.stage_layers = balanced_stage_layers(p, r, prof);
    std::vector<int> even;
    even.reserve(static_cast<std::size_t>(p.stages) * static_cast<std::size_t>(p.chunks));
    for (int v = 0; v < p.stages * p.chunks; ++v)
      even.push_back(stage_layers(p, r.model.layers, v));
    if (u.stage_layers != even) consider_split(u);
  };
  const std::vector<int> sizes = candidate_microbatch_sizes(r);
  for (int P = 1; P <= std::min(r.ranks, r.model.layers); ++P) {
    if (r.ranks % P != 0) continue;
    const int R = r.ranks / P;
    if (r.batch % R != 0) continue;
    const int per = r.batch / R;
    for (const int b : sizes) {
      if (per % b != 0 || per / b > r.max_microbatches) continue;
      Plan base;
      base.stages = P;
      base.replicas = R;
      base.microbatch_size = b;
      base.microbatches = per / b;
      base.codec = best_codec(base, r, prof);
      const auto placements = good_placements(base, r, prof);
      for (const auto& [kind, V] : schedules_for(P, base.microbatches, r.model.layers)) {
        Plan p = base;
        p.schedule = kind;
        p.chunks = V;
        for (const auto act :
             {ActivationOffload::None, ActivationOffload::Cpu, ActivationOffload::Nvme}) {
          p.activations = act;
          if (act != ActivationOffload::None && !offload_changes(p)) continue;
          for (const auto& placement : placements) {
            p.placement = placement;
            consider(p);
            if (sites.size() < 2 || R < 2) continue;
            for (const int H : r.outer_steps) {
              if (H <= 0 || r.train_steps / H < kMinOuterRounds) continue;
              for (const auto& oc : r.outer_codecs) {
                Plan d = p;
                d.codec = "none";
                d.outer_steps = H;
                d.outer_codec = oc;
                consider(d);
              }
            }
          }
        }
      }
    }
  }
  if (out.empty()) {
    throw bad(fmt::format(
        "plan: no plan of {} ranks fits --memory-per-rank {:.0f} MiB; the smallest ({}) needs "
        "{:.1f} MiB per rank: raise the limit, lower --batch, or use more ranks",
        r.ranks, r.memory_per_rank / (1 << 20), smallest, smallest_peak / (1 << 20)));
  }
  // Fastest first; plans within 0.1 ms of each other (the stretch makes saturated plans equal)
  // go to the one with less memory.
  std::stable_sort(out.begin(), out.end(), [](const ScoredPlan& a, const ScoredPlan& b) {
    const auto ta = std::llround(a.predicted.step_s * 1e4);
    const auto tb = std::llround(b.predicted.step_s * 1e4);
    return ta != tb ? ta < tb : a.predicted.peak_memory < b.predicted.peak_memory;
  });
  return out;
}

std::string why_better(const ScoredPlan& a, const ScoredPlan& b) {
  const Prediction& x = a.predicted;
  const Prediction& y = b.predicted;
  struct Part {
    const char* name;
    double d;
  };
  std::vector<Part> parts = {{"compute", y.compute_s - x.compute_s},
                             {"bubble", y.bubble_s - x.bubble_s},
                             {"link", y.link_s - x.link_s},
                             {"disk", y.disk_s - x.disk_s}};
  std::sort(parts.begin(), parts.end(),
            [](const Part& l, const Part& r) { return std::abs(l.d) > std::abs(r.d); });
  if (std::llround(x.step_s * 1e4) == std::llround(y.step_s * 1e4)) {  // search_plans' tie
    return fmt::format("tied on step time ({:.1f} ms); less memory: {:.1f} vs {:.1f} MiB per rank",
                       x.step_s * 1e3, x.peak_memory / (1 << 20), y.peak_memory / (1 << 20));
  }
  std::string s = fmt::format("{:.1f} ms faster per step ({:.1f}%): ", (y.step_s - x.step_s) * 1e3,
                              100.0 * (y.step_s - x.step_s) / y.step_s);
  for (std::size_t i = 0; i < 2; ++i) {
    if (i > 0) s += ", ";
    s += fmt::format("{} {} by {:.1f} ms", parts[i].name, parts[i].d >= 0 ? "shorter" : "longer",
                     std::abs(parts[i].d) * 1e3);
  }
  if (std::abs(x.peak_memory - y.peak_memory) > 0.05 * y.peak_memory) {
    s += fmt::format("; peak memory {:.1f} vs {:.1f} MiB", x.peak_memory / (1 << 20),
                     y.peak_memory / (1 << 20));
  }
  return s;
}

std::vector<std::string> plan_train_args(const Plan& p) {
  std::vector<std::string> a = {"--stages",
                                std::to_string(p.stages),
                                "--replicas",
                                std::to_string(p.replicas),
                                "--schedule",
                                std::string(sched::schedule_kind_name(p.schedule)),
                                "--chunks",
                                std::to_string(p.chunks),
                                "--microbatches",
                                std::to_string(p.microbatches),
                                "--microbatch-size",
                                std::to_string(p.microbatch_size),
                                "--offload-activations",
                                std::string(to_string(p.activations)),
                                "--offload-optimizer",
                                std::string(offload::to_string(p.optimizer))};
  if (!p.stage_layers.empty()) {
    a.insert(a.end(), {"--stage-layers", fmt::format("{}", fmt::join(p.stage_layers, ","))});
  }
  if (!identity_placement(p.placement)) {
    a.insert(a.end(), {"--placement", fmt::format("{}", fmt::join(p.placement, ","))});
  }
  if (p.codec != "none") a.insert(a.end(), {"--codec", p.codec});
  if (p.outer_steps > 0) {
    a.insert(a.end(),
             {"--outer-steps", std::to_string(p.outer_steps), "--outer-codec", p.outer_codec});
  }
  return a;
}

void apply_plan(const Plan& p, TrainConfig& c) {
  c.stages = p.stages;
  c.replicas = p.replicas;
  c.schedule = p.schedule;
  c.chunks = p.chunks;
  c.microbatches = p.microbatches;
  c.microbatch_size = p.microbatch_size;
  c.offload_activations = p.activations;
  c.offload_prefetch = 1;
  c.offload_optimizer = p.optimizer;
  c.codec = p.codec == "none" ? std::string() : p.codec;
  c.outer_steps = p.outer_steps;
  c.outer_codec = p.outer_codec;
  c.stage_layers = p.stage_layers;
  c.placement = identity_placement(p.placement) ? std::vector<int>{} : p.placement;
}

nlohmann::json plan_to_json(const ScoredPlan& s, const PlanRequest& r) {
  const Plan& p = s.plan;
  const Prediction& x = s.predicted;
  return {{"plan",
           {{"stages", p.stages},
            {"replicas", p.replicas},
            {"schedule", sched::schedule_kind_name(p.schedule)},
            {"chunks", p.chunks},
            {"microbatches", p.microbatches},
            {"microbatch_size", p.microbatch_size},
            {"offload_activations", to_string(p.activations)},
            {"offload_optimizer", offload::to_string(p.optimizer)},
            {"codec", p.codec},
            {"outer_steps", p.outer_steps},
            {"outer_codec", p.outer_codec},
            {"stage_layers", p.stage_layers},
            {"placement", placement_or_identity(p.placement, p.stages * p.replicas)}}},
          {"model",
           {{"layers", r.model.layers},
            {"dim", r.model.dim},
            {"heads", r.model.heads},
            {"ctx", r.model.ctx}}},
          {"predicted",
           {{"step_s", x.step_s},
            {"tokens_per_s", x.tokens_per_s},
            {"peak_memory_bytes", x.peak_memory},
            {"cross_site_bytes", x.cross_site_bytes},
            {"bottleneck", x.bottleneck}}},
          {"train_args", plan_train_args(p)}};
}

Plan plan_from_json(const nlohmann::json& j) {
  try {
    const auto& q = j.at("plan");
    Plan p;
    p.stages = q.at("stages").get<int>();
    p.replicas = q.at("replicas").get<int>();
    p.schedule = sched::parse_schedule_kind(q.at("schedule").get<std::string>());
    p.chunks = q.at("chunks").get<int>();
    p.microbatches = q.at("microbatches").get<int>();
    p.microbatch_size = q.at("microbatch_size").get<int>();
    const auto act = q.at("offload_activations").get<std::string>();
    p.activations = act == "cpu"    ? ActivationOffload::Cpu
                    : act == "nvme" ? ActivationOffload::Nvme
                                    : ActivationOffload::None;
    p.optimizer = offload::parse_optimizer_offload(q.at("offload_optimizer").get<std::string>());
    p.codec = q.at("codec").get<std::string>();
    p.outer_steps = q.at("outer_steps").get<int>();
    p.outer_codec = q.at("outer_codec").get<std::string>();
    p.stage_layers = q.value("stage_layers", std::vector<int>{});  // absent: the even split
    p.placement = q.value("placement", std::vector<int>{});        // absent: the identity
    check_placement(p.placement, p.stages, p.replicas, "the plan file's placement");
    if (identity_placement(p.placement)) p.placement.clear();
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw bad(fmt::format("plan file: {} (write it with strait plan --output)", e.what()));
  }
}

Plan read_plan_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw bad(fmt::format("--plan {}: cannot read it", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return plan_from_json(nlohmann::json::parse(ss.str()));
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(fmt::format("--plan {}: not JSON ({})", path.string(), e.what()));
  }
}

namespace {

// The memory fit's terms: 1, a pipeline, model stages - 1, NVMe and CPU activation offload.
constexpr std::size_t kMemoryTerms = 5;
constexpr double Learned::*kMemoryTerm[kMemoryTerms] = {
    &Learned::memory_extra_bytes, &Learned::memory_extra_pipeline_bytes,
    &Learned::memory_extra_per_stage_bytes, &Learned::memory_extra_nvme_bytes,
    &Learned::memory_extra_cpu_bytes};

// Least squares of y on the columns `cols` of x (normal equations, Gauss-Jordan with partial
// pivoting); nothing when they are collinear over the rows.
std::optional<std::vector<double>> least_squares(
    const std::vector<std::array<double, kMemoryTerms>>& x, const std::vector<double>& y,
    const std::vector<std::size_t>& cols) {
  const std::size_t n = cols.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (std::size_t i = 0; i < y.size(); ++i) {
    for (std::size_t u = 0; u < n; ++u) {
      for (std::size_t v = 0; v < n; ++v) a[u][v] += x[i][cols[u]] * x[i][cols[v]];
      a[u][n] += x[i][cols[u]] * y[i];
    }
  }
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t pivot = c;
    for (std::size_t k = c + 1; k < n; ++k) {
      if (std::abs(a[k][c]) > std::abs(a[pivot][c])) pivot = k;
    }
    if (std::abs(a[pivot][c]) < 1e-9 * static_cast<double>(y.size())) return std::nullopt;
    std::swap(a[c], a[pivot]);
    for (std::size_t k = 0; k < n; ++k) {
      if (k == c) continue;
      const double f = a[k][c] / a[c][c];
      for (std::size_t v = c; v <= n; ++v) a[k][v] -= f * a[c][v];
    }
  }
  std::vector<double> coef(n);
  for (std::size_t u = 0; u < n; ++u) coef[u] = a[u][n] / a[u][u];
  return coef;
}

// The runs' measured peak - predicted, fitted on 1, a pipeline (more than one model stage), model
// stages - 1, NVMe and CPU activation offload (measured: about 6 MiB at one model stage, 14 - 18
// at two, 20 - 31 at four, NVMe about 10 more; docs/commands/plan.md). A term the runs cannot tell
// apart (one layout, no NVMe or CPU run, or only one and two model stages) keeps its earlier value;
// no run at all keeps everything.
void fit_memory_extra(Learned& l, const Learned& before, const PlanProfile& prof,
                      const PlanRequest& r,
                      const std::vector<std::pair<Plan, RunMeasurement>>& runs) {
  std::vector<std::array<double, kMemoryTerms>> x;
  std::vector<double> y;
  for (const auto& [p, m] : runs) {
    if (m.peak_memory <= 0) continue;
    const int stages = p.stages * p.chunks;
    x.push_back({1.0, stages > 1 ? 1.0 : 0.0, static_cast<double>(stages - 1),
                 p.activations == ActivationOffload::Nvme ? 1.0 : 0.0,
                 p.activations == ActivationOffload::Cpu ? 1.0 : 0.0});
    // The model's figure: what predict() gives less the extra it adds (l's, which it applies).
    y.push_back(m.peak_memory - predict(p, r, prof).peak_memory +
                memory_extra(l, stages, p.activations));
  }
  for (const auto term : kMemoryTerm) l.*term = before.*term;
  if (y.empty()) return;
  // The intercept always; the others while they vary, dropped from the pipeline's step on when
  // collinear (one and two model stages alone make the step and the per-stage term one).
  std::vector<std::size_t> cols = {0};
  for (std::size_t j = 1; j < kMemoryTerms; ++j) {
    if (std::any_of(x.begin(), x.end(), [&](const auto& row) { return row[j] != x[0][j]; })) {
      cols.push_back(j);
    }
  }
  // Fixed terms (earlier values) shift their rows: fit what is left of y.
  std::optional<std::vector<double>> coef;
  while (true) {
    std::vector<double> rest = y;
    for (std::size_t j = 1; j < kMemoryTerms; ++j) {
      if (std::find(cols.begin(), cols.end(), j) != cols.end()) continue;
      for (std::size_t i = 0; i < y.size(); ++i) rest[i] -= x[i][j] * l.*kMemoryTerm[j];
    }
    if ((coef = least_squares(x, rest, cols)) || cols.size() == 1) break;
    cols.erase(cols.begin() + 1);
  }
  if (!coef) return;
  for (std::size_t u = 0; u < cols.size(); ++u) l.*kMemoryTerm[cols[u]] = (*coef)[u];
}

}  // namespace

Learned learn_from_runs(PlanProfile& prof, const PlanRequest& r,
                        const std::vector<std::pair<Plan, RunMeasurement>>& runs) {
  Learned& l = prof.learned[learned_key(r.ranks, r.threads, r.site_count())];
  if (l.runs == 0) l = default_learned(r.site_count());  // what predict() assumed before any run
  const Learned before = l;
  // 1. The step: a * simulate(cores C, waiting load w) fitted to the measured steps (least
  // squares on log ratios; `a` the others' load on the cores, C the cores the ranks really shared,
  // w the share of the bubble that polling ranks keep the cores busy), C and w on a grid over
  // [0.25, the machine's cores] x [0, 1] and `a` in closed form for each.
  std::vector<double> send, recv, lat;
  for (const auto& [p, m] : runs) {
    if (m.send_s >= 0) send.push_back(m.send_s);
    if (m.recv_s >= 0) recv.push_back(m.recv_s);
    if (m.latency_s >= 0) lat.push_back(m.latency_s);
  }
  double best_err = std::numeric_limits<double>::infinity();
  Learned best = before;
  const int steps = static_cast<int>(std::lround((std::max(1, prof.cores) - 0.25) / 0.05));
  // The messages' costs first (the traces measured them), so that the fit prices the rest.
  const double send_s = send.empty() ? before.send_s : median(send);
  const double recv_s = recv.empty() ? before.recv_s : median(recv);
  // C = the cores, ... 0.30, 0.25; for each, the waiting load from kDefaultWaitLoad, then 0, 0.1,
  // ... 1. Once every plan is stretched, C and the step factor trade one for the other, and where
  // no plan is stretched the waiting load prices nothing: ties keep the first found (the larger C,
  // so the factor says what the others' load took; the default waiting load).
  std::vector<double> waits = {kDefaultWaitLoad};
  for (int w = 0; w <= 10; ++w) waits.push_back(0.1 * w);
  const bool timed =
      std::any_of(runs.begin(), runs.end(), [](const auto& x) { return x.second.step_s > 0; });
  for (int k = timed ? steps : -1; k >= 0; --k) {
    for (const double w : waits) {
      l = Learned{};
      l.effective_cores = 0.25 + 0.05 * k;
      l.wait_load = w;
      l.send_s = send_s;
      l.recv_s = recv_s;
      l.runs = 1;  // so predict() applies it
      std::vector<double> log_ratio;
      for (const auto& [p, m] : runs) {
        if (m.step_s > 0) log_ratio.push_back(std::log(m.step_s / predict(p, r, prof).step_s));
      }
      double mean = 0, err = 0;
      for (const double x : log_ratio) mean += x / static_cast<double>(log_ratio.size());
      for (const double x : log_ratio) err += (x - mean) * (x - mean);
      if (err < best_err * (1 - 1e-9)) {
        best_err = err;
        best = l;
        best.step_scale = std::exp(mean);
      }
    }
  }
  l = best;
  l.latency_s = lat.empty() ? before.latency_s : median(lat);
  l.runs = 1;
  // 2. Memory beyond the model's figures.
  fit_memory_extra(l, before, prof, r, runs);
  l.runs = before.runs + static_cast<int>(runs.size());
  l.source = runs.empty() ? before.source : runs.back().second.source;
  return l;
}

}  // namespace strait::train
