// Spawns the built `strait` binary and checks `strait run` from the outside, as a user sees it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "strait-run-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }
  [[nodiscard]] std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool process_exists(pid_t pid) {
  return kill(pid, 0) == 0 || errno != ESRCH;
}

// `strait ARGS...` running with stdout and stderr captured in a file.
class Strait {
 public:
  Strait(const std::vector<std::string>& args, const fs::path& output) : output_(output) {
    std::vector<std::string> all = {STRAIT_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    // The launcher must see SIGINT and SIGTERM whatever the test runner does with them.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigset_t defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = posix_spawn(&pid_, all[0].c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw std::runtime_error("cannot spawn " + all[0]);
  }
  Strait(const Strait&) = delete;
  Strait& operator=(const Strait&) = delete;
  ~Strait() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  [[nodiscard]] pid_t pid() const { return pid_; }

  // The wait status; a launcher still running after limit is killed and fails the test.
  int wait(std::chrono::seconds limit = 60s) {
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (true) {
      const pid_t p = waitpid(pid_, &status, WNOHANG);
      if (p == pid_) break;
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "strait did not exit within " << limit.count() << "s; output:\n"
                      << output();
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    return status;
  }

  // The exit code (128 + signal when the launcher itself was killed).
  int exit_code(std::chrono::seconds limit = 60s) {
    const int status = wait(limit);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  [[nodiscard]] std::string output() const { return read_file(output_); }

 private:
  fs::path output_;
  pid_t pid_ = -1;
};

// Waits until every path exists; false after 30 s.
bool wait_for_files(const std::vector<fs::path>& paths) {
  const auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline) {
    bool all = true;
    for (const auto& p : paths) all = all && fs::exists(p);
    if (all) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

pid_t read_pid(const fs::path& p) {
  return static_cast<pid_t>(std::stol(read_file(p)));
}

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

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
  for (const char* text :
       {"--nproc", "--master-addr", "--master-port", "--kill-grace", "--stop-timeout",
        "MASTER_ADDR", "LOCAL_WORLD_SIZE", "SIGTERM", "Exit status", "strait run -n 4 -- "}) {
    EXPECT_TRUE(contains(out, text)) << "missing " << text << " in:\n" << out;
  }
}

}  // namespace
