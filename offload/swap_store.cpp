#include "offload/swap_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "offload/io_engine_factory.h"
#include "offload/pinned_buffer.h"
#include "offload/remove_on_exit.h"

namespace strait::offload {
namespace {

constexpr std::uint64_t round_up(std::uint64_t x, std::uint64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view key) const noexcept {
    return std::hash<std::string_view>{}(key);
  }
};

// Maps keyed by std::string that are searched with a std::string_view, without a copy.
template <class V>
using KeyMap = std::unordered_map<std::string, V, KeyHash, std::equal_to<>>;

struct Extent {
  std::uint64_t offset = 0;  // bytes, a multiple of the unit
  std::uint64_t length = 0;  // bytes, a multiple of the unit
};

// Extents of one file: a free list (offset -> length, neighbours merged) and the end of the
// highest extent ever handed out. Best fit; a request that fits nowhere extends the last free
// extent when it ends the file, else starts at the end.
class ExtentAllocator {
 public:
  Extent allocate(std::uint64_t length) {
    if (length == 0) return {};
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= length && (best == free_.end() || it->second < best->second)) best = it;
    }
    if (best != free_.end()) {
      const Extent e{best->first, length};
      const std::uint64_t rest = best->second - length;
      free_.erase(best);
      if (rest > 0) free_.emplace(e.offset + length, rest);
      return e;
    }
    std::uint64_t offset = end_;
    if (!free_.empty()) {
      const auto last = std::prev(free_.end());
      if (last->first + last->second == end_) {
        offset = last->first;
        free_.erase(last);
      }
    }
    end_ = offset + length;
    return {offset, length};
  }

  void release(Extent e) {
    if (e.length == 0) return;
    auto it = free_.emplace(e.offset, e.length).first;
    if (const auto next = std::next(it);
        next != free_.end() && e.offset + e.length == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      const auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  [[nodiscard]] std::uint64_t end() const noexcept { return end_; }
  [[nodiscard]] const std::map<std::uint64_t, std::uint64_t>& free_extents() const noexcept {
    return free_;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> free_;
  std::uint64_t end_ = 0;
};

std::vector<std::uint64_t> hash_blocks(const std::byte* data, std::size_t size) {
  std::vector<std::uint64_t> sums;
  sums.reserve((size + kChecksumBlock - 1) / kChecksumBlock);
  for (std::size_t pos = 0; pos < size; pos += kChecksumBlock) {
    sums.push_back(XXH3_64bits(data + pos, std::min(kChecksumBlock, size - pos)));
  }
  return sums;
}

enum class OpKind : std::uint8_t { SwapOut, SwapIn, Prefetch, Erase, Drain };

std::string_view verb(OpKind kind) {
  switch (kind) {
    case OpKind::SwapOut: return "swap_out";
    case OpKind::SwapIn: return "swap_in";
    case OpKind::Prefetch: return "prefetch";
    case OpKind::Erase: return "erase";
    case OpKind::Drain: return "drain";
  }
  return "?";
}

struct Op {
  OpKind kind = OpKind::Drain;
  std::string key;
  std::uint64_t seq = 0;           // call order
  const std::byte* src = nullptr;  // swap_out
  std::byte* dst = nullptr;        // swap_in
  std::size_t size = 0;            // bytes of src or dst
  std::promise<void> done;
};

}  // namespace

struct SwapStore::Impl {
  // A key's current version, as written (worker thread only).
  struct Stored {
    Extent extent;
    std::size_t size = 0;
    std::vector<std::uint64_t> sums;     // per kChecksumBlock; empty without checksums
    std::optional<PinnedBuffer> staged;  // the prefetched copy, verified
  };
  // What contains() and stored_size() answer: the size after the calls so far, and the call that
  // set it (so a failed swap_out is undone only when nothing later touched the key).
  struct Visible {
    std::size_t size = 0;
    std::uint64_t seq = 0;
  };

  bool checksum = true;
  std::string reason;
  std::size_t unit = 0;  // bytes
  bool direct = false;
  std::atomic<std::uint64_t> file_end{0};
  // Destruction runs bottom-up: the worker is joined in ~Impl, then the engine drains what is
  // still in flight, then the file is closed and the buffers unmapped, and the file removed.
  RemoveOnExit remover;
  std::array<PinnedBuffer, 2> staging;
  std::vector<PinnedBuffer> in_flight_forever;  // buffers of transfers that timed out
  IoFile file;
  std::unique_ptr<IoEngine> engine;

  // Worker thread only.
  KeyMap<Stored> stored;
  ExtentAllocator extents;
  std::string broken;  // why the store takes no more transfers (a timeout), or empty

  mutable std::mutex mu;  // guards what follows
  std::condition_variable wake;
  std::deque<Op> queue;
  bool stopping = false;
  std::uint64_t next_seq = 0;
  KeyMap<Visible> visible;
  std::thread worker;  // last: started once everything above exists

  explicit Impl(const SwapStoreOptions& options) : checksum(options.checksum) {
    OffloadFile f =
        create_offload_file(options.dir, "swap store", "swap", options.tag, "swap", options.io);
    engine = std::move(f.engine);
    reason = std::move(f.reason);
    file = std::move(f.file);
    const std::filesystem::path path = f.path;
    remover.reset(path);
    const IoAlignment a = file.alignment();
    unit = std::max({page_size(), a.offset, a.memory});
    direct = file.direct();
    if (!options.keep_name) {
      // The open descriptor keeps the nameless file; the kernel frees it when the store goes.
      std::error_code ec;
      std::filesystem::remove(path, ec);
      if (!ec) remover.reset({});
    }
    const std::size_t staging_bytes =
        std::max<std::size_t>(unit, round_up(options.staging_bytes, unit));
    std::vector<std::span<std::byte>> spans;
    for (PinnedBuffer& b : staging) {
      b = PinnedBuffer(staging_bytes);
      spans.push_back(b.bytes());
    }
    engine->register_buffers(spans);
    const IoFile* const files[] = {&file};
    engine->register_files(files);
    spdlog::debug("offload: swap store {} (unit {} bytes, {} engine: {})", path.string(), unit,
                  to_string(engine->kind()), reason);
    worker = std::thread([this] { run_worker(); });
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    std::deque<Op> dropped;
    {
      const std::lock_guard lock(mu);
      stopping = true;
      dropped.swap(queue);
    }
    wake.notify_all();
    for (Op& op : dropped) {
      op.done.set_exception(std::make_exception_ptr(Error(
          ErrorCode::Aborted, fmt::format("swap store {}: destroyed before the {} of key '{}' ran",
                                          file.path().string(), verb(op.kind), op.key))));
    }
    if (worker.joinable()) worker.join();
  }

  // --- the caller's side --------------------------------------------------------------------

  std::future<void> enqueue(OpKind kind, std::string_view key, const std::byte* src, std::byte* dst,
                            std::size_t size) {
    Op op;
    op.kind = kind;
    op.key = std::string(key);
    op.src = src;
    op.dst = dst;
    op.size = size;
    std::future<void> done = op.done.get_future();
    {
      const std::lock_guard lock(mu);
      op.seq = next_seq++;
      if (kind == OpKind::SwapOut) {
        visible.insert_or_assign(op.key, Visible{size, op.seq});
      } else if (kind == OpKind::Erase) {
        if (const auto it = visible.find(key); it != visible.end()) visible.erase(it);
      }
      queue.push_back(std::move(op));
    }
    wake.notify_one();
    return done;
  }

  // --- the worker's side --------------------------------------------------------------------

  void run_worker() {
    for (;;) {
      Op op;
      {
        std::unique_lock lock(mu);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
      }
      execute(op);
    }
  }

  void execute(Op& op) {
    try {
      switch (op.kind) {
        case OpKind::SwapOut: swap_out(op); break;
        case OpKind::SwapIn: swap_in(op); break;
        case OpKind::Prefetch: prefetch(op); break;
        case OpKind::Erase: erase(op.key); break;
        case OpKind::Drain: break;
      }
      op.done.set_value();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Timeout && broken.empty()) broken = e.message();
      const std::string what =
          op.kind == OpKind::SwapOut || op.kind == OpKind::SwapIn
              ? fmt::format("{} of key '{}' ({} bytes)", verb(op.kind), op.key, op.size)
              : fmt::format("{} of key '{}'", verb(op.kind), op.key);
      std::string after;
      if (op.kind == OpKind::SwapOut) {
        undo_visible(op);
        const auto it = stored.find(op.key);
        after = it != stored.end()
                    ? fmt::format(
                          "; the previously stored version of '{}' ({} bytes) is "
                          "unchanged and still readable",
                          op.key, it->second.size)
                    : fmt::format("; '{}' had no stored version and stays absent", op.key);
      }
      op.done.set_exception(std::make_exception_ptr(
          Error(e.code(), fmt::format("swap store {}: {} failed: {}{}", file.path().string(), what,
                                      e.message(), after))));
    } catch (...) {
      if (op.kind == OpKind::SwapOut) undo_visible(op);
      op.done.set_exception(std::current_exception());
    }
  }

  // A swap_out failed: unless a later call changed the key, contains() and stored_size() go back
  // to the version that is actually stored.
  void undo_visible(const Op& op) {
    const std::lock_guard lock(mu);
    const auto it = visible.find(op.key);
    if (it == visible.end() || it->second.seq != op.seq) return;
    if (const auto s = stored.find(op.key); s != stored.end()) {
      it->second.size = s->second.size;
    } else {
      visible.erase(it);
    }
  }

  void check_usable() const {
    if (!broken.empty()) {
      throw Error(ErrorCode::Aborted,
                  fmt::format("an earlier transfer timed out and may still be in flight ({}); the "
                              "store takes no more transfers: destroy it",
                              broken));
    }
  }

  Stored& find_stored(std::string_view key) {
    const auto it = stored.find(key);
    if (it == stored.end()) {
      throw Error(ErrorCode::InvalidArgument,
                  "the key is not stored (never swapped out, erased, or its swap_out failed)");
    }
    return it->second;
  }

  // An extent of round_up(size, unit) bytes whose blocks are reserved on disk.
  Extent reserve(std::size_t size) {
    const Extent e = extents.allocate(round_up(size, unit));
    if (e.length == 0) return e;
    try {
      preallocate(file, e.offset, e.length);
    } catch (const Error&) {
      // Whatever the failed attempt got goes back, then the blocks that free extents still hold;
      // one more try if there were any.
      release_blocks(file, e.offset, e.length);
      bool gave_back = false;
      for (const auto& [offset, length] : extents.free_extents()) {
        gave_back = release_blocks(file, offset, length) || gave_back;
      }
      if (!gave_back) {
        extents.release(e);
        throw;
      }
      try {
        preallocate(file, e.offset, e.length);
      } catch (const Error&) {
        release_blocks(file, e.offset, e.length);
        extents.release(e);
        throw;
      }
    }
    file_end.store(extents.end());
    return e;
  }

  // Waits for a ticket; a timeout marks the store broken (the transfer is still in flight).
  void settle(std::optional<IoEngine::Ticket>& ticket) {
    if (!ticket) return;
    try {
      engine->wait(*ticket);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Timeout) {
        if (broken.empty()) broken = e.message();
      } else {
        ticket.reset();  // done, though failed
      }
      throw;
    }
    ticket.reset();
  }

  // After an error: waits for every other transfer of the operation, so none still touches the
  // caller's buffer when its future reports the error.
  void settle_quietly(std::span<std::optional<IoEngine::Ticket>> tickets) {
    for (auto& t : tickets) {
      try {
        settle(t);
      } catch (const Error& e) {
        spdlog::debug("offload: swap store: while draining after an error: {}", e.what());
      }
    }
  }

  [[nodiscard]] bool aligned(const std::byte* p) const {
    return std::bit_cast<std::uintptr_t>(p) % file.alignment().memory == 0;
  }

  // The part of a transfer of `size` bytes that goes to or from the caller's buffer in place:
  // all of it, or with O_DIRECT its whole units.
  [[nodiscard]] std::size_t body_bytes(std::size_t size) const {
    return direct ? size / unit * unit : size;
  }

  // A transfer the device can do from the caller's buffer (see body_bytes): the body in place,
  // the tail (under one unit) through staging[0], padded to a unit.
  std::vector<IoRequest> in_place_requests(IoOp op, const Extent& e, const std::byte* data,
                                           std::size_t size) {
    const auto request = [&](std::uint64_t offset, const std::byte* from, std::size_t n) {
      // The engines never write through a write request's pointer (IoRequest::write).
      auto* p = const_cast<std::byte*>(from);
      return op == IoOp::Read ? IoRequest::read(file, offset, {p, n})
                              : IoRequest::write(file, offset, {from, n});
    };
    const std::size_t body = body_bytes(size);
    std::vector<IoRequest> requests;
    if (body > 0) requests.push_back(request(e.offset, data, body));
    if (body < size) requests.push_back(request(e.offset + body, staging[0].data(), unit));
    return requests;
  }

  // Writes size bytes from src into the extent (see the header's "Unaligned sizes and buffers");
  // `during` runs while the first transfer is in flight.
  void write_extent(const Extent& e, const std::byte* src, std::size_t size,
                    const std::function<void()>& during) {
    if (size == 0) {
      during();
      return;
    }
    std::array<std::optional<IoEngine::Ticket>, 2> tickets;
    try {
      if (!direct || aligned(src)) {
        const std::size_t body = body_bytes(size);
        const std::size_t tail = size - body;
        if (tail > 0) {
          std::byte* pad = staging[0].data();
          std::memcpy(pad, src + body, tail);
          std::memset(pad + tail, 0, unit - tail);
        }
        tickets[0] = engine->submit(in_place_requests(IoOp::Write, e, src, size));
        during();
        settle(tickets[0]);
        return;
      }
      const std::size_t chunk = staging[0].size();
      for (std::size_t pos = 0, i = 0; pos < size; pos += chunk, ++i) {
        PinnedBuffer& buffer = staging[i % 2];
        auto& ticket = tickets[i % 2];
        settle(ticket);
        const std::size_t n = std::min(chunk, size - pos);
        const std::size_t padded = round_up(n, unit);
        std::memcpy(buffer.data(), src + pos, n);
        std::memset(buffer.data() + n, 0, padded - n);
        const IoRequest w = IoRequest::write(file, e.offset + pos, buffer.bytes().first(padded));
        ticket = engine->submit({&w, 1});
        if (i == 0) during();
      }
      for (auto& t : tickets) settle(t);
    } catch (...) {
      settle_quietly(tickets);
      throw;
    }
  }

  // Reads the extent's first size bytes into dst.
  void read_extent(const Extent& e, std::byte* dst, std::size_t size) {
    if (size == 0) return;
    std::array<std::optional<IoEngine::Ticket>, 2> tickets;
    try {
      if (!direct || aligned(dst)) {
        const std::size_t body = body_bytes(size);
        const std::size_t tail = size - body;
        tickets[0] = engine->submit(in_place_requests(IoOp::Read, e, dst, size));
        settle(tickets[0]);
        if (tail > 0) std::memcpy(dst + body, staging[0].data(), tail);
        return;
      }
      const std::size_t chunk = staging[0].size();
      const std::size_t chunks = (size + chunk - 1) / chunk;
      const auto submit_read = [&](std::size_t i) {
        const std::size_t pos = i * chunk;
        const std::size_t padded = round_up(std::min(chunk, size - pos), unit);
        const IoRequest r =
            IoRequest::read(file, e.offset + pos, staging[i % 2].bytes().first(padded));
        tickets[i % 2] = engine->submit({&r, 1});
      };
      submit_read(0);
      for (std::size_t i = 0; i < chunks; ++i) {
        // The other buffer was copied out in the previous round: read ahead into it.
        if (i + 1 < chunks) submit_read(i + 1);
        settle(tickets[i % 2]);
        const std::size_t pos = i * chunk;
        std::memcpy(dst + pos, staging[i % 2].data(), std::min(chunk, size - pos));
      }
    } catch (...) {
      settle_quietly(tickets);
      throw;
    }
  }

  void verify(const Stored& s, const std::byte* data) const {
    for (std::size_t i = 0; i < s.sums.size(); ++i) {
      const std::size_t pos = i * kChecksumBlock;
      const std::size_t n = std::min(kChecksumBlock, s.size - pos);
      const std::uint64_t actual = XXH3_64bits(data + pos, n);
      if (actual != s.sums[i]) {
        throw Error(ErrorCode::Io,
                    fmt::format("checksum mismatch at offset {} of {} (bytes [{}, {}) of the "
                                "key): expected xxh3 {:016x}, read {:016x}; the swap file was "
                                "modified or the device corrupted it",
                                s.extent.offset + pos, file.path().string(), pos, pos + n,
                                s.sums[i], actual));
      }
    }
  }

  void swap_out(Op& op) {
    check_usable();
    const Extent e = reserve(op.size);
    std::vector<std::uint64_t> sums;
    try {
      write_extent(e, op.src, op.size, [&] {
        if (checksum) sums = hash_blocks(op.src, op.size);
      });
    } catch (...) {
      if (broken.empty()) extents.release(e);  // a timed-out write may still land there
      throw;
    }
    Stored next{e, op.size, std::move(sums), std::nullopt};
    if (const auto it = stored.find(op.key); it != stored.end()) {
      extents.release(it->second.extent);
      it->second = std::move(next);
    } else {
      stored.emplace(op.key, std::move(next));
    }
  }

  void swap_in(Op& op) {
    check_usable();
    Stored& s = find_stored(op.key);
    if (op.size != s.size) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("the buffer has {} bytes but {} are stored; pass a buffer of "
                              "stored_size(key) bytes",
                              op.size, s.size));
    }
    if (s.staged) {
      if (s.size > 0) std::memcpy(op.dst, s.staged->data(), s.size);
      s.staged.reset();
      return;
    }
    read_extent(s.extent, op.dst, s.size);
    verify(s, op.dst);
  }

  void prefetch(Op& op) {
    check_usable();
    Stored& s = find_stored(op.key);
    if (s.staged) return;
    PinnedBuffer buffer(s.extent.length);
    if (s.size > 0) {
      const std::size_t length = direct ? s.extent.length : s.size;
      const IoRequest r = IoRequest::read(file, s.extent.offset, buffer.bytes().first(length));
      std::optional<IoEngine::Ticket> ticket = engine->submit({&r, 1});
      try {
        settle(ticket);
      } catch (...) {
        if (ticket) in_flight_forever.push_back(std::move(buffer));  // timed out: keep it mapped
        throw;
      }
    }
    verify(s, buffer.data());
    s.staged = std::move(buffer);
  }

  void erase(std::string_view key) {
    const auto it = stored.find(key);
    if (it == stored.end()) return;
    extents.release(it->second.extent);
    stored.erase(it);
  }
};

SwapStore::SwapStore(const SwapStoreOptions& options) : impl_(std::make_unique<Impl>(options)) {}

SwapStore::~SwapStore() = default;

std::future<void> SwapStore::swap_out(std::string_view key, std::span<const std::byte> data) {
  return impl_->enqueue(OpKind::SwapOut, key, data.data(), nullptr, data.size());
}

std::future<void> SwapStore::swap_in(std::string_view key, std::span<std::byte> out) {
  return impl_->enqueue(OpKind::SwapIn, key, nullptr, out.data(), out.size());
}

std::future<void> SwapStore::prefetch(std::string_view key) {
  return impl_->enqueue(OpKind::Prefetch, key, nullptr, nullptr, 0);
}

void SwapStore::erase(std::string_view key) {
  impl_->enqueue(OpKind::Erase, key, nullptr, nullptr, 0);
}

void SwapStore::drain() {
  impl_->enqueue(OpKind::Drain, {}, nullptr, nullptr, 0).get();
}

bool SwapStore::contains(std::string_view key) const {
  const std::lock_guard lock(impl_->mu);
  return impl_->visible.find(key) != impl_->visible.end();
}

std::size_t SwapStore::stored_size(std::string_view key) const {
  const std::lock_guard lock(impl_->mu);
  const auto it = impl_->visible.find(key);
  if (it == impl_->visible.end()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("swap store {}: stored_size of key '{}': the key is not stored",
                            impl_->file.path().string(), key));
  }
  return it->second.size;
}

const std::filesystem::path& SwapStore::path() const noexcept {
  return impl_->file.path();
}
std::size_t SwapStore::unit() const noexcept {
  return impl_->unit;
}
std::uint64_t SwapStore::file_bytes() const {
  return impl_->file_end.load();
}
IoEngineKind SwapStore::engine_kind() const noexcept {
  return impl_->engine->kind();
}
std::string_view SwapStore::engine_reason() const noexcept {
  return impl_->reason;
}

}  // namespace strait::offload
