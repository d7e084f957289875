/// \file
/// PinnedPool: a cache of page-aligned, locked, NUMA-placed host buffers (PinnedBuffer), handed
/// out as move-only leases that give their buffer back to the pool when they are destroyed.
///
/// Size classes: a request of n bytes (n > 0) gets a buffer of class_bytes(n) bytes: the smallest
/// power of two that is at least one page and at least n, while that is at most
/// PinnedPoolOptions::max_class_bytes; above that, n rounded up to a whole page. A lease's size()
/// is its class size, so callers may use the slack. Cached buffers are kept per (class, NUMA node)
/// and reused last-in first-out; a reused buffer holds whatever its previous lease left in it (a
/// new one is zero-filled).
///
/// Placement (where the pages live): Placement::any() takes any cached buffer of the class and
/// allocates new ones unbound (the kernel places them at first touch); calling_thread() binds to
/// the node of the CPU the caller runs on at acquire() (unbound if hwloc cannot tell); node(n) to
/// node n (OS index, as in /sys/devices/system/node); pci("0000:3b:00.0") to the node local to that
/// PCI device (a GPU or NIC). Binding happens before the pages are first touched (see
/// PinnedBuffer). Locking and CUDA: every buffer is mlock'ed when RLIMIT_MEMLOCK (or CAP_IPC_LOCK)
/// allows, else it is usable unlocked after one warning; with register_with_cuda, buffers are
/// registered with cudaHostRegister when CUDA and a device are present (Lease::cuda_registered()
/// says so) and unregistered before they are freed.
///
/// Statistics (stats()): bytes held by the pool (leased plus cached), bytes leased, the peak of the
/// bytes leased, locked and CUDA-registered bytes held, and counts of acquisitions served from the
/// cache (hits), by a new buffer (misses), and buffers freed. All byte counts are class sizes.
///
/// Lifetime: leases share the pool's state (shared_ptr), so a lease may outlive its PinnedPool;
/// destroying the pool frees its cached buffers and each outstanding buffer is freed when its lease
/// ends. Thread-safety: every PinnedPool member may be called from any thread concurrently (one
/// mutex guards the cache and the statistics; mapping, locking, registering and unmapping run
/// outside it). A Lease is a value: use one from one thread at a time; it may end on any thread.
/// Errors: InvalidArgument for a request too large to round to a page, a NUMA node or PCI bus id
/// this machine does not have, or options that are not page multiples; Io when the kernel has no
/// memory for a buffer; Unavailable when a placement other than any() is asked for and hwloc cannot
/// read the topology.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/export.h"
#include "offload/pinned_buffer.h"

namespace strait::offload {

class Placement {
 public:
  enum class Kind : std::uint8_t { Any, CallingThread, Node, Pci };

  static Placement any() { return Placement(Kind::Any); }
  static Placement calling_thread() { return Placement(Kind::CallingThread); }
  static Placement node(unsigned os_index) {
    Placement p(Kind::Node);
    p.node_ = os_index;
    return p;
  }
  static Placement pci(std::string bus_id) {
    Placement p(Kind::Pci);
    p.bus_id_ = std::move(bus_id);
    return p;
  }

  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] unsigned node_index() const noexcept { return node_; }          // Kind::Node only
  [[nodiscard]] const std::string& bus_id() const noexcept { return bus_id_; }  // Kind::Pci only

 private:
  explicit Placement(Kind kind) : kind_(kind) {}
  Kind kind_;
  unsigned node_ = 0;
  std::string bus_id_;
};

struct PinnedPoolOptions {
  /// Largest power-of-two class, in bytes: a power of two and a page multiple. Larger requests get
  /// exact page multiples (at most a page of slack instead of up to half the buffer).
  std::size_t max_class_bytes = std::size_t{64} << 20;
  /// Most bytes kept cached (held but not leased); a buffer given back beyond this is freed.
  std::size_t max_cached_bytes = std::numeric_limits<std::size_t>::max();
  /// cudaHostRegister each new buffer when CUDA and a device are present. Off by default: the
  /// first registration starts the CUDA runtime, which a CPU-only user of the pool does not need.
  bool register_with_cuda = false;
};

struct PinnedPoolStats {
  std::size_t bytes_held = 0;             ///< every buffer the pool owns: leased + cached
  std::size_t bytes_in_use = 0;           ///< leased now
  std::size_t peak_bytes_in_use = 0;      ///< the most ever leased at once
  std::size_t bytes_locked = 0;           ///< of bytes_held, mlock'ed
  std::size_t bytes_cuda_registered = 0;  ///< of bytes_held, registered with CUDA
  std::size_t buffers_held = 0;
  std::uint64_t hits = 0;    ///< acquisitions served by a cached buffer
  std::uint64_t misses = 0;  ///< acquisitions that allocated a new buffer
  std::uint64_t frees = 0;   ///< buffers freed by trim(), max_cached_bytes or the pool's end
};

namespace detail {
struct PinnedPoolState;
}  // namespace detail

class STRAIT_API PinnedPool {
 public:
  class Lease;

  explicit PinnedPool(PinnedPoolOptions options = {});
  /// A moved-from pool may only be assigned to or destroyed (acquire throws InvalidArgument).
  PinnedPool(PinnedPool&&) noexcept = default;
  PinnedPool& operator=(PinnedPool&& other) noexcept;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();

  /// A buffer of class_bytes(bytes) bytes placed as asked; bytes == 0 gives an empty lease and
  /// touches no statistics.
  [[nodiscard]] Lease acquire(std::size_t bytes, const Placement& placement = Placement::any());

  /// Frees every cached buffer; returns the bytes freed. Leased buffers are not affected.
  std::size_t trim();

  [[nodiscard]] PinnedPoolStats stats() const;
  [[nodiscard]] std::size_t class_bytes(std::size_t bytes) const;
  [[nodiscard]] const PinnedPoolOptions& options() const noexcept;

 private:
  std::shared_ptr<detail::PinnedPoolState> state_;
};

class STRAIT_API PinnedPool::Lease {
 public:
  Lease() = default;  ///< empty: data() is null, size() is 0
  Lease(Lease&& other) noexcept = default;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { reset(); }

  /// Gives the buffer back to the pool now; the lease is empty afterwards.
  void reset() noexcept;

  [[nodiscard]] std::byte* data() const noexcept { return buffer_.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size(); }  // the class size
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return buffer_.bytes(); }
  [[nodiscard]] bool empty() const noexcept { return buffer_.data() == nullptr; }
  [[nodiscard]] bool locked() const noexcept { return buffer_.locked(); }
  [[nodiscard]] bool cuda_registered() const noexcept { return buffer_.cuda_registered(); }
  /// The node the pages are bound to; nullopt for Placement::any() or when binding was refused.
  [[nodiscard]] std::optional<unsigned> numa_node() const noexcept { return buffer_.numa_node(); }

 private:
  friend class PinnedPool;
  Lease(std::shared_ptr<detail::PinnedPoolState> pool, PinnedBuffer buffer, int key_node)
      : pool_(std::move(pool)), buffer_(std::move(buffer)), key_node_(key_node) {}

  std::shared_ptr<detail::PinnedPoolState> pool_;
  PinnedBuffer buffer_;
  int key_node_ = -1;  ///< the free list it returns to: the requested node, -1 for any
};

}  // namespace strait::offload
