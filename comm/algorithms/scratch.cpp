#include "comm/algorithms/scratch.h"

#include <algorithm>
#include <vector>

namespace strait::comm {
namespace {

struct Cached {
  std::shared_ptr<std::byte[]> buffer;
  std::size_t bytes = 0;
  [[nodiscard]] bool idle() const { return buffer.use_count() == 1; }
};

}  // namespace

std::shared_ptr<std::byte[]> scratch_buffer(std::size_t bytes) {
  thread_local std::vector<Cached> cache;
  // The smallest idle buffer that is large enough.
  Cached* best = nullptr;
  for (auto& c : cache) {
    if (c.idle() && c.bytes >= bytes && (best == nullptr || c.bytes < best->bytes)) best = &c;
  }
  if (best != nullptr) return best->buffer;
  Cached fresh{std::make_shared_for_overwrite<std::byte[]>(std::max<std::size_t>(bytes, 1)), bytes};
  if (cache.size() < kScratchCacheSlots) {
    cache.push_back(fresh);
  } else {
    // Replace the smallest idle buffer (they are the cheapest to fault in again); when every
    // slot is in use, the new buffer is not cached.
    Cached* victim = nullptr;
    for (auto& c : cache) {
      if (c.idle() && (victim == nullptr || c.bytes < victim->bytes)) victim = &c;
    }
    if (victim != nullptr) *victim = fresh;
  }
  return fresh.buffer;
}

std::shared_ptr<std::byte[]> frame_buffer() {
  thread_local std::vector<std::shared_ptr<std::byte[]>> pool;
  for (const auto& b : pool) {
    if (b.use_count() == 1) return b;
  }
  auto fresh = std::make_shared_for_overwrite<std::byte[]>(kFrameBufferBytes);
  if (pool.size() < kFrameCacheSlots) pool.push_back(fresh);
  return fresh;
}

}  // namespace strait::comm
