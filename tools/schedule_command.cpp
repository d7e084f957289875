#include "tools/schedule_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/params.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_csv.h"
#include "scheduler/schedule_print.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_trace.h"
#include "tools/wan/subprocess.h"

namespace strait::tools {
namespace {

using namespace strait::sched;  // NOLINT(google-build-using-namespace): the vocabulary here

constexpr const char* kFooter = R"(
Costs: --costs F,B,W are the times of one microbatch's forward, input-gradient backward and
weight-gradient on a rank's whole share of the model (a stage of a P-stage split); a schedule with
V chunks per rank runs V times as many actions, each costing a V-th. A backward without a W
(gpipe, 1f1b, interleaved) costs B + W. --costs TRACE (a `strait train --trace` file) takes every
cost from that run instead: the mean per kind of action over its stages and its steps from the
third on (scheduler/schedule_sim.h, measured_stage_costs), applied to every stage.
Communication (same time unit; each defaults to 0, or the trace's figure): --send and --recv, what
posting a send and completing a receive occupy a rank; --latency, --bytes and --bandwidth (bytes
per time unit, 0 = unlimited): a message arrives latency + bytes / bandwidth after its send;
--allreduce and --optim: ALLREDUCE_GRAD and OPTIM after the last rank of their collective arrived
(strait train's: the tied embedding between the first and last rank, and the gradient norm over
all ranks unless --no-norm-sync).
The text timeline counts in units of 1/V of a cost unit and needs whole-number compute costs and
free communication; otherwise the per-rank order is printed.
Peak activation memory is in stages' worth of stashes per rank (chunk stashes / V): 1F1B's rank 0
holds P. With --offload D, stashes leave the model after their F and come back D computes ahead
of their B (scheduler/schedule.h, add_activation_offload).
--schedule all prints the table for every schedule with and without offload. The zero-bubble
schedules (zb-h1, zbv) are planned with the compute costs (list scheduling on those times), the
others do not depend on them. dualpipev's OVERLAP_F_B pairs take no time of their own: their F and
B are priced back to back, as a CPU rank runs them.
--png FILE draws a Gantt chart with /usr/bin/python3 and matplotlib (tools/plot/plot_schedule.py;
STRAIT_PLOT_DIR overrides where it is looked for).
--from-trace FILE reads `strait train --trace FILE`: for every step, the measured bubble (mean over
ranks) beside the plan's, simulated with that step's mean cost of every kind of action on each
stage (compute, transfers, all-reduce, optimizer), and beside the plan priced with compute alone;
the median relative difference from the third step on; then one step (the last, or --step) per
rank; with --png it draws that step's plan above what ran.)";

struct ScheduleOptions {
  std::string schedule = "1f1b";
  int stages = 4;
  int microbatches = 8;
  int chunks = 0;
  std::string costs = "1,1,1";
  // Communication costs; negative = not given (0, or the --costs trace's figure).
  double send = -1;
  double recv = -1;
  double latency = -1;
  double bytes = -1;
  double bandwidth = -1;
  double allreduce = -1;
  double optim = -1;
  bool no_norm_sync = false;
  int offload = -1;
  bool all_actions = false;
  std::string csv_out;
  std::string from_csv;
  std::string png;
  std::string from_trace;
  std::int64_t step = -1;
};

ActionCosts parse_costs(const std::string& text) {
  ActionCosts c;
  double* fields[] = {&c.f, &c.b, &c.w};
  std::stringstream in(text);
  std::string item;
  int n = 0;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (n >= 3 || item.empty() || end != item.c_str() + item.size() || !std::isfinite(v) ||
        v < 0.0) {
      n = -1;
      break;
    }
    *fields[n++] = v;
  }
  if (n != 3 || c.f <= 0.0 || c.b <= 0.0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--costs '{}': give three times F,B,W (F, B > 0, W >= 0), e.g. 1,1,1 "
                            "or 1.0,1.1,0.9, or a trace file written by `strait train --trace`",
                            text));
  }
  return c;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::Io, fmt::format("{}: cannot open '{}'", what, path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(ErrorCode::Io, fmt::format("{}: cannot write '{}'", what, path));
}

ActionCosts per_chunk(const ActionCosts& c, int chunks) {
  const double v = static_cast<double>(chunks);
  return ActionCosts{c.f / v, c.b / v, c.w / v};
}

// What a plan is priced with: one rank's whole share of every cost (compute split over its chunks
// by per_stage), and the collectives of strait train.
struct PlanCosts {
  StageCosts rank;
  bool norm_sync = true;

  [[nodiscard]] bool comm_free() const {
    return rank.send == 0 && rank.recv == 0 && rank.link.transfer() == 0 && rank.offload == 0 &&
           rank.reload == 0 && rank.allreduce == 0 && rank.optim == 0;
  }
  // Per model stage of s: compute / V (a chunk's share); messages, the all-reduce and the
  // optimizer cost the same per action whatever V.
  [[nodiscard]] std::vector<StageCosts> per_stage(const Schedule& s) const {
    StageCosts c = rank;
    c.compute = per_chunk(rank.compute, s.chunks);
    return std::vector<StageCosts>(static_cast<std::size_t>(stage_count(s)), c);
  }
  [[nodiscard]] SyncGroups groups(const Schedule& s) const {
    return data_parallel_sync_groups(s.stages, norm_sync);
  }
};

struct Row {
  std::string name;
  int chunks = 1;
  int offload = -1;
  double makespan = 0;
  double bubble = 0;
  double peak_stages = 0;  // max over ranks, in stages' worth
  int peak_w = 0;          // max over ranks, chunk stashes held for W
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

Row summarise(const std::string& name, const Schedule& s, const PlanCosts& costs, int offload) {
  Row row;
  row.name = name;
  row.chunks = s.chunks;
  row.offload = offload;
  const std::vector<StageCosts> c = costs.per_stage(s);
  const SyncGroups g = costs.groups(s);
  row.makespan = simulate(s, c, g).makespan;
  row.bubble = mean(stage_bubble_fractions(s, c, g));
  for (int r = 0; r < s.stages; ++r) {
    row.peak_stages =
        std::max(row.peak_stages, static_cast<double>(peak_stashed_microbatches(s, r)) /
                                      static_cast<double>(s.chunks));
    row.peak_w = std::max(row.peak_w, peak_stashed_weight_inputs(s, r));
  }
  return row;
}

std::string table(const std::vector<Row>& rows) {
  std::string out =
      fmt::format("{:<12} {:>6} {:>8} {:>10} {:>8} {:>18} {:>12}\n", "schedule", "chunks",
                  "offload", "step", "bubble", "peak act (stages)", "peak W in");
  for (const Row& r : rows) {
    out += fmt::format("{:<12} {:>6} {:>8} {:>10.7g} {:>8.3f} {:>18.3g} {:>12}\n", r.name, r.chunks,
                       r.offload < 0 ? std::string("no") : fmt::format("d={}", r.offload),
                       r.makespan, r.bubble, r.peak_stages, r.peak_w);
  }
  return out;
}

// The schedule with the zero-bubble generators planning with the given costs (per chunk).
Schedule build(ScheduleKind kind, int stages, int microbatches, int chunks,
               const ActionCosts& costs) {
  const int v = chunks != 0 ? chunks : default_chunks(kind);
  return make_schedule(kind, stages, microbatches, chunks, per_chunk(costs, v));
}

bool integral(double x) {
  return std::abs(x - std::round(x)) < 1e-9;
}

std::string plot_script() {
  std::vector<std::filesystem::path> dirs;
  if (const auto env = params::text("STRAIT_PLOT_DIR")) dirs.emplace_back(*env);
  dirs.emplace_back(STRAIT_PLOT_DIR);
  for (const auto& d : dirs) {
    const auto p = d / "plot_schedule.py";
    if (std::filesystem::exists(p)) return p.string();
  }
  throw Error(ErrorCode::Unavailable,
              fmt::format("--png: plot_schedule.py is not in {} (set STRAIT_PLOT_DIR to the "
                          "folder that holds it, tools/plot in the source tree)",
                          STRAIT_PLOT_DIR));
}

nlohmann::json panel(const Schedule& s, const std::string& label, const Timeline& tl,
                     double bubble) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < tl.stages.size(); ++r) {
    for (const TimedAction& t : tl.stages[r]) {
      const ActionKind k = t.action.kind;
      if (k != ActionKind::F && k != ActionKind::B && k != ActionKind::W) continue;
      events.push_back({{"rank", r},
                        {"kind", std::string(action_kind_name(k))},
                        {"name", action_string(t.action)},
                        {"chunk", chunk_of(s, t.action.stage)},
                        {"start", t.start},
                        {"end", t.end}});
    }
  }
  return {{"label", label},
          {"ranks", tl.stages.size()},
          {"makespan", tl.makespan},
          {"bubble", bubble},
          {"events", events}};
}

// Writes the chart spec next to the PNG and runs the plot script on it (bounded by `timeout`).
void draw(const std::string& png, const std::string& title, const std::string& unit,
          const std::vector<nlohmann::json>& panels) {
  const nlohmann::json spec = {{"title", title}, {"unit", unit}, {"panels", panels}};
  const std::string spec_path = png + ".json";
  write_file(spec_path, spec.dump(), "--png");
  run_checked({"timeout", "120", "/usr/bin/python3", plot_script(), spec_path, png});
  fmt::print("wrote {} (chart data: {})\n", png, spec_path);
}

struct StepBubbles {
  double measured = 0;
  double planned = 0;       // every kind of action priced
  double compute_only = 0;  // F, B and W priced, communication free
};

double mean_bubble(const Timeline& tl) {
  double out = 0;
  for (double busy : tl.busy) {
    out += (tl.makespan - busy) / tl.makespan / static_cast<double>(tl.busy.size());
  }
  return out;
}

std::vector<ActionCosts> compute_part(const std::vector<StageCosts>& costs) {
  std::vector<ActionCosts> out;
  out.reserve(costs.size());
  for (const StageCosts& c : costs) out.push_back(c.compute);
  return out;
}

// One step of a trace: its mean bubble over the ranks, and the plan's with that step's per-stage
// mean costs.
StepBubbles step_bubbles(const Schedule& plan, const SyncGroups& groups, const LoadedTrace& trace,
                         std::int64_t step) {
  const Timeline measured = measured_timeline(trace, step, plan.stages);
  const std::vector<StageCosts> costs = measured_stage_costs(plan, measured, groups);
  StepBubbles out;
  out.measured = mean_bubble(measured);
  out.planned = mean(stage_bubble_fractions(plan, costs, groups));
  out.compute_only = mean(stage_bubble_fractions(plan, compute_part(costs)));
  return out;
}

// The steps a trace holds, [first, last].
std::pair<std::int64_t, std::int64_t> step_range(const LoadedTrace& trace) {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = -1;
  for (const TraceRecord& r : trace.records) {
    first = std::min(first, r.step);
    last = std::max(last, r.step);
  }
  if (last < 0) throw Error(ErrorCode::InvalidArgument, "trace: it holds no actions");
  return {first, last};
}

Schedule plan_of(const TraceInfo& info) {
  Schedule plan = make_schedule(parse_schedule_kind(info.schedule), info.stages, info.microbatches,
                                info.chunks);
  if (info.offload_prefetch >= 0) plan = add_activation_offload(plan, info.offload_prefetch);
  return plan;
}

void run_from_trace(const ScheduleOptions& o) {
  const LoadedTrace trace = parse_chrome_trace(read_file(o.from_trace, "--from-trace"));
  const TraceInfo& info = trace.info;
  const Schedule plan = plan_of(info);
  const SyncGroups groups = data_parallel_sync_groups(plan.stages, !o.no_norm_sync);
  const auto [first_step, last_step] = step_range(trace);
  // Every step's mean bubble, measured and planned, to see the noise of single steps.
  if (last_step > first_step) {
    fmt::print("{:<6} {:>16} {:>16} {:>10} {:>22}\n", "step", "measured bubble", "planned bubble",
               "relative", "planned, compute only");
    std::vector<double> rel;
    std::vector<double> rel_compute;
    for (std::int64_t k = first_step; k <= last_step; ++k) {
      const StepBubbles sb = step_bubbles(plan, groups, trace, k);
      const double r = sb.planned > 0 ? (sb.measured - sb.planned) / sb.planned : 0.0;
      const double rc =
          sb.compute_only > 0 ? (sb.measured - sb.compute_only) / sb.compute_only : 0.0;
      if (k >= first_step + 2) {  // the first two steps warm up
        rel.push_back(r);
        rel_compute.push_back(rc);
      }
      fmt::print("{:<6} {:>16.3f} {:>16.3f} {:>+9.1f}% {:>13.3f} ({:>+6.1f}%)\n", k, sb.measured,
                 sb.planned, 100 * r, sb.compute_only, 100 * rc);
    }
    if (!rel.empty()) {
      std::sort(rel.begin(), rel.end());
      std::sort(rel_compute.begin(), rel_compute.end());
      fmt::print(
          "median relative difference over steps {}..{}: {:+.1f}% (compute-only plan: "
          "{:+.1f}%)\n\n",
          first_step + 2, last_step, 100 * rel[rel.size() / 2],
          100 * rel_compute[rel_compute.size() / 2]);
    }
  }
  const std::int64_t step = o.step < 0 ? last_step : o.step;
  const Timeline measured = measured_timeline(trace, step, info.stages);
  const std::vector<StageCosts> stage_costs = measured_stage_costs(plan, measured, groups);
  const Timeline planned = simulate(plan, stage_costs, groups);
  const std::vector<double> plan_bubble = stage_bubble_fractions(plan, stage_costs, groups);
  fmt::print(
      "{} schedule, {} ranks x {} chunks, {} microbatches{}; step {} of {}\n"
      "measured costs per stage (us; the plan is simulated with them):\n",
      info.schedule, info.stages, info.chunks, info.microbatches,
      info.offload_prefetch >= 0 ? fmt::format(", offload d={}", info.offload_prefetch) : "", step,
      o.from_trace);
  fmt::print("{:<6} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>9} {:>7} {:>7}\n", "stage", "F", "B",
             "W", "send", "recv", "latency", "allreduce", "optim", "reload");
  for (std::size_t v = 0; v < stage_costs.size(); ++v) {
    const StageCosts& c = stage_costs[v];
    fmt::print(
        "{:<6} {:>8.1f} {:>8.1f} {:>8.1f} {:>7.1f} {:>7.1f} {:>8.1f} {:>9.1f} {:>7.1f} "
        "{:>7.1f}\n",
        v, c.compute.f, c.compute.b, c.compute.w, c.send, c.recv, c.link.latency, c.allreduce,
        c.optim, c.reload);
  }
  fmt::print("{:<6} {:>16} {:>16} {:>10}\n", "rank", "measured bubble", "planned bubble", "diff");
  double m_sum = 0;
  double p_sum = 0;
  for (int r = 0; r < info.stages; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    const double m = (measured.makespan - measured.busy[ru]) / measured.makespan;
    m_sum += m;
    p_sum += plan_bubble[ru];
    fmt::print("{:<6} {:>16.3f} {:>16.3f} {:>+10.3f}\n", r, m, plan_bubble[ru],
               m - plan_bubble[ru]);
  }
  const double m_mean = m_sum / info.stages;
  const double p_mean = p_sum / info.stages;
  fmt::print("{:<6} {:>16.3f} {:>16.3f} {:>+10.3f}  (relative {:+.1f}%)\n", "mean", m_mean, p_mean,
             m_mean - p_mean, p_mean > 0 ? 100.0 * (m_mean - p_mean) / p_mean : 0.0);
  fmt::print("step time: measured {:.1f} us, planned {:.1f} us\n", measured.makespan,
             planned.makespan);
  if (!o.png.empty()) {
    draw(o.png,
         fmt::format("{}: P={}, M={}, V={} - planned (simulated with measured costs) vs measured",
                     info.schedule, info.stages, info.microbatches, info.chunks),
         "microseconds",
         {panel(plan, "planned", planned, p_mean),
          panel(plan, fmt::format("measured (step {})", step), measured, m_mean)});
  }
}

// --costs TRACE: the mean of every kind of cost over the trace's stages and its steps from the
// third on (all of them when it has fewer than three).
StageCosts costs_from_trace(const std::string& path, bool norm_sync) {
  const LoadedTrace trace = parse_chrome_trace(read_file(path, "--costs"));
  const Schedule plan = plan_of(trace.info);
  const SyncGroups groups = data_parallel_sync_groups(plan.stages, norm_sync);
  const auto [first_step, last_step] = step_range(trace);
  const std::int64_t from = last_step - first_step >= 2 ? first_step + 2 : first_step;
  std::vector<StageCosts> all;
  for (std::int64_t k = from; k <= last_step; ++k) {
    const std::vector<StageCosts> c =
        measured_stage_costs(plan, measured_timeline(trace, k, plan.stages), groups);
    all.insert(all.end(), c.begin(), c.end());
  }
  StageCosts out;
  out.compute = ActionCosts{0.0, 0.0, 0.0};
  const auto n = static_cast<double>(all.size());
  for (const StageCosts& c : all) {
    out.compute.f += c.compute.f / n;
    out.compute.b += c.compute.b / n;
    out.compute.w += c.compute.w / n;
    out.send += c.send / n;
    out.recv += c.recv / n;
    out.link.latency += c.link.latency / n;
    out.offload += c.offload / n;
    out.reload += c.reload / n;
    out.allreduce += c.allreduce / n;
    out.optim += c.optim / n;
  }
  return out;
}

PlanCosts plan_costs(const ScheduleOptions& o) {
  PlanCosts p;
  p.norm_sync = !o.no_norm_sync;
  if (std::filesystem::is_regular_file(o.costs)) {
    p.rank = costs_from_trace(o.costs, p.norm_sync);
  } else {
    p.rank.compute = parse_costs(o.costs);
  }
  const auto set = [](double given, double& into) {
    if (given >= 0) into = given;
  };
  set(o.send, p.rank.send);
  set(o.recv, p.rank.recv);
  set(o.latency, p.rank.link.latency);
  set(o.bytes, p.rank.link.bytes);
  set(o.bandwidth, p.rank.link.bandwidth);
  set(o.allreduce, p.rank.allreduce);
  set(o.optim, p.rank.optim);
  return p;
}

std::string describe(const ScheduleOptions& o, const PlanCosts& c) {
  std::string out =
      fmt::format("costs F,B,W = {:.4g},{:.4g},{:.4g} per stage{}", c.rank.compute.f,
                  c.rank.compute.b, c.rank.compute.w,
                  std::filesystem::is_regular_file(o.costs) ? fmt::format(" (means of {})", o.costs)
                                                            : std::string());
  if (!c.comm_free()) {
    out += fmt::format(
        "; send {:.4g}, recv {:.4g}, transfer {:.4g}, allreduce {:.4g}, optim {:.4g}, offload "
        "{:.4g}, reload {:.4g}",
        c.rank.send, c.rank.recv, c.rank.link.transfer(), c.rank.allreduce, c.rank.optim,
        c.rank.offload, c.rank.reload);
  }
  return out;
}

void run_schedule(const ScheduleOptions& o) {
  if (!o.from_trace.empty()) {
    run_from_trace(o);
    return;
  }
  const PlanCosts costs = plan_costs(o);
  const ActionCosts& compute = costs.rank.compute;
  if (o.schedule == "all") {
    std::vector<Row> rows;
    for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"}) {
      const ScheduleKind kind = parse_schedule_kind(name);
      std::vector<int> chunk_list = {0};
      if (kind == ScheduleKind::Interleaved) chunk_list = {2, 4};
      for (int v : chunk_list) {
        Schedule s;
        try {
          s = build(kind, o.stages, o.microbatches, v, compute);
        } catch (const Error& e) {
          fmt::print("{} (V={}): {}\n", name, v, e.message());
          continue;
        }
        rows.push_back(summarise(name, s, costs, -1));
        rows.push_back(summarise(name, add_activation_offload(s, o.offload < 0 ? 1 : o.offload),
                                 costs, o.offload < 0 ? 1 : o.offload));
      }
    }
    fmt::print("P = {}, M = {}, {}\n{}", o.stages, o.microbatches, describe(o, costs), table(rows));
    return;
  }
  Schedule s = o.from_csv.empty() ? build(parse_schedule_kind(o.schedule), o.stages, o.microbatches,
                                          o.chunks, compute)
                                  : schedule_from_csv(read_file(o.from_csv, "--from-csv"));
  const std::string name = o.from_csv.empty() ? o.schedule : o.from_csv;
  if (o.offload >= 0) s = add_activation_offload(s, o.offload);
  if (!o.csv_out.empty()) {
    write_file(o.csv_out, schedule_to_csv(s), "--csv");
    fmt::print("wrote {}\n", o.csv_out);
  }
  fmt::print("{}: {} ranks x {} chunks, {} microbatches{}; {}\n", name, s.stages, s.chunks,
             s.microbatches, o.offload >= 0 ? fmt::format(", offload d={}", o.offload) : "",
             describe(o, costs));
  if (o.all_actions) fmt::print("{}", format_schedule(s, ScheduleDetail::All));
  if (costs.comm_free() && integral(compute.f) && integral(compute.b) && integral(compute.w)) {
    fmt::print("{}", format_timeline(s, static_cast<int>(std::lround(compute.f)),
                                     static_cast<int>(std::lround(compute.b)),
                                     static_cast<int>(std::lround(compute.w))));
  } else if (!o.all_actions) {
    fmt::print("{}", format_schedule(s));
  }
  fmt::print("\n{}", table({summarise(name, s, costs, o.offload)}));
  if (!o.png.empty()) {
    const std::vector<StageCosts> c = costs.per_stage(s);
    const SyncGroups g = costs.groups(s);
    draw(o.png,
         fmt::format("{}: P={}, M={}, V={}, {}", name, s.stages, s.microbatches, s.chunks,
                     describe(o, costs)),
         "time (cost units)",
         {panel(s, "planned (simulated)", simulate(s, c, g),
                mean(stage_bubble_fractions(s, c, g)))});
  }
}

}  // namespace

void add_schedule_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "schedule",
      "Print a pipeline schedule's timeline, bubble and peak activation memory; draw it as a PNG; "
      "or compare a --trace of `strait train` with its plan");
  cmd->footer(kFooter);
  auto o = std::make_shared<ScheduleOptions>();
  cmd->add_option(
         "--schedule", o->schedule,
         "gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev, or all (a table of every schedule)")
      ->capture_default_str();
  cmd->add_option("-p,--stages", o->stages, "P: pipeline ranks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("-m,--microbatches", o->microbatches, "M: microbatches per step")
      ->check(CLI::Range(1, 32767))
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks,
                  "V: model chunks per rank (interleaved; 0 = the schedule's own: 2 for "
                  "interleaved, zbv and dualpipev, 1 otherwise)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--costs", o->costs,
                  "F,B,W: times of one microbatch on one stage, or a trace file (see below)")
      ->capture_default_str();
  cmd->add_option("--send", o->send, "Time a SEND occupies its rank (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--recv", o->recv, "Time a RECV occupies its rank once its data is there")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--latency", o->latency, "Per message, from its send to its arrival")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--bytes", o->bytes, "Bytes per message (with --bandwidth)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--bandwidth", o->bandwidth, "Bytes per time unit of a link (0: unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--allreduce", o->allreduce, "ALLREDUCE_GRAD's time once its group is there")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--optim", o->optim, "OPTIM's time once every rank is there")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-norm-sync", o->no_norm_sync,
                "OPTIM waits for no other rank (strait train --grad-clip 0)");
  cmd->add_option("--offload", o->offload,
                  "Activation offload with this prefetch distance (computes); -1 = none")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--all-actions", o->all_actions, "Also print every rank's full action list");
  cmd->add_option("--csv", o->csv_out, "Write the schedule as CSV (one row per rank, \"2F0\")");
  cmd->add_option("--from-csv", o->from_csv, "Read the schedule from a CSV instead of --schedule");
  cmd->add_option("--png", o->png, "Write a Gantt chart (one row per rank) to this PNG");
  cmd->add_option("--from-trace", o->from_trace,
                  "A Chrome trace from `strait train --trace`: measured vs planned bubble");
  cmd->add_option("--step", o->step, "With --from-trace: the step to show (-1 = the last)")
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    run_schedule(*o);
    exit_code = 0;
  });
}

}  // namespace strait::tools
