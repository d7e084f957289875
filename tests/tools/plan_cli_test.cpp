// `strait plan` and `strait train --plan auto` end to end: a tiny model is profiled once into the
// profile file, planned, trained with the chosen plan, and a second plan reuses the cached costs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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
  const std::vector<std::string> model = {"--layers", "2", "--dim", "32",
                                          "--heads",  "2", "--ctx", "32"};
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

}  // namespace
