// The WAN testbed (tools/wan/testbed.h): namespaces, shaping, a real job across sites, cleanup.
// Needs root and iproute2; skips with the reason otherwise.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "core/error.h"
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
