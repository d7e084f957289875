#include "tools/plan_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/params.h"
#include "scheduler/schedule_validate.h"
#include "tools/plan_support.h"
#include "tools/tune/budget.h"

namespace strait::tools {
namespace {

using train::Plan;
using train::PlanProfile;
using train::PlanRequest;
using train::ScoredPlan;

constexpr const char* kFooter = R"(
Costs come from measurement, each printed with its source: per-block F, B (input gradient) and W
(weight gradient) times of the reference GPT at every microbatch size the search may use, timed on
this machine with the GEMM threads each rank gets (cores / ranks); the embedding's and the head's
extra; stashed-activation bytes per slot; AdamW per parameter; RAM copy and disk (--offload-dir)
bandwidth; every allowed codec's encode/decode time and wire bytes; links from `strait tune`
(run once per world size and cached), --links FILE (a strait tune file), or --sites measure.
They are cached in the profile (STRAIT_PLAN_PROFILE, default ~/.cache/strait/plan-profile.json):
a second plan measures only what is missing (--reprofile measures again).
The search covers stages x replicas, microbatch size and count (the --batch sequences per step
split over the replicas), the schedule (gpipe, 1f1b, interleaved with V = 2..4, zb-h1, zbv),
activation offload (none, cpu, nvme), the optimizer state (RAM, or nvme when RAM exceeds
--memory-per-rank), the gradient codec up to --max-codec (the fastest, priced on the layout), and
with several sites, when --outer-steps lists any, DiLoCo's H (each only when --train-steps / H >= 30
rounds: fewer cost held-out loss) and outer codec. Each plan is priced with the schedule simulator
(scheduler/schedule_sim.h); plans over --memory-per-rank are dropped.
--validate K trains the top K plans and --sample others (the fastest of each stages x replicas
layout the top lacks, then plans at evenly spaced predicted step times) for --steps steps each
through `strait train` (which starts its ranks through the launcher),
--repeat rounds (each plan keeps its fastest run), and prints predicted against measured step
time and peak memory (the largest rank's resident growth from before its model), Spearman's rank
correlation, and the chosen plan against the best measured one. It then learns from the runs
into the profile: the cores the ranks really had, the share of a rank's waiting that still loads
them (a receiver polls before it sleeps) and a step factor (the others' load), fitted to the
measured steps through the simulator; what a send and a receive occupy their rank (from the runs'
traces); the memory beyond the model's figures (fitted on the model stages and NVMe). The traces'
per-action compute against the profile's and the message latency are printed, not priced (on
shared cores they are mostly waits for a core). The same table, re-predicted, follows.
Unlike sites: --sites 0,0,1,1 labels the ranks' sites; --site-link MS,MBIT prices the links
between them (e.g. the WAN testbed's 100 Mbit/s) when the measured links are loopback's.
Unlike ranks: --rank-speed 1,1,1,0.5 prices each rank's compute at that fraction of the profile's
(measured by bench/rank_speed.py: a rank's F+B+W in a --trace of an even split against what the
profile prices for its layers, over the fastest rank's);
--site-speed 1,0.5 gives every rank of --sites label 1 half the speed;
the search then also tries, for every layout, the layers per stage that balance the stages' times
(layers=3,4,4,1 in the plan; strait train --stage-layers), e.g.
  strait plan -n 4 --rank-speed 1,1,1,0.25 --model layers=12,dim=128,heads=4,ctx=128 --output p.json
  strait train --plan p.json
Placement: with unlike speeds or sites the search also chooses which rank runs each (replica,
stage) slot, jointly with the split: the slowest ranks grouped into one stage (a stage runs at its
slowest replica's speed) and given the fewest layers, and a pipeline inside a site or a stage's
replicas inside a site, whichever the links price lower (place=0,2,1,3 in the plan; strait train
--placement), e.g.
  strait plan -n 4 --rank-speed 0.5,0.5,1,1 --output p.json)";

struct PlanOptions {
  int nproc = 4;
  std::string sites, links, site_link, memory = "0", max_codec = "none", rank_speed, site_speed;
  std::string model = "layers=4,dim=128,heads=4,ctx=128";
  int batch = 32, top = 5, validate = 0, sample = 8, steps = 6, max_microbatches = 16, repeat = 2;
  std::string output, profile, offload_dir = "/var/tmp", outer_steps, data;
  bool reprofile = false, no_learn = false;
  int wan = 0;            // ranks per site on the WAN testbed
  int train_steps = 600;  // the run the plan is for (strait train's --steps)
};

sched::GptConfig parse_model(const std::string& text) {
  sched::GptConfig g;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    int value = 0;
    try {
      value = std::stoi(item.substr(eq == std::string::npos ? item.size() : eq + 1));
    } catch (const std::exception&) {
      throw Error(
          ErrorCode::InvalidArgument,
          fmt::format("--model {}: '{}' is not key=number (layers, dim, heads, ctx)", text, item));
    }
    if (key == "layers")
      g.layers = value;
    else if (key == "dim")
      g.dim = value;
    else if (key == "heads")
      g.heads = value;
    else if (key == "ctx")
      g.ctx = value;
    else {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--model {}: unknown key '{}' (layers, dim, heads, ctx)", text, key));
    }
  }
  g.validate();
  return g;
}

std::vector<int> parse_ints(const std::string& text, const char* what) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) {
      throw Error(
          ErrorCode::InvalidArgument,
          fmt::format("{} {}: '{}' is not a whole number >= 1 (e.g. 8,32)", what, text, item));
    }
    out.push_back(v);
  }
  return out;
}

// --rank-speed or --site-speed (`what`): one positive number per rank or site ("" gives none).
std::vector<double> parse_speeds(const std::string& text, int ranks, const char* what) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(v > 0) || v > 1e3) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} {}: '{}' is not a speed > 0 (1: as profiled, 0.5: "
                              "half as fast)",
                              what, text, item));
    }
    out.push_back(v);
  }
  if (!out.empty() && static_cast<int>(out.size()) != ranks) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} {}: {} speeds for -n {} ranks; give one per rank", what, text,
                            out.size(), ranks));
  }
  return out;
}

// --site-speed: one speed per site label (0, 1, ...), given to every rank of the site once the
// sites are known (after prepare_costs).
void apply_site_speed(const std::string& text, PlanRequest& r) {
  if (text.empty()) return;
  if (!r.rank_speed.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                "--site-speed and --rank-speed both give the ranks' speeds: pass one of them");
  }
  const std::vector<double> speeds = parse_speeds(
      text, static_cast<int>(std::count(text.begin(), text.end(), ',')) + 1, "--site-speed");
  for (const int site : r.links.site) {
    if (site < 0 || site >= static_cast<int>(speeds.size())) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--site-speed {}: {} speeds, but the ranks' sites are {}: give one "
                              "per site label 0..{}",
                              text, speeds.size(), fmt::join(r.links.site, ","),
                              *std::max_element(r.links.site.begin(), r.links.site.end())));
    }
    r.rank_speed.push_back(speeds[static_cast<std::size_t>(site)]);
  }
}

// Codecs within the accuracy budget that strait train accepts without arguments.
std::vector<std::string> allowed_codecs(const std::string& max_codec, bool outer) {
  const int level = tune::parse_max_codec(max_codec);
  std::vector<std::string> out;
  for (const auto& c : tune::codecs_by_accuracy()) {
    if (tune::codec_level(c) > level) continue;
    if (c == "powersgd") continue;  // needs a rank argument and warm state; not priced per byte
    if (outer && c != "none" && c != "bf16" && c != "int8" && c != "int4") continue;
    out.push_back(c);
  }
  return out;
}

PlanRequest make_request(const PlanOptions& o) {
  if (o.nproc < 1) throw Error(ErrorCode::InvalidArgument, "-n must be >= 1");
  PlanRequest r;
  r.ranks = o.nproc;
  r.model = parse_model(o.model);
  r.batch = o.batch;
  r.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / o.nproc);
  r.memory_per_rank = static_cast<double>(params::parse_size(o.memory, "--memory-per-rank"));
  r.codecs = allowed_codecs(o.max_codec, false);
  r.outer_codecs = allowed_codecs(o.max_codec, true);
  r.outer_steps = parse_ints(o.outer_steps, "--outer-steps");
  if (o.train_steps < 1) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("--train-steps {} must be >= 1 (the steps of the run to plan)", o.train_steps));
  }
  r.train_steps = o.train_steps;
  r.max_microbatches = o.max_microbatches;
  r.rank_speed = parse_speeds(o.rank_speed, o.nproc, "--rank-speed");
  return r;
}

PlanSetup make_setup(const PlanOptions& o) {
  PlanSetup s;
  s.sites = o.sites;
  s.links_file = o.links;
  s.site_link = o.site_link;
  s.profile_path = o.profile.empty() ? default_profile_path() : std::filesystem::path(o.profile);
  s.offload_dir = o.offload_dir;
  s.reprofile = o.reprofile;
  s.data = o.data;
  s.wan_ranks_per_site = o.wan;
  return s;
}

// Every plan must be one the schedule validator accepts (it is what strait train will run).
void check_valid(const std::vector<ScoredPlan>& plans) {
  for (const auto& p : plans) sched::validate_schedule(train::plan_schedule(p.plan));
}

struct Row {
  const ScoredPlan* plan;
  int rank;
  train::RunMeasurement m;
};

void print_validation(const std::vector<Row>& rows, const PlanRequest& r, const PlanProfile& prof,
                      const char* title) {
  fmt::print("\n{}\n{:>4}  {:<50} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}\n", title, "#", "plan",
             "pred ms", "meas ms", "err", "pred MiB", "meas MiB", "err");
  std::vector<double> pred, meas, mem_err;
  double best_meas = 1e30, chosen_meas = -1, chosen_pred = 1e30, chosen_mem = 1e30;
  for (const auto& row : rows) {
    if (row.m.step_s <= 0) {
      fmt::print("{:>4}  {:<50} failed: {}\n", row.rank, row.plan->plan.describe(), row.m.source);
      continue;
    }
    const auto x = train::predict(row.plan->plan, r, prof);
    pred.push_back(x.step_s);
    meas.push_back(row.m.step_s);
    const double me =
        row.m.peak_memory > 0 ? (x.peak_memory - row.m.peak_memory) / row.m.peak_memory : 0;
    mem_err.push_back(std::abs(me));
    fmt::print("{:>4}  {:<50} {:>9.1f} {:>9.1f} {:>+6.1f}% {:>9.1f} {:>9.1f} {:>+6.1f}%\n",
               row.rank, row.plan->plan.describe(), x.step_s * 1e3, row.m.step_s * 1e3,
               100 * (x.step_s - row.m.step_s) / row.m.step_s, x.peak_memory / (1 << 20),
               row.m.peak_memory / (1 << 20), 100 * me);
    best_meas = std::min(best_meas, row.m.step_s);
    // The plan the search would choose among these: fastest, ties (0.1 ms) to less memory.
    const double t = std::round(x.step_s * 1e4);
    if (t < chosen_pred || (t == chosen_pred && x.peak_memory < chosen_mem)) {
      chosen_pred = t;
      chosen_mem = x.peak_memory;
      chosen_meas = row.m.step_s;
    }
  }
  if (pred.size() < 2) return;
  std::sort(mem_err.begin(), mem_err.end());
  fmt::print(
      "Spearman(predicted, measured step) = {:.3f} over {} plans; the plan predicted fastest "
      "measured {:.1f} ms, {:+.1f}% from the best measured {:.1f} ms; peak memory error "
      "median {:.1f}%, max {:.1f}%\n",
      spearman(pred, meas), pred.size(), chosen_meas * 1e3,
      100 * (chosen_meas - best_meas) / best_meas, best_meas * 1e3,
      100 * mem_err[mem_err.size() / 2], 100 * mem_err.back());
}

void validate_plans(const std::vector<ScoredPlan>& plans, const PlanOptions& o, PlanRequest& r,
                    PlanProfile& prof, const PlanSetup& setup) {
  // The top K; then, out of --sample, the fastest plan of each stages x replicas layout the top
  // lacks, so that learning sees ranks that wait (pipelines) and ranks that do not (data
  // parallelism); then the rest at evenly spaced predicted step times between the (K+1)th and the
  // slowest plan, so the sample spans what the planner thinks matters.
  std::vector<int> picks;
  const int n = static_cast<int>(plans.size());
  picks.reserve(static_cast<std::size_t>(std::min(o.validate, n)) +
                static_cast<std::size_t>(std::max(o.sample, 0)));
  for (int i = 0; i < std::min(o.validate, n); ++i) picks.push_back(i);
  int layouts = 0;
  for (int i = o.validate; i < n && layouts < o.sample; ++i) {
    const auto& p = plans[static_cast<std::size_t>(i)].plan;
    const bool seen = std::any_of(picks.begin(), picks.end(), [&](int k) {
      const auto& q = plans[static_cast<std::size_t>(k)].plan;
      return q.stages == p.stages && q.replicas == p.replicas;
    });
    if (!seen) {
      picks.push_back(i);
      ++layouts;
    }
  }
  if (n > o.validate && o.sample > layouts) {
    const double lo = plans[static_cast<std::size_t>(std::min(o.validate, n - 1))].predicted.step_s;
    const double hi = plans.back().predicted.step_s;
    const int left = o.sample - layouts;
    for (int k = 0; k < left; ++k) {
      const double target = lo + (hi - lo) * (k + 1.0) / left;
      int best = -1;
      for (int i = o.validate; i < n; ++i) {
        if (std::find(picks.begin(), picks.end(), i) != picks.end()) continue;
        if (best < 0 ||
            std::abs(plans[static_cast<std::size_t>(i)].predicted.step_s - target) <
                std::abs(plans[static_cast<std::size_t>(best)].predicted.step_s - target)) {
          best = i;
        }
      }
      if (best >= 0) picks.push_back(best);
    }
  }
  fmt::print("\nvalidating {} plans ({} steps each through strait train; load {})\n", picks.size(),
             o.steps, [] {
               std::ifstream in("/proc/loadavg");
               std::string s;
               std::getline(in, s);
               return s;
             }());
  std::vector<Row> rows;
  rows.reserve(picks.size());
  for (const int i : picks) rows.push_back({&plans[static_cast<std::size_t>(i)], i + 1, {}});
  // Rounds over all plans, so a burst of others' load does not hit one plan's every run; each
  // plan keeps its fastest run (the least disturbed).
  for (int round = 0; round < o.repeat; ++round) {
    for (auto& row : rows) {
      fmt::print("  round {} #{} {} ...", round + 1, row.rank, row.plan->plan.describe());
      std::fflush(stdout);
      auto m = measure_plan(row.plan->plan, r, setup, o.steps, std::to_string(row.rank));
      fmt::print(" {}\n", m.step_s > 0 ? fmt::format("{:.1f} ms", m.step_s * 1e3) : m.source);
      if (m.step_s > 0 && (row.m.step_s <= 0 || m.step_s < row.m.step_s)) row.m = m;
      if (row.m.step_s <= 0 && m.step_s <= 0) row.m = m;
    }
  }
  std::vector<std::pair<Plan, train::RunMeasurement>> runs;
  for (const auto& row : rows) {
    if (row.m.step_s > 0) runs.emplace_back(row.plan->plan, row.m);
  }
  print_validation(rows, r, prof, "predicted vs measured (before learning):");
  if (o.no_learn || runs.empty()) return;
  const train::Learned l = train::learn_from_runs(prof, r, runs);
  prof.save(setup.profile_path);
  fmt::print("\nlearned (saved to {}): {}\n", setup.profile_path.string(), describe_learned(l));
  std::vector<double> ratio;
  for (const auto& [p, m] : runs) {
    if (m.compute_per_stage_s > 0) {
      ratio.push_back(m.compute_per_stage_s / train::predict(p, r, prof).profiled_stage_compute);
    }
  }
  std::sort(ratio.begin(), ratio.end());
  if (!ratio.empty()) {
    fmt::print("the traces' F+B+W per stage ran {:.2f}x (median; {:.2f}-{:.2f}x) the profile's\n",
               ratio[ratio.size() / 2], ratio.front(), ratio.back());
  }
  print_validation(rows, r, prof, "the same runs re-predicted with what was learned:");
}

void run_plan(const PlanOptions& o) {
  PlanRequest r = make_request(o);
  const PlanSetup setup = make_setup(o);
  PlanProfile prof = PlanProfile::load(setup.profile_path);
  const double measured_s = prepare_costs(r, prof, setup);
  apply_site_speed(o.site_speed, r);
  print_costs(r, prof);
  std::fflush(stdout);  // before an error the search may print on stderr
  const auto t0 = std::chrono::steady_clock::now();
  const auto plans = train::search_plans(r, prof);
  const double search_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_valid(plans);
  fmt::print(
      "\n{} plans of {} ranks priced in {:.2f} s (measuring took {:.1f} s; every plan "
      "passed the schedule validator)\n",
      plans.size(), r.ranks, search_s, measured_s);
  print_plans(plans, o.top);
  if (!o.output.empty()) {
    std::ofstream out(o.output, std::ios::trunc);
    out << train::plan_to_json(plans.front(), r).dump(1) << '\n';
    if (!out) throw Error(ErrorCode::Io, fmt::format("cannot write --output {}", o.output));
    fmt::print("wrote the best plan to {} (strait train --plan {})\n", o.output, o.output);
  }
  if (o.validate > 0) validate_plans(plans, o, r, prof, setup);
}

}  // namespace

std::filesystem::path plan_for_train(const train::TrainConfig& c) {
  PlanOptions o;
  o.nproc = c.world_size();
  o.model = fmt::format("layers={},dim={},heads={},ctx={}", c.layers, c.dim, c.heads, c.ctx);
  o.batch = c.replicas * c.microbatches * c.microbatch_size;
  o.train_steps = c.steps;
  // DiLoCo only when asked for: --outer-steps H with --plan auto lets the search try that H.
  if (c.outer_steps > 0) o.outer_steps = std::to_string(c.outer_steps);
  o.offload_dir = c.offload_dir.string();
  PlanRequest r = make_request(o);
  const PlanSetup setup = make_setup(o);
  PlanProfile prof = PlanProfile::load(setup.profile_path);
  prepare_costs(r, prof, setup);
  const auto plans = train::search_plans(r, prof);
  check_valid(plans);
  const auto& best = plans.front();
  fmt::print(
      "strait train --plan auto: {} (predicted {:.1f} ms/step, {:.0f} tokens/s, peak {:.1f} "
      "MiB per rank; profile {})\n",
      best.plan.describe(), best.predicted.step_s * 1e3, best.predicted.tokens_per_s,
      best.predicted.peak_memory / (1 << 20), setup.profile_path.string());
  auto path =
      std::filesystem::temp_directory_path() / fmt::format("strait-plan-auto-{}.json", ::getpid());
  std::ofstream out(path, std::ios::trunc);
  out << train::plan_to_json(best, r).dump(1) << '\n';
  return path;
}

void add_plan_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Choose the training plan (stages, replicas, microbatches, schedule, offload, codec, "
      "DiLoCo) from measured costs; --validate trains the top plans to check it");
  cmd->footer(kFooter);
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("-n,--nproc", o->nproc, "Ranks to plan for")->capture_default_str();
  cmd->add_option("--sites", o->sites,
                  "Sites of the ranks: measure (strait tune), or one label per rank (0,0,1,1); "
                  "default: the measured links' sites");
  cmd->add_option("--links", o->links, "Links and sites from a strait tune file");
  cmd->add_option("--site-link", o->site_link,
                  "LATENCY_MS,MBIT between sites (e.g. 10,100), instead of the measured links");
  cmd->add_option("--rank-speed", o->rank_speed,
                  "Compute speed of each rank against the profile's, e.g. 1,1,1,0.5 (a rank "
                  "limited to half a core); unlike speeds add splits that balance the stages");
  cmd->add_option("--site-speed", o->site_speed,
                  "Compute speed of each site (by --sites label 0, 1, ...), e.g. 1,0.5: every "
                  "rank of the site gets it (instead of --rank-speed)");
  cmd->add_option("--memory-per-rank", o->memory, "Memory limit per rank (K, M, G; 0: none)")
      ->capture_default_str();
  cmd->add_option(
         "--max-codec", o->max_codec,
         "The lossiest gradient codec allowed (none < fp16 = bf16 < int8 < int4 < onebit = "
         "topk)")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "The model: layers=,dim=,heads=,ctx=")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences per step, all replicas together")
      ->capture_default_str();
  cmd->add_option("--max-microbatches", o->max_microbatches, "Most microbatches per replica")
      ->capture_default_str();
  cmd->add_option("--outer-steps", o->outer_steps,
                  "DiLoCo H values to try across sites, e.g. 8,32 (none by default: DiLoCo trades "
                  "held-out loss for speed, and the planner prices only speed)");
  cmd->add_option("--train-steps", o->train_steps,
                  "Steps of the run to plan: DiLoCo's H only where it gives >= 30 rounds")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Plans to print")->capture_default_str();
  cmd->add_option("--output", o->output, "Write the best plan here (for strait train --plan)");
  cmd->add_option("--profile", o->profile, "The cost profile (default: STRAIT_PLAN_PROFILE)");
  cmd->add_flag("--reprofile", o->reprofile, "Measure every cost again");
  cmd->add_option("--offload-dir", o->offload_dir, "Disk for the offload probe and nvme plans")
      ->capture_default_str();
  cmd->add_option("--validate", o->validate, "Train the top K plans (and --sample others)")
      ->capture_default_str();
  cmd->add_option("--sample", o->sample,
                  "Other plans to validate, spread over the predicted step times")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps,
                  "Steps per validation run, at least 3 (the first two are not timed)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            int n = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec != std::errc() || end != v.data() + v.size()) {
              return fmt::format("'{}' is not a whole number of steps", v);
            }
            return n >= 3 ? ""
                          : "the first two steps of a run are warm-up, not timed: give 3 or more";
          },
          ""));
  cmd->add_option("--repeat", o->repeat, "Validation rounds; each plan keeps its fastest run")
      ->capture_default_str();
  cmd->add_option("--data", o->data, "Corpus of the validation runs (strait train's --data)");
  cmd->add_option("--wan", o->wan,
                  "Ranks per site on the WAN testbed that is up (strait wan up): measure the links "
                  "and run the validation there (strait wan run); needs root")
      ->capture_default_str();
  cmd->add_flag("--no-learn", o->no_learn, "Validate without updating the profile");
  cmd->callback([o, &exit_code] {
    run_plan(*o);
    exit_code = 0;
  });
}

}  // namespace strait::tools
