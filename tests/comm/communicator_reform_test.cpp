// Communicator::reform() and join() (comm/reform.h) across real processes: `strait run -n N --
// elastic_worker ...` (tests/comm/elastic_worker.cpp) on loopback, over a TcpStore whose server
// runs in this test process, so that it outlives any rank, rank 0 included. Each worker checks its
// collectives against a reference computed from the membership the test expects and prints
// "<who>: ok ..."; the test checks those lines, what the launcher says, and that everything ends
// within its limit.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "comm/bootstrap/tcp_store.h"
#include "tests/common/process.h"

namespace {

using namespace std::chrono_literals;
using strait::test::contains;

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// The store every process of a test connects to as a client.
std::unique_ptr<strait::comm::TcpStore> make_server() {
  strait::comm::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  return std::make_unique<strait::comm::TcpStore>(o);
}

std::vector<std::string> launch_args(int n, std::uint16_t port, std::vector<std::string> worker) {
  std::vector<std::string> args = {
      "run",          "-n", std::to_string(n), "--master-port", std::to_string(port),
      "--kill-grace", "60", ELASTIC_WORKER_BIN};
  args.insert(args.end(), worker.begin(), worker.end());
  return args;
}

// Runs `strait run` to completion within `limit` (SIGINT past it, which fails the test).
// Heartbeats every 0.2 s (lease 1 s) in every test: survivors still inside the failed round's
// collective learn from them that the others have begun to re-form (comm/heartbeat.h).
const std::vector<std::string> kEnv = {"STRAIT_TIMEOUT_S=30", "STRAIT_HEARTBEAT_S=0.2"};

RunResult strait_run(int n, std::uint16_t port, const std::vector<std::string>& worker,
                     std::chrono::seconds limit = 90s) {
  const strait::test::TempDir dir;
  strait::test::Process launcher(STRAIT_BIN, launch_args(n, port, worker), dir.path() / "output",
                                 kEnv);
  const int code = launcher.exit_code(limit, SIGINT, 6s);
  return {code, launcher.output()};
}

int count_lines_with(const std::string& output, const std::string& needle) {
  std::istringstream in(output);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

class Shrink : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

// World sizes 2..5, the victim at every kind of place (rank 0, which holds no store here, a middle
// rank, the last), killed before the round's allreduce, in the middle of it, or at the round
// boundary after it.
TEST_P(Shrink, SurvivorsReformWithoutTheKilledRankAndComputeCorrectly) {
  const auto [size, victim, phase] = GetParam();
  auto store = make_server();
  const RunResult r = strait_run(size, store->port(), {"shrink", std::to_string(victim), phase});
  // The launcher reports the victim's SIGKILL as the job's status; the survivors exit 0.
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_EQ(count_lines_with(r.output, ": WRONG"), 0) << r.output;
  for (int rank = 0; rank < size; ++rank) {
    if (rank == victim) continue;
    EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + ": ok shrink: generation 1"))
        << "rank " << rank << "\n"
        << r.output;
  }
  EXPECT_EQ(count_lines_with(r.output, ": ok shrink: generation 1, rank "), size - 1) << r.output;
  EXPECT_TRUE(contains(r.output, "leaves out rank " + std::to_string(victim) + " of generation 0"))
      << r.output;
}

std::vector<std::tuple<int, int, std::string>> shrink_cases() {
  std::vector<std::tuple<int, int, std::string>> cases;
  for (int size = 2; size <= 5; ++size) {
    for (const std::string phase : {"before", "during"}) {
      cases.emplace_back(size, size % 2 == 0 ? 0 : size - 1, phase);
    }
  }
  cases.emplace_back(5, 2, "during");
  cases.emplace_back(3, 1, "after");
  cases.emplace_back(4, 2, "after");
  return cases;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Shrink, ::testing::ValuesIn(shrink_cases()),
                         [](const ::testing::TestParamInfo<std::tuple<int, int, std::string>>& p) {
                           return "size" + std::to_string(std::get<0>(p.param)) + "_victim" +
                                  std::to_string(std::get<1>(p.param)) + "_" + std::get<2>(p.param);
                         });

class Exclude : public ::testing::TestWithParam<int> {};

// The excluded rank keeps sending on the old communicator; the new group's collectives are
// still right, and the excluded rank's own reform() says it was left out.
TEST_P(Exclude, AnExcludedRankThatKeepsSendingCannotDisturbTheNewGroup) {
  const int size = GetParam();
  const int victim = 1;
  auto store = make_server();
  const RunResult r = strait_run(size, store->port(), {"exclude", std::to_string(victim)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, ": WRONG"), 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, ": ok exclude: generation 1"), size - 1) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: ok excluded after")) << r.output;
  EXPECT_TRUE(contains(r.output, "was left out of generation 1")) << r.output;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Exclude, ::testing::Values(2, 3, 5));

class Heartbeat : public ::testing::TestWithParam<int> {};

// A stopped rank keeps its connections open: only its lapsed heartbeat tells the others, who must
// learn of it within the heartbeat's bound (checked by the workers), re-form without it and go on;
// resumed, it is told it was left out.
TEST_P(Heartbeat, AStoppedRankIsLostWithinTheLeaseAndLeftOut) {
  const int size = GetParam();
  const int victim = size - 1;
  auto store = make_server();
  const RunResult r = strait_run(size, store->port(), {"stopped", std::to_string(victim)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, ": WRONG"), 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, ": ok stopped peer: generation 1"), size - 1) << r.output;
  EXPECT_TRUE(contains(r.output, "rank " + std::to_string(victim) + ": ok stopped and left out"))
      << r.output;
  // The heartbeat named the loss: "lapsed" when the victim had beaten before it stopped, "never
  // arrived" when a loaded machine stopped it before its heartbeat thread's first beat.
  EXPECT_TRUE(
      contains(r.output, "rank " + std::to_string(victim) + " is lost: its heartbeat lapsed") ||
      contains(r.output,
               "rank " + std::to_string(victim) + " is lost: its heartbeat never arrived"))
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Heartbeat, ::testing::Values(2, 3, 4));

class Grow : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Members started by one launcher, joiners by another; the joiners receive the state from the new
// rank 0 and every collective of the grown world is right.
TEST_P(Grow, JoinersAreAdmittedAtTheNextReformAndReceiveTheState) {
  const auto [members, joiners] = GetParam();
  auto store = make_server();
  const strait::test::TempDir dir;
  strait::test::Process joining(
      STRAIT_BIN,
      launch_args(joiners, store->port(),
                  {"join", std::to_string(members), std::to_string(joiners)}),
      dir.path() / "joiners", kEnv);
  const RunResult r = strait_run(members, store->port(), {"grow", std::to_string(joiners)});
  const int joiners_code = joining.exit_code(90s, SIGINT, 6s);
  const std::string joiners_output = joining.output();
  EXPECT_EQ(r.exit_code, 0) << r.output << joiners_output;
  EXPECT_EQ(joiners_code, 0) << r.output << joiners_output;
  EXPECT_EQ(count_lines_with(r.output + joiners_output, ": WRONG"), 0)
      << r.output << joiners_output;
  EXPECT_EQ(count_lines_with(r.output, ": ok grow: generation 1"), members) << r.output;
  for (int j = 0; j < joiners; ++j) {
    EXPECT_TRUE(contains(joiners_output, "joiner " + std::to_string(members + j) +
                                             ": ok join: generation 1, rank " +
                                             std::to_string(members + j) + " of " +
                                             std::to_string(members + joiners)))
        << joiners_output;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Grow,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(2, 1),
                                           std::make_tuple(2, 2), std::make_tuple(3, 2)));

}  // namespace
