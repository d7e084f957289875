// `strait plan` and `strait train --plan auto` end to end: a tiny model is profiled once into the
// profile file, planned, trained with the chosen plan, and a second plan reuses the cached costs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/small_model.h"
#include "tests/common/strait_process.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/common/word_corpus.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using strait::test::contains;
using strait::test::Strait;
using strait::test::TempDir;

TEST(StraitPlan, AutoPlansOnceTrainsWithThePlanAndTheNextPlanReusesTheProfile) {
  const TempDir dir;
  const fs::path corpus = strait::test::write_word_corpus(dir.path());
  const fs::path profile = dir.path() / "profile.json";
  const std::vector<std::string> env = {"STRAIT_PLAN_PROFILE=" + profile.string()};
  const std::vector<std::string> model = strait::test::small_model_flags(2);
  std::vector<std::string> train = {"train",
                                    "--plan",
                                    "auto",
                                    "--stages",
                                    "2",
                                    "--replicas",
                                    "1",
                                    "--microbatches",
                                    "2",
                                    "--microbatch-size",
                                    "2",
                                    "--steps",
                                    "2",
                                    "--sample-bytes",
                                    "0",
                                    "--eval-sequences",
                                    "2",
                                    "--data",
                                    corpus.string(),
                                    "--offload-dir",
                                    dir.path().string()};
  train.insert(train.end(), model.begin(), model.end());
  Strait run(train, dir.path() / "train.out", env);
  ASSERT_EQ(run.exit_code(180s), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "strait train --plan auto: ")) << run.output();
  EXPECT_TRUE(contains(run.output(), "2 ranks = ")) << run.output();
  ASSERT_TRUE(fs::exists(profile));
  std::ifstream in(profile);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  // One shape, profiled at the threads a rank gets (cores / 2 ranks).
  ASSERT_EQ(j.at("shapes").size(), 1U) << j.at("shapes").dump();
  EXPECT_EQ(j.at("shapes").begin().key().rfind("dim=32,heads=2,ctx=32,vocab=256,threads=", 0), 0U)
      << j.at("shapes").dump();
  EXPECT_TRUE(j.at("links").contains("2")) << j.at("links").dump();
  // The same model and ranks again: every cost comes from the profile.
  Strait plan({"plan", "-n", "2", "--model", "layers=2,dim=32,heads=2,ctx=32", "--batch", "4",
               "--offload-dir", dir.path().string()},
              dir.path() / "plan.out", env);
  ASSERT_EQ(plan.exit_code(120s), 0) << plan.output();
  EXPECT_TRUE(contains(plan.output(), "measuring took 0.0 s")) << plan.output();
  EXPECT_TRUE(contains(plan.output(), "(cached)")) << plan.output();
  EXPECT_TRUE(contains(plan.output(), "why #1 beat #2")) << plan.output();
}

TEST(StraitPlan, NoPlanFitsATinyMemoryLimit) {
  const TempDir dir;
  Strait plan({"plan", "-n", "2", "--model", "layers=2,dim=32,heads=2,ctx=32", "--batch", "4",
               "--memory-per-rank", "1K", "--offload-dir", dir.path().string()},
              dir.path() / "plan.out", {"STRAIT_PLAN_PROFILE=" + (dir.path() / "p.json").string()});
  EXPECT_EQ(plan.exit_code(120s), 2) << plan.output();
  EXPECT_TRUE(contains(plan.output(), "no plan of 2 ranks fits --memory-per-rank"))
      << plan.output();
}

// Validation runs of fewer than 3 steps time nothing (the first two are warm-up): refused before
// anything is measured, saying why; so is a count that is not a number.
TEST(StraitPlan, ValidationStepsBelowThreeAreRefused) {
  const TempDir dir;
  for (const auto& [steps, says] :
       {std::pair<std::string, std::string>{"2", "warm-up, not timed: give 3 or more"},
        {"x", "'x' is not a whole number of steps"}}) {
    Strait plan({"plan", "-n", "2", "--validate", "1", "--steps", steps}, dir.path() / "plan.out",
                {"STRAIT_PLAN_PROFILE=" + (dir.path() / "p.json").string()});
    EXPECT_NE(plan.exit_code(60s), 0) << plan.output();
    EXPECT_TRUE(contains(plan.output(), says)) << plan.output();
    EXPECT_FALSE(fs::exists(dir.path() / "p.json"));  // nothing measured
  }
}

// Unlike ranks: rank 1 at a quarter of rank 0's speed. Every plan of 2 stages tried with a split
// other than the even one gives rank 1 fewer layers, on whichever stage its placement puts it
// (place=1,0: stage 0, whose embedding costs less than the head); the plan file carries the split
// and the placement into strait train, which says them. --site-speed gives each site's ranks its
// speed. Bad speeds are refused, naming the fix.
TEST(StraitPlan, RankSpeedGivesTheSlowRankFewerLayersAndTheFileCarriesThem) {
  const TempDir dir;
  const fs::path corpus = strait::test::write_word_corpus(dir.path());
  const std::vector<std::string> env = {"STRAIT_PLAN_PROFILE=" +
                                        (dir.path() / "profile.json").string()};
  const fs::path file = dir.path() / "plan.json";
  Strait plan({"plan", "-n", "2", "--model", "layers=6,dim=32,heads=2,ctx=32", "--batch", "4",
               "--rank-speed", "1,0.25", "--top", "200", "--output", file.string(), "--offload-dir",
               dir.path().string()},
              dir.path() / "plan.out", env);
  ASSERT_EQ(plan.exit_code(180s), 0) << plan.output();
  EXPECT_TRUE(contains(plan.output(), "rank speed (x the profile's compute): 1,0.25"))
      << plan.output();
  ASSERT_TRUE(contains(plan.output(), " 2x1 1f1b M=1 b=4 layers=")) << plan.output();
  // Every one-chunk 2-stage plan with a split: "layers=A,B " with A > B.
  std::istringstream lines(plan.output());
  int splits = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find(" layers=");
    if (line.find(" 2x1 ") == std::string::npos || at == std::string::npos) continue;
    int a = 0, b = 0;
    char comma = 0, end = 0;
    std::istringstream(line.substr(at + 8)) >> a >> comma >> b >> std::noskipws >> end;
    if (end != ' ') continue;  // more than two stages (interleaved, zbv)
    if (line.find(" place=1,0 ") != std::string::npos) std::swap(a, b);  // rank 1 runs stage 0
    EXPECT_GT(a, b) << line;
    ++splits;
  }
  EXPECT_GT(splits, 0) << plan.output();
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in);
  const auto split = j.at("plan").at("stage_layers").get<std::vector<int>>();
  const auto placement = j.at("plan").at("placement").get<std::vector<int>>();
  if (j.at("plan").at("stages").get<int>() == 2 && j.at("plan").at("chunks").get<int>() == 1) {
    ASSERT_EQ(split.size(), 2U) << j.dump();
    ASSERT_EQ(placement.size(), 2U) << j.dump();
    // The stage rank 1 runs holds fewer layers.
    EXPECT_LT(split[placement[0] == 1 ? 0 : 1], split[placement[0] == 1 ? 1 : 0]) << j.dump();
  }
  Strait train(
      strait::test::joined({"train", "--plan", file.string()}, strait::test::small_model_flags(6),
                           {"--steps", "1", "--sample-bytes", "0", "--eval-sequences", "2",
                            "--data", corpus.string(), "--offload-dir", dir.path().string()}),
      dir.path() / "train.out", env);
  ASSERT_EQ(train.exit_code(180s), 0) << train.output();
  if (!split.empty()) {
    std::string counts;
    for (const int n : split) {
      if (!counts.empty()) counts += ',';
      counts += std::to_string(n);
    }
    EXPECT_TRUE(contains(train.output(), "(per stage " + counts + ")")) << train.output();
  }
  if (placement == std::vector<int>{1, 0}) {
    EXPECT_TRUE(contains(plan.output(),
                         "placement of #1 (replica r stage s -> world rank): "
                         "r0s0->1 r0s1->0"))
        << plan.output();
    EXPECT_TRUE(contains(train.output(),
                         "placement (--placement 1,0): rank 0 runs replica 0's "
                         "stage 1"))
        << train.output();
  }
  // Per site: every rank of site 1 at a quarter; a site without a speed is named.
  Strait sites({"plan", "-n", "2", "--model", "layers=6,dim=32,heads=2,ctx=32", "--batch", "4",
                "--sites", "0,1", "--site-speed", "1,0.25", "--offload-dir", dir.path().string()},
               dir.path() / "sites.out", env);
  ASSERT_EQ(sites.exit_code(120s), 0) << sites.output();
  EXPECT_TRUE(contains(sites.output(), "rank speed (x the profile's compute): 1,0.25"))
      << sites.output();
  Strait short_sites({"plan", "-n", "2", "--model", "layers=6,dim=32,heads=2,ctx=32", "--sites",
                      "0,1", "--site-speed", "1", "--offload-dir", dir.path().string()},
                     dir.path() / "short.out", env);
  EXPECT_NE(short_sites.exit_code(60s), 0) << short_sites.output();
  EXPECT_TRUE(contains(short_sites.output(), "give one per site label 0..1"))
      << short_sites.output();
  for (const auto& [speeds, message] : std::vector<std::pair<std::string, std::string>>{
           {"1,0", "is not a speed > 0"}, {"1", "1 speeds for -n 2 ranks"}}) {
    Strait bad({"plan", "-n", "2", "--model", "layers=6,dim=32,heads=2,ctx=32", "--rank-speed",
                speeds, "--offload-dir", dir.path().string()},
               dir.path() / "bad.out", env);
    EXPECT_NE(bad.exit_code(60s), 0) << bad.output();
    EXPECT_TRUE(contains(bad.output(), message)) << bad.output();
  }
}

}  // namespace
