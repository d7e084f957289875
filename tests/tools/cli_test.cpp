// The command line as users expect it (tools/main.cpp, tools/cli_support.h): `strait --version`,
// a bare `strait` listing the commands, "did you mean" for typos, an example line at the end of
// every --help, and `strait info` naming every parameter with its value's source.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/strait_process.h"
#include "tests/common/temp_dir.h"

namespace {

using strait::test::contains;
using strait::test::read_file;
using strait::test::Strait;
using strait::test::TempDir;

struct Result {
  int code;
  std::string out;
};

Result strait_says(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  const TempDir dir;
  Strait s(args, dir.path() / "out", env);
  const int code = s.exit_code();
  return {code, s.output()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

TEST(StraitCli, VersionNamesTheVersionAndCommit) {
  const Result r = strait_says({"--version"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_match(
      r.out, std::regex("strait [0-9]+\\.[0-9]+\\.[0-9]+( \\(git [0-9a-f]+(\\+changes)?\\))?\n")))
      << r.out;
}

TEST(StraitCli, BareStraitListsTheCommands) {
  const Result r = strait_says({});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(contains(r.out, "A subcommand is required")) << r.out;
  for (const char* command : {"info", "run", "schedule", "train", "tune", "wan"}) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(std::string("\n  ") + command + " +[A-Z]")))
        << command << " missing from:\n"
        << r.out;
  }
  const Result wan = strait_says({"wan"});
  EXPECT_EQ(wan.code, 2) << wan.out;
  EXPECT_TRUE(std::regex_search(wan.out, std::regex("\n  up +Create the testbed"))) << wan.out;
}

TEST(StraitCli, ATypoGetsTheClosestName) {
  const Result option = strait_says({"train", "--step", "3"});
  EXPECT_NE(option.code, 0);
  EXPECT_TRUE(contains(option.out, "did you mean --steps?")) << option.out;
  const Result command = strait_says({"trian"});
  EXPECT_NE(command.code, 0);
  EXPECT_TRUE(contains(command.out, "did you mean train?")) << command.out;
  const Result nested = strait_says({"wan", "up", "--rat", "1mbit"});
  EXPECT_TRUE(contains(nested.out, "did you mean --rate?")) << nested.out;
  const Result sub = strait_says({"wan", "upp"});
  EXPECT_TRUE(contains(sub.out, "did you mean up?")) << sub.out;
  // Nothing close: no guess, CLI11's error alone.
  const Result far = strait_says({"run", "--zzzzzzzz", "-n", "2", "true"});
  EXPECT_NE(far.code, 0);
  EXPECT_TRUE(contains(far.out, "--zzzzzzzz")) << far.out;
  EXPECT_FALSE(contains(far.out, "did you mean")) << far.out;
}

TEST(StraitCli, EveryHelpEndsWithAnExample) {
  const std::vector<std::vector<std::string>> commands = {
      {},      {"info"},      {"run"},         {"schedule"},      {"train"},      {"tune"},
      {"wan"}, {"wan", "up"}, {"wan", "down"}, {"wan", "status"}, {"wan", "run"}, {"wan", "exec"}};
  for (auto args : commands) {
    const std::string name = args.empty() ? "strait" : "strait " + args.back();
    args.push_back("--help");
    const Result r = strait_says(args);
    EXPECT_EQ(r.code, 0) << name << ":\n" << r.out;
    const auto lines = lines_of(r.out);
    ASSERT_GE(lines.size(), 2U) << name;
    EXPECT_EQ(lines[lines.size() - 2], "Example:") << name << ":\n" << r.out;
    EXPECT_TRUE(std::regex_match(lines.back(), std::regex("  (sudo )?strait .*"))) << name << ":\n"
                                                                                   << r.out;
  }
}

TEST(StraitCli, InfoNamesEveryParameterOfTheDocsWithItsSource) {
  const TempDir dir;
  const std::string conf = (dir.path() / "strait.conf").string();
  std::ofstream(conf) << "# test\nSTRAIT_SPIN_US=7\n";
  const Result r = strait_says({"info"}, {"STRAIT_CONF_FILE=" + conf, "STRAIT_STREAMS=3",
                                          "STRAIT_SPIN_US=", "STRAIT_TIMOUT_S=1"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^strait [0-9.]+"))) << r.out;
  for (const char* build : {"compiler", "CUDA", "NCCL", "UCX", "io_uring", "hwloc", "SIMD"}) {
    EXPECT_TRUE(contains(r.out, std::string("\n  ") + build + " ")) << build << "\n" << r.out;
  }
  EXPECT_TRUE(std::regex_search(r.out, std::regex("STRAIT_STREAMS +3  \\[environment\\]")))
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("STRAIT_SPIN_US +7  \\[config file " + conf + ":2\\]")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("STRAIT_TIMEOUT_S +\\(300\\)  \\[default\\]")))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "STRAIT_TIMOUT_S is set but is not a strait parameter (did you "
                       "mean STRAIT_TIMEOUT_S?)"))
      << r.out;
  // Every variable the docs list.
  const std::string doc =
      read_file(std::filesystem::path(STRAIT_SOURCE_DIR) / "docs" / "environment.md");
  const std::regex row("\n\\| `(STRAIT_[A-Z0-9_]+)` \\|");
  int rows = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator();
       ++it, ++rows) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n  " + (*it)[1].str() + " ")))
        << (*it)[1].str();
  }
  EXPECT_GT(rows, 20);
}

}  // namespace
