#include "offload/activation_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "core/error.h"
#include "tests/common/expect_error.h"
#include "tests/common/temp_dir.h"

namespace strait::offload {
namespace {

using strait::test::expect_error;

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<std::byte>(static_cast<std::uint8_t>(i * 131 + seed));
  }
  return v;
}

bool ready(const std::future<void>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

TEST(HostActivationStore, StashesComeBackBitForBitInAnyOrder) {
  auto store = make_host_activation_store();
  EXPECT_EQ(store->kind(), "cpu");
  constexpr std::size_t kBytes = 100'003;  // not a page multiple
  std::vector<std::vector<std::byte>> stashes;
  std::vector<std::future<void>> out;
  for (int k = 0; k < 4; ++k) {
    stashes.push_back(pattern(kBytes, static_cast<std::uint8_t>(k)));
    out.push_back(store->offload(k, stashes.back()));
  }
  for (auto& f : out) f.get();
  for (const int k : {2, 0, 3, 1}) {
    std::vector<std::byte> back(kBytes);
    store->reload(k, back).get();
    EXPECT_EQ(back, stashes[static_cast<std::size_t>(k)]) << "key " << k;
  }
  // The caller may overwrite its range once the offload future is ready: the store has a copy.
  std::vector<std::byte> mine = pattern(kBytes, 9);
  store->offload(7, mine).get();
  std::fill(mine.begin(), mine.end(), std::byte{0});
  std::vector<std::byte> back(kBytes);
  store->reload(7, back).get();
  EXPECT_EQ(back, pattern(kBytes, 9));
}

TEST(HostActivationStore, AReloadQueuedBeforeItsOffloadFinishedStillGetsTheData) {
  auto store = make_host_activation_store();
  const auto data = pattern(8 << 20, 3);
  std::vector<std::byte> back(data.size());
  auto out = store->offload(0, data);
  auto in = store->reload(0, back);  // not waiting for `out` first
  in.get();
  EXPECT_TRUE(ready(out));
  EXPECT_EQ(back, data);
}

TEST(HostActivationStore, BuffersAreReusedAndComeFromTheGivenAllocator) {
  int allocations = 0;
  auto store = make_host_activation_store([&](std::size_t bytes) {
    ++allocations;
    return allocate_pinned_block(bytes);
  });
  const auto a = pattern(5000, 1), b = pattern(5000, 2);
  std::vector<std::byte> back(5000);
  for (int round = 0; round < 10; ++round) {
    // Two stashes out at once, then both back.
    store->offload(0, a).get();
    store->offload(1, b).get();
    store->reload(0, back).get();
    ASSERT_EQ(back, a);
    store->reload(1, back).get();
    ASSERT_EQ(back, b);
  }
  EXPECT_EQ(allocations, 2);
  EXPECT_GE(store->allocated_bytes(), 2 * a.size());
  EXPECT_LT(store->allocated_bytes(), 2 * a.size() + 2 * 65536);  // page rounding only
}

TEST(HostActivationStore, BlocksCanBeLeasesOfAPinnedPool) {
  auto pool = std::make_shared<PinnedPool>();
  const auto a = pattern(70'000, 4);
  std::vector<std::byte> back(a.size());
  {
    auto store = make_host_activation_store(pinned_pool_allocator(pool));
    store->offload(0, a).get();
    EXPECT_EQ(pool->stats().bytes_in_use, pool->class_bytes(a.size()));
    EXPECT_EQ(store->allocated_bytes(), pool->class_bytes(a.size()));
    store->reload(0, back).get();
    EXPECT_EQ(back, a);
  }
  // The store's end gives its leases back.
  EXPECT_EQ(pool->stats().bytes_in_use, 0U);
  EXPECT_EQ(pool->stats().misses, 1U);
  expect_error(ErrorCode::InvalidArgument, [] { (void)pinned_pool_allocator(nullptr); });
}

TEST(HostActivationStore, AllocatorFailureIsReportedThroughTheFuture) {
  auto store = make_host_activation_store([](std::size_t) -> HostBlock {
    throw Error(ErrorCode::Io, "no memory left for pinned buffers");
  });
  const auto data = pattern(64, 0);
  auto f = store->offload(0, data);
  expect_error(ErrorCode::Io, [&] { f.get(); });
  // Nothing was stored under the key.
  std::vector<std::byte> back(64);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(0, back); });
}

TEST(HostActivationStore, MisuseIsRejectedAtOnce) {
  auto store = make_host_activation_store();
  const auto data = pattern(64, 0);
  std::vector<std::byte> back(64), small(63);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->offload(-1, data); });
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(3, back); });  // never out
  store->offload(3, data).get();
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->offload(3, data); });  // held
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(3, small); });  // size
  store->reload(3, back).get();
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(3, back); });  // back already
}

TEST(HostActivationStore, DestructionFinishesTheCopiesInFlight) {
  const auto data = pattern(4 << 20, 5);
  std::vector<std::future<void>> out;
  {
    auto store = make_host_activation_store();
    for (int k = 0; k < 8; ++k) out.push_back(store->offload(k, data));
  }
  for (auto& f : out) {
    EXPECT_TRUE(ready(f));
    EXPECT_NO_THROW(f.get());
  }
}

// --- nvme: over a SwapStore ----------------------------------------------------------------------

std::unique_ptr<ActivationStore> swap_store_in(const strait::test::TempDir& dir) {
  SwapStoreOptions o;
  o.dir = dir.path();
  o.tag = "act-test";
  return make_swap_activation_store(o);
}

TEST(SwapActivationStore, StashesComeBackBitForBitAndTheFileIsReused) {
  const strait::test::TempDir dir;
  auto store = swap_store_in(dir);
  EXPECT_EQ(store->kind(), "nvme");
  // An odd size at an odd address: the swap store's staging path.
  constexpr std::size_t kBytes = 300'001;
  std::vector<std::byte> a(kBytes + 1), b(kBytes + 1);
  const auto pa = pattern(kBytes, 1), pb = pattern(kBytes, 2);
  std::copy(pa.begin(), pa.end(), a.begin() + 1);
  std::copy(pb.begin(), pb.end(), b.begin() + 1);
  const std::span<const std::byte> sa(a.data() + 1, kBytes), sb(b.data() + 1, kBytes);
  std::vector<std::byte> back(kBytes);
  std::size_t file_after_first_round = 0;
  for (int round = 0; round < 5; ++round) {
    auto oa = store->offload(0, sa);
    auto ob = store->offload(1, sb);
    // Reloads may be called before the offloads are done: the swap store keeps call order.
    auto ra = store->reload(1, back);
    ra.get();
    ASSERT_EQ(back, pb) << "round " << round;
    store->reload(0, back).get();
    ASSERT_EQ(back, pa) << "round " << round;
    oa.get();
    ob.get();
    if (round == 0) file_after_first_round = store->allocated_bytes();
  }
  // Two stashes out at once, rounded up to the I/O unit: erased extents serve later offloads.
  EXPECT_GE(file_after_first_round, 2 * kBytes);
  EXPECT_EQ(store->allocated_bytes(), file_after_first_round);
}

TEST(SwapActivationStore, MisuseIsRejectedAtOnce) {
  const strait::test::TempDir dir;
  auto store = swap_store_in(dir);
  const auto data = pattern(4096, 0);
  std::vector<std::byte> back(4096), small(4095);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->offload(-1, data); });
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(2, back); });
  auto out = store->offload(2, data);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->offload(2, data); });
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(2, small); });
  store->reload(2, back).get();
  out.get();
  EXPECT_EQ(back, data);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)store->reload(2, back); });
  // A directory that does not exist fails at construction.
  SwapStoreOptions o;
  o.dir = dir.path() / "missing";
  expect_error(ErrorCode::InvalidArgument, [&] { (void)make_swap_activation_store(o); });
}

}  // namespace
}  // namespace strait::offload
