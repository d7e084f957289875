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
#include <vector>

#include "core/error.h"
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
(gpipe, 1f1b, interleaved) costs B + W. The text timeline counts in units of 1/V of a cost unit
and needs whole-number costs; otherwise the per-rank order is printed.
Peak activation memory is in stages' worth of stashes per rank (chunk stashes / V): 1F1B's rank 0
holds P. With --offload D, stashes leave the model after their F and come back D computes ahead
of their B (scheduler/schedule.h, add_activation_offload).
--schedule all prints the table for every schedule with and without offload. The zero-bubble
schedules (zb-h1, zbv) are planned with --costs (list scheduling on those times), the others do
not depend on them.
--png FILE draws a Gantt chart with /usr/bin/python3 and matplotlib (tools/plot/plot_schedule.py;
STRAIT_PLOT_DIR overrides where it is looked for).
--from-trace FILE reads `strait train --trace FILE`: for every step, the measured bubble (mean over
ranks) beside the plan's, simulated with that step's mean F, B and W time of each stage, and the
median relative difference from the third step on; then one step (the last, or --step) per rank;
with --png it draws that step's plan above what ran.)";

struct ScheduleOptions {
  std::string schedule = "1f1b";
  int stages = 4;
  int microbatches = 8;
  int chunks = 0;
  std::string costs = "1,1,1";
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
                            "or 1.0,1.1,0.9",
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

struct Row {
  std::string name;
  int chunks = 1;
  int offload = -1;
  double makespan = 0;
  double bubble = 0;
  double peak_stages = 0;  // max over ranks, in stages' worth
  int peak_w = 0;          // max over ranks, chunk stashes held for W
};

Row summarise(const std::string& name, const Schedule& s, const ActionCosts& costs, int offload) {
  Row row;
  row.name = name;
  row.chunks = s.chunks;
  row.offload = offload;
  const ActionCosts c = per_chunk(costs, s.chunks);
  row.makespan = simulate(s, c).makespan;
  row.bubble = bubble_fraction(s, c);
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
    out += fmt::format("{:<12} {:>6} {:>8} {:>10.4g} {:>8.3f} {:>18.3g} {:>12}\n", r.name, r.chunks,
                       r.offload < 0 ? std::string("no") : fmt::format("d={}", r.offload),
                       r.makespan, r.bubble, r.peak_stages, r.peak_w);
  }
  return out;
}

// The schedule with the zero-bubble generators planning with the given costs (per chunk).
Schedule build(ScheduleKind kind, int stages, int microbatches, int chunks,
               const ActionCosts& costs) {
  const int v = chunks != 0
                    ? chunks
                    : (kind == ScheduleKind::Interleaved || kind == ScheduleKind::ZbV ? 2 : 1);
  return make_schedule(kind, stages, microbatches, chunks, per_chunk(costs, v));
}

bool integral(double x) {
  return std::abs(x - std::round(x)) < 1e-9;
}

std::string plot_script() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("STRAIT_PLOT_DIR")) dirs.emplace_back(env);
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

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

struct StepBubbles {
  double measured = 0;
  double planned = 0;
};

// A measured step's mean F, B and W times: per model stage, and over all stages. Without W the
// measured B holds the weight gradients too; the simulator adds w to such a B.
struct MeasuredCosts {
  std::vector<ActionCosts> per_stage;
  ActionCosts overall;
};

MeasuredCosts measured_costs(const Timeline& measured, std::size_t stages, std::int64_t step) {
  std::vector<std::vector<double>> f(stages), b(stages), w(stages);
  for (const auto& list : measured.stages) {
    for (const TimedAction& t : list) {
      const auto v = static_cast<std::size_t>(t.action.stage);
      if (v >= stages) continue;
      const double d = t.end - t.start;
      if (t.action.kind == ActionKind::F) f[v].push_back(d);
      if (t.action.kind == ActionKind::B) b[v].push_back(d);
      if (t.action.kind == ActionKind::W) w[v].push_back(d);
    }
  }
  MeasuredCosts out;
  out.per_stage.resize(stages);
  std::vector<double> all_f, all_b, all_w;
  for (std::size_t v = 0; v < stages; ++v) {
    if (f[v].empty() || b[v].empty()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--from-trace: step {} has no F or B of stage {}; pick a complete "
                              "step with --step",
                              step, v));
    }
    out.per_stage[v] = ActionCosts{mean(f[v]), mean(b[v]), w[v].empty() ? 0.0 : mean(w[v])};
    all_f.insert(all_f.end(), f[v].begin(), f[v].end());
    all_b.insert(all_b.end(), b[v].begin(), b[v].end());
    all_w.insert(all_w.end(), w[v].begin(), w[v].end());
  }
  out.overall = ActionCosts{mean(all_f), mean(all_b), mean(all_w)};
  return out;
}

// One step of a trace: its mean bubble over the ranks, and the plan's with that step's per-stage
// mean F, B, W times.
StepBubbles step_bubbles(const Schedule& plan, const LoadedTrace& trace, std::int64_t step) {
  const Timeline measured = measured_timeline(trace, step, plan.stages);
  const MeasuredCosts costs =
      measured_costs(measured, static_cast<std::size_t>(stage_count(plan)), step);
  StepBubbles out;
  for (double busy : measured.busy) {
    out.measured += (measured.makespan - busy) / measured.makespan / plan.stages;
  }
  out.planned = mean(stage_bubble_fractions(plan, costs.per_stage));
  return out;
}

void run_from_trace(const ScheduleOptions& o) {
  const LoadedTrace trace = parse_chrome_trace(read_file(o.from_trace, "--from-trace"));
  const TraceInfo& info = trace.info;
  Schedule plan = make_schedule(parse_schedule_kind(info.schedule), info.stages, info.microbatches,
                                info.chunks);
  if (info.offload_prefetch >= 0) plan = add_activation_offload(plan, info.offload_prefetch);
  std::int64_t first_step = std::numeric_limits<std::int64_t>::max();
  std::int64_t last_step = -1;
  for (const TraceRecord& r : trace.records) {
    first_step = std::min(first_step, r.step);
    last_step = std::max(last_step, r.step);
  }
  // Every step's mean bubble, measured and planned, to see the noise of single steps.
  if (last_step > first_step) {
    fmt::print("{:<6} {:>16} {:>16} {:>10}\n", "step", "measured bubble", "planned bubble",
               "relative");
    std::vector<double> rel;
    for (std::int64_t k = first_step; k <= last_step; ++k) {
      const StepBubbles sb = step_bubbles(plan, trace, k);
      const double r = sb.planned > 0 ? (sb.measured - sb.planned) / sb.planned : 0.0;
      if (k >= first_step + 2) rel.push_back(r);  // the first two steps warm up
      fmt::print("{:<6} {:>16.3f} {:>16.3f} {:>+9.1f}%\n", k, sb.measured, sb.planned, 100 * r);
    }
    if (!rel.empty()) {
      std::sort(rel.begin(), rel.end());
      fmt::print("median relative difference over steps {}..{}: {:+.1f}%\n\n", first_step + 2,
                 last_step, 100 * rel[rel.size() / 2]);
    }
  }
  const std::int64_t step = o.step < 0 ? last_step : o.step;
  const Timeline measured = measured_timeline(trace, step, info.stages);
  const MeasuredCosts measured_means =
      measured_costs(measured, static_cast<std::size_t>(stage_count(plan)), step);
  const std::vector<ActionCosts>& stage_costs = measured_means.per_stage;
  const ActionCosts& costs = measured_means.overall;
  const Timeline planned = simulate(plan, stage_costs);
  const std::vector<double> plan_bubble = stage_bubble_fractions(plan, stage_costs);
  fmt::print(
      "{} schedule, {} ranks x {} chunks, {} microbatches{}; step {} of {}\n"
      "mean measured costs (us): F {:.1f}, B {:.1f}, W {:.1f}; the plan is simulated with each "
      "stage's own means\n",
      info.schedule, info.stages, info.chunks, info.microbatches,
      info.offload_prefetch >= 0 ? fmt::format(", offload d={}", info.offload_prefetch) : "", step,
      o.from_trace, costs.f, costs.b, costs.w);
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

void run_schedule(const ScheduleOptions& o) {
  if (!o.from_trace.empty()) {
    run_from_trace(o);
    return;
  }
  const ActionCosts costs = parse_costs(o.costs);
  if (o.schedule == "all") {
    std::vector<Row> rows;
    for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv"}) {
      const ScheduleKind kind = parse_schedule_kind(name);
      std::vector<int> chunk_list = {0};
      if (kind == ScheduleKind::Interleaved) chunk_list = {2, 4};
      for (int v : chunk_list) {
        Schedule s;
        try {
          s = build(kind, o.stages, o.microbatches, v, costs);
        } catch (const Error& e) {
          fmt::print("{} (V={}): {}\n", name, v, e.message());
          continue;
        }
        rows.push_back(summarise(name, s, costs, -1));
        rows.push_back(summarise(name, add_activation_offload(s, o.offload < 0 ? 1 : o.offload),
                                 costs, o.offload < 0 ? 1 : o.offload));
      }
    }
    fmt::print("P = {}, M = {}, costs F,B,W = {} per stage\n{}", o.stages, o.microbatches, o.costs,
               table(rows));
    return;
  }
  Schedule s = o.from_csv.empty() ? make_schedule(parse_schedule_kind(o.schedule), o.stages,
                                                  o.microbatches, o.chunks)
                                  : schedule_from_csv(read_file(o.from_csv, "--from-csv"));
  const std::string name = o.from_csv.empty() ? o.schedule : o.from_csv;
  if (o.offload >= 0) s = add_activation_offload(s, o.offload);
  if (!o.csv_out.empty()) {
    write_file(o.csv_out, schedule_to_csv(s), "--csv");
    fmt::print("wrote {}\n", o.csv_out);
  }
  fmt::print("{}: {} ranks x {} chunks, {} microbatches{}\n", name, s.stages, s.chunks,
             s.microbatches, o.offload >= 0 ? fmt::format(", offload d={}", o.offload) : "");
  if (o.all_actions) fmt::print("{}", format_schedule(s, ScheduleDetail::All));
  if (integral(costs.f) && integral(costs.b) && integral(costs.w)) {
    fmt::print("{}", format_timeline(s, static_cast<int>(std::lround(costs.f)),
                                     static_cast<int>(std::lround(costs.b)),
                                     static_cast<int>(std::lround(costs.w))));
  } else if (!o.all_actions) {
    fmt::print("{}", format_schedule(s));
  }
  fmt::print("\n{}", table({summarise(name, s, costs, o.offload)}));
  if (!o.png.empty()) {
    const ActionCosts c = per_chunk(costs, s.chunks);
    draw(o.png,
         fmt::format("{}: P={}, M={}, V={}, costs F,B,W = {}", name, s.stages, s.microbatches,
                     s.chunks, o.costs),
         "time (cost units)",
         {panel(s, "planned (simulated)", simulate(s, c), bubble_fraction(s, c))});
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
  cmd->add_option("--schedule", o->schedule,
                  "gpipe, 1f1b, interleaved, zb-h1, zbv, or all (a table of every schedule)")
      ->capture_default_str();
  cmd->add_option("-p,--stages", o->stages, "P: pipeline ranks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("-m,--microbatches", o->microbatches, "M: microbatches per step")
      ->check(CLI::Range(1, 32767))
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks,
                  "V: model chunks per rank (interleaved; 0 = the schedule's own: 2 for "
                  "interleaved and zbv, 1 otherwise)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--costs", o->costs, "F,B,W: times of one microbatch on one stage (see below)")
      ->capture_default_str();
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
