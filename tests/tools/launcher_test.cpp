// Spawns the built `strait` binary and checks `strait run` from the outside, as a user sees it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/process.h"

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
class Strait : public strait::test::Process {
 public:
  Strait(const std::vector<std::string>& args, const fs::path& output)
      : Process(STRAIT_BIN, args, output) {}
};

// A shell snippet run by every rank with the test directory as $0. It writes its pid to
// $0/pid.$RANK atomically, so a reader never sees a partial file.
const std::string kWritePid =
    R"(echo $$ > "$0/pid.$RANK.tmp" && mv "$0/pid.$RANK.tmp" "$0/pid.$RANK"; )";

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
  const std::string script = kWritePid + R"(
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
  EXPECT_TRUE(contains(out, "stopped by the launcher: ranks 0, 2")) << out;
  for (const int r : {0, 2}) {
    const pid_t pid = read_pid(dir.path() / ("pid." + std::to_string(r)));
    EXPECT_FALSE(process_exists(pid)) << "rank " << r << " (pid " << pid << ") is still alive";
  }
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
    )" + kWritePid + R"(
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
  EXPECT_TRUE(contains(out, "stopped by the launcher: rank 3\n")) << out;
  EXPECT_FALSE(contains(out, "rank 3 (pid")) << out;
  EXPECT_FALSE(contains(out, "SIGKILL")) << out;
}

TEST(StraitRun, ARankKilledByASignalIsNamedWithIt) {
  const TempDir dir;
  const std::string script = kWritePid + R"(
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
    )" + kWritePid + "wait";
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
  const std::string script = "trap '' INT TERM; " + kWritePid + "while :; do sleep 0.05; done";
  Strait run({"run", "-n", "2", "--stop-timeout", "0.5", "--", "sh", "-c", script, dir.str()},
             dir.path() / "out");
  ASSERT_TRUE(wait_for_files({dir.path() / "pid.0", dir.path() / "pid.1"})) << run.output();
  kill(run.pid(), SIGINT);
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 128 + SIGINT) << out;
  EXPECT_TRUE(contains(out, "sending SIGKILL")) << out;
  // Killed by the launcher's SIGKILL: stopped by it, whatever they did with the SIGINT.
  EXPECT_TRUE(contains(out, "stopped by the launcher: ranks 0-1")) << out;
  EXPECT_FALSE(contains(out, "(pid")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(process_exists(read_pid(dir.path() / ("pid." + std::to_string(r)))));
  }
}

TEST(StraitRun, ASecondSigintKillsAtOnce) {
  const TempDir dir;
  const std::string script = "trap '' INT TERM; " + kWritePid + "while :; do sleep 0.05; done";
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
  EXPECT_TRUE(contains(out, "stopped by the launcher: ranks 0-1")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(process_exists(read_pid(dir.path() / ("pid." + std::to_string(r)))));
  }
}

// Rank 1 fails; rank 0 notices (a marker file here, a PeerLost in real jobs) only after 'delay'.
std::string failure_watch_script(const std::string& delay) {
  return kWritePid + R"(
    if [ "$RANK" = 1 ]; then
      while [ ! -f "$0/pid.0" ]; do sleep 0.01; done
      touch "$0/failed"; exit 3
    fi
    while [ ! -f "$0/failed" ]; do sleep 0.01; done
    sleep )" +
         delay + R"(
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
}

TEST(StraitRun, WithoutKillGraceTheOtherRanksAreStoppedAtOnce) {
  const TempDir dir;
  Strait run({"run", "-n", "2", "--", "sh", "-c", failure_watch_script("30"), dir.str()},
             dir.path() / "out");
  const int code = run.exit_code();
  const std::string out = run.output();
  EXPECT_EQ(code, 3) << out;
  EXPECT_FALSE(fs::exists(dir.path() / "noticed")) << out;
  EXPECT_TRUE(contains(out, "stopped by the launcher: rank 0")) << out;
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
  // Both detected it themselves (status 42) during the grace period.
  std::size_t count = 0;
  for (std::size_t pos = out.find("exited with status 42"); pos != std::string::npos;
       pos = out.find("exited with status 42", pos + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2U) << out;
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
  for (const char* text : {"--nproc", "--master-addr", "--master-port", "--kill-grace",
                           "--stop-timeout", "MASTER_ADDR", "LOCAL_WORLD_SIZE", "SIGTERM",
                           "stopped by the launcher", "Exit status", "strait run -n 4 -- "}) {
    EXPECT_TRUE(contains(out, text)) << "missing " << text << " in:\n" << out;
  }
}

}  // namespace
