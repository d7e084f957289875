// `strait tune` as a user runs it: bad options fail at once with a clear message, and a quick run
// of 2 local ranks on loopback writes a config that the selection table reads, with contiguous
// rules from 0 to inf, the link matrices, the sites and every candidate's times.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/algorithms/selection.h"
#include "tests/common/process.h"
#include "tests/common/strait_process.h"

namespace strait::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

// `strait` with STRAIT_TUNE_FILE cleared: a tuning file in the caller's environment must not steer
// these runs.
class TuneProcess : public Strait {
 public:
  TuneProcess(const std::vector<std::string>& args, const fs::path& output)
      : Strait(args, output, {"STRAIT_TUNE_FILE="}) {}
};

// Runs `strait tune ARGS` without RANK (so it launches its own ranks); returns the exit code.
int tune(const TempDir& dir, const std::vector<std::string>& args, std::string& output,
         std::chrono::seconds limit = 60s) {
  std::vector<std::string> all = {"tune"};
  all.insert(all.end(), args.begin(), args.end());
  TuneProcess p(all, dir.path() / "out.txt");
  const int code = p.exit_code(limit);
  output = p.output();
  return code;
}

TEST(TuneCli, AnUnknownMaxCodecFailsAtOnceListingTheValidNames) {
  const TempDir dir;
  std::string out;
  EXPECT_EQ(
      tune(dir, {"--max-codec", "int3", "--output", (dir.path() / "t.json").string()}, out, 30s), 2)
      << out;
  EXPECT_TRUE(contains(out, "--max-codec 'int3' is not a codec")) << out;
  for (const char* name : {"none", "bf16", "fp16", "int8", "int4", "onebit", "topk"}) {
    EXPECT_TRUE(contains(out, name)) << name << " missing in: " << out;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "t.json"));
}

TEST(TuneCli, BadSizesAndUnwritableOutputFailAtOnce) {
  const TempDir dir;
  std::string out;
  EXPECT_EQ(tune(dir, {"--sizes", "64K"}, out, 30s), 2) << out;
  EXPECT_TRUE(contains(out, "LO..HI")) << out;
  EXPECT_EQ(tune(dir, {"--sizes", "4Q..8K"}, out, 30s), 2) << out;
  EXPECT_TRUE(contains(out, "'4Q'")) << out;
  EXPECT_EQ(tune(dir, {"--sizes", "6..8K"}, out, 30s), 2) << out;
  EXPECT_TRUE(contains(out, "multiples of 4")) << out;
  EXPECT_EQ(tune(dir, {"--output", "/nonexistent/dir/t.json"}, out, 30s), 2) << out;
  EXPECT_TRUE(contains(out, "/nonexistent/dir/t.json")) << out;
}

TEST(TuneCli, AQuickLoopbackRunWritesAConfigTheCommunicatorReads) {
  const TempDir dir;
  const fs::path file = dir.path() / "tune.json";
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(tune(dir,
                 {"--quick", "-n", "2", "--sizes", "4K..256K", "--max-codec", "int8", "--output",
                  file.string()},
                 out, 120s),
            0)
      << out;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60) << out;  // about 10 s on 2 busy cores
  EXPECT_TRUE(contains(out, "latency (us")) << out;
  EXPECT_TRUE(contains(out, "bandwidth (MB/s")) << out;
  EXPECT_TRUE(contains(out, "codec<=int8")) << out;
  EXPECT_TRUE(contains(out, "wrote " + file.string())) << out;

  const json doc = json::parse(read_file(file));
  // The Communicator's parser accepts the whole file.
  const auto table = comm::AlgorithmTable::parse_json(doc.dump(), file.string());
  const auto& rules = table.rules();
  ASSERT_FALSE(rules.empty());
  EXPECT_EQ(rules.front().min_bytes, 0U);
  EXPECT_EQ(rules.back().max_bytes, strait::comm::SelectionRule::kInf);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(rules[i].min_ranks, 2);
    EXPECT_EQ(rules[i].max_ranks, 2);
    EXPECT_NE(rules[i].selection.algorithm, nullptr);
    // Within the budget: none, a 16-bit cast or int8.
    const std::string codec = rules[i].codec.substr(0, rules[i].codec.find(':'));
    EXPECT_TRUE(codec == "none" || codec == "bf16" || codec == "fp16" || codec == "int8")
        << rules[i].describe();
    if (i > 0) {
      EXPECT_EQ(rules[i - 1].max_bytes, rules[i].min_bytes);
    }
  }
  EXPECT_EQ(doc["sites"], json::parse("[[0, 1]]")) << doc["sites"];  // loopback: one site
  const auto& bw = doc["links"]["bandwidth_MBps"];
  const auto& lat = doc["links"]["latency_us"];
  ASSERT_EQ(bw.size(), 2U);
  EXPECT_GT(bw[0][1].get<double>(), 0);
  EXPECT_EQ(bw[0][1], bw[1][0]);
  EXPECT_GT(lat[0][1].get<double>(), 0);
  EXPECT_EQ(doc["tuner"]["sizes_bytes"], json::parse("[4096, 16384, 65536, 262144]"));
  for (const char* c : {"recursive_doubling", "rabenseifner", "ring@seg=8K", "int8", "onebit"}) {
    ASSERT_TRUE(doc["tuner"]["time_us"].contains(c)) << c;
    EXPECT_EQ(doc["tuner"]["time_us"][c].size(), 4U) << c;
  }
}

}  // namespace
}  // namespace strait::test
