#include "offload/swap_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fd.h"
#include "offload/pinned_buffer.h"
#include "tests/common/scratch_mount.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using strait::test::contains;
using strait::test::ScratchMount;
using strait::test::TempDir;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

// Distinct bytes for every (seed, index), so a block read from the wrong place or version shows.
std::byte pattern(std::size_t seed, std::size_t i) {
  std::uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ULL + i;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 32;
  return static_cast<std::byte>(x);
}

void fill(std::span<std::byte> bytes, std::size_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(seed, i);
}

// The first index where bytes differs from the pattern, or bytes.size().
std::size_t first_difference(std::span<const std::byte> bytes, std::size_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != pattern(seed, i)) return i;
  }
  return bytes.size();
}

// A buffer of `size` bytes whose address is page-aligned or deliberately not (1 byte past a page
// boundary), since SwapStore moves the two differently under O_DIRECT.
class TestBuffer {
 public:
  TestBuffer(std::size_t size, bool aligned) : storage_(size + 1), size_(size), aligned_(aligned) {}
  std::span<std::byte> bytes() { return storage_.bytes().subspan(aligned_ ? 0 : 1, size_); }

 private:
  PinnedBuffer storage_;
  std::size_t size_;
  bool aligned_;
};

// An aligned buffer of `size` bytes holding fill()'s pattern for `seed`.
TestBuffer patterned(std::size_t size, std::size_t seed) {
  TestBuffer b(size, true);
  fill(b.bytes(), seed);
  return b;
}

// Waits for an operation's future with a deadline, so a hang fails the test instead of the run.
void get(std::future<void>& f) {
  ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "hung";
  f.get();
}

void get(std::future<void>&& f) {
  get(f);
}

// The Error an operation's future holds; fails the test when it holds none.
Error error_of(std::future<void> f) {
  EXPECT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "hung";
  try {
    f.get();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the operation succeeded; expected an error";
  return Error(ErrorCode::Internal, "no error");
}

SwapStoreOptions options_for(const std::filesystem::path& dir, std::optional<IoEngineKind> kind) {
  SwapStoreOptions o;
  o.dir = dir;
  o.tag = "test";
  o.io.force = kind;
  return o;
}

constexpr std::array<std::size_t, 6> kSizes = {0, 1, 4095, 4096, 4097, 28824000};

// Stores a key of every size from aligned and unaligned buffers, then reads each back (without
// waiting for the swap_outs first: the queue keeps call order) into buffers of the other kind.
void check_round_trips(SwapStore& store) {
  for (const bool aligned_in : {true, false}) {
    std::vector<TestBuffer> outs;
    std::vector<std::future<void>> writes;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      outs.emplace_back(kSizes[k], aligned_in);
      fill(outs.back().bytes(), k);
      writes.push_back(store.swap_out(fmt::format("key{}", k), outs.back().bytes()));
      EXPECT_TRUE(store.contains(fmt::format("key{}", k)));
      EXPECT_EQ(store.stored_size(fmt::format("key{}", k)), kSizes[k]);
    }
    std::vector<TestBuffer> ins;
    std::vector<std::future<void>> reads;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      ins.emplace_back(kSizes[k], !aligned_in);
      std::memset(ins.back().bytes().data(), 0xEE, kSizes[k]);
      reads.push_back(store.swap_in(fmt::format("key{}", k), ins.back().bytes()));
    }
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "size " << kSizes[k] << ", written from an "
                                        << (aligned_in ? "aligned" : "unaligned") << " buffer");
      get(writes[k]);
      get(reads[k]);
      EXPECT_EQ(first_difference(ins[k].bytes(), k), kSizes[k]);
    }
  }
}

class SwapStoreTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    if (GetParam() == IoEngineKind::Uring) {
      if (auto why = testing::uring_unavailable(dir_.path())) GTEST_SKIP() << *why;
    }
  }
  SwapStoreOptions options() const { return options_for(dir_.path(), GetParam()); }

  TempDir dir_;
};

TEST_P(SwapStoreTest, RoundTripsOfAwkwardSizesAreExact) {
  SwapStore store(options());
  ASSERT_EQ(store.engine_kind(), GetParam());
  check_round_trips(store);
  // Every extent is a whole number of units, so the file is too.
  EXPECT_EQ(store.file_bytes() % store.unit(), 0U);
}

TEST_P(SwapStoreTest, RoundTripsWithoutChecksumsAndWithSmallStaging) {
  SwapStoreOptions o = options();
  o.checksum = false;
  o.staging_bytes = 8 * kKiB;  // unaligned buffers stream through many small chunks
  SwapStore store(o);
  check_round_trips(store);
}

TEST_P(SwapStoreTest, FileIsNamedUnlinkedAndItsSpaceReused) {
  {
    SwapStore store(options());
    EXPECT_TRUE(std::filesystem::is_empty(dir_.path())) << "unlinked unless keep_name";
    const std::string name = store.path().filename().string();
    EXPECT_TRUE(contains(name, "strait-swap-test-pid" + std::to_string(::getpid()))) << name;
    TestBuffer a(100 * kKiB + 1, true);
    fill(a.bytes(), 1);
    get(store.swap_out("a", a.bytes()));
    const std::uint64_t after_one = store.file_bytes();
    EXPECT_EQ(after_one, 104 * kKiB);  // 100 KiB + 1 rounded up to the 4 KiB unit
    // Rewriting the same size alternates between two extents; erasing and storing again reuses.
    for (int i = 0; i < 5; ++i) get(store.swap_out("a", a.bytes()));
    store.erase("a");
    EXPECT_FALSE(store.contains("a"));
    get(store.swap_out("b", a.bytes()));
    store.drain();
    EXPECT_LE(store.file_bytes(), 2 * after_one);
  }
  SwapStoreOptions o = options();
  o.keep_name = true;
  std::filesystem::path path;
  {
    const SwapStore store(o);
    path = store.path();
    EXPECT_TRUE(std::filesystem::exists(path));
    const SwapStore other(o);  // same tag, same process: its own file
    EXPECT_NE(other.path(), path);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
}

TEST_P(SwapStoreTest, ReplacingAKeyWithAnotherSizeReadsTheNewVersion) {
  SwapStore store(options());
  TestBuffer big(3 * kMiB + 5, true);
  TestBuffer small(5000, false);
  fill(big.bytes(), 1);
  fill(small.bytes(), 2);
  get(store.swap_out("k", big.bytes()));
  auto replaced = store.swap_out("k", small.bytes());
  EXPECT_EQ(store.stored_size("k"), 5000U);  // from the call on
  get(replaced);
  const Error e = error_of(store.swap_in("k", big.bytes()));
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(e.what(), "swap_in of key 'k' (3145733 bytes)")) << e.what();
  EXPECT_TRUE(contains(e.what(), "5000 are stored")) << e.what();
  TestBuffer in(5000, true);
  get(store.swap_in("k", in.bytes()));
  EXPECT_EQ(first_difference(in.bytes(), 2), 5000U);
}

TEST_P(SwapStoreTest, MissingKeysAreInvalidArguments) {
  SwapStore store(options());
  TestBuffer b(10, true);
  fill(b.bytes(), 3);
  EXPECT_FALSE(store.contains("x"));
  EXPECT_THROW((void)store.stored_size("x"), Error);
  Error e = error_of(store.swap_in("x", b.bytes()));
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(e.what(), "key 'x'")) << e.what();
  EXPECT_TRUE(contains(e.what(), "not stored")) << e.what();
  e = error_of(store.prefetch("x"));
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  get(store.swap_out("x", b.bytes()));
  store.erase("x");
  store.erase("never stored");  // nothing to do
  EXPECT_FALSE(store.contains("x"));
  EXPECT_EQ(error_of(store.swap_in("x", b.bytes())).code(), ErrorCode::InvalidArgument);
}

TEST_P(SwapStoreTest, FlippedByteIsReportedByTheChecksum) {
  SwapStoreOptions o = options();
  o.keep_name = true;
  for (const bool checksum : {true, false}) {
    SCOPED_TRACE(checksum ? "checksum" : "no checksum");
    o.checksum = checksum;
    SwapStore store(o);
    const std::size_t size = 3 * kMiB + 12345;
    TestBuffer data = patterned(size, 4);
    get(store.swap_out("weights", data.bytes()));
    // The only extent starts at offset 0; flip one bit in its third checksum block.
    const std::size_t at = 2 * kMiB + 77;
    const Fd fd(::open(store.path().c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_GE(fd.get(), 0);
    const auto flipped = static_cast<std::byte>(static_cast<unsigned>(pattern(4, at)) ^ 0x10U);
    ASSERT_EQ(::pwrite(fd.get(), &flipped, 1, static_cast<off_t>(at)), 1);
    TestBuffer in(size, false);
    auto read = store.swap_in("weights", in.bytes());
    if (!checksum) {
      get(read);  // nothing notices: the flipped byte comes back
      EXPECT_EQ(first_difference(in.bytes(), 4), at);
      continue;
    }
    const Error e = error_of(std::move(read));
    EXPECT_EQ(e.code(), ErrorCode::Io);
    const std::span<const std::byte> block = data.bytes().subspan(2 * kMiB, kMiB);
    std::vector<std::byte> damaged(block.begin(), block.end());
    damaged[77] = flipped;
    const std::string expected = fmt::format(
        "swap store {}: swap_in of key 'weights' ({} bytes) failed: checksum mismatch at offset "
        "{} of {} (bytes [{}, {}) of the key): expected xxh3 {:016x}, read {:016x}",
        store.path().string(), size, 2 * kMiB, store.path().string(), 2 * kMiB, 3 * kMiB,
        XXH3_64bits(block.data(), block.size()), XXH3_64bits(damaged.data(), damaged.size()));
    EXPECT_TRUE(contains(e.what(), expected)) << e.what() << "\nexpected: " << expected;
    // Fixing the byte makes the key readable again.
    ASSERT_EQ(::pwrite(fd.get(), &data.bytes()[at], 1, static_cast<off_t>(at)), 1);
    get(store.swap_in("weights", in.bytes()));
    EXPECT_EQ(first_difference(in.bytes(), 4), size);
  }
}

TEST_P(SwapStoreTest, PrefetchReadsAheadSoSwapInIsACopy) {
  SwapStoreOptions o = options();
  o.keep_name = true;
  SwapStore store(o);
  const std::size_t size = 2 * kMiB + 3;
  TestBuffer data = patterned(size, 5);
  get(store.swap_out("act", data.bytes()));
  get(store.prefetch("act"));
  get(store.prefetch("act"));  // already staged: nothing more
  // Damage the file after the prefetch: the staged copy is what swap_in returns.
  const Fd fd(::open(store.path().c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  const auto junk = static_cast<std::byte>(static_cast<unsigned>(pattern(5, 1000)) ^ 0xFFU);
  ASSERT_EQ(::pwrite(fd.get(), &junk, 1, 1000), 1);
  TestBuffer in(size, false);
  get(store.swap_in("act", in.bytes()));
  EXPECT_EQ(first_difference(in.bytes(), 5), size);
  // That consumed the copy: the next swap_in reads the (damaged) file, and a prefetch now fails.
  EXPECT_EQ(error_of(store.swap_in("act", in.bytes())).code(), ErrorCode::Io);
  const Error e = error_of(store.prefetch("act"));
  EXPECT_EQ(e.code(), ErrorCode::Io);
  EXPECT_TRUE(contains(e.what(), "prefetch of key 'act' failed: checksum mismatch")) << e.what();
  // A swap_out drops a staged copy of the old version.
  get(store.swap_out("act", data.bytes()));
  get(store.prefetch("act"));
  TestBuffer other(size, true);
  fill(other.bytes(), 6);
  get(store.swap_out("act", other.bytes()));
  get(store.swap_in("act", in.bytes()));
  EXPECT_EQ(first_difference(in.bytes(), 6), size);
}

TEST_P(SwapStoreTest, ManyThreadsUseOneStore) {
  SwapStore store(options());
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<std::size_t> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t size = 10000 + static_cast<std::size_t>(t) * 4099;
      TestBuffer out(size, t % 2 == 0);
      TestBuffer in(size, t % 2 != 0);
      for (int r = 0; r < kRounds; ++r) {
        const std::string key = fmt::format("t{}", t);
        const std::size_t seed = static_cast<std::size_t>(t) * 1000 + static_cast<std::size_t>(r);
        fill(out.bytes(), seed);
        auto w = store.swap_out(key, out.bytes());
        auto p = store.prefetch(key);
        auto i = store.swap_in(key, in.bytes());
        w.get();
        p.get();
        i.get();
        if (first_difference(in.bytes(), seed) != size) ++bad[static_cast<std::size_t>(t)];
        if (r % 5 == 4) store.erase(key);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[static_cast<std::size_t>(t)], 0U) << t;
}

TEST_P(SwapStoreTest, DestroyingTheStoreFinishesOrAbortsEveryOperation) {
  TestBuffer data = patterned(kMiB + 1, 30);
  std::vector<std::future<void>> futures;
  {
    SwapStore store(options());
    for (int i = 0; i < 32; ++i)
      futures.push_back(store.swap_out(fmt::format("k{}", i), data.bytes()));
  }
  int aborted = 0;
  for (auto& f : futures) {
    // Ready at once: the destructor ran or failed every one of them.
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      f.get();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
      EXPECT_TRUE(contains(e.what(), "destroyed before the swap_out of key 'k")) << e.what();
      ++aborted;
    }
  }
  std::cout << aborted << " of 32 queued swap_outs were aborted\n";
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapStoreTest,
                         ::testing::Values(IoEngineKind::Posix, IoEngineKind::Uring),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

// --- engine fallback ------------------------------------------------------------------------

TEST(SwapStoreFallback, EnvironmentOverrideForcesThePosixEngine) {
  TempDir dir;
  const testing::EnvGuard force("STRAIT_IO_ENGINE", "posix");
  SwapStore store(options_for(dir.path(), std::nullopt));
  EXPECT_EQ(store.engine_kind(), IoEngineKind::Posix);
  EXPECT_TRUE(contains(std::string(store.engine_reason()), "STRAIT_IO_ENGINE=posix"))
      << store.engine_reason();
  check_round_trips(store);
}

TEST(SwapStoreFallback, PosixEngineWhereODirectIsRefused) {
  // ramfs refuses O_DIRECT (tmpfs accepts it since Linux 6.6).
  ScratchMount ramfs("ramfs", 0, "");
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.error();
  const testing::EnvGuard automatic("STRAIT_IO_ENGINE", std::nullopt);
  SwapStore store(options_for(ramfs.path(), std::nullopt));
  EXPECT_EQ(store.engine_kind(), IoEngineKind::Posix);
  EXPECT_TRUE(contains(std::string(store.engine_reason()), "O_DIRECT")) << store.engine_reason();
  check_round_trips(store);
}

TEST(SwapStoreFallback, WorksInATmpfsDirectory) {
  // /dev/shm is tmpfs: whichever engine the automatic choice takes there must round-trip.
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
  const std::filesystem::path dir = fmt::format("/dev/shm/strait-swap-test-{}", ::getpid());
  std::filesystem::create_directory(dir);
  const testing::EnvGuard automatic("STRAIT_IO_ENGINE", std::nullopt);
  {
    SwapStore store(options_for(dir, std::nullopt));
    SCOPED_TRACE(std::string(store.engine_reason()));
    check_round_trips(store);
  }
  std::filesystem::remove_all(dir);
}

// --- a full disk ----------------------------------------------------------------------------

TEST(SwapStoreFullDisk, FailsUpFrontWithENOSPCAndKeepsOldVersions) {
  ScratchMount small("tmpfs", 0, "size=4m");
  if (!small.ok()) GTEST_SKIP() << small.error();
  SwapStore store(options_for(small.path(), std::nullopt));
  const std::size_t a_size = kMiB + 3;
  TestBuffer a(a_size, true);
  fill(a.bytes(), 10);
  get(store.swap_out("A", a.bytes()));

  // A new key larger than the file system.
  TestBuffer b(8 * kMiB, true);
  fill(b.bytes(), 11);
  Error e = error_of(store.swap_out("B", b.bytes()));
  EXPECT_FALSE(store.contains("B"));  // a failed swap_out is undone once its future is ready
  EXPECT_EQ(e.code(), ErrorCode::Io);
  for (const std::string& part :
       {std::string("swap_out of key 'B' (8388608 bytes) failed: cannot preallocate"),
        store.path().string(), std::string("it needs 8388608 bytes (8.0 MiB)"),
        std::string("bytes free"), std::string("ENOSPC"), std::string("--offload-dir"),
        std::string("'B' had no stored version")}) {
    EXPECT_TRUE(contains(e.what(), part)) << e.what() << "\nmissing: " << part;
  }

  // Replacing A with a version larger than the free space keeps the old one.
  TestBuffer bigger(3 * kMiB + kMiB / 2, false);
  fill(bigger.bytes(), 12);
  e = error_of(store.swap_out("A", bigger.bytes()));
  EXPECT_EQ(e.code(), ErrorCode::Io);
  EXPECT_TRUE(contains(e.what(), "ENOSPC")) << e.what();
  EXPECT_TRUE(contains(e.what(), "previously stored version of 'A' (1048579 bytes) is unchanged"))
      << e.what();
  EXPECT_EQ(store.stored_size("A"), a_size);
  TestBuffer in(a_size, false);
  get(store.swap_in("A", in.bytes()));
  EXPECT_EQ(first_difference(in.bytes(), 10), a_size);

  // The failed attempts hold no space: 2 MiB more still fit next to A's 1 MiB + 4 KiB.
  TestBuffer c(2 * kMiB, true);
  fill(c.bytes(), 13);
  get(store.swap_out("C", c.bytes()));
  TestBuffer c_in(2 * kMiB, true);
  get(store.swap_in("C", c_in.bytes()));
  EXPECT_EQ(first_difference(c_in.bytes(), 13), 2 * kMiB);
  get(store.swap_in("A", in.bytes()));
  EXPECT_EQ(first_difference(in.bytes(), 10), a_size);
}

TEST(SwapStoreFullDisk, BlocksOfErasedKeysAreGivenBackWhenSpaceRunsOut) {
  ScratchMount small("tmpfs", 0, "size=4m");
  if (!small.ok()) GTEST_SKIP() << small.error();
  SwapStore store(options_for(small.path(), std::nullopt));
  TestBuffer x1(kMiB + kMiB / 2, true);
  TestBuffer x2(kMiB, true);
  fill(x1.bytes(), 20);
  fill(x2.bytes(), 21);
  get(store.swap_out("x1", x1.bytes()));
  get(store.swap_out("x2", x2.bytes()));
  store.erase("x1");  // its extent [0, 1.5 MiB) is free but keeps its blocks
  // 1.6 MiB fits neither x1's old extent nor the 1.5 MiB the file system has left, until those
  // blocks are given back.
  TestBuffer y(kMiB + 6 * kMiB / 10, true);
  fill(y.bytes(), 22);
  get(store.swap_out("y", y.bytes()));
  TestBuffer y_in(y.bytes().size(), true);
  get(store.swap_in("y", y_in.bytes()));
  EXPECT_EQ(first_difference(y_in.bytes(), 22), y.bytes().size());
  TestBuffer x2_in(kMiB, false);
  get(store.swap_in("x2", x2_in.bytes()));
  EXPECT_EQ(first_difference(x2_in.bytes(), 21), kMiB);
}

TEST(SwapStoreOptionsCheck, BadDirectoryOrTag) {
  TempDir dir;
  SwapStoreOptions o = options_for(dir.path() / "missing", std::nullopt);
  try {
    const SwapStore store(o);
    FAIL() << "a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e.what(), "--offload-dir")) << e.what();
  }
  o.dir = dir.path();
  o.tag = "a/b";
  EXPECT_THROW(const SwapStore store(o), Error);
}

}  // namespace
}  // namespace strait::offload
