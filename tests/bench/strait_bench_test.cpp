// Runs the built strait-bench as a user would, through `strait run`, and reads its table and JSON:
// every row checked (#wrong 0), the right sizes, and clear errors for bad arguments.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/process.h"

namespace {

using strait::test::contains;
using strait::test::read_file;
using strait::test::TempDir;

struct Table {
  std::vector<std::vector<std::string>> rows;  // whitespace-separated fields of each row
  std::string text;
};

// Rows are the lines that do not start with '#' and have the 13 columns of nccl-tests.
Table parse_table(const std::string& output) {
  Table t{.rows = {}, .text = output};
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> row;
    std::string f;
    while (fields >> f) row.push_back(f);
    if (row.size() == 13) t.rows.push_back(row);
  }
  return t;
}

struct Result {
  int exit_code;
  std::string output;
};

Result run_bench(int ranks, const std::vector<std::string>& bench_args, const TempDir& dir) {
  std::vector<std::string> args;
  if (ranks > 0) args = {"run", "-n", std::to_string(ranks), "--", STRAIT_BENCH_BIN};
  args.insert(args.end(), bench_args.begin(), bench_args.end());
  strait::test::Process p(ranks > 0 ? STRAIT_BIN : STRAIT_BENCH_BIN, args, dir.path() / "out",
                          {"STRAIT_TIMEOUT_S=60"});
  const int code = p.exit_code(std::chrono::seconds(120));
  return {code, p.output()};
}

struct Case {
  int ranks;
  std::vector<std::string> args;
  std::vector<std::string> sizes;  // the size column, row by row
  bool out_of_place = true;
  bool in_place = true;
};

// Test names in ctest show the arguments, not the bytes of the parameter.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.ranks << " ranks:";
  for (const auto& a : c.args) *os << ' ' << a;
}

class StraitBench : public testing::TestWithParam<Case> {};

TEST_P(StraitBench, EveryRowIsCheckedAndRight) {
  const Case& c = GetParam();
  const TempDir dir;
  auto args = c.args;
  args.insert(args.end(), {"-c", "1", "-n", "3", "-w", "1", "--json", (dir.path() / "j").string()});
  const auto r = run_bench(c.ranks, args, dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Table t = parse_table(r.output);
  ASSERT_EQ(t.rows.size(), c.sizes.size()) << r.output;
  for (std::size_t i = 0; i < c.sizes.size(); ++i) {
    const auto& row = t.rows[i];
    EXPECT_EQ(row[0], c.sizes[i]) << r.output;
    EXPECT_EQ(row[8], c.out_of_place ? "0" : "n/a") << "out-of-place #wrong\n" << r.output;
    EXPECT_EQ(row[12], c.in_place ? "0" : "n/a") << "in-place #wrong\n" << r.output;
  }
  EXPECT_TRUE(contains(r.output, "# Out of bounds values : 0 OK")) << r.output;
  EXPECT_TRUE(contains(r.output, "# Avg bus bandwidth")) << r.output;

  const auto j = nlohmann::json::parse(read_file(dir.path() / "j"));
  EXPECT_EQ(j["ranks"], c.ranks == 0 ? 1 : c.ranks);
  EXPECT_EQ(j["wrong"], 0);
  ASSERT_EQ(j["rows"].size(), c.sizes.size());
  for (std::size_t i = 0; i < c.sizes.size(); ++i) {
    EXPECT_EQ(std::to_string(j["rows"][i]["bytes"].get<std::size_t>()), c.sizes[i]);
  }
}

const std::vector<std::string> kSizes8To64K = {"8", "32", "128", "512", "2048", "8192", "32768"};

INSTANTIATE_TEST_SUITE_P(
    Runs, StraitBench,
    testing::Values(
        Case{.ranks = 2,
             .args = {"allreduce", "-b", "8", "-e", "64K", "-f", "4"},
             .sizes = kSizes8To64K},
        Case{.ranks = 3,
             .args = {"allreduce", "-b", "8", "-e", "64K", "-f", "4"},
             .sizes = kSizes8To64K},
        Case{.ranks = 3,
             .args = {"allreduce", "-b", "6", "-e", "96", "-f", "4", "-d", "bf16", "-o", "avg"},
             .sizes = {"6", "24", "96"}},
        Case{.ranks = 3,
             .args = {"allreduce", "-b", "1K", "-e", "1K", "-d", "i8", "-o", "prod"},
             .sizes = {"1024"}},
        // 3 ranks of f16: 4 B is 0 elements per rank, 32 B is 5 per rank, 30 B in all
        // (nccl-tests' size is the whole gathered buffer, rounded down to whole elements).
        Case{.ranks = 3,
             .args = {"allgather", "-b", "4", "-e", "8K", "-f", "8", "-d", "f16"},
             .sizes = {"0", "30", "252", "2046"}},
        Case{.ranks = 3,
             .args = {"broadcast", "-b", "4", "-e", "64K", "-f", "128", "-r", "2"},
             .sizes = {"4", "512", "65536"},
             .out_of_place = false},
        Case{.ranks = 3,
             .args = {"sendrecv", "-b", "4", "-e", "64K", "-f", "128", "-d", "u8"},
             .sizes = {"4", "512", "65536"},
             .in_place = false},
        // 3 ranks of bf16: 6 B is 1 element per rank; 192 B is 32 per rank, 96 in all.
        Case{.ranks = 3,
             .args = {"reduce_scatter", "-b", "6", "-e", "6K", "-f", "32", "-d", "bf16", "-o",
                      "avg"},
             .sizes = {"6", "192", "6144"}},
        Case{.ranks = 3,
             .args = {"reduce", "-b", "8", "-e", "8K", "-f", "32", "-d", "i8", "-o", "prod", "-r",
                      "2"},
             .sizes = {"8", "256", "8192"}},
        Case{.ranks = 3,
             .args = {"alltoall", "-b", "8", "-e", "256K", "-f", "32", "-d", "u8"},
             .sizes = {"6", "255", "8190", "262143"}},
        // Without RANK in the environment strait-bench is one rank of its own.
        Case{.ranks = 0,
             .args = {"allreduce", "-b", "8", "-e", "1K", "-f", "8", "-o", "max"},
             .sizes = {"8", "64", "512"}}),
    [](const testing::TestParamInfo<Case>& i) {
      return fmt::format("{}_{}ranks_{}", i.param.args[0], i.param.ranks, i.index);
    });

struct BadCase {
  std::vector<std::string> args;
  std::string says;
};

void PrintTo(const BadCase& c, std::ostream* os) {
  for (const auto& a : c.args) *os << ' ' << a;
}

class StraitBenchRefuses : public testing::TestWithParam<BadCase> {};

TEST_P(StraitBenchRefuses, WithAClearError) {
  const TempDir dir;
  const auto r = run_bench(0, GetParam().args, dir);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, GetParam().says)) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    BadArguments, StraitBenchRefuses,
    testing::Values(
        BadCase{{"allreduse"}, "unknown collective 'allreduse'"},
        BadCase{{"allreduce", "-b", "1M", "-e", "1K"}, "larger than -e"},
        BadCase{{"allreduce", "-d", "f8"}, "unknown dtype 'f8'"},
        BadCase{{"allreduce", "-o", "xor"}, "unknown reduction 'xor'"},
        BadCase{{"allreduce", "-d", "i32", "-o", "avg"}, "-o avg needs a floating-point dtype"},
        BadCase{{"allreduce", "-b", "8", "-e", "1K", "-f", "1"}, "-f (FACTOR)"},
        BadCase{{"allreduce", "-b", "lots"}, "size 'lots' is not a size"},
        BadCase{{"broadcast", "-r", "3", "-b", "8", "-e", "8"}, "-r (ROOT) is 3"},
        BadCase{{"sendrecv", "-b", "8", "-e", "8"}, "sendrecv needs at least 2 ranks"},
        BadCase{{"allreduce", "--bound", "--bound-bytes", "1K"}, "--bound-bytes is 1024 B"}),
    [](const testing::TestParamInfo<BadCase>& i) { return fmt::format("case{}", i.index); });

// --bound: rows gain the copy rate and, per variant, the bound and busbw / bound (18 columns),
// and the JSON carries them.
TEST(StraitBenchBound, RowsShowTheCopyRateTheBoundAndTheFraction) {
  const TempDir dir;
  const auto r =
      run_bench(2,
                {"reduce_scatter", "-b", "64K", "-e", "256K", "-f", "4", "-n", "2", "-w", "1",
                 "--bound", "--bound-bytes", "1M", "--json", (dir.path() / "j").string()},
                dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "# bound: before each size every rank copies 1048576 B"))
      << r.output;
  int rows = 0;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string x;
    while (fields >> x) f.push_back(x);
    ASSERT_EQ(f.size(), 18U) << line;
    EXPECT_GT(std::stod(f[13]), 0.0) << line;  // copy GB/s
    // bound = size / (1.5 size / (2 copy)) * 1/2 for 2 ranks.
    EXPECT_NEAR(std::stod(f[14]), std::stod(f[13]) * 2 / 1.5 / 2, 0.011) << line;
    EXPECT_NEAR(std::stod(f[15]), std::stod(f[7]) / std::stod(f[14]), 0.011) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 2) << r.output;
  const auto j = nlohmann::json::parse(read_file(dir.path() / "j"));
  EXPECT_EQ(j["bound_bytes"], 1U << 20U);
  EXPECT_GT(j["rows"][0]["copy_gbs"].get<double>(), 0.0);
  EXPECT_GT(j["rows"][0]["in_place"]["of_bound"].get<double>(), 0.0);
}

TEST(StraitBenchJson, UnwritablePathIsAnError) {
  const TempDir dir;
  const auto r =
      run_bench(0, {"allreduce", "-b", "8", "-e", "8", "--json", "/nonexistent/x.json"}, dir);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot write --json /nonexistent/x.json")) << r.output;
}

}  // namespace

// `--file` relative to the working directory: the engine is chosen for the file's own folder
// (it once looked for the folder "" and failed).
TEST(StraitBenchOffload, ARelativeFileIsTakenFromTheWorkingDirectory) {
  const TempDir dir;
  const std::string command = fmt::format(
      "cd '{}' && exec '{}' offload --file io.dat --file-size 1M --engines posix "
      "--ops write,read -b 64K -e 64K --qd 1 --bytes 256K --adamw-params 0",
      dir.str(), STRAIT_BENCH_BIN);
  strait::test::Process p("/bin/sh", {"-c", command}, dir.path() / "out");
  const int status = p.wait(std::chrono::seconds(60));
  const std::string out = read_file(dir.path() / "out");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(posix +read +64K +1 +262144)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(posix +write +64K +1 +262144)"))) << out;
}
