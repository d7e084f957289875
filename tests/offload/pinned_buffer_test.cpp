#include "offload/pinned_buffer.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "tests/common/text.h"
#include "tests/offload/mlock_check.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using strait::test::contains;

TEST(PinnedBuffer, PageAlignedRoundedUpAndZeroed) {
  const std::size_t page = page_size();
  ASSERT_EQ(page, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
  for (const std::size_t request : {std::size_t{1}, page - 1, page, page + 1, 3 * page + 5}) {
    const PinnedBuffer b(request);
    EXPECT_EQ(b.size(), (request + page - 1) / page * page) << request;
    EXPECT_EQ(std::bit_cast<std::uintptr_t>(b.data()) % page, 0U) << request;
    EXPECT_TRUE(
        std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; }));
    std::fill(b.data(), b.data() + b.size(), std::byte{0x5a});  // all of it is writable
  }
  const PinnedBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0U);
  EXPECT_EQ(PinnedBuffer(0).size(), 0U);
}

// From a huge page up, a buffer starts on a huge-page boundary (so transparent huge pages can back
// all of it), stays zeroed and writable to its end, and frees cleanly (its trimmed mapping).
TEST(PinnedBuffer, HugePageSizedBuffersStartOnAHugePageBoundary) {
  const std::size_t page = page_size();
  for (const std::size_t request :
       {kHugePageBytes, kHugePageBytes + page + 1, 3 * kHugePageBytes, std::size_t{32} << 20}) {
    for (int round = 0; round < 3; ++round) {  // mmap's address moves between rounds
      const PinnedBuffer b(request);
      EXPECT_EQ(b.size(), (request + page - 1) / page * page) << request;
      EXPECT_EQ(std::bit_cast<std::uintptr_t>(b.data()) % kHugePageBytes, 0U) << request;
      EXPECT_TRUE(std::all_of(b.data(), b.data() + b.size(),
                              [](std::byte x) { return x == std::byte{0}; }));
      std::fill(b.data(), b.data() + b.size(), std::byte{0x5a});
    }
  }
}

TEST(PinnedBuffer, LockStateMatchesKernelAccounting) {
  STRAIT_SKIP_IF_MLOCK_INTERCEPTED();
  const long before = testing::locked_kib();
  ASSERT_GE(before, 0) << "no VmLck in /proc/self/status";
  const std::size_t bytes = 64 * page_size();
  {
    const PinnedBuffer b(bytes);
    const long expect = before + (b.locked() ? static_cast<long>(bytes / 1024) : 0);
    EXPECT_EQ(testing::locked_kib(), expect) << "locked()=" << b.locked();
  }
  EXPECT_EQ(testing::locked_kib(), before) << "destruction must unlock and unmap";
}

TEST(PinnedBuffer, MoveTransfersOwnership) {
  PinnedBuffer a(10);
  std::byte* p = a.data();
  a.data()[3] = std::byte{42};
  PinnedBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[3], std::byte{42});
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0U);
  PinnedBuffer c(3 * page_size());
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), page_size());
}

TEST(PinnedBuffer, FallsBackToUnlockedMemoryWithOneWarning) {
  STRAIT_SKIP_IF_MLOCK_INTERCEPTED();
  // In a child: drop CAP_IPC_LOCK and set RLIMIT_MEMLOCK to 0, so mlock must fail.
  const int code = testing::run_in_child([] {
    if (!testing::forbid_mlock()) return 77;

    const testing::CapturedLog log;
    const PinnedBuffer a(5 * page_size());
    const PinnedBuffer b(page_size());
    if (a.locked() || b.locked()) return 1;
    std::fill(a.data(), a.data() + a.size(), std::byte{1});  // usable all the same
    const std::string text = log.text();
    if (log.count("could not lock") != 1) return 2;
    if (!contains(text, "RLIMIT_MEMLOCK")) return 3;
    return 0;
  });
  if (code == 77) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK here";
  EXPECT_EQ(code, 0) << "1: locked despite the limit, 2: not exactly one warning, 3: no hint";
}

}  // namespace
}  // namespace strait::offload
