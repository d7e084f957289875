#include "offload/activation_store.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "offload/pinned_buffer.h"

namespace strait::offload {
namespace {

std::future<void> failed(std::exception_ptr e) {
  std::promise<void> p;
  p.set_exception(std::move(e));
  return p.get_future();
}

// offload()'s argument check, the same for both stores: a key >= 0 that holds no stash (`taken`).
void check_offload(int key, bool taken) {
  if (key < 0) throw Error(ErrorCode::InvalidArgument, fmt::format("offload: key {} < 0", key));
  if (taken) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("offload: key {} already holds a stash; reload it first", key));
  }
}

// reload()'s: the key holds a stash (of `held` bytes; nullopt: none) of the size asked for.
void check_reload(int key, std::optional<std::size_t> held, std::size_t asked) {
  if (!held) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("reload: key {} holds no stash (never offloaded, or reloaded already)", key));
  }
  if (*held != asked) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("reload: key {} holds {} bytes but {} were asked for", key, *held, asked));
  }
}

// The copies run on one worker thread in submission order: a reload queued after its key's
// offload always copies after it, and a buffer handed to a new offload after a reload of its old
// key is written only after that reload has read it.
class HostActivationStore final : public ActivationStore {
 public:
  explicit HostActivationStore(HostAllocator allocate)
      : allocate_(allocate ? std::move(allocate) : HostAllocator(allocate_pinned_block)),
        worker_([this] { work(); }) {}

  HostActivationStore(const HostActivationStore&) = delete;
  HostActivationStore& operator=(const HostActivationStore&) = delete;

  ~HostActivationStore() override {
    {
      const std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();  // runs what is queued first: every future is made ready
  }

  std::future<void> offload(int key, std::span<const std::byte> bytes) override {
    check_offload(key, held_.contains(key));
    Held h;
    try {
      h.block = take_block(bytes.size());
    } catch (...) {
      return failed(std::current_exception());
    }
    h.size = bytes.size();
    std::byte* to = h.block.bytes.data();
    held_.emplace(key, std::move(h));
    return enqueue([to, bytes] { std::memcpy(to, bytes.data(), bytes.size()); });
  }

  std::future<void> reload(int key, std::span<std::byte> bytes) override {
    const auto it = held_.find(key);
    check_reload(key, it == held_.end() ? std::nullopt : std::optional(it->second.size),
                 bytes.size());
    const std::byte* from = it->second.block.bytes.data();
    // The block is reused by later offloads; the FIFO worker reads it before they write it.
    free_.push_back(std::move(it->second.block));
    held_.erase(it);
    return enqueue([from, bytes] { std::memcpy(bytes.data(), from, bytes.size()); });
  }

  [[nodiscard]] std::string_view kind() const noexcept override { return "cpu"; }
  [[nodiscard]] std::size_t allocated_bytes() const noexcept override { return allocated_; }

 private:
  struct Held {
    HostBlock block;
    std::size_t size = 0;
  };

  HostBlock take_block(std::size_t bytes) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->bytes.size() >= bytes) {
        HostBlock b = std::move(*it);
        free_.erase(it);
        return b;
      }
    }
    HostBlock b = allocate_(bytes);
    if (b.bytes.size() < bytes) {
      throw Error(ErrorCode::Internal,
                  fmt::format("activation store: the allocator returned {} bytes for {}",
                              b.bytes.size(), bytes));
    }
    allocated_ += b.bytes.size();
    return b;
  }

  std::future<void> enqueue(std::function<void()> copy) {
    std::packaged_task<void()> task(std::move(copy));
    std::future<void> f = task.get_future();
    {
      const std::lock_guard lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return f;
  }

  void work() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception lands in the task's future
    }
  }

  HostAllocator allocate_;
  std::map<int, Held> held_;
  std::vector<HostBlock> free_;
  std::size_t allocated_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: starts after everything it reads is constructed
};

// Keys and sizes are tracked here, on the caller's thread, so misuse fails at once as with the cpu
// backend; the bytes move on the swap store's worker thread.
class SwapActivationStore final : public ActivationStore {
 public:
  explicit SwapActivationStore(const SwapStoreOptions& options) : swap_(options) {}

  std::future<void> offload(int key, std::span<const std::byte> bytes) override {
    check_offload(key, sizes_.contains(key));
    sizes_.emplace(key, bytes.size());
    return swap_.swap_out(name(key), bytes);
  }

  std::future<void> reload(int key, std::span<std::byte> bytes) override {
    const auto it = sizes_.find(key);
    check_reload(key, it == sizes_.end() ? std::nullopt : std::optional(it->second), bytes.size());
    sizes_.erase(it);
    const std::string k = name(key);
    std::future<void> f = swap_.swap_in(k, bytes);
    swap_.erase(k);  // queued after the read: the extent is free for the next offload
    return f;
  }

  [[nodiscard]] std::string_view kind() const noexcept override { return "nvme"; }
  [[nodiscard]] std::size_t allocated_bytes() const noexcept override {
    try {
      return static_cast<std::size_t>(swap_.file_bytes());
    } catch (...) {
      return 0;
    }
  }

 private:
  static std::string name(int key) { return fmt::format("act{}", key); }

  SwapStore swap_;
  std::map<int, std::size_t> sizes_;
};

}  // namespace

HostBlock allocate_pinned_block(std::size_t bytes) {
  auto buffer = std::make_shared<PinnedBuffer>(bytes);
  const std::span<std::byte> span = buffer->bytes();
  return HostBlock{span, std::move(buffer)};
}

HostAllocator pinned_pool_allocator(std::shared_ptr<PinnedPool> pool, Placement placement) {
  if (pool == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "pinned_pool_allocator: the pool is null");
  }
  return [pool = std::move(pool), placement = std::move(placement)](std::size_t bytes) {
    auto lease = std::make_shared<PinnedPool::Lease>(pool->acquire(bytes, placement));
    const std::span<std::byte> span = lease->bytes();
    return HostBlock{span, std::move(lease)};
  };
}

std::unique_ptr<ActivationStore> make_swap_activation_store(const SwapStoreOptions& options) {
  return std::make_unique<SwapActivationStore>(options);
}

std::unique_ptr<ActivationStore> make_host_activation_store(HostAllocator allocate) {
  return std::make_unique<HostActivationStore>(std::move(allocate));
}

}  // namespace strait::offload
