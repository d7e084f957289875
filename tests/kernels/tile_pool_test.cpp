// TilePool (kernels/tile_pool.h): every tile exactly once, for any thread count, run after run,
// and with two callers sharing one pool.
#include "kernels/tile_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace strait::kernels {
namespace {

// Runs `tiles` tiles and checks that each was called once.
void expect_each_tile_once(TilePool& pool, std::size_t tiles) {
  const auto hits = std::make_unique<std::atomic<int>[]>(tiles);
  pool.for_each_tile(tiles, [&](std::size_t t) { hits[t].fetch_add(1); });
  for (std::size_t t = 0; t < tiles; ++t) ASSERT_EQ(hits[t].load(), 1) << "tile " << t;
}

TEST(TilePool, RunsEveryTileOnceForAnyThreadCount) {
  for (unsigned threads = 1; threads <= 4; ++threads) {
    TilePool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    for (const std::size_t tiles : {0, 1, 2, 3, 5, 64, 1000}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, " << tiles << " tiles");
      expect_each_tile_once(pool, tiles);
    }
  }
  EXPECT_GE(TilePool(0).threads(), 1U);
}

TEST(TilePool, ManyRunsInARowAndOnSeveralThreads) {
  TilePool pool(3);
  for (int run = 0; run < 2000; ++run) expect_each_tile_once(pool, 7);
  // Workers do take tiles (not only the caller) when the tiles take a while.
  std::mutex mutex;
  std::set<std::thread::id> seen;
  pool.for_each_tile(64, [&](std::size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::lock_guard lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GT(seen.size(), 1U);
  // Two callers take turns on one pool.
  std::vector<std::jthread> callers;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&pool] {
      for (int run = 0; run < 300; ++run) expect_each_tile_once(pool, 33);
    });
  }
}

}  // namespace
}  // namespace strait::kernels
