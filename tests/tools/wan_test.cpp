// The WAN testbed (tools/wan/testbed.h): namespaces, shaping, a real job across sites, cleanup.
// Needs root and iproute2; skips with the reason otherwise.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/common/elastic_log.h"
#include "tests/common/small_model.h"
#include "tests/common/strait_process.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/common/word_corpus.h"
#include "tools/wan/subprocess.h"
#include "tools/wan/testbed.h"

namespace strait::tools {
namespace {

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Unique per process: ctest runs tests of this file in parallel processes.
std::string test_prefix() {
  return "stt" + std::to_string(::getpid());
}

class Wan : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the WAN testbed needs root (network namespaces, tc)";
    if (!run_capture({"sh", "-c", "command -v ip && command -v tc"}).ok()) {
      GTEST_SKIP() << "ip or tc is missing (Debian's iproute2; scripts/setup.sh installs it)";
    }
    wan_down(prefix_);  // leftovers of a crashed run of this pid, if any
  }
  void TearDown() override {
    if (::geteuid() == 0) wan_down(prefix_);
  }
  const std::string prefix_ = test_prefix();
};

TEST(WanRate, ParsesTcBitUnitsAndRefusesTheRest) {
  EXPECT_EQ(parse_rate_bits("100mbit"), 100'000'000U);
  EXPECT_EQ(parse_rate_bits("1gbit"), 1'000'000'000U);
  EXPECT_EQ(parse_rate_bits("1.5mbit"), 1'500'000U);
  EXPECT_EQ(parse_rate_bits("64kbit"), 64'000U);
  for (const char* bad : {"100", "100mbps", "mbit", "-5mbit", "100 mbit", "1bit", "5000gbit"}) {
    try {
      parse_rate_bits(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  }
}

TEST_F(Wan, UpMakesShapedSitesThatAJobCrossesAndDownRemovesThem) {
  WanOptions o;
  o.prefix = prefix_;
  o.sites = 2;
  o.rate = "1gbit";
  const auto sites = wan_up(o);
  ASSERT_EQ(sites.size(), 2U);
  EXPECT_EQ(sites[0].address, "10.77.0.1");
  EXPECT_EQ(sites[1].address, "10.77.0.2");
  EXPECT_EQ(wan_sites(prefix_).size(), 2U);
  const std::string status = wan_status(prefix_);
  EXPECT_TRUE(has(status, "rate 1Gbit")) << status;
  EXPECT_TRUE(has(status, "latency is not emulated")) << status;

  // Sites reach each other only through the shaped link: a real two-rank job, one rank per site,
  // whose allreduces are checked against a double reference by the worker itself.
  const std::uint64_t before = wan_bytes_sent(prefix_, 0);
  const CommandResult job =
      run_capture({STRAIT_BIN, "wan", "run", "--prefix", prefix_, "--ranks-per-site", "1", "--",
                   COMM_WORKER_BIN, "allreduce"});
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_TRUE(has(job.output, "rank 0: ok")) << job.output;
  EXPECT_TRUE(has(job.output, "rank 1: ok")) << job.output;
  // Out of place and in place of 1000003 f32, sum and avg: several MB left site 0 via its shaper.
  EXPECT_GT(wan_bytes_sent(prefix_, 0) - before, 4'000'000U);

  EXPECT_EQ(wan_down(prefix_), 3);  // two sites and the hub
  EXPECT_TRUE(wan_sites(prefix_).empty());
  EXPECT_TRUE(has(wan_status(prefix_), "no testbed"));
}

// 2 sites x 2 ranks: `wan run` tells the ranks their sites (STRAIT_SITES), so the allreduces run
// hierarchically (comm_worker checks values, bit-identity and the site count), and with a per-flow
// limit (--flow-rate) and 2 streams per peer the job still passes.
TEST_F(Wan, TwoSitesOfTwoRanksRunTheHierarchicalAllreduce) {
  WanOptions o;
  o.prefix = prefix_;
  o.sites = 2;
  o.rate = "1gbit";
  o.flow_rate = "500mbit";
  ASSERT_EQ(wan_up(o).size(), 2U);
  const std::string status = wan_status(prefix_);
  EXPECT_TRUE(has(status, "htb")) << status;
  const std::uint64_t before = wan_bytes_sent(prefix_, 0);
  const CommandResult job =
      run_capture({"env", "STRAIT_STREAMS=2", STRAIT_BIN, "wan", "run", "--prefix", prefix_,
                   "--ranks-per-site", "2", "--", COMM_WORKER_BIN, "hierarchical"});
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_TRUE(has(job.output, "[[0, 1], [2, 3]] (from STRAIT_SITES=0,0,1,1)")) << job.output;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(has(job.output, fmt::format("rank {}: ok (hierarchical", r))) << job.output;
  }
  EXPECT_GT(wan_bytes_sent(prefix_, 0) - before, 4'000'000U);
}

// `strait train --elastic` across two sites, one whole-model replica in each: `wan run --elastic`
// hosts the job's store in the launcher, listening in site 0. Site 1's replica is killed
// (SIGKILL, STRAIT_TRAIN_FAULT) and the survivor trains on alone (--min-replicas 1); a joiner
// started in site 1 with `wan exec` reaches the store across the shaped link, is admitted at the
// round boundary the job holds for it (STRAIT_TRAIN_AWAIT_JOINER), receives the survivor's state
// over the link (the same xxh3 on both sides; at least that many bytes left site 0 through its
// shaper), and both end on the same weights.
TEST_F(Wan, ElasticJobLosesSiteOnesReplicaAndAdmitsAJoinerStartedThere) {
  using namespace std::chrono_literals;
  using test::contains;
  WanOptions o;
  o.prefix = prefix_;
  o.rate = "1gbit";
  ASSERT_EQ(wan_up(o).size(), 2U);
  const test::TempDir dir;
  const auto corpus = test::write_word_corpus(dir.path());
  const auto metrics = dir.path() / "job.jsonl";
  const std::vector<std::string> train =
      strait::test::joined({STRAIT_BIN, "train"}, strait::test::small_model_flags(2),
                           {"--microbatch-size",
                            "2",
                            "--microbatches",
                            "2",
                            "--eval-sequences",
                            "8",
                            "--sample-bytes",
                            "0",
                            "--warmup",
                            "2",
                            "--blas-threads",
                            "1",
                            "--stages",
                            "1",
                            "--replicas",
                            "2",
                            "--outer-steps",
                            "2",
                            "--elastic",
                            "--min-replicas",
                            "1",
                            "--steps",
                            "12",
                            "--data",
                            corpus.string()});
  std::vector<std::string> job_args = {"wan",       "run",           "--prefix", prefix_,
                                       "--elastic", "--master-port", "29500",    "--"};
  job_args.insert(job_args.end(), train.begin(), train.end());
  job_args.insert(job_args.end(), {"--metrics", metrics.string()});
  const std::uint64_t before = wan_bytes_sent(prefix_, 0);
  test::Strait job(
      job_args, dir.path() / "job.out",
      {"STRAIT_TIMEOUT_S=60", "STRAIT_TRAIN_FAULT=1:3:inner", "STRAIT_TRAIN_AWAIT_JOINER=6"});
  std::string text = test::wait_for_output(job, "lost replica 1", 120s);
  ASSERT_TRUE(contains(text, "lost replica 1 (1 of 2 ranks left)")) << text;
  EXPECT_TRUE(contains(
      text,
      "elastic: the job's store is at 10.77.0.1:29500 in network namespace " + prefix_ + "-site0"))
      << text;
  std::vector<std::string> join_args = {"wan", "exec",          "--prefix", prefix_, "--site",
                                        "1",   "--master-port", "29500",    "--"};
  join_args.insert(join_args.end(), train.begin(), train.end());
  join_args.emplace_back("--join");
  test::Strait joiner(join_args, dir.path() / "joiner.out", {"STRAIT_TIMEOUT_S=60"});
  const int joiner_status = joiner.wait(180s);
  const int status = job.wait(180s, SIGINT, 10s);
  text = job.output();
  const std::string joined = joiner.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  ASSERT_TRUE(WIFEXITED(joiner_status) && WEXITSTATUS(joiner_status) == 0) << joined;
  test::expect_joiner_admitted_after_step_6_with_the_sent_state(text, joined);
  static const std::regex kEnd(R"(ends after step 12 with weights xxh3 ([0-9a-f]{16}))");
  std::smatch end_job;
  std::smatch end_joiner;
  ASSERT_TRUE(std::regex_search(text, end_job, kEnd)) << text;
  ASSERT_TRUE(std::regex_search(joined, end_joiner, kEnd)) << joined;
  EXPECT_EQ(end_job[1].str(), end_joiner[1].str());
  // The state went from site 0 to site 1 through site 0's shaper.
  std::int64_t state_bytes = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    if (r["type"] == "elastic" && r["event"] == "joined") state_bytes = r["state_bytes"];
  }
  ASSERT_GT(state_bytes, 0) << "no \"joined\" record with state_bytes in " << metrics;
  EXPECT_GT(wan_bytes_sent(prefix_, 0) - before, static_cast<std::uint64_t>(state_bytes));
}

// `wan exec` refuses a testbed that is not up and a site it does not have, by name.
TEST_F(Wan, ExecNamesAMissingTestbedOrSite) {
  const CommandResult none =
      run_capture({STRAIT_BIN, "wan", "exec", "--prefix", prefix_, "--", "true"});
  EXPECT_NE(none.status, 0);
  EXPECT_TRUE(has(none.output, "no testbed named " + prefix_ + " is up")) << none.output;
  WanOptions o;
  o.prefix = prefix_;
  ASSERT_EQ(wan_up(o).size(), 2U);
  const CommandResult far =
      run_capture({STRAIT_BIN, "wan", "exec", "--prefix", prefix_, "--site", "2", "--", "true"});
  EXPECT_NE(far.status, 0);
  EXPECT_TRUE(has(far.output, "--site 2: testbed " + prefix_ + " has sites 0 to 1")) << far.output;
  // In the site, with wan run's environment.
  const CommandResult in = run_capture({STRAIT_BIN, "wan", "exec", "--prefix", prefix_, "--site",
                                        "1", "--master-port", "29612", "--", "sh", "-c",
                                        "echo $MASTER_ADDR:$MASTER_PORT $UCX_NET_DEVICES; "
                                        "ip -4 -o addr show dev wan0"});
  EXPECT_EQ(in.status, 0) << in.output;
  EXPECT_TRUE(has(in.output, "10.77.0.1:29612 wan0")) << in.output;
  EXPECT_TRUE(has(in.output, "inet 10.77.0.2/24")) << in.output;
}

TEST_F(Wan, BadOptionsAndASecondUpAreRefusedAndLeaveNothingBehind) {
  WanOptions o;
  o.prefix = prefix_;
  o.rate = "100mbps";
  EXPECT_THROW(wan_up(o), Error);
  EXPECT_TRUE(wan_sites(prefix_).empty());
  o.rate = "10mbit";
  o.subnet = "10.300.0";
  EXPECT_THROW(wan_up(o), Error);
  o.subnet = "10.77.0";
  o.sites = 1;
  EXPECT_THROW(wan_up(o), Error);
  o.sites = 3;
  ASSERT_EQ(wan_up(o).size(), 3U);
  try {
    wan_up(o);
    ADD_FAILURE() << "a second testbed of one prefix was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(has(e.what(), "already up")) << e.what();
  }
  EXPECT_EQ(wan_sites(prefix_).size(), 3U);  // the first one is untouched
  WanOptions bad_name;
  bad_name.prefix = "Bad Name";
  EXPECT_THROW(wan_up(bad_name), Error);
  WanOptions bad_flow;
  bad_flow.prefix = prefix_ + "f";
  bad_flow.flow_rate = "25mbps";
  EXPECT_THROW(wan_up(bad_flow), Error);
  EXPECT_TRUE(wan_sites(bad_flow.prefix).empty());
}

}  // namespace
}  // namespace strait::tools
