// SwapStore with one key of 3 GiB + 1 bytes: past 2^31 and 2^32 - 1 byte offsets, several
// maximal transfers (kMaxTransferBytes) and an unaligned tail. Label "bigfile"; it needs 4 GiB
// free in $STRAIT_TEST_OFFLOAD_DIR (default /var/tmp, a disk rather than the usual tmpfs /tmp)
// and 4 GiB of available memory, and skips saying so otherwise.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>

#include "core/params.h"
#include "offload/pinned_buffer.h"
#include "offload/swap_store.h"
#include "tests/common/temp_dir.h"

namespace strait::offload {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Bytes of MemAvailable in /proc/meminfo; 0 when it cannot be read.
std::uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// A word per 8 bytes that no other position or seed shares (splitmix64 of the index).
std::uint64_t word(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t x = i + seed * 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void fill(std::byte* p, std::size_t size, std::uint64_t seed) {
  const std::size_t words = size / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = word(i, seed);
    std::memcpy(p + i * 8, &w, 8);
  }
  const std::uint64_t last = word(words, seed);
  std::memcpy(p + words * 8, &last, size % 8);
}

// The first byte that differs from fill(.., seed), or size.
std::size_t first_difference(const std::byte* p, std::size_t size, std::uint64_t seed) {
  const std::size_t words = size / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = word(i, seed);
    if (std::memcmp(p + i * 8, &w, 8) != 0) {
      for (std::size_t b = 0; b < 8; ++b) {
        if (std::memcmp(p + i * 8 + b, reinterpret_cast<const std::byte*>(&w) + b, 1) != 0) {
          return i * 8 + b;
        }
      }
    }
  }
  const std::uint64_t last = word(words, seed);
  for (std::size_t b = 0; b < size % 8; ++b) {
    if (std::memcmp(p + words * 8 + b, reinterpret_cast<const std::byte*>(&last) + b, 1) != 0) {
      return words * 8 + b;
    }
  }
  return size;
}

TEST(SwapStoreBig, ThreeGiBPlusOneRoundTrips) {
  const std::size_t size = 3 * kGiB + 1;
  const std::filesystem::path base =
      strait::params::text("STRAIT_TEST_OFFLOAD_DIR").value_or("/var/tmp");
  struct statvfs vfs {};
  if (::statvfs(base.c_str(), &vfs) != 0) GTEST_SKIP() << "cannot statvfs " << base;
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < size + kGiB) {
    GTEST_SKIP() << base << " has " << free_bytes << " bytes free; this test needs " << size
                 << " plus 1 GiB of margin (set STRAIT_TEST_OFFLOAD_DIR to a larger disk)";
  }
  if (available_memory() < size + kGiB) {
    GTEST_SKIP() << "MemAvailable is " << available_memory() << " bytes; this test holds one "
                 << size << "-byte buffer and wants 1 GiB of margin";
  }
  const auto start = std::chrono::steady_clock::now();
  // A scratch directory inside base, removed at the end (TempDir uses TMPDIR).
  const std::filesystem::path dir = base / fmt::format("strait-swap-big-{}", ::getpid());
  std::filesystem::create_directory(dir);
  struct Remove {
    explicit Remove(std::filesystem::path path) : p(std::move(path)) {}
    std::filesystem::path p;
    Remove(const Remove&) = delete;
    Remove& operator=(const Remove&) = delete;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } remove{dir};

  SwapStoreOptions o;
  o.dir = dir;
  o.tag = "big";
  o.io.block_size = std::size_t{64} << 20;  // keeps several pieces in flight
  SwapStore store(o);
  // One page-aligned buffer (the direct path plus a 1-byte tail), reused for the read so the
  // test holds one copy: the pattern is recomputed to check it.
  const PinnedBuffer buffer(size);
  fill(buffer.data(), size, 7);
  auto out = store.swap_out("huge", {buffer.data(), size});
  ASSERT_EQ(out.wait_for(std::chrono::minutes(3)), std::future_status::ready);
  out.get();
  EXPECT_EQ(store.stored_size("huge"), size);
  EXPECT_EQ(store.file_bytes(), (size + store.unit() - 1) / store.unit() * store.unit());
  std::memset(buffer.data(), 0, size);
  auto in = store.swap_in("huge", {buffer.data(), size});
  ASSERT_EQ(in.wait_for(std::chrono::minutes(3)), std::future_status::ready);
  in.get();
  EXPECT_EQ(first_difference(buffer.data(), size, 7), size);
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("3 GiB + 1 round trip through the {} engine in {}: {:.1f} s\n",
                           to_string(store.engine_kind()), dir.string(), seconds);
}

}  // namespace
}  // namespace strait::offload
