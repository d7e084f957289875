// scratch_buffer: reused once idle, never handed out twice while held.
#include "comm/algorithms/scratch.h"

#include <gtest/gtest.h>

#include <vector>

namespace strait::comm {
namespace {

TEST(ScratchBuffer, AnIdleBufferIsReusedForAnySizeItHolds) {
  const std::byte* first = nullptr;
  {
    auto a = scratch_buffer(1 << 20);
    first = a.get();
  }
  EXPECT_EQ(scratch_buffer(1 << 20).get(), first);
  EXPECT_EQ(scratch_buffer(100).get(), first);  // the smallest idle buffer large enough
}

TEST(ScratchBuffer, ABufferStillHeldIsNotHandedOutAgain) {
  auto a = scratch_buffer(4096);
  auto keep = a;  // as a transport request's keep_alive would
  a.reset();
  auto b = scratch_buffer(4096);
  EXPECT_NE(b.get(), keep.get());
  // Every buffer handed out is writable over the bytes asked for.
  b[4095] = std::byte{1};
  keep[4095] = std::byte{2};
  EXPECT_EQ(b[4095], std::byte{1});
}

TEST(ScratchBuffer, MoreBuffersThanSlotsAreAllDistinctAndLargeEnough) {
  std::vector<std::shared_ptr<std::byte[]>> held;
  for (std::size_t i = 0; i < 2 * kScratchCacheSlots; ++i) {
    held.push_back(scratch_buffer(64 * (i + 1)));
    for (std::size_t j = 0; j < i; ++j) ASSERT_NE(held[j].get(), held[i].get());
    held[i][64 * (i + 1) - 1] = std::byte{7};
  }
  held.clear();
  EXPECT_NE(scratch_buffer(0), nullptr);  // zero bytes still gives a buffer
}

}  // namespace
}  // namespace strait::comm
