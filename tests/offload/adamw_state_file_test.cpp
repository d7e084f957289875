#include "offload/adamw_state_file.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "offload/pinned_buffer.h"
#include "tests/common/expect_error.h"
#include "tests/common/scratch_mount.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/offload/adamw_reference.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using kernels::AdamWHyper;
using strait::test::contains;
using strait::test::error_of;
using strait::test::ScratchMount;
using strait::test::TempDir;

using namespace strait::offload::testing;  // tests/offload/adamw_reference.h, test_util.h

AdamWStateFileOptions options_for(const std::filesystem::path& dir, IoEngineKind kind,
                                  std::size_t chunk, unsigned buffers) {
  AdamWStateFileOptions o;
  o.dir = dir;
  o.tag = "rank7";
  o.chunk_params = chunk;
  o.buffers = buffers;
  o.io.force = kind;
  o.keep_name = true;  // these tests inspect and damage the file through its name
  return o;
}

class StateFileTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    if (GetParam() == IoEngineKind::Uring) {
      if (auto why = testing::uring_unavailable(dir_.path())) GTEST_SKIP() << *why;
    }
  }

  // Streams `steps` AdamW steps through a state file and checks params and moments bit-for-bit
  // against the in-memory kernel.
  void check_matches_in_memory(std::size_t n, std::size_t chunk, unsigned buffers, int steps) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " chunk=" << chunk << " buffers=" << buffers);
    std::mt19937 rng(static_cast<unsigned>(n * 31 + chunk));
    AdamWStateFile state(n, options_for(dir_.path(), GetParam(), chunk, buffers));
    ASSERT_EQ(state.engine_kind(), GetParam());
    const std::vector<DecayGroup> groups = three_groups(n);
    std::vector<float> params = random_vector(n, rng, 1.0F);
    InMemory ref{params, std::vector<float>(n, 0.0F), std::vector<float>(n, 0.0F)};
    const AdamWHyper hyper{1e-2, 0.9, 0.999, 1e-8, 123.0 /* replaced by each group's */};
    for (int t = 1; t <= steps; ++t) {
      const std::vector<float> grads = random_vector(n, rng, t == 2 ? 1e-4F : 1.0F);
      state.step(params, grads, groups, hyper, t);
      ref.step(grads, groups, hyper, t);
      ASSERT_TRUE(same_bits(params, ref.p)) << "params differ after step " << t;
    }
    std::vector<float> m(n, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> v(n, std::numeric_limits<float>::quiet_NaN());
    state.read_moments(m, v);
    EXPECT_TRUE(same_bits(m, ref.m)) << "m read back from disk differs";
    EXPECT_TRUE(same_bits(v, ref.v)) << "v read back from disk differs";
  }

  TempDir dir_;
};

TEST_P(StateFileTest, AwkwardCountsMatchInMemoryBitForBit) {
  const std::size_t chunk = 2048;  // a multiple of 1024, so no rounding
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{3}, std::size_t{1023}, std::size_t{1025}, std::size_t{4095},
        std::size_t{4096}, std::size_t{4097}, chunk - 1, chunk, chunk + 1, 5 * chunk + 17}) {
    check_matches_in_memory(n, chunk, 3, 3);
  }
}

TEST_P(StateFileTest, AnyBufferCountGivesTheSameResult) {
  for (const unsigned buffers : {2U, 3U, 5U})
    check_matches_in_memory(9 * 1024 + 5, 1024, buffers, 3);
}

TEST_P(StateFileTest, DefaultChunkSizeStreamsSeveralChunks) {
  AdamWStateFileOptions o;
  o.dir = dir_.path();
  EXPECT_EQ(o.chunk_params, std::size_t{512} * 1024);
  check_matches_in_memory(2 * o.chunk_params + 1234, o.chunk_params, 3, 2);
}

TEST_P(StateFileTest, ChunkSizeIsRoundedToTheAlignment) {
  AdamWStateFile state(5000, options_for(dir_.path(), GetParam(), 1000, 3));
  EXPECT_EQ(state.chunk_params() % 1024, 0U);
  EXPECT_GE(state.chunk_params(), 1000U);
  check_matches_in_memory(5000, 1000, 3, 2);
}

TEST_P(StateFileTest, FileIsPreallocatedZeroNamedAndRemoved) {
  std::filesystem::path path;
  {
    const std::size_t n = 10000;
    AdamWStateFile state(n, options_for(dir_.path(), GetParam(), 4096, 3));
    path = state.path();
    EXPECT_EQ(path.parent_path(), dir_.path());
    const std::string name = path.filename().string();
    EXPECT_TRUE(contains(name, "rank7")) << name;
    EXPECT_TRUE(contains(name, std::to_string(::getpid()))) << name;
    ASSERT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(std::filesystem::file_size(path), state.file_bytes());
    // Two full chunks [m | v] of 4096 parameters, then the 1808 left over with m and v each
    // padded to a page (4 KiB pages: 2 x 32 KiB + 2 x 8 KiB).
    ASSERT_EQ(state.chunk_params(), 4096U);
    const std::size_t page = page_size();
    EXPECT_EQ(state.file_bytes(),
              2U * 2U * 4096U * 4U + 2U * ((1808U * 4U + page - 1) / page * page));
    // A second state with the same tag in the same process gets its own file.
    const AdamWStateFile other(n, options_for(dir_.path(), GetParam(), 4096, 3));
    EXPECT_NE(other.path(), path);
    std::vector<float> m(n, 1.0F), v(n, 1.0F);
    state.read_moments(m, v);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(m[i], 0.0F) << i;
      ASSERT_EQ(v[i], 0.0F) << i;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
}

TEST_P(StateFileTest, ByDefaultTheFileHasNoNameSoAKilledJobLeavesNothing) {
  const std::size_t n = 3000;
  AdamWStateFileOptions o = options_for(dir_.path(), GetParam(), 1024, 3);
  o.keep_name = false;
  AdamWStateFile state(n, o);
  // Gone from the directory from the start, yet fully usable through the open descriptor.
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
  EXPECT_FALSE(std::filesystem::exists(state.path()));
  std::vector<float> params(n), grads(n), m(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    params[i] = 0.01F * static_cast<float>(i % 17);
    grads[i] = 0.5F - 0.001F * static_cast<float>(i % 31);
  }
  std::vector<float> ref_p = params, ref_m(n, 0.0F), ref_v(n, 0.0F);
  kernels::AdamWHyper h;
  h.weight_decay = 0.0;
  for (std::int64_t t = 1; t <= 3; ++t) {
    state.step(params, grads, h, t);
    kernels::adamw_step(ref_p, grads, ref_m, ref_v, h, t);
  }
  state.read_moments(m, v);
  EXPECT_EQ(params, ref_p);
  EXPECT_EQ(m, ref_m);
  EXPECT_EQ(v, ref_v);
}

TEST_P(StateFileTest, RestoredMomentsContinueLikeInMemory) {
  const std::size_t n = 3000;
  std::mt19937 rng(3);
  AdamWStateFile state(n, options_for(dir_.path(), GetParam(), 1024, 3));
  InMemory ref{random_vector(n, rng, 1.0F), random_vector(n, rng, 0.1F),
               random_vector(n, rng, 0.1F)};
  for (float& x : ref.v) x = x * x;  // v >= 0
  state.write_moments(ref.m, ref.v);
  std::vector<float> params = ref.p;
  const AdamWHyper hyper{3e-3, 0.9, 0.95, 1e-8, 0.05};
  const std::vector<DecayGroup> one = {{0, n, hyper.weight_decay}};
  const std::vector<float> grads = random_vector(n, rng, 1.0F);
  state.step(params, grads, hyper, 41);  // resuming at step 41
  ref.step(grads, one, hyper, 41);
  EXPECT_TRUE(same_bits(params, ref.p));
  std::vector<float> m(n), v(n);
  state.read_moments(m, v);
  EXPECT_TRUE(same_bits(m, ref.m));
  EXPECT_TRUE(same_bits(v, ref.v));
}

TEST_P(StateFileTest, TruncatedFileFailsLoudlyThenRefusesUntilRestored) {
  const std::size_t n = 6 * 1024;
  AdamWStateFile state(n, options_for(dir_.path(), GetParam(), 1024, 3));
  std::filesystem::resize_file(state.path(), state.file_bytes() / 2);  // someone else's bug
  std::vector<float> params(n, 1.0F), grads(n, 0.5F);
  // A step over a truncated state file throws; so does the next one, until write_moments.
  const std::string truncated =
      error_of([&] { state.step(params, grads, AdamWHyper{}, 1); }, ErrorCode::Io);
  EXPECT_TRUE(contains(truncated, "end of the file")) << truncated;
  EXPECT_TRUE(contains(truncated, state.path().string())) << truncated;
  const std::string refused =
      error_of([&] { state.step(params, grads, AdamWHyper{}, 2); }, ErrorCode::Aborted);
  EXPECT_TRUE(contains(refused, "write_moments")) << refused;
  const std::vector<float> zeros(n, 0.0F);
  state.write_moments(zeros, zeros);  // restores every chunk (and the file's length)
  EXPECT_EQ(std::filesystem::file_size(state.path()), state.file_bytes());
  std::vector<float> fresh(n, 1.0F);
  state.step(fresh, grads, AdamWHyper{}, 1);
  InMemory ref{std::vector<float>(n, 1.0F), zeros, zeros};
  ref.step(grads, {{0, n, AdamWHyper{}.weight_decay}}, AdamWHyper{}, 1);
  EXPECT_TRUE(same_bits(fresh, ref.p));
}

TEST_P(StateFileTest, BadArgumentsAreRejectedBeforeAnyIo) {
  const std::size_t n = 100;
  AdamWStateFile state(n, options_for(dir_.path(), GetParam(), 1024, 3));
  std::vector<float> p(n), g(n), shorter(n - 1);
  const auto expect_invalid = [](const std::function<void()>& fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one mentioning " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_TRUE(contains(e.what(), part)) << e.what();
    }
  };
  const AdamWHyper h;
  expect_invalid([&] { state.step(shorter, g, h, 1); }, "params");
  expect_invalid([&] { state.step(p, shorter, h, 1); }, "grads");
  expect_invalid([&] { state.step(p, g, h, 0); }, "step");
  const std::vector<DecayGroup> gap = {{0, 40, 0.1}, {50, 50, 0.0}};
  expect_invalid([&] { state.step(p, g, gap, h, 1); }, "[40, 50) are in no decay group");
  const std::vector<DecayGroup> overlap = {{0, 60, 0.1}, {50, 50, 0.0}};
  expect_invalid([&] { state.step(p, g, overlap, h, 1); }, "overlap");
  const std::vector<DecayGroup> beyond = {{0, 101, 0.1}};
  expect_invalid([&] { state.step(p, g, beyond, h, 1); }, "past");
  const std::vector<DecayGroup> negative = {{0, 100, -1.0}};
  expect_invalid([&] { state.step(p, g, negative, h, 1); }, "weight_decay");
  expect_invalid([&] { state.read_moments(shorter, p); }, "m has 99");
  // None of these touched the state: a valid step still works.
  state.step(p, g, h, 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, StateFileTest,
                         ::testing::Values(IoEngineKind::Posix, IoEngineKind::Uring),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

// Errors in the directory: independent of the engine.
ErrorCode create_error(const std::filesystem::path& dir, std::size_t n, std::string& what) {
  AdamWStateFileOptions o;
  o.dir = dir;
  try {
    const AdamWStateFile state(n, o);
  } catch (const Error& e) {
    what = e.what();
    return e.code();
  }
  return ErrorCode::Internal;  // nothing thrown
}

TEST(StateFileDirectory, MissingOrNotADirectory) {
  TempDir dir;
  std::string what;
  EXPECT_EQ(create_error(dir.path() / "nope", 10, what), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "offload directory " + (dir.path() / "nope").string() +
                                 " does not exist: create it or pass --offload-dir DIR"))
      << what;
  const auto file = dir.path() / "file";
  std::ofstream(file) << "x";
  EXPECT_EQ(create_error(file, 10, what), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "not a directory")) << what;
}

TEST(StateFileDirectory, NotWritable) {
  std::string what;
  // Root may write anywhere permissions-wise, but not into /proc ...
  {
    const testing::EnvGuard posix("STRAIT_IO_ENGINE", "posix");
    EXPECT_EQ(create_error("/proc", 10, what), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(what, "not writable")) << what;
    EXPECT_TRUE(contains(what, "--offload-dir")) << what;
  }
  // ... nor into a read-only mount.
  ScratchMount ro("tmpfs", MS_RDONLY, "size=64k");
  if (!ro.ok()) GTEST_SKIP() << ro.error();
  EXPECT_EQ(create_error(ro.path(), 10, what), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "not writable")) << what;
  EXPECT_TRUE(contains(what, "EROFS")) << what;
}

TEST(StateFileDirectory, AutomaticFallbackWhereODirectIsRefused) {
  ScratchMount ramfs("ramfs", 0, "");
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.error();
  const testing::EnvGuard automatic("STRAIT_IO_ENGINE", std::nullopt);
  AdamWStateFileOptions o;
  o.dir = ramfs.path();
  o.chunk_params = 1024;
  const std::size_t n = 2500;
  AdamWStateFile state(n, o);
  EXPECT_EQ(state.engine_kind(), IoEngineKind::Posix);
  EXPECT_TRUE(contains(std::string(state.engine_reason()), "O_DIRECT")) << state.engine_reason();
  std::mt19937 rng(9);
  std::vector<float> params = random_vector(n, rng, 1.0F);
  InMemory ref{params, std::vector<float>(n), std::vector<float>(n)};
  const AdamWHyper hyper;
  for (int t = 1; t <= 2; ++t) {
    const std::vector<float> grads = random_vector(n, rng, 1.0F);
    state.step(params, grads, hyper, t);
    ref.step(grads, {{0, n, hyper.weight_decay}}, hyper, t);
  }
  EXPECT_TRUE(same_bits(params, ref.p));
}

TEST(StateFileDirectory, FullDiskFailsUpFrontNamingTheBytes) {
  ScratchMount small("tmpfs", 0, "size=1m");
  if (!small.ok()) GTEST_SKIP() << small.error();
  const std::size_t n = std::size_t{1} << 20;  // 8 MiB of moments on a 1 MiB file system
  std::string what;
  EXPECT_EQ(create_error(small.path(), n, what), ErrorCode::Io);
  EXPECT_TRUE(contains(what, "ENOSPC")) << what;
  EXPECT_TRUE(contains(what, std::to_string(n * 8) + " bytes")) << what;
  // The free space as it was before the attempt (a partial allocation is not subtracted).
  EXPECT_TRUE(contains(what, "has 1048576 bytes free")) << what;
  EXPECT_TRUE(contains(what, small.path().string())) << what;
  EXPECT_TRUE(std::filesystem::is_empty(small.path())) << "the failed file must be removed";
}

}  // namespace
}  // namespace strait::offload
