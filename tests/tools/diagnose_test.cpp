// `strait diagnose` (tools/diagnose): the analysis on hand-written dumps (who waits, who never
// entered, who wrote no dump, mismatches, p2p waits, several jobs in one folder), the command on a
// folder, and two real hung jobs: `strait train` and a torch DDP job on the strait backend, each
// with one rank SIGSTOPped mid-run; the others time out (3 s) and dump, and the report names the
// stopped rank from the dumps alone.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/common/process.h"
#include "tests/common/small_model.h"
#include "tests/common/strait_process.h"
#include "tests/common/temp_dir.h"
#include "tests/common/word_corpus.h"
#include "tools/diagnose/analysis.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using strait::test::child_processes;
using strait::test::contains;
using strait::test::process_environment;
using strait::test::process_exists;
using strait::test::Strait;
using strait::test::TempDir;
using strait::tools::diagnose::analyse;
using strait::tools::diagnose::Dump;
using strait::tools::diagnose::parse_dump;

// One entry of a hand-written dump: a collective (seq >= 0) or a p2p op (seq -1, peer).
struct E {
  long seq;
  std::string kind;
  std::string state;
  long count = 2;
  int peer = -1;
};

// The JSON of one process's dump with one communicator (comm_id 0, world ranks 0..size-1).
std::string dump_text(int rank, int size, const std::vector<E>& entries, long long time_ns = 1000,
                      const std::string& job = "h:1") {
  std::string list;
  long id = 1;
  for (const E& e : entries) {
    if (!list.empty()) list += ",\n";
    list += "{\"id\": " + std::to_string(id++) + ", \"seq\": " + std::to_string(e.seq) +
            ", \"kind\": \"" + e.kind +
            "\", \"dtype\": \"f32\", \"count\": " + std::to_string(e.count) +
            ", \"bytes\": " + std::to_string(4 * e.count) +
            ", \"algorithm\": \"ring\", \"device\": false, \"state\": \"" + e.state +
            "\", \"enqueued_unix_ns\": 100, \"started_unix_ns\": 200, \"ended_unix_ns\": 0" +
            (e.peer >= 0 ? ", \"peer\": " + std::to_string(e.peer) + ", \"tag\": 0" : "") +
            (e.state == "failed"
                 ? std::string(", \"error_code\": \"Timeout\", \"error\": \"did not finish\"")
                 : std::string()) +
            "}";
  }
  std::string world;
  for (int r = 0; r < size; ++r) world += (r > 0 ? ", " : "") + std::to_string(r);
  return "{\"format\": \"strait-flight-recorder\", \"version\": 1, \"rank\": " +
         std::to_string(rank) + ", \"host\": \"h\", \"pid\": " + std::to_string(100 + rank) +
         ", \"job\": \"" + job + "\", \"trigger\": \"timeout\", \"reason\": \"x\", " +
         "\"time_unix_ns\": " + std::to_string(time_ns) +
         ", \"communicators\": [{\"comm_id\": 0, \"rank\": " + std::to_string(rank) +
         ", \"size\": " + std::to_string(size) + ", \"generation\": 0, \"world_ranks\": [" + world +
         "], \"capacity\": 512, \"recorded\": " + std::to_string(entries.size()) +
         ", \"entries\": [" + list + "]}]}";
}

Dump dump(int rank, int size, const std::vector<E>& entries, long long time_ns = 1000,
          const std::string& job = "h:1") {
  return parse_dump(dump_text(rank, size, entries, time_ns, job), "rank" + std::to_string(rank));
}

TEST(Diagnose, NamesTheRankThatNeverEnteredTheOperationTheOthersWaitIn) {
  const std::vector<E> done = {{55, "allreduce", "finished"}, {56, "allreduce", "finished"}};
  std::vector<E> waiting = done;
  waiting.push_back({57, "allreduce", "failed"});
  const auto report =
      analyse({dump(0, 4, waiting), dump(1, 4, waiting), dump(2, 4, done),
               dump(3, 4, {{56, "allreduce", "finished"}, {57, "allreduce", "started"}})});
  EXPECT_TRUE(contains(report.text, "ranks 0, 1, 3 wait in allreduce #57 (f32 x 2, ring)"))
      << report.text;
  EXPECT_TRUE(contains(report.text, "rank 2 never entered it; its last finished operation is #56"))
      << report.text;
  EXPECT_TRUE(contains(report.text, "first error: Timeout: did not finish")) << report.text;
  EXPECT_EQ(report.suspects, std::vector<int>{2});
  EXPECT_FALSE(report.mismatch);
}

TEST(Diagnose, NamesARankWithoutADumpAndRanksThatWentOn) {
  // Rank 1 wrote no dump; rank 2 finished #9 (say, a broadcast root) and waits in #10.
  const auto report =
      analyse({dump(0, 3, {{8, "broadcast", "finished"}, {9, "allreduce", "started"}}),
               dump(2, 3, {{9, "allreduce", "finished"}, {10, "allreduce", "started"}})});
  EXPECT_TRUE(contains(report.text, "2 dump(s) from ranks 0, 2 of 3 rank(s); no dump from rank 1"))
      << report.text;
  EXPECT_TRUE(contains(report.text, "rank 0 waits in allreduce #9")) << report.text;
  EXPECT_TRUE(contains(report.text, "rank 2 finished it (and went on)")) << report.text;
  EXPECT_TRUE(contains(report.text, "rank 1 wrote no dump")) << report.text;
  EXPECT_EQ(report.suspects, std::vector<int>{1});
  EXPECT_TRUE(
      contains(report.text, "look first at rank 1:\n  rank 1 wrote no dump while ranks 0, 2 wait"))
      << report.text;
}

TEST(Diagnose, ReportsAMismatchAtOneSequenceNumber) {
  const auto report = analyse(
      {dump(0, 2, {{4, "allreduce", "failed", 8}}), dump(1, 2, {{4, "broadcast", "failed", 8}})});
  EXPECT_TRUE(report.mismatch);
  EXPECT_TRUE(contains(report.text,
                       "mismatch at #4: rank 0 called allreduce (f32 x 8); rank 1 called broadcast "
                       "(f32 x 8)"))
      << report.text;
  // Counts differ too.
  const auto counts = analyse(
      {dump(0, 2, {{4, "allreduce", "failed", 8}}), dump(1, 2, {{4, "allreduce", "failed", 9}})});
  EXPECT_TRUE(counts.mismatch) << counts.text;
}

TEST(Diagnose, ReportsPointToPointWaitsAndIdleCommunicators) {
  const auto report = analyse(
      {dump(0, 2, {{-1, "recv", "started", 64, 1}}), dump(1, 2, {{3, "allreduce", "finished"}})});
  EXPECT_TRUE(contains(report.text, "rank 0 waits in recv from 1 (tag 0, 256 B)")) << report.text;
  const auto idle = analyse(
      {dump(0, 2, {{3, "allreduce", "finished"}}), dump(1, 2, {{3, "allreduce", "finished"}})});
  EXPECT_TRUE(contains(idle.text, "nothing in flight; last finished operation #3")) << idle.text;
  EXPECT_TRUE(idle.suspects.empty());
}

TEST(Diagnose, KeepsTheNewestJobAndTheNewestDumpOfEachRank) {
  const auto report = analyse({dump(0, 2, {{1, "allreduce", "started"}}, 5000, "h:2"),
                               dump(1, 2, {{0, "allreduce", "finished"}}, 5000, "h:2"),
                               dump(1, 2, {{1, "allreduce", "started"}}, 4000, "h:2"),
                               dump(0, 4, {{7, "allreduce", "started"}}, 100, "h:1")});
  EXPECT_TRUE(contains(report.text, "left out 1 dump(s) of other jobs")) << report.text;
  EXPECT_TRUE(contains(report.text, "left out 1 older dump(s)")) << report.text;
  EXPECT_TRUE(contains(report.text, "rank 1 never entered it")) << report.text;
}

TEST(Diagnose, RefusesFilesThatAreNotDumps) {
  EXPECT_THROW(parse_dump("{}", "x.json"), strait::Error);
  EXPECT_THROW(parse_dump("not json", "x.json"), strait::Error);
}

TEST(DiagnoseCommand, ReadsAFolderOfDumps) {
  const TempDir dir;
  const std::vector<E> done = {{0, "allreduce", "finished"}};
  std::ofstream(dir.path() / "strait-fr-rank0-h-100.json")
      << dump_text(0, 2, {{0, "allreduce", "finished"}, {1, "allreduce", "failed"}});
  std::ofstream(dir.path() / "strait-fr-rank1-h-101.json") << dump_text(1, 2, done);
  std::ofstream(dir.path() / "unrelated.json") << "{}";
  Strait run({"diagnose", dir.str()}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(30s), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "rank 1 never entered it; its last finished operation is #0"))
      << run.output();
  const TempDir empty;
  Strait none({"diagnose", empty.str()}, empty.path() / "out");
  EXPECT_EQ(none.exit_code(30s), 2) << none.output();
  EXPECT_TRUE(contains(none.output(), "holds no flight-recorder dump")) << none.output();
}

// --- Real hung jobs ------------------------------------------------------------------------------

// The ranks (RANK in their environment) among `launcher`'s children, once its output shows
// `marker`; empty after 120 s without (three torch imports on a loaded machine).
std::map<int, pid_t> ranks_once(const Strait& launcher, const std::string& marker, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  std::map<int, pid_t> ranks;
  while (std::chrono::steady_clock::now() < deadline) {
    if (contains(launcher.output(), marker)) {
      ranks.clear();
      for (const pid_t child : child_processes(launcher.pid())) {
        const auto env = process_environment(child);
        if (const auto it = env.find("RANK"); it != env.end()) ranks[std::stoi(it->second)] = child;
      }
      if (static_cast<int>(ranks.size()) == expected) return ranks;
    }
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

// Stops rank `victim` of a running job, waits for the job to end, resumes and kills the victim
// (nothing is left running), then checks that `strait diagnose` names it from the dumps alone.
void stop_rank_and_diagnose(Strait& job, const std::map<int, pid_t>& ranks, int victim,
                            const fs::path& dumps, const fs::path& scratch) {
  ASSERT_EQ(kill(ranks.at(victim), SIGSTOP), 0);
  const int code = job.exit_code(30s);
  for (const auto& [rank, pid] : ranks) {
    if (process_exists(pid)) {
      kill(pid, SIGCONT);
      kill(pid, SIGKILL);
    }
  }
  EXPECT_NE(code, 0) << job.output();
  Strait diagnose({"diagnose", dumps.string()}, scratch / "diagnose.out");
  ASSERT_EQ(diagnose.exit_code(30s), 0) << diagnose.output();
  const std::string report = diagnose.output();
  const std::string name = "rank " + std::to_string(victim);
  EXPECT_TRUE(contains(report, "look first at " + name + ":")) << report << job.output();
  // A stopped rank writes nothing (the launcher does not ask a suspended rank for its dump).
  EXPECT_TRUE(contains(report, "; no dump from " + name + "\n")) << report;
  EXPECT_TRUE(contains(report, "  " + name + " wrote no dump while ")) << report;
  std::ofstream(scratch / "report.txt") << report;  // for the reader of a failed run
}

TEST(DiagnoseHungJob, NamesTheStoppedRankOfStraitTrain) {
  const TempDir dir;
  const fs::path corpus = strait::test::write_word_corpus(dir.path());
  const fs::path dumps = dir.path() / "fr";
  Strait job(
      strait::test::joined({"train", "--stages", "2", "--replicas", "2", "--microbatches", "4"},
                           strait::test::small_model_flags(2),
                           {"--microbatch-size", "2", "--steps", "1000000", "--timeout", "3",
                            "--eval-sequences", "8", "--data", corpus.string()}),
      dir.path() / "out", {"STRAIT_FR_DUMP_DIR=" + dumps.string()});
  const auto ranks = ranks_once(job, "\nstep ", 4);
  ASSERT_EQ(ranks.size(), 4U) << job.output();
  stop_rank_and_diagnose(job, ranks, 2, dumps, dir.path());
}

TEST(DiagnoseHungJob, NamesTheStoppedRankOfATorchDdpJob) {
  const TempDir dir;
  strait::test::Process probe("/usr/bin/python3", {"-c", "import torch"}, dir.path() / "probe");
  if (probe.exit_code(60s) != 0) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  const fs::path dumps = dir.path() / "fr";
  Strait job(
      {"run", "-n", "3", "--", "/usr/bin/python3", STRAIT_SOURCE_DIR "/tests/tools/fr_ddp.py"},
      dir.path() / "out",
      {"STRAIT_FR_DUMP_DIR=" + dumps.string(), "PYTHONPATH=" STRAIT_SOURCE_DIR "/python",
       "STRAIT_LIBRARY=" STRAIT_LIBRARY_PATH, "PYTHONWARNINGS=ignore::UserWarning",
       "PYTHONDONTWRITEBYTECODE=1"});
  const auto ranks = ranks_once(job, "step 3\n", 3);
  ASSERT_EQ(ranks.size(), 3U) << job.output();
  stop_rank_and_diagnose(job, ranks, 1, dumps, dir.path());
}

}  // namespace
