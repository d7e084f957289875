// Spawns the built `strait` binary and checks `strait run` from the outside, as a user sees it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/strait_process.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using strait::test::contains;
using strait::test::parse_env;
using strait::test::process_exists;
using strait::test::read_file;
using strait::test::read_pid;
using strait::test::TempDir;
using strait::test::wait_for_files;

// `strait ARGS...` running with stdout and stderr captured in a file.
using strait::test::Strait;

// A shell snippet run by every rank with the test directory as $0. It writes its pid to
// $0/pid.$RANK atomically, so a reader never sees a partial file.
std::string write_pid() {
  return R"(echo $$ > "$0/pid.$RANK.tmp" && mv "$0/pid.$RANK.tmp" "$0/pid.$RANK"; )";
}

TEST(StraitRun, EveryRankSeesTorchrunsEnvironment) {
  const TempDir dir;
  setenv("STRAIT_TEST_INHERITED", "inherited value", 1);
  Strait run({"run", "-n", "3", "--", "sh", "-c", R"(env > "$0/env.$RANK")", dir.str()},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0) << run.output();
  std::set<std::string> ports;
  for (int r = 0; r < 3; ++r) {
    auto env = parse_env(read_file(dir.path() / ("env." + std::to_string(r))));
    const std::string rank = std::to_string(r);
    EXPECT_EQ(env["RANK"], rank);
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_RANK"], rank);
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_RANK"], rank);
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["STRAIT_TEST_INHERITED"], "inherited value");
    const int port = std::stoi(env["MASTER_PORT"]);
    EXPECT_GE(port, 1);
    EXPECT_LE(port, 65535);
    ports.insert(env["MASTER_PORT"]);
  }
  EXPECT_EQ(ports.size(), 1U) << "ranks disagree on MASTER_PORT";
}

// --elastic: the launcher hosts the store (the ranks are told so) and a failing rank does not stop
// the others; the job succeeds when some rank finishes it, and fails with the first failure's
// status when none does.
TEST(StraitRun, ElasticLetsTheOthersGoOnAndHostsTheStore) {
  const TempDir dir;
  const std::string script = R"(env > "$0/env.$RANK"; if [ "$RANK" = 1 ]; then exit 3; fi; )"
                             R"(sleep 1; touch "$0/done.$RANK")";
  Strait run({"run", "-n", "3", "--elastic", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(contains(out, "exited with status 3 (--elastic: the other ranks go on)")) << out;
  EXPECT_TRUE(contains(out, "elastic: the job's store is at 127.0.0.1:")) << out;
  EXPECT_TRUE(fs::exists(dir.path() / "done.0") && fs::exists(dir.path() / "done.2")) << out;
  for (int r = 0; r < 3; ++r) {
    auto env = parse_env(read_file(dir.path() / ("env." + std::to_string(r))));
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True") << r;
  }
  Strait all_fail({"run", "-n", "2", "--elastic", "--", "sh", "-c", "exit 5"}, dir.path() / "out2");
  EXPECT_EQ(all_fail.exit_code(), 5) << all_fail.output();
}

TEST(StraitRun, ExplicitAddressAndPortArePassedThrough) {
  const TempDir dir;
  Strait run({"run", "-n", "2", "--master-addr", "localhost", "--master-port", "29511", "--", "sh",
              "-c", R"(env > "$0/env.$RANK")", dir.str()},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0) << run.output();
  for (int r = 0; r < 2; ++r) {
    auto env = parse_env(read_file(dir.path() / ("env." + std::to_string(r))));
    EXPECT_EQ(env["MASTER_ADDR"], "localhost");
    EXPECT_EQ(env["MASTER_PORT"], "29511");
  }
}

TEST(StraitRun, RanksShareAStoreThroughTheLaunchEnvironment) {
  const TempDir dir;
  Strait run({"run", "-n", "4", "--", STORE_RANK_BIN, "rendezvous"}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0) << run.output();
  const std::string out = run.output();
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + ": rendezvous ok")) << out;
  }
}

TEST(StraitRun, AFailingRankIsNamedAndTheOthersAreStopped) {
  const TempDir dir;
  // Rank 1 fails once ranks 0 and 2 are up; they would sleep for 5 minutes.
  const std::string script = write_pid() + R"(
    if [ "$RANK" = 1 ]; then
      while [ ! -f "$0/pid.0" ] || [ ! -f "$0/pid.2" ]; do sleep 0.01; done
      exit 3
    fi
    exec sleep 300)";
  Strait run({"run", "-n", "3", "--", "sh", "-c", script, dir.str()}, dir.path() / "out");
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 3) << out;
  const pid_t failed = read_pid(dir.path() / "pid.1");
  EXPECT_TRUE(contains(out, "rank 1 (pid " + std::to_string(failed) + ") exited with status 3"))
      << out;
  // The ranks the launcher terminated are reported as such, not as failures.
  EXPECT_FALSE(contains(out, "rank 0 (pid")) << out;
  EXPECT_FALSE(contains(out, "rank 2 (pid")) << out;
  EXPECT_TRUE(contains(out, "ranks 0, 2: stopped by the launcher (SIGTERM)")) << out;
  for (const int r : {0, 2}) {
    const pid_t pid = read_pid(dir.path() / ("pid." + std::to_string(r)));
    EXPECT_FALSE(process_exists(pid)) << "rank " << r << " (pid " << pid << ") is still alive";
  }
}

// `strait run ... 2>&1 | head -1`: the reader goes after one line, and the launcher's own report
// of the failure then meets a closed pipe. It still returns the rank's status (it used to abort:
// the failed write threw, and a blocked SIGPIPE struck once the mask was restored).
TEST(StraitRun, AClosedOutputPipeLeavesTheRanksStatus) {
  const TempDir dir;
  const std::string pipeline = std::string("'") + STRAIT_BIN +
                               "' run -n 2 -- sh -c 'echo bad >&2; exit 3' 2>&1 | head -1; "
                               "exit ${PIPESTATUS[0]}";
  strait::test::Process run("/bin/bash", {"-c", pipeline}, dir.path() / "out");
  const int code = run.exit_code();
  EXPECT_EQ(code, 3) << run.output();
  EXPECT_EQ(run.output(), "bad\n");
}

TEST(StraitRun, ARankThatPrintedItsOwnErrorFirstHadAlreadyFailed) {
  const TempDir dir;
  // Rank 0 prints its own error and hangs (as a rank stuck in cleanup after a lost peer); rank 1
  // fails once that is said; rank 2 sleeps. The launcher's SIGTERM ends ranks 0 and 2, but rank 0
  // had failed before it, and the summary says so with its error line.
  const std::string script = write_pid() + R"(
    case "$RANK" in
      0) echo "some progress" >&2; echo "PeerLost: rank 1 stopped answering" >&2
         echo "a later warning" >&2; touch "$0/said.0"; exec sleep 300 ;;
      1) while [ ! -f "$0/said.0" ] || [ ! -f "$0/pid.2" ]; do sleep 0.01; done; exit 3 ;;
      *) exec sleep 300 ;;
    esac)";
  Strait run({"run", "-n", "3", "--", "sh", "-c", script, dir.str()}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 3);
  const std::string out = run.output();
  EXPECT_TRUE(contains(out,
                       "strait run:   rank 0: had already failed, then the launcher's SIGTERM "
                       "ended it: PeerLost: rank 1 stopped answering\n"))
      << out;
  EXPECT_TRUE(contains(out, "strait run:   rank 2: stopped by the launcher (SIGTERM)\n")) << out;
}

TEST(StraitRun, ARankThatOutlivesTheLaunchersSigtermIsReportedWithItsOwnStatus) {
  const TempDir dir;
  // Rank 0 fails once the others are set up. Rank 1 ignores SIGTERM and exits 6 when the test
  // says so, rank 2 exits 7 from a SIGTERM handler, rank 3 dies of SIGTERM. Only rank 3 was
  // stopped by the launcher; the others' statuses are theirs. (The stop timeout is long so that
  // SIGKILL cannot come first, however slow the machine.)
  const std::string script = R"(
    case "$RANK" in
      1) trap '' TERM ;;
      2) trap 'exit 7' TERM ;;
    esac
    )" + write_pid() + R"(
    case "$RANK" in
      0) while [ ! -f "$0/pid.1" ] || [ ! -f "$0/pid.2" ] || [ ! -f "$0/pid.3" ]; do
           sleep 0.01
         done
         exit 5 ;;
      1) while [ ! -f "$0/go" ]; do sleep 0.01; done; exit 6 ;;
      2) while :; do sleep 0.01; done ;;
      *) exec sleep 300 ;;
    esac)";
  Strait run({"run", "-n", "4", "--stop-timeout", "600", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  const auto deadline = Clock::now() + 30s;
  while (!contains(run.output(), "sending SIGTERM") && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  std::ofstream(dir.path() / "go").close();
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 5) << out;  // the first failure decides
  const auto pid = [&](int r) {
    return std::to_string(read_pid(dir.path() / ("pid." + std::to_string(r))));
  };
  EXPECT_TRUE(contains(out, "sending SIGTERM to ranks 1-3 (rank 0 failed)")) << out;
  EXPECT_TRUE(contains(out, "rank 0 (pid " + pid(0) + ") exited with status 5\n")) << out;
  EXPECT_TRUE(contains(
      out, "rank 1 (pid " + pid(1) + ") exited with status 6 after the launcher's SIGTERM"))
      << out;
  EXPECT_TRUE(contains(
      out, "rank 2 (pid " + pid(2) + ") exited with status 7 after the launcher's SIGTERM"))
      << out;
  EXPECT_TRUE(contains(out, "  rank 3: stopped by the launcher (SIGTERM)\n")) << out;
  EXPECT_FALSE(contains(out, "rank 3 (pid")) << out;
  EXPECT_FALSE(contains(out, "SIGKILL")) << out;
}

TEST(StraitRun, ARankKilledByASignalIsNamedWithIt) {
  const TempDir dir;
  const std::string script = write_pid() + R"(
    if [ "$RANK" = 0 ]; then kill -9 $$; fi
    exec sleep 300)";
  Strait run({"run", "-n", "2", "--", "sh", "-c", script, dir.str()}, dir.path() / "out");
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 128 + 9) << out;
  const pid_t killed = read_pid(dir.path() / "pid.0");
  EXPECT_TRUE(
      contains(out, "rank 0 (pid " + std::to_string(killed) + ") was killed by signal 9 (SIGKILL)"))
      << out;
  if (fs::exists(dir.path() / "pid.1")) {
    EXPECT_FALSE(process_exists(read_pid(dir.path() / "pid.1")));
  }
}

TEST(StraitRun, SigintIsForwardedToEveryRank) {
  const TempDir dir;
  // Each rank records the SIGINT it receives, then exits. (`sleep &` ignores SIGINT in a
  // non-interactive shell, hence the explicit kill.)
  const std::string script = R"(
    trap 'echo got > "$0/int.$RANK"; kill $child; exit 0' INT
    sleep 300 & child=$!
    )" + write_pid() + "wait";
  Strait run({"run", "-n", "3", "--", "sh", "-c", script, dir.str()}, dir.path() / "out");
  ASSERT_TRUE(wait_for_files({dir.path() / "pid.0", dir.path() / "pid.1", dir.path() / "pid.2"}))
      << run.output();
  kill(run.pid(), SIGINT);
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 128 + SIGINT) << out;
  EXPECT_TRUE(contains(out, "got SIGINT: forwarding it to ranks 0-2")) << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(fs::exists(dir.path() / ("int." + std::to_string(r)))) << "rank " << r;
    EXPECT_FALSE(process_exists(read_pid(dir.path() / ("pid." + std::to_string(r)))));
  }
}

TEST(StraitRun, RanksIgnoringSigintAreKilledAfterTheStopTimeout) {
  const TempDir dir;
  const std::string script = "trap '' INT TERM; " + write_pid() + "while :; do sleep 0.05; done";
  Strait run({"run", "-n", "2", "--stop-timeout", "0.5", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  ASSERT_TRUE(wait_for_files({dir.path() / "pid.0", dir.path() / "pid.1"})) << run.output();
  kill(run.pid(), SIGINT);
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 128 + SIGINT) << out;
  EXPECT_TRUE(contains(out, "sending SIGKILL")) << out;
  // Killed by the launcher's SIGKILL: stopped by it, whatever they did with the SIGINT.
  EXPECT_TRUE(contains(out, "ranks 0-1: stopped by the launcher (SIGKILL)")) << out;
  EXPECT_FALSE(contains(out, "(pid")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(process_exists(read_pid(dir.path() / ("pid." + std::to_string(r)))));
  }
}

TEST(StraitRun, ASecondSigintKillsAtOnce) {
  const TempDir dir;
  const std::string script = "trap '' INT TERM; " + write_pid() + "while :; do sleep 0.05; done";
  Strait run({"run", "-n", "2", "--stop-timeout", "600", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  ASSERT_TRUE(wait_for_files({dir.path() / "pid.0", dir.path() / "pid.1"})) << run.output();
  kill(run.pid(), SIGINT);
  const auto deadline = Clock::now() + 30s;
  while (!contains(run.output(), "forwarding") && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  kill(run.pid(), SIGINT);
  const int code = run.exit_code();  // far sooner than the 600 s stop timeout
  const std::string out = run.output();
  EXPECT_EQ(code, 128 + SIGINT) << out;
  EXPECT_TRUE(contains(out, "got SIGINT again: killing ranks 0-1")) << out;
  EXPECT_TRUE(contains(out, "ranks 0-1: stopped by the launcher (SIGKILL)")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(process_exists(read_pid(dir.path() / ("pid." + std::to_string(r)))));
  }
}

// Rank 1 fails; rank 0 notices (a marker file here, a PeerLost in real jobs) only after 'delay'.
std::string failure_watch_script(const std::string& delay) {
  return write_pid() + R"(
    if [ "$RANK" = 1 ]; then
      while [ ! -f "$0/pid.0" ]; do sleep 0.01; done
      touch "$0/failed"; exit 3
    fi
    while [ ! -f "$0/failed" ]; do sleep 0.01; done
    sleep )" +
         delay + R"(
    echo "rank $RANK noticed the failure" >&2
    touch "$0/noticed"; exit 4)";
}

TEST(StraitRun, KillGraceLetsTheOtherRanksNoticeTheFailure) {
  const TempDir dir;
  Strait run({"run", "-n", "2", "--kill-grace", "60", "--", "sh", "-c", failure_watch_script("0.2"),
              dir.str()},
             dir.path() / "out");
  const int code = run.exit_code(50s);  // returns once all ranks are done, not after the grace
  const std::string out = run.output();
  EXPECT_EQ(code, 3) << out;  // the first failure decides
  EXPECT_TRUE(fs::exists(dir.path() / "noticed")) << out;
  EXPECT_TRUE(contains(out, "exited with status 3")) << out;
  EXPECT_TRUE(contains(out, "stopping the other ranks in 60s (--kill-grace)")) << out;
  // Rank 0 failed on its own during the grace period: that is reported as a failure.
  const pid_t rank0 = read_pid(dir.path() / "pid.0");
  EXPECT_TRUE(contains(out, "rank 0 (pid " + std::to_string(rank0) + ") exited with status 4"))
      << out;
  // The summary still names rank 1 as the root cause, and rank 0's outcome with its last line.
  EXPECT_TRUE(contains(out, "========== rank 1 failed first ==========")) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(
               "strait run:   rank 0: exited with status 4 at [0-9:]{8}\\.[0-9]{3}: rank 0 noticed "
               "the failure\n")))
      << out;
}

TEST(StraitRun, WithoutKillGraceTheOtherRanksAreStoppedAtOnce) {
  const TempDir dir;
  Strait run({"run", "-n", "2", "--", "sh", "-c", failure_watch_script("30"), dir.str()},
             dir.path() / "out");
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 3) << out;
  EXPECT_FALSE(fs::exists(dir.path() / "noticed")) << out;
  EXPECT_TRUE(contains(out, "rank 0: stopped by the launcher (SIGTERM)")) << out;
}

TEST(StraitRun, OtherRanksSeePeerLostWhenRankZeroDies) {
  const TempDir dir;
  Strait run({"run", "-n", "3", "--kill-grace", "60", "--", STORE_RANK_BIN, "server-dies"},
             dir.path() / "out");
  const int code = run.exit_code(55s);
  const std::string out = run.output();
  // Rank 0's sockets close before it becomes a zombie, so a quick rank 1 or 2 can be reaped
  // first: either may be the failure the launcher sees first.
  EXPECT_TRUE(code == 3 || code == 42) << out;
  EXPECT_TRUE(contains(out, "exited with status 3")) << out;
  for (const int r : {1, 2}) {
    EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + ": PeerLost")) << out;
  }
  // Both detected it themselves (status 42) during the grace period: the launcher's line at
  // each exit ("rank R (pid P) exited with status 42" ending the line). The summary repeats
  // the first failure's line with " at <time>" after it, so it is not counted when a rank
  // other than 0 is reaped first.
  const std::string exit_line = ") exited with status 42\n";
  std::size_t count = 0;
  for (std::size_t pos = out.find(exit_line); pos != std::string::npos;
       pos = out.find(exit_line, pos + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2U) << out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(StraitRun, TheLastLinesSummarizeTheFailureStartingWithItsRootCause) {
  const TempDir dir;
  // Rank 1 writes to both streams and fails once ranks 0 and 2 are up; they would sleep on.
  const std::string script = write_pid() + R"(
    if [ "$RANK" = 1 ]; then
      while [ ! -f "$0/pid.0" ] || [ ! -f "$0/pid.2" ]; do sleep 0.01; done
      echo "some progress"
      echo "warning: something odd" >&2
      echo "error: the real cause" >&2
      exit 3
    fi
    exec sleep 300)";
  Strait run({"run", "-n", "3", "--", "sh", "-c", script, dir.str()}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 3);
  const std::string out = run.output();
  const auto lines = lines_of(out);
  const auto header = std::find(lines.begin(), lines.end(),
                                "strait run: ========== rank 1 failed first ==========");
  ASSERT_NE(header, lines.end()) << out;
  const std::vector<std::string> summary(header, lines.end());
  ASSERT_EQ(summary.size(), 7U) << out;
  const std::string pid = std::to_string(read_pid(dir.path() / "pid.1"));
  EXPECT_TRUE(std::regex_match(
      summary[1],
      std::regex("strait run: rank 1 \\(pid " + pid +
                 "\\) exited with status 3 at 20[0-9]{2}-[0-9]{2}-[0-9]{2} "
                 "[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} \\([0-9.]+ s after the start\\)")))
      << summary[1];
  EXPECT_EQ(summary[2], "strait run: its last 2 lines on stderr:");
  EXPECT_EQ(summary[3], "strait run:   warning: something odd");
  EXPECT_EQ(summary[4], "strait run:   error: the real cause");
  EXPECT_EQ(summary[5], "strait run: the other ranks:");
  EXPECT_EQ(summary[6], "strait run:   ranks 0, 2: stopped by the launcher (SIGTERM)");
  // The rank's own lines came through before it, each once.
  EXPECT_EQ(std::count(lines.begin(), header, "error: the real cause"), 1) << out;
  EXPECT_EQ(std::count(lines.begin(), header, "some progress"), 1) << out;
}

TEST(StraitRun, ARankThatWroteNothingOnStderrIsQuotedFromStdout) {
  const TempDir dir;
  Strait run({"run", "-n", "1", "--", "sh", "-c", "echo one; echo two; echo 'it broke'; exit 9"},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 9);
  const std::string out = run.output();
  EXPECT_TRUE(contains(out,
                       "strait run: its last 3 lines on stdout (nothing on stderr):\n"
                       "strait run:   one\nstrait run:   two\nstrait run:   it broke\n"))
      << out;
}

TEST(StraitRun, TheSummaryQuotesTheLastTwentyLines) {
  const TempDir dir;
  Strait run({"run", "-n", "1", "--", "sh", "-c", "seq 1 50 >&2; exit 1"}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 1);
  const std::string out = run.output();
  EXPECT_TRUE(contains(out,
                       "strait run: its last 20 lines on stderr (of 50):\n"
                       "strait run:   31\n"))
      << out;
  EXPECT_TRUE(contains(out, "strait run:   50\n")) << out;
  EXPECT_FALSE(contains(out, "strait run:   30\n")) << out;
}

TEST(StraitRun, LinesOfDifferentRanksNeverCutIntoEachOther) {
  const TempDir dir;
  // Each line is written in three pieces (three write calls of the shell's printf). Written
  // straight to one file, the ranks' pieces interleave; relayed, every line arrives whole.
  const std::string script = R"(
    i=0
    while [ $i -lt 300 ]; do
      printf 'r%s:' "$RANK"; printf '%0200d' 0; printf ':end\n'
      printf 'e%s:' "$RANK" >&2; printf '%0200d' 0 >&2; printf ':end\n' >&2
      i=$((i + 1))
    done)";
  Strait run({"run", "-n", "4", "--", "sh", "-c", script}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0);
  const std::string out = run.output();
  std::map<std::string, int> per_rank;
  const std::regex whole("[re][0-3]:0{200}:end");
  int broken = 0;
  for (const auto& line : lines_of(out)) {
    if (std::regex_match(line, whole)) {
      ++per_rank[line.substr(0, 2)];
    } else {
      ++broken;
    }
  }
  EXPECT_EQ(broken, 0) << out.substr(0, 4000);
  for (const char* k : {"r0", "r1", "r2", "r3", "e0", "e1", "e2", "e3"}) {
    EXPECT_EQ(per_rank[k], 300) << k;
  }
}

TEST(StraitRun, TagOutputStartsEachLineWithItsRank) {
  const TempDir dir;
  // The last write has no line end: it is relayed, ended, when the rank exits.
  Strait run({"run", "-n", "2", "--tag-output", "--", "sh", "-c",
              "echo out $RANK; echo err $RANK >&2; printf 'no newline %s' $RANK"},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0);
  const auto lines = lines_of(run.output());
  for (const std::string r : {"0", "1"}) {
    for (const std::string& text : {"out " + r, "err " + r, "no newline " + r}) {
      std::string tagged = "[rank ";
      tagged += r;
      tagged += "] ";
      tagged += text;
      EXPECT_EQ(std::count(lines.begin(), lines.end(), tagged), 1) << text << " in:\n"
                                                                   << run.output();
    }
  }
  EXPECT_EQ(lines.size(), 6U) << run.output();
}

TEST(StraitRun, ASuspendedRankActsOnTheLaunchersSigtermAndIsNamedAsSuspended) {
  const TempDir dir;
  // Rank 1 suspends itself (as `kill -STOP` would); rank 0 fails once it sees it suspended. With
  // a stop timeout of 600 s, the job ends at once only if the SIGTERM is acted on (SIGCONT).
  const std::string script = write_pid() + R"sh(
    if [ "$RANK" = 1 ]; then kill -STOP $$; exec sleep 300; fi
    while [ ! -f "$0/pid.1" ]; do sleep 0.01; done
    while [ "$(cut -d' ' -f3 "/proc/$(cat "$0/pid.1")/stat")" != T ]; do sleep 0.01; done
    exit 2)sh";
  const auto start = Clock::now();
  Strait run({"run", "-n", "2", "--stop-timeout", "600", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  EXPECT_EQ(run.exit_code(50s), 2);
  EXPECT_LT(Clock::now() - start, 40s);
  const std::string out = run.output();
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex("strait run:   rank 1: was suspended by SIGSTOP at [0-9:]{8}\\.[0-9]{3}, then "
                 "stopped by the launcher \\(SIGTERM\\)\n")))
      << out;
  EXPECT_FALSE(contains(out, "SIGKILL")) << out;
}

TEST(StraitRun, ACommandThatCannotBeExecutedIsAClearError) {
  const TempDir dir;
  {
    Strait run({"run", "-n", "2", "--", "strait-no-such-command", "arg"}, dir.path() / "out1");
    EXPECT_EQ(run.exit_code(), 127);
    const std::string out = run.output();
    EXPECT_TRUE(contains(out, "cannot execute \"strait-no-such-command\"")) << out;
    EXPECT_TRUE(contains(out, "on PATH")) << out;
  }
  {
    const fs::path script = dir.path() / "not-executable.sh";
    std::ofstream(script) << "#!/bin/sh\nexit 0\n";
    Strait run({"run", "-n", "1", "--", script.string()}, dir.path() / "out2");
    EXPECT_EQ(run.exit_code(), 127);
    EXPECT_TRUE(contains(run.output(), "Permission denied")) << run.output();
  }
  {
    Strait run({"run", "-n", "2"}, dir.path() / "out3");
    EXPECT_NE(run.exit_code(), 0);
    EXPECT_TRUE(contains(run.output(), "command is required")) << run.output();
  }
}

TEST(StraitRun, HelpDocumentsEveryOption) {
  const TempDir dir;
  Strait run({"run", "--help"}, dir.path() / "out");
  EXPECT_EQ(run.exit_code(), 0);
  const std::string out = run.output();
  for (const char* text :
       {"--nproc", "--master-addr", "--master-port", "--kill-grace", "--stop-timeout",
        "MASTER_ADDR", "LOCAL_WORLD_SIZE", "SIGTERM", "stopped by the launcher", "Exit status",
        "strait run -n 4 -- ", "--tag-output", "line at a time", "summary"}) {
    EXPECT_TRUE(contains(out, text)) << "missing " << text << " in:\n" << out;
  }
}

}  // namespace
