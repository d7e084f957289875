#include "kernels/tile_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strait::kernels {

struct TilePool::State {
  std::mutex run_mutex;  // one run at a time
  std::mutex mutex;      // guards everything below except `next`
  std::condition_variable start;
  std::condition_variable done;
  std::uint64_t generation = 0;  // bumped by each run; a worker joins each generation once
  bool stopping = false;
  Body body = nullptr;
  const void* ctx = nullptr;
  std::size_t tiles = 0;
  unsigned busy = 0;  // workers that have not finished the current generation
  std::atomic<std::size_t> next{0};
  std::vector<std::jthread> workers;  // last member: the threads go before the state they use

  // Takes tiles until none is left; shared by the workers and the calling thread.
  void drain(Body b, const void* c, std::size_t count) noexcept {
    for (std::size_t t = next.fetch_add(1, std::memory_order_relaxed); t < count;
         t = next.fetch_add(1, std::memory_order_relaxed)) {
      b(c, t);
    }
  }

  void work() noexcept {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex);
    for (;;) {
      start.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping) return;
      seen = generation;
      const Body b = body;
      const void* const c = ctx;
      const std::size_t count = tiles;
      lock.unlock();
      drain(b, c, count);
      lock.lock();
      if (--busy == 0) done.notify_one();
    }
  }

  ~State() {
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    start.notify_all();
    workers.clear();  // joins
  }
  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

TilePool::TilePool(unsigned threads) : state_(std::make_unique<State>()) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  state_->workers.reserve(threads - 1);
  for (unsigned i = 1; i < threads; ++i) {
    state_->workers.emplace_back([s = state_.get()] { s->work(); });
  }
}

TilePool::~TilePool() = default;

unsigned TilePool::threads() const noexcept {
  return static_cast<unsigned>(state_->workers.size()) + 1;
}

void TilePool::run(std::size_t tiles, Body body, const void* ctx) {
  State& s = *state_;
  if (tiles == 0) return;
  if (s.workers.empty() || tiles == 1) {
    for (std::size_t t = 0; t < tiles; ++t) body(ctx, t);
    return;
  }
  const std::lock_guard run_lock(s.run_mutex);
  {
    const std::lock_guard lock(s.mutex);
    s.body = body;
    s.ctx = ctx;
    s.tiles = tiles;
    s.next.store(0, std::memory_order_relaxed);  // published by the mutex
    s.busy = static_cast<unsigned>(s.workers.size());
    ++s.generation;
  }
  s.start.notify_all();
  s.drain(body, ctx, tiles);
  std::unique_lock lock(s.mutex);
  s.done.wait(lock, [&] { return s.busy == 0; });
}

}  // namespace strait::kernels
