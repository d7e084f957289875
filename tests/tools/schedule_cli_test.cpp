// `strait schedule` as a user runs it: the timeline and table of a schedule, a valid PNG Gantt
// chart, CSV out and back in, a trace set beside its plan, and clear errors for bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_trace.h"
#include "tests/common/process.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using strait::test::contains;
using strait::test::read_file;
using strait::test::TempDir;

int strait_schedule(const TempDir& dir, const std::vector<std::string>& args, std::string& output) {
  std::vector<std::string> all = {"schedule"};
  all.insert(all.end(), args.begin(), args.end());
  strait::test::Process p(STRAIT_BIN, all, dir.path() / "out.txt");
  const int code = p.exit_code(120s);
  output = p.output();
  return code;
}

// A PNG starts with its 8-byte signature and an IHDR chunk holding width and height.
void expect_png(const fs::path& path) {
  ASSERT_TRUE(fs::exists(path)) << path;
  const std::string bytes = read_file(path);
  ASSERT_GT(bytes.size(), 33U);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  EXPECT_GT(be32(16), 100U);  // width
  EXPECT_GT(be32(20), 100U);  // height
}

TEST(ScheduleCli, PrintsTimelineAndTableAndWritesAPng) {
  const TempDir dir;
  const fs::path png = dir.path() / "zbh1.png";
  std::string out;
  ASSERT_EQ(strait_schedule(dir,
                            {"--schedule", "zb-h1", "--stages", "4", "--microbatches", "8",
                             "--costs", "1,1,1", "--png", png.string()},
                            out),
            0)
      << out;
  // (P-1)/(3M+P-1) = 3/27 (Qi et al. 2023).
  EXPECT_TRUE(contains(out, "bubble fraction 0.111")) << out;
  EXPECT_TRUE(contains(out, "stage 3 .  .  .  F0 B0 F1 B1")) << out;
  EXPECT_TRUE(contains(out, "zb-h1             1       no         27    0.111")) << out;
  expect_png(png);
}

TEST(ScheduleCli, TableOfEverySchedule) {
  const TempDir dir;
  std::string out;
  ASSERT_EQ(strait_schedule(dir, {"--schedule", "all", "-p", "4", "-m", "8"}, out), 0) << out;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"}) {
    EXPECT_TRUE(contains(out, name)) << name << " missing in " << out;
  }
  // 1F1B: (P-1)/(M+P-1) = 3/11, rank 0 holds P = 4 stashes, 2 with offload at distance 1.
  EXPECT_TRUE(contains(out, "1f1b              1       no         33    0.273                  4"))
      << out;
  EXPECT_TRUE(contains(out, "1f1b              1      d=1         33    0.273                  2"))
      << out;
}

TEST(ScheduleCli, CsvOutAndBackInGivesTheSameTimeline) {
  const TempDir dir;
  const fs::path csv = dir.path() / "zbv.csv";
  std::string first;
  ASSERT_EQ(strait_schedule(dir, {"--schedule", "zbv", "-p", "3", "-m", "6", "--csv", csv.string()},
                            first),
            0)
      << first;
  EXPECT_TRUE(contains(read_file(csv), "0F0,0SEND_F0")) << read_file(csv);
  std::string second;
  ASSERT_EQ(strait_schedule(dir, {"--from-csv", csv.string()}, second), 0) << second;
  const auto timeline = [](const std::string& s) { return s.substr(s.find("time ")); };
  EXPECT_EQ(timeline(first).substr(0, timeline(first).find("\n\n")),
            timeline(second).substr(0, timeline(second).find("\n\n")));
}

// A trace of 1F1B, P = 2, M = 4 that ran exactly as simulated with every kind of action priced
// (us): F 100, B 150, W 0, sends 10, transfers 40, ALLREDUCE_GRAD 20 and OPTIM 30 past their
// collectives' waits.
std::string priced_trace() {
  using namespace strait::sched;
  const Schedule plan = make_1f1b(2, 4);
  std::vector<StageCosts> costs(2);
  for (StageCosts& c : costs) {
    c.compute = ActionCosts{100.0, 150.0, 0.0};
    c.send = 10.0;
    c.link.latency = 40.0;
    c.allreduce = 20.0;
    c.optim = 30.0;
  }
  const Timeline tl = simulate(plan, costs, data_parallel_sync_groups(2));
  std::vector<TraceRecord> records;
  for (int step = 0; step < 4; ++step) {
    for (std::size_t r = 0; r < tl.stages.size(); ++r) {
      for (const TimedAction& t : tl.stages[r]) {
        const double at = 1e6 + step * 1e4;
        records.push_back({static_cast<int>(r), step, t.action, at + t.start, at + t.end});
      }
    }
  }
  return chrome_trace_json(TraceInfo{"1f1b", 2, 4, 1, -1}, records);
}

TEST(ScheduleCli, ATraceIsSetBesideItsPlan) {
  // The measured bubble must equal the plan priced with the measured costs; the plan priced with
  // compute alone misses the transfers and the optimizer: makespan (M+P-1)(f+b) = 1250 us there.
  const TempDir dir;
  const fs::path trace = dir.path() / "trace.json";
  std::ofstream(trace) << priced_trace();
  const fs::path png = dir.path() / "vs.png";
  std::string out;
  ASSERT_EQ(strait_schedule(dir, {"--from-trace", trace.string(), "--png", png.string()}, out), 0)
      << out;
  EXPECT_TRUE(contains(out,
                       "0         100.0    150.0      0.0    10.0     0.0     40.0      "
                       "20.0    30.0     0.0"))
      << out;
  EXPECT_TRUE(contains(out,
                       "median relative difference over steps 2..3: +0.0% (compute-only "
                       "plan: +"))
      << out;
  EXPECT_TRUE(contains(out, "(relative +0.0%)")) << out;
  EXPECT_TRUE(contains(out, "step 3 of")) << out;
  expect_png(png);
}

TEST(ScheduleCli, CostsComeFromATraceOrFromFlags) {
  // 1F1B, P = 2, M = 4, F 100, B 150, with the trace's communication: rank 1's B3 ends at
  // 100 + 10 + 40 (F0 reaches it) + 4 * 250 + 3 * 10 (its SEND_Bs between) = 1180 at best; the
  // table must price more than the compute-only 1250 us.
  const TempDir dir;
  const fs::path trace = dir.path() / "trace.json";
  std::ofstream(trace) << priced_trace();
  std::string from_trace;
  ASSERT_EQ(
      strait_schedule(dir, {"--schedule", "1f1b", "-p", "2", "-m", "4", "--costs", trace.string()},
                      from_trace),
      0)
      << from_trace;
  EXPECT_TRUE(contains(from_trace, "costs F,B,W = 100,150,0 per stage (means of")) << from_trace;
  EXPECT_TRUE(contains(from_trace, "send 10, recv 0, transfer 40, allreduce 20, optim 30"))
      << from_trace;
  // The same costs by hand give the same table row.
  std::string by_hand;
  ASSERT_EQ(
      strait_schedule(dir, {"--schedule", "1f1b",        "-p",        "2",       "-m",
                            "4",          "--costs",     "100,150,0", "--send",  "10",
                            "--latency",  "20",          "--bytes",   "2000",    "--bandwidth",
                            "100",        "--allreduce", "20",        "--optim", "30"},
                      by_hand),
      0)
      << by_hand;
  const auto row = [](const std::string& s) { return s.substr(s.find("\n1f1b ") + 1); };
  EXPECT_EQ(row(from_trace), row(by_hand));
  // Free communication: (M+P-1)(f+b) = 1250, bubble 1/5.
  std::string free;
  ASSERT_EQ(strait_schedule(
                dir, {"--schedule", "1f1b", "-p", "2", "-m", "4", "--costs", "100,150,0"}, free),
            0)
      << free;
  EXPECT_TRUE(contains(free, "1f1b              1       no       1250    0.200")) << free;
  EXPECT_FALSE(contains(by_hand, "1f1b              1       no       1250")) << by_hand;
}

TEST(ScheduleCli, BadInputFailsWithAClearMessage) {
  const TempDir dir;
  std::string out;
  EXPECT_EQ(strait_schedule(dir, {"--schedule", "zb-h2"}, out), 2) << out;
  EXPECT_TRUE(contains(out, "choose one of gpipe, 1f1b, interleaved, zb-h1, zbv")) << out;
  EXPECT_EQ(strait_schedule(dir, {"--schedule", "interleaved", "-p", "4", "-m", "6"}, out), 2)
      << out;
  EXPECT_TRUE(contains(out, "use 8 microbatches or 4")) << out;
  EXPECT_EQ(strait_schedule(dir, {"--schedule", "1f1b", "--costs", "1,x,1"}, out), 2) << out;
  EXPECT_TRUE(contains(out, "--costs '1,x,1'")) << out;
  const fs::path bad = dir.path() / "bad.csv";
  std::ofstream(bad) << "0F0,0W0,0B0\n";
  EXPECT_EQ(strait_schedule(dir, {"--from-csv", bad.string()}, out), 2) << out;
  EXPECT_TRUE(contains(out, "rank 0 runs 0W0 (action 1) before 0B0 (action 2)")) << out;
}

}  // namespace
