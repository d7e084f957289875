// `strait train --quorum Q --grace S` end to end (spawns the built binary; 3 replicas of one
// stage): rounds close with at least Q replicas, replica 0 always among them; the token-weighted
// rounds cover the job's token budget (steps x replicas steps) and the last one stops every
// replica; the flags that do not fit are refused by name. (A slowed and a dying replica:
// tests/train/quorum_sync_test.cpp; bench/quorum.sh throttles one replica with cgroups.)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/small_model.h"
#include "tests/common/strait_process.h"
#include "tests/common/word_corpus.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::contains;
using strait::test::Strait;
using strait::test::TempDir;

std::vector<std::string> quorum_args(const fs::path& corpus,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> a = strait::test::joined({"train"}, strait::test::small_model_flags(2),
                                                    {"--microbatch-size",
                                                     "2",
                                                     "--microbatches",
                                                     "2",
                                                     "--warmup",
                                                     "2",
                                                     "--sample-bytes",
                                                     "0",
                                                     "--blas-threads",
                                                     "1",
                                                     "--stages",
                                                     "1",
                                                     "--replicas",
                                                     "3",
                                                     "--outer-steps",
                                                     "5",
                                                     "--outer-lr",
                                                     "1",
                                                     "--outer-momentum",
                                                     "0.5",
                                                     "--data",
                                                     corpus.string()});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(StraitTrainQuorum, RoundsCloseOnTheQuorumAndCoverTheTokenBudget) {
  const TempDir dir;
  const fs::path corpus = strait::test::write_word_corpus(dir.path());
  const fs::path metrics = dir.path() / "m.jsonl";
  Strait run(quorum_args(corpus, {"--steps", "60", "--quorum", "2", "--grace", "0.002", "--metrics",
                                  metrics.string()}),
             dir.path() / "out", {"STRAIT_TIMEOUT_S=60"});
  const int status = run.wait(180s);
  const std::string text = run.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_TRUE(contains(text, "training ends")) << text;
  std::ifstream in(metrics);
  std::vector<json> rounds;
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["type"] == "quorum_round") rounds.push_back(r);
  }
  ASSERT_FALSE(rounds.empty()) << text;
  double tokens = 0;
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    const json& r = rounds[i];
    EXPECT_EQ(r["version"], i + 1);
    const auto in_round = r["included"].get<std::vector<int>>();
    EXPECT_GE(in_round.size(), 2U) << r.dump();
    EXPECT_EQ(in_round.front(), 0) << r.dump();
    EXPECT_EQ(r["stop"].get<bool>(), i + 1 == rounds.size()) << r.dump();
    tokens += r["tokens"].get<double>();
    EXPECT_DOUBLE_EQ(r["total_tokens"].get<double>(), tokens);
  }
  // 60 steps x 3 replicas x 2 x 2 x 32 tokens, plus at most the replicas' rounds in flight.
  const double budget = 60.0 * 3 * 128;
  EXPECT_GE(tokens, budget);
  EXPECT_LE(tokens, budget + 3 * 5 * 128 * 2);
}

TEST(StraitTrainQuorum, FlagsThatDoNotFitAreNamed) {
  const TempDir dir;
  const fs::path corpus = strait::test::write_word_corpus(dir.path());
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--quorum", "4"}, "at least the quorum"},
      {{"--quorum", "2", "stages=2"}, "--stages 1 (has 2)"},
      {{"--quorum", "2", "--outer-overlap"}, "--quorum needs --outer-steps H, and none of"},
      {{"--quorum", "2", "--grace", "-1"}, "--grace"}};
  for (const Case& c : cases) {
    std::vector<std::string> args = quorum_args(corpus, c.extra);
    if (args.back() == "stages=2") {  // the split itself: --stages 1 becomes 2
      args.pop_back();
      *(std::find(args.begin(), args.end(), "--stages") + 1) = "2";
    }
    Strait run(args, dir.path() / "bad.out");
    (void)run.wait(60s);
    EXPECT_TRUE(contains(run.output(), c.says)) << c.says << ":\n" << run.output();
  }
}

}  // namespace
