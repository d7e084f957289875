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

/// Where a PinnedPool buffer's pages live (see the file comment). A value type.
class Placement {
 public:
  /// Any node; the calling thread's node; a NUMA node by OS index; the node of a PCI device.
  enum class Kind : std::uint8_t { Any, CallingThread, Node, Pci };

  /// Any cached buffer of the class; new ones unbound.
  static Placement any() { return Placement(Kind::Any); }
  /// The NUMA node of the CPU that calls acquire().
  static Placement calling_thread() { return Placement(Kind::CallingThread); }
  /// NUMA node `os_index` (as in /sys/devices/system/node).
  static Placement node(unsigned os_index) {
    Placement p(Kind::Node);
    p.node_ = os_index;
    return p;
  }
  /// The node local to PCI device `bus_id` ("0000:3b:00.0").
  static Placement pci(std::string bus_id) {
    Placement p(Kind::Pci);
    p.bus_id_ = std::move(bus_id);
    return p;
  }

  /// Which placement this is.
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// The node's OS index (Kind::Node only).
  [[nodiscard]] unsigned node_index() const noexcept { return node_; }  // Kind::Node only
  /// The PCI bus id (Kind::Pci only).
  [[nodiscard]] const std::string& bus_id() const noexcept { return bus_id_; }  // Kind::Pci only

 private:
  explicit Placement(Kind kind) : kind_(kind) {}
  Kind kind_;
  unsigned node_ = 0;
  std::string bus_id_;
};

/// Size classes, cache limit and CUDA registration of a PinnedPool.
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

/// A snapshot of a pool's counters; byte counts are class sizes.
struct PinnedPoolStats {
  std::size_t bytes_held = 0;             ///< every buffer the pool owns: leased + cached
  std::size_t bytes_in_use = 0;           ///< leased now
  std::size_t peak_bytes_in_use = 0;      ///< the most ever leased at once
  std::size_t bytes_locked = 0;           ///< of bytes_held, mlock'ed
  std::size_t bytes_cuda_registered = 0;  ///< of bytes_held, registered with CUDA
  /// Buffers the pool owns, leased and cached.
  std::size_t buffers_held = 0;
  std::uint64_t hits = 0;    ///< acquisitions served by a cached buffer
  std::uint64_t misses = 0;  ///< acquisitions that allocated a new buffer
  std::uint64_t frees = 0;   ///< buffers freed by trim(), max_cached_bytes or the pool's end
};

namespace detail {
struct PinnedPoolState;
}  // namespace detail

/// A thread-safe cache of PinnedBuffers handed out as leases (see the file comment).
class STRAIT_API PinnedPool {
 public:
  class Lease;

  /// An empty pool. Errors: InvalidArgument for options that are not page multiples or powers of
  /// two.
  explicit PinnedPool(PinnedPoolOptions options = {});
  /// A moved-from pool may only be assigned to or destroyed (acquire throws InvalidArgument).
  PinnedPool(PinnedPool&&) noexcept = default;
  /// Destroys this pool (outstanding leases stay valid), then takes `other`'s state.
  PinnedPool& operator=(PinnedPool&& other) noexcept;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();

  /// A buffer of class_bytes(bytes) bytes placed as asked; bytes == 0 gives an empty lease and
  /// touches no statistics.
  [[nodiscard]] Lease acquire(std::size_t bytes, const Placement& placement = Placement::any());

  /// Frees every cached buffer; returns the bytes freed. Leased buffers are not affected.
  std::size_t trim();

  /// The counters now (takes the pool's mutex).
  [[nodiscard]] PinnedPoolStats stats() const;
  /// The size a request of `bytes` bytes gets (see the file comment). Errors: InvalidArgument when
  /// too large to round to a page.
  [[nodiscard]] std::size_t class_bytes(std::size_t bytes) const;
  /// The options the pool was made with.
  [[nodiscard]] const PinnedPoolOptions& options() const noexcept;

 private:
  std::shared_ptr<detail::PinnedPoolState> state_;
};

/// A buffer on loan from a PinnedPool; back to the pool when reset or destroyed. Move-only; use
/// from one thread at a time.
class STRAIT_API PinnedPool::Lease {
 public:
  Lease() = default;  ///< empty: data() is null, size() is 0
  /// Takes `other`'s buffer, leaving it empty.
  Lease(Lease&& other) noexcept = default;
  /// Gives this lease's buffer back, then takes `other`'s.
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { reset(); }

  /// Gives the buffer back to the pool now; the lease is empty afterwards.
  void reset() noexcept;

  /// The first byte (page-aligned); null when empty.
  [[nodiscard]] std::byte* data() const noexcept { return buffer_.data(); }
  /// Bytes: the class size, at least what was asked for.
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size(); }  // the class size
  /// data() and size() as a span.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return buffer_.bytes(); }
  /// True when the lease holds no buffer.
  [[nodiscard]] bool empty() const noexcept { return buffer_.data() == nullptr; }
  /// True when the buffer is mlock'ed.
  [[nodiscard]] bool locked() const noexcept { return buffer_.locked(); }
  /// True when the buffer is registered with CUDA.
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
