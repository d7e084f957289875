#include "offload/pinned_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "offload/numa.h"

namespace strait::offload {
namespace detail {

struct PinnedPoolState {
  explicit PinnedPoolState(const PinnedPoolOptions& o) : options(o) {}

  // Takes every cached buffer out (to be freed by the caller, outside the lock); with `close`,
  // buffers given back later are freed at once. Returns their bytes.
  std::map<std::pair<std::size_t, int>, std::vector<PinnedBuffer>> drain(bool close,
                                                                         std::size_t& bytes) {
    const std::lock_guard lock(mu);
    if (close) closed = true;
    bytes = cached_bytes;
    for (const auto& [key, list] : free) {
      for (const PinnedBuffer& b : list) account_free(b);
    }
    cached_bytes = 0;
    return std::exchange(free, {});
  }

  void give_back(PinnedBuffer buffer, int key) noexcept {
    PinnedBuffer doomed;  // destroyed (unmapped) after the lock is released
    const std::lock_guard lock(mu);
    const std::size_t size = buffer.size();
    stats.bytes_in_use -= size;
    if (!closed && size <= options.max_cached_bytes - cached_bytes) {
      try {
        free[{size, key}].push_back(std::move(buffer));
        cached_bytes += size;
        return;
      } catch (...) {  // no memory for the list entry: free the buffer instead
      }
    }
    account_free(buffer);
    doomed = std::move(buffer);
  }

  // Caller holds mu.
  void account_new(const PinnedBuffer& b) {
    stats.bytes_held += b.size();
    stats.bytes_locked += b.locked() ? b.size() : 0;
    stats.bytes_cuda_registered += b.cuda_registered() ? b.size() : 0;
    ++stats.buffers_held;
    ++stats.misses;
  }
  void account_free(const PinnedBuffer& b) noexcept {
    stats.bytes_held -= b.size();
    stats.bytes_locked -= b.locked() ? b.size() : 0;
    stats.bytes_cuda_registered -= b.cuda_registered() ? b.size() : 0;
    --stats.buffers_held;
    ++stats.frees;
  }
  void account_lease(std::size_t size) {
    stats.bytes_in_use += size;
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
  }

  const PinnedPoolOptions options;
  mutable std::mutex mu;
  // Guarded by mu. Cached buffers by (class bytes, node; -1 for unbound), sorted so the lists of
  // one class are adjacent with the unbound one first.
  std::map<std::pair<std::size_t, int>, std::vector<PinnedBuffer>> free;
  PinnedPoolStats stats;
  std::size_t cached_bytes = 0;
  bool closed = false;
};

}  // namespace detail

namespace {

bool is_power_of_two(std::size_t n) {
  return n != 0 && (n & (n - 1)) == 0;
}

}  // namespace

PinnedPool::PinnedPool(PinnedPoolOptions options) {
  const std::size_t page = page_size();
  if (!is_power_of_two(options.max_class_bytes) || options.max_class_bytes < page) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("PinnedPool: max_class_bytes {} must be a power of two of at least "
                            "one page ({} bytes)",
                            options.max_class_bytes, page));
  }
  state_ = std::make_shared<detail::PinnedPoolState>(options);
}

PinnedPool& PinnedPool::operator=(PinnedPool&& other) noexcept {
  if (this != &other) {
    if (state_) {
      std::size_t bytes = 0;
      state_->drain(true, bytes);
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

PinnedPool::~PinnedPool() {
  if (!state_) return;
  std::size_t bytes = 0;
  state_->drain(true, bytes);  // outstanding leases free their buffers when they end
}

const PinnedPoolOptions& PinnedPool::options() const noexcept {
  return state_->options;
}

std::size_t PinnedPool::class_bytes(std::size_t bytes) const {
  if (bytes == 0) return 0;
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - page) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("PinnedPool: a buffer of {} bytes cannot exist; ask for less", bytes));
  }
  if (bytes <= state_->options.max_class_bytes) return std::max(page, std::bit_ceil(bytes));
  return (bytes + page - 1) / page * page;
}

PinnedPool::Lease PinnedPool::acquire(std::size_t bytes, const Placement& placement) {
  if (!state_) {
    throw Error(ErrorCode::InvalidArgument, "PinnedPool: acquire on a moved-from pool");
  }
  if (bytes == 0) return {};
  const std::size_t size = class_bytes(bytes);
  std::optional<unsigned> node;
  switch (placement.kind()) {
    case Placement::Kind::Any: break;
    case Placement::Kind::CallingThread: node = numa::calling_thread_node(); break;
    case Placement::Kind::Node:
      numa::check_node(placement.node_index());
      node = placement.node_index();
      break;
    case Placement::Kind::Pci: node = numa::pci_node(placement.bus_id()); break;
  }
  const int key = node ? static_cast<int>(*node) : -1;

  detail::PinnedPoolState& st = *state_;
  {
    const std::lock_guard lock(st.mu);
    // An unbound request takes any node's buffer; a bound one only its node's.
    auto it = node ? st.free.find({size, key}) : st.free.lower_bound({size, INT_MIN});
    if (it != st.free.end() && it->first.first == size && !it->second.empty()) {
      const int from = it->first.second;
      PinnedBuffer buffer = std::move(it->second.back());
      it->second.pop_back();
      if (it->second.empty()) st.free.erase(it);
      st.cached_bytes -= size;
      ++st.stats.hits;
      st.account_lease(size);
      return {state_, std::move(buffer), from};
    }
  }
  // A miss: map, bind, lock and register outside the lock (milliseconds for large buffers).
  PinnedBuffer buffer(size, PinnedBufferOptions{node, st.options.register_with_cuda});
  const std::lock_guard lock(st.mu);
  st.account_new(buffer);
  st.account_lease(size);
  return {state_, std::move(buffer), key};
}

std::size_t PinnedPool::trim() {
  if (!state_) return 0;
  std::size_t bytes = 0;
  state_->drain(false, bytes);  // the drained buffers are freed here, outside the lock
  return bytes;
}

PinnedPoolStats PinnedPool::stats() const {
  if (!state_) return {};
  const std::lock_guard lock(state_->mu);
  return state_->stats;
}

PinnedPool::Lease& PinnedPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    buffer_ = std::move(other.buffer_);
    key_node_ = other.key_node_;
  }
  return *this;
}

void PinnedPool::Lease::reset() noexcept {
  if (!pool_) return;
  pool_->give_back(std::move(buffer_), key_node_);
  pool_.reset();
}

}  // namespace strait::offload
