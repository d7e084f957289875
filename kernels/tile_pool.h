// TilePool: a persistent set of worker threads for kernels that split a range into tiles (CPU
// AdamW). Threads are created once, in the constructor, and wait on a condition variable between
// runs, so a run costs one wake-up, not a thread creation.
//
// for_each_tile(tiles, fn) calls fn(tile) exactly once for every tile in [0, tiles), on the pool's
// workers and the calling thread together, and returns when all calls have returned. Tiles are
// handed out dynamically (an atomic counter), so a thread the OS descheduled does not hold the
// others up; which thread runs a tile is therefore unspecified, and fn must give the same result
// whichever does (true of element-wise kernels).
// Thread-safety: for_each_tile may be called from several threads; runs on one pool take turns.
// fn is called through a const reference and must not throw (a throw terminates the process) and
// must not call for_each_tile on the same pool. Destruction waits for the workers to exit; no run
// may be in progress.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

namespace strait::kernels {

class TilePool {
 public:
  // threads counts the calling thread: threads - 1 workers are started (none for 1).
  // 0 means std::thread::hardware_concurrency() (1 if that is unknown).
  explicit TilePool(unsigned threads = 0);
  TilePool(const TilePool&) = delete;
  TilePool& operator=(const TilePool&) = delete;
  ~TilePool();

  [[nodiscard]] unsigned threads() const noexcept;

  template <class F>
  void for_each_tile(std::size_t tiles, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(
        tiles,
        [](const void* ctx, std::size_t tile) noexcept { (*static_cast<const Fn*>(ctx))(tile); },
        &fn);
  }

 private:
  using Body = void (*)(const void* ctx, std::size_t tile) noexcept;
  void run(std::size_t tiles, Body body, const void* ctx);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strait::kernels
