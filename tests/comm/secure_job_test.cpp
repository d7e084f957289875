// A job with a shared secret, as deployed: `strait run -n N -- comm_worker SCENARIO` with
// STRAIT_SECRET_FILE set (tests/comm/comm_worker.cpp). The store authenticates every rank, links
// between sites are sealed (STRAIT_ENCRYPT=sites, the default with a secret), and a rank whose
// secret differs fails at once with an error naming its file instead of a timeout.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using strait::test::contains;
namespace fs = std::filesystem;

constexpr int kMismatch = 5;  // comm_worker's exit status for Error(Mismatch)

struct RunResult {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

std::string write_secret(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return path.string();
}

RunResult strait_run(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  const strait::test::TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  strait::test::Process launcher(STRAIT_BIN, args, dir.path() / "output", env);
  const int code = launcher.exit_code(90s, SIGINT, 6s);
  return {code, launcher.output(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(SecureJob, AuthenticatedStoreAndSealedSitesGiveTheReferenceValues) {
  const strait::test::TempDir dir;
  const std::string key = write_secret(dir.path() / "job.key", "secure-job-test-secret-0123456789");
  // Two sites of two ranks: the hierarchical allreduce, plain and compressed (int8), whose
  // inter-site messages are sealed; comm_worker checks values against its reference and that every
  // rank ends bit-identical.
  // GROUP_WORLD_SIZE (the site count comm_worker expects) through env(1): the launcher sets its
  // own.
  const auto run = strait_run(
      {"run", "-n", "4", "--", "env", "GROUP_WORLD_SIZE=2", COMM_WORKER_BIN, "hierarchical"},
      {"STRAIT_SECRET_FILE=" + key, "STRAIT_SITES=0,0,1,1", "STRAIT_TIMEOUT_S=60"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(contains(run.output, "rank " + std::to_string(r) + ": ok (hierarchical"))
        << run.output;
  }
}

TEST(SecureJob, ARankWithAnotherSecretFailsAtOnceNamingItsFile) {
  const strait::test::TempDir dir;
  const std::string key = write_secret(dir.path() / "job.key", "secure-job-test-secret-0123456789");
  const std::string wrong =
      write_secret(dir.path() / "old.key", "an-older-secret-0123456789abcdef");
  // Rank 1 alone reads another file (the launcher gives every rank the same environment).
  const std::string cmd = "if [ \"$RANK\" = 1 ]; then export STRAIT_SECRET_FILE='" + wrong +
                          "'; fi; exec '" + COMM_WORKER_BIN + "' allreduce";
  const auto run = strait_run({"run", "-n", "3", "--", "/bin/sh", "-c", cmd},
                              {"STRAIT_SECRET_FILE=" + key, "STRAIT_TIMEOUT_S=60"});
  EXPECT_EQ(run.exit_code, kMismatch) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "authentication failed: this rank's secret differs from rank 0's "
                       "(STRAIT_SECRET_FILE=" +
                           wrong))
      << run.output;
  // At once: far below the 60 s timeout the ranks would otherwise wait.
  EXPECT_LT(run.seconds, 30.0) << run.output;
}

}  // namespace
