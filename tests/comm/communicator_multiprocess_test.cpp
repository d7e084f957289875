// The Communicator across real processes, as deployed: `strait run -n N -- comm_worker SCENARIO`
// (tests/comm/comm_worker.cpp). Each rank builds its communicator with Communicator::from_env()
// over the job's TcpStore and UCX; the test checks the launcher's exit status and what the ranks
// printed.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/common/process.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using strait::test::contains;

constexpr int kTimeout = 4;  // comm_worker's exit status for Error(Timeout)

struct RunResult {
  int exit_code = -1;  // the launcher's; 128 + signal if it was killed
  std::string output;  // its stdout and stderr, which the ranks share
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `strait run ARGS...` to completion (stopping it after `limit`, which fails the test), with
// `extra_env` ("NAME=value") added to the environment.
RunResult strait_run(const std::vector<std::string>& args, std::chrono::seconds limit = 90s,
                     const std::vector<std::string>& extra_env = {}) {
  const strait::test::TempDir dir;
  strait::test::Process launcher(STRAIT_BIN, concat({"run"}, args), dir.path() / "output",
                                 extra_env);
  // Past the limit, SIGINT first: the launcher stops its ranks (a second signal would SIGKILL
  // them), and SIGKILL only if it is still there 6 s later.
  const int code = launcher.exit_code(limit, SIGINT, 6s);
  return {code, launcher.output()};
}

// The line rank `rank` printed starting with "rank R: " (the last one), or "".
std::string line_of(const std::string& output, int rank) {
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  std::istringstream in(output);
  std::string line;
  std::string found;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) found = line;
  }
  return found;
}

// The milliseconds a "rank R: failed after N ms: ..." line reports; -1 if there is none.
long failed_after_ms(const std::string& line) {
  const std::string marker = "failed after ";
  const auto at = line.find(marker);
  if (at == std::string::npos) return -1;
  const std::string rest = line.substr(at + marker.size());
  if (rest.empty() || rest[0] < '0' || rest[0] > '9') return -1;
  return std::stol(rest);
}

// How the launcher said rank `rank` ended: "<how>" of "strait run: rank R (pid P) <how>", e.g.
// "exited with status 3"; "" if it said nothing.
std::string launcher_says(const std::string& output, int rank) {
  const std::string prefix = "strait run: rank " + std::to_string(rank) + " (pid ";
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto close = line.find(") ", prefix.size());
    if (close != std::string::npos) return line.substr(close + 2);
  }
  return "";
}

std::vector<std::string> worker(const std::string& scenario, const std::string& timeout_s) {
  // Through env(1), so the variable reaches only the ranks of this run.
  return {"env", "STRAIT_TIMEOUT_S=" + timeout_s, COMM_WORKER_BIN, scenario};
}

class AllreduceAcrossProcesses : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceAcrossProcesses, MatchesTheReferenceOnEveryRankAndInEachSplitGroup) {
  const int n = GetParam();
  const auto run = strait_run(concat({"-n", std::to_string(n), "--"}, worker("allreduce", "20")));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(contains(line_of(run.output, r), "ok (18 checked allreduces)"))
        << "rank " << r << ":\n"
        << run.output;
  }
  EXPECT_FALSE(contains(run.output, "WRONG")) << run.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceAcrossProcesses, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           std::string name = "n";  // not "n" + ...: GCC 12's -Wrestrict misfires
                           name += std::to_string(p.param);
                           return name;
                         });

TEST(CommunicatorProcesses, ARankKilledMidStepIsPeerLostOnTheOthers) {
  // Three ranks: rank 0 sends to rank 1 and rank 2 receives from it, so both survivors wait on
  // it directly. The grace lets them report the failure themselves before the launcher stops them.
  const auto start = Clock::now();
  const auto run =
      strait_run(concat({"-n", "3", "--kill-grace", "60", "--"}, worker("kill", "20")));
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(run.exit_code, 128 + SIGKILL) << run.output;
  EXPECT_EQ(launcher_says(run.output, 1), "was killed by signal 9 (SIGKILL)") << run.output;
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "PeerLost") || contains(line, "Timeout")) << run.output;
    EXPECT_TRUE(contains(line, "rank 1")) << line;
    const long ms = failed_after_ms(line);
    EXPECT_GE(ms, 0) << line;
    EXPECT_LT(ms, 10'000) << "well within STRAIT_TIMEOUT_S=20: " << line;
    // Each survivor exited non-zero on its own (PeerLost: 3, Timeout: 4), not stopped by the
    // launcher's SIGTERM after the grace.
    const std::string how = launcher_says(run.output, r);
    EXPECT_TRUE(how == "exited with status 3" || how == "exited with status 4") << run.output;
  }
  EXPECT_LT(elapsed, 50s) << "the survivors did not end before the launcher's grace ran out";
}

// Ranks 0 and 2 of a run whose rank 1 stopped: every survivor failed (a Timeout, or PeerLost once
// the other survivor had gone), none hung, well within the run's timeout.
void expect_survivors_failed_in_time(const RunResult& run) {
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "Timeout") || contains(line, "PeerLost")) << run.output;
    EXPECT_LT(failed_after_ms(line), 10'000) << line;
  }
}

// Short vectors between local ranks go through the shared-memory mailbox, where a dead peer sends
// nothing at all: its pidfd says it is gone, within milliseconds, not the timeout.
TEST(CommunicatorProcesses, ARankKilledInALoopOfShortAllreducesIsPeerLostOnTheOthers) {
  const auto run =
      strait_run(concat({"-n", "3", "--kill-grace", "30", "--"}, worker("kill_short", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(launcher_says(run.output, 1), "was killed by signal 9 (SIGKILL)") << run.output;
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "PeerLost")) << run.output;
    EXPECT_TRUE(contains(line, "rank 1's process exited")) << line;
    EXPECT_TRUE(contains(line, "mailbox")) << line;
    const long ms = failed_after_ms(line);
    EXPECT_GE(ms, 0) << line;
    EXPECT_LT(ms, 10'000) << "well within STRAIT_TIMEOUT_S=20: " << line;
  }
}

TEST(CommunicatorProcesses, ARankStoppedInALoopOfShortAllreducesIsATimeoutNamingIt) {
  const auto run =
      strait_run(concat({"-n", "3", "--kill-grace", "1", "--"}, worker("stop_short", "2")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "the vector from rank 1 in the shared-memory mailbox"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "rank 1: was suspended by SIGSTOP at")) << run.output;
  expect_survivors_failed_in_time(run);
}

TEST(CommunicatorProcesses, ARankThatNeverCallsTheCollectiveIsATimeoutNamingIt) {
  // Rank 1 sleeps; with a 2 s timeout ranks 0 and 2 give up, naming rank 1 (whose header they both
  // wait for: fingerprints go both ways). Rank 0 also waits on rank 2, and may see it exit (after
  // its own Timeout) a moment before its own deadline: then it fails with PeerLost, which must
  // still say that rank 1 never sent its header. The grace lets the second of them report too;
  // the launcher then stops rank 1.
  const auto run = strait_run(concat({"-n", "3", "--kill-grace", "5", "--"}, worker("sleep", "2")),
                              90s, {"STRAIT_TUNE=allreduce:ring"});
  EXPECT_EQ(run.exit_code, kTimeout) << run.output;
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    const bool timed_out = contains(line, "Timeout") && contains(line, "within 2000 ms");
    const bool saw_the_other_go =
        r == 0 && contains(line, "PeerLost") && contains(line, "rank 2's process exited");
    EXPECT_TRUE(timed_out || saw_the_other_go) << run.output;
    EXPECT_TRUE(contains(line, "a message from rank 1 (the operation's header)")) << line;
    const long ms = failed_after_ms(line);
    // Rank 2 may have started the allreduce (and its clock) a moment before rank 0.
    EXPECT_GE(ms, saw_the_other_go ? 1500 : 2000) << "a failure before STRAIT_TIMEOUT_S: " << line;
    EXPECT_LT(ms, 15'000) << line;
  }
  // Rank 1 was stopped by the launcher, not counted as a failure of its own.
  EXPECT_TRUE(contains(run.output, "rank 1: stopped by the launcher (SIGTERM)")) << run.output;
}

TEST(CommunicatorProcesses, MismatchedCountsAreAMismatchOnTheRanksInvolved) {
  // Rank 1 allreduces 1001 elements, ranks 0 and 2 1000. Rank 1 and rank 2 exchange fingerprints
  // (ring neighbours, and recursive-doubling partners), so both see the other side's; rank 1 names
  // whichever of its two disagreeing peers' fingerprints arrived first.
  const auto run =
      strait_run(concat({"-n", "3", "--kill-grace", "30", "--"}, worker("mismatch", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  const std::string one = line_of(run.output, 1);
  const std::string two = line_of(run.output, 2);
  EXPECT_TRUE(contains(one, "Mismatch")) << run.output;
  EXPECT_TRUE(contains(one, "rank 0 called allreduce #0 (f32 x 1000, sum") ||
              contains(one, "rank 2 called allreduce #0 (f32 x 1000, sum"))
      << one;
  EXPECT_TRUE(contains(one, "this rank called allreduce #0 (f32 x 1001, sum")) << one;
  EXPECT_TRUE(contains(two, "Mismatch")) << run.output;
  EXPECT_TRUE(contains(two, "rank 1 called allreduce #0 (f32 x 1001, sum")) << two;
  for (const int r : {1, 2}) {
    EXPECT_EQ(launcher_says(run.output, r), "exited with status 5") << run.output;
    EXPECT_LT(failed_after_ms(line_of(run.output, r)), 10'000);
  }
  // Rank 0 only hears of it when a neighbour gives up: it must still fail, not hang or succeed.
  const std::string zero = line_of(run.output, 0);
  EXPECT_TRUE(contains(zero, "failed after")) << run.output;
}

// What a user reads when a job fails: strait's error, the launcher's summary last, and nothing
// from UCX. Each scenario fails in its own way (tests/comm/comm_worker.cpp); its stderr must
// hold strait's error (`expect`: in the rank's own lines and in the summary) and no line of UCX's
// (neither its own printer's "UCX  WARN" nor strait's "ucx:" lines, which show only when
// UCX_LOG_LEVEL asks for them).
struct FailureScenario {
  const char* name;
  const char* timeout_s;               // STRAIT_TIMEOUT_S
  int first;                           // the rank that fails first, -1 if any may
  std::vector<std::string> expect;     // in stderr
  std::vector<std::string> survivors;  // in the lines of the ranks that did not fail first
};

std::vector<FailureScenario> scenarios() {
  return {
      {"kill",
       "20",
       1,
       {"rank 1 failed first", "was killed by signal 9 (SIGKILL)"},
       {"PeerLost", "rank 1's process exited"}},
      // A survivor may wait on rank 1 (Timeout) or on the other survivor, which may have exited
      // (PeerLost): the waiting on rank 1 shows in one of them.
      {"stop", "2", -1, {"Timeout", "from rank 1", "rank 1: was suspended by SIGSTOP at"}, {}},
      {"abort",
       "20",
       0,
       {"rank 0 failed first", "Aborted", "the test's other thread aborted it"},
       {"PeerLost", "rank 0's process exited"}},
      {"mismatch", "20", -1, {"Mismatch", "f32 x 1001"}, {}},
      {"nan",
       "20",
       1,
       {"rank 1 failed first", "InvalidArgument", "element 12345 of the input is nan"},
       {"PeerLost: allreduce_compressed #1", "rank 1's process exited"}},
  };
}

void PrintTo(const FailureScenario& s, std::ostream* os) {
  *os << s.name;
}

struct SplitRun {
  int exit_code = -1;
  std::string out;  // the launcher's stdout
  std::string err;  // its stderr
};

// `strait run -n 3 --kill-grace 1 -- env [-u UCX_LOG_LEVEL | UCX_LOG_LEVEL=L] ... comm_worker`.
SplitRun run_scenario(const FailureScenario& s, const std::string& ucx_log_level) {
  const strait::test::TempDir dir;
  std::vector<std::string> args = {"run", "-n", "3", "--kill-grace", "1", "--", "env"};
  if (ucx_log_level.empty()) {
    args.insert(args.end(), {"-u", "UCX_LOG_LEVEL"});
  } else {
    args.push_back("UCX_LOG_LEVEL=" + ucx_log_level);
  }
  args.insert(args.end(),
              {std::string("STRAIT_TIMEOUT_S=") + s.timeout_s, COMM_WORKER_BIN, s.name});
  strait::test::Process launcher(STRAIT_BIN, args, dir.path() / "out", {}, dir.path() / "err");
  const int code = launcher.exit_code(90s, SIGINT, 6s);
  return {code, launcher.output(), launcher.error_output()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class FailureOutput : public ::testing::TestWithParam<FailureScenario> {};

TEST_P(FailureOutput, EndsWithStraitsErrorAndHoldsNoUcxLine) {
  const FailureScenario& s = GetParam();
  const auto run = run_scenario(s, "");
  const std::string all = run.out + run.err;
  EXPECT_NE(run.exit_code, 0) << all;
  for (const auto& text : s.expect) EXPECT_TRUE(contains(run.err, text)) << text << " in:\n" << all;
  for (const auto& line : lines_of(all)) {
    EXPECT_FALSE(contains(line, "UCX") || contains(line, "ucx:")) << line << "\nin:\n" << all;
  }
  // The survivors' own errors, each whole on one line of stderr.
  for (int r = 0; r < 3; ++r) {
    if (r == s.first) continue;
    const std::string line = line_of(run.err, r);
    if (line.empty() && s.first < 0) continue;  // the one that failed first may be any
    for (const auto& text : s.survivors)
      EXPECT_TRUE(contains(line, text)) << text << " in " << line;
  }
  // The summary comes last: its header, then only its own lines.
  const auto lines = lines_of(run.err);
  const auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return std::regex_match(l, std::regex("strait run: =+ rank [0-9] failed first =+"));
  });
  ASSERT_NE(header, lines.end()) << run.err;
  if (s.first >= 0) {
    EXPECT_EQ(*header, "strait run: ========== rank " + std::to_string(s.first) +
                           " failed first ==========");
  }
  ASSERT_GE(lines.end() - header, 4) << run.err;
  EXPECT_TRUE(std::regex_search(
      *(header + 1), std::regex(" at 20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9:]{8}\\.[0-9]{3} \\(")))
      << *(header + 1);
  for (auto it = header; it != lines.end(); ++it) {
    EXPECT_EQ(it->rfind("strait run: ", 0), 0U) << "a line after the summary began: " << *it;
  }
  EXPECT_NE(std::find(header, lines.end(), "strait run: the other ranks:"), lines.end()) << run.err;
}

// With UCX's own warnings asked for, teardown leaves UCX nothing to warn about: the messages no
// operation took are received, so no descriptor stays out of its pool.
TEST_P(FailureOutput, TeardownLeavesUcxNothingToWarnAbout) {
  const FailureScenario& s = GetParam();
  const auto run = run_scenario(s, "warn");
  const std::string all = run.out + run.err;
  EXPECT_NE(run.exit_code, 0) << all;
  EXPECT_FALSE(contains(all, "was not returned to mpool")) << all;
  EXPECT_FALSE(contains(all, "was not matched")) << all;
  EXPECT_FALSE(contains(all, "not released")) << all;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, FailureOutput, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<FailureScenario>& p) {
                           return std::string(p.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// The single-copy path between local ranks (transport/ucx/ucx_transport.h) across processes: on
// (messages from 64 KiB read straight from the sender's memory) and forced off through
// STRAIT_SINGLE_COPY_MIN, the collectives stay right and the failures keep their names.

struct SingleCopyMode {
  const char* name;
  const char* min;  // STRAIT_SINGLE_COPY_MIN
  bool on;
  const char* tune = "";  // STRAIT_TUNE
};

// "on" and "off": large allreduces by the ring, through the transport (whose large messages are
// read in place when on). "direct": by the direct algorithm (comm/algorithms/direct_allreduce.h),
// every rank reading every peer's memory at once, with the same failure semantics as the ring.
// "mailbox": the default from 3 ranks (comm/algorithms/mailbox_allreduce.h), no transport.
const SingleCopyMode kSingleCopyModes[] = {
    {"on", "64K", true, "allreduce:1048577-inf:ring@seg=1M"},
    {"off", "off", false, "allreduce:1048577-inf:ring@seg=1M"},
    {"direct", "64K", true, "allreduce:1M-inf:direct"},
    {"mailbox", "64K", false, "allreduce:mailbox"}};

void PrintTo(const SingleCopyMode& m, std::ostream* os) {
  *os << m.name;
}

std::vector<std::string> worker_with(const SingleCopyMode& m, const std::string& scenario,
                                     const std::string& timeout_s) {
  return {"env",
          std::string("STRAIT_SINGLE_COPY_MIN=") + m.min,
          std::string("STRAIT_TUNE=") + m.tune,
          "STRAIT_TIMEOUT_S=" + timeout_s,
          COMM_WORKER_BIN,
          scenario};
}

// The bytes a "failed after N ms (B bytes sent by single copy)" line reports; -1 if none.
long single_copy_bytes(const std::string& line) {
  const std::regex number("\\(([0-9]+) bytes sent by single copy\\)");
  std::smatch m;
  if (!std::regex_search(line, m, number)) return -1;
  return std::stol(m[1].str());
}

class SingleCopyProcesses : public ::testing::TestWithParam<std::tuple<SingleCopyMode, int>> {};

TEST_P(SingleCopyProcesses, AllreduceMatchesTheReferenceOnEveryRank) {
  const auto& [mode, n] = GetParam();
  const auto run =
      strait_run(concat({"-n", std::to_string(n), "--"}, worker_with(mode, "allreduce", "20")));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(contains(line_of(run.output, r), "ok (18 checked allreduces)"))
        << "rank " << r << ":\n"
        << run.output;
  }
  EXPECT_FALSE(contains(run.output, "WRONG")) << run.output;
}

INSTANTIATE_TEST_SUITE_P(Modes, SingleCopyProcesses,
                         ::testing::Combine(::testing::ValuesIn(kSingleCopyModes),
                                            ::testing::Values(2, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<SingleCopyMode, int>>& p) {
                           std::string name = std::get<0>(p.param).name;
                           name += "_n";
                           name += std::to_string(std::get<1>(p.param));
                           return name;
                         });

class SingleCopyFailures : public ::testing::TestWithParam<SingleCopyMode> {};

TEST_P(SingleCopyFailures, ARankKilledWhileItsLargeMessagesAreReadIsPeerLostOnTheOthers) {
  const SingleCopyMode& mode = GetParam();
  // A long grace: a survivor that waits on the other survivor hears of the loss only once that
  // one has failed and exited; it must still report, not be stopped by the launcher.
  const auto run = strait_run(
      concat({"-n", "3", "--kill-grace", "30", "--"}, worker_with(mode, "kill_loop", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(launcher_says(run.output, 1), "was killed by signal 9 (SIGKILL)") << run.output;
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "PeerLost")) << run.output;
    EXPECT_TRUE(contains(line, "rank 1's process exited")) << run.output;
    // Within the timeout (20 s), not by it: the loss is seen, not waited out.
    const long ms = failed_after_ms(line);
    EXPECT_GE(ms, 0) << line;
    EXPECT_LT(ms, 10'000) << line;
    const long copied = single_copy_bytes(line);
    if (mode.on) {
      EXPECT_GT(copied, 0) << line;
    } else {
      EXPECT_EQ(copied, 0) << line;
    }
  }
}

TEST_P(SingleCopyFailures, AStoppedRankIsATimeoutNamingIt) {
  const SingleCopyMode& mode = GetParam();
  const auto run =
      strait_run(concat({"-n", "3", "--kill-grace", "1", "--"}, worker_with(mode, "stop", "2")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "Timeout")) << run.output;
  // The Timeout names the stopped rank, in one of two ways depending on when it stopped: as the
  // sender of a message a survivor waits for, or as the reader of a survivor's send (a stopped
  // process's memory can still be read: the direct allreduce's survivors may have reduced rank
  // 1's share and then wait for rank 1 to read theirs).
  // Through the mailbox: its vector, or its share reduced (the split protocol).
  EXPECT_TRUE(contains(run.output, "a message from rank 1") ||
              contains(run.output, "a send to rank 1") ||
              contains(run.output, "from rank 1 in the shared-memory mailbox"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "rank 1: was suspended by SIGSTOP at")) << run.output;
  expect_survivors_failed_in_time(run);
}

TEST_P(SingleCopyFailures, LargeMismatchedCountsAreAMismatchNamingBothSides) {
  const SingleCopyMode& mode = GetParam();
  const auto run = strait_run(
      concat({"-n", "2", "--kill-grace", "30", "--"}, worker_with(mode, "mismatch_large", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  for (const int r : {0, 1}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "Mismatch")) << run.output;
    EXPECT_TRUE(contains(line, "f32 x 1000003")) << line;
    EXPECT_TRUE(contains(line, "f32 x 1000004")) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SingleCopyFailures, ::testing::ValuesIn(kSingleCopyModes),
                         [](const ::testing::TestParamInfo<SingleCopyMode>& p) {
                           return std::string(p.param.name);
                         });

// The single-copy collectives between local ranks (comm/algorithms/local_copy.h): the failures of
// the allreduce's single-copy path, each collective in turn (comm_worker's
// COMM_WORKER_COLLECTIVE): a rank killed while its memory is read, a stopped one, and counts that
// differ, all named within the timeout.
class LocalCopyFailures : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> local_copy_worker(const std::string& collective,
                                           const std::string& scenario,
                                           const std::string& timeout_s) {
  // Broadcast takes the single-copy path by rule only; the rooted and v forms by these rules,
  // whatever the built-in ones say (alltoall_v's rules see 0 bytes).
  return {"env",
          "COMM_WORKER_COLLECTIVE=" + collective,
          "STRAIT_TIMEOUT_S=" + timeout_s,
          "STRAIT_TUNE=broadcast:256K-inf:single_copy;reduce:64K-inf:single_copy;"
          "gather:64K-inf:single_copy;scatter:64K-inf:single_copy;"
          "allgather_v:64K-inf:single_copy;reduce_scatter_v:64K-inf:single_copy;"
          "alltoall_v:0-inf:single_copy",
          COMM_WORKER_BIN,
          scenario};
}

TEST_P(LocalCopyFailures, ARankKilledWhileItsMemoryIsReadIsPeerLostOnTheOthers) {
  const auto run = strait_run(concat({"-n", "3", "--kill-grace", "30", "--"},
                                     local_copy_worker(GetParam(), "kill_loop", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(launcher_says(run.output, 1), "was killed by signal 9 (SIGKILL)") << run.output;
  // A survivor waiting on the other survivor may hear first that that one has gone (it failed
  // and exited, and rank 1's own exit may not show in its pidfd yet): each names a rank that
  // exited, and one of them rank 1.
  EXPECT_TRUE(contains(line_of(run.output, 0), "rank 1's process exited") ||
              contains(line_of(run.output, 2), "rank 1's process exited"))
      << run.output;
  for (const int r : {0, 2}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "PeerLost")) << run.output;
    EXPECT_TRUE(contains(line, "rank 1's process exited") ||
                contains(line, "rank " + std::to_string(2 - r) + "'s process exited") ||
                contains(line, "left the collective"))
        << line;
    EXPECT_TRUE(contains(line, GetParam())) << line;
    const long ms = failed_after_ms(line);
    EXPECT_GE(ms, 0) << line;
    EXPECT_LT(ms, 10'000) << "well within STRAIT_TIMEOUT_S=20: " << line;
  }
}

TEST_P(LocalCopyFailures, AStoppedRankIsATimeoutNamingIt) {
  const auto run = strait_run(
      concat({"-n", "3", "--kill-grace", "1", "--"}, local_copy_worker(GetParam(), "stop", "2")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "Timeout")) << run.output;
  // Waiting for its addresses, or for it to finish reading a survivor's memory.
  EXPECT_TRUE(contains(run.output, "the vector from rank 1 in the shared-memory mailbox") ||
              contains(run.output, "rank 1 to finish reading this rank's memory"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "rank 1: was suspended by SIGSTOP at")) << run.output;
  expect_survivors_failed_in_time(run);
}

TEST_P(LocalCopyFailures, MismatchedCountsAreAMismatchNamingBothSides) {
  const auto run = strait_run(concat({"-n", "2", "--kill-grace", "30", "--"},
                                     local_copy_worker(GetParam(), "mismatch_large", "20")));
  EXPECT_NE(run.exit_code, 0) << run.output;
  // allgather_v's and reduce_scatter_v's fingerprints carry the sum of the counts (2 ranks).
  const bool summed = GetParam() == "allgather_v" || GetParam() == "reduce_scatter_v";
  for (const int r : {0, 1}) {
    const std::string line = line_of(run.output, r);
    EXPECT_TRUE(contains(line, "Mismatch")) << run.output;
    EXPECT_TRUE(contains(line, summed ? "2000006" : "1000003")) << line;
    EXPECT_TRUE(contains(line, summed ? "2000008" : "1000004")) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, LocalCopyFailures,
                         ::testing::Values("reduce_scatter", "allgather", "broadcast", "alltoall",
                                           "reduce", "gather", "scatter", "allgather_v",
                                           "reduce_scatter_v", "alltoall_v"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
