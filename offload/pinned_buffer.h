/// \file
/// PinnedBuffer: a page-aligned, zero-filled host buffer for I/O and host<->device staging.
///
/// The size is rounded up to a whole number of pages (so O_DIRECT and registered io_uring buffers
/// can use any prefix of it). Buffers of kHugePageBytes or more start on a 2 MiB boundary and are
/// advised to use transparent huge pages (MADV_HUGEPAGE): a device then gets one segment per huge
/// page, which doubled registered O_DIRECT reads (docs/results/offload.md). The pages are
/// locked with mlock so they cannot be swapped out under an in-flight transfer; when the kernel
/// refuses (RLIMIT_MEMLOCK too small and no CAP_IPC_LOCK) the buffer stays usable but unlocked, and
/// the process logs one warning (spdlog) saying how to raise the limit. Options: bind the pages to
/// a NUMA node before they are first touched (hwloc; a refusal, e.g. mbind without CAP_SYS_NICE in
/// a container, leaves them unbound with one warning), and register them with CUDA
/// (cudaHostRegister; a no-op without CUDA or a device, one warning when the runtime refuses).
/// PinnedPool (pinned_pool.h) caches these buffers by size. Thread-safety: a value type; concurrent
/// use of the bytes is up to the caller. Errors: Io when the kernel has no memory for the mapping;
/// InvalidArgument for a NUMA node this machine does not have.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "core/export.h"

namespace strait::offload {

/// The system page size in bytes (sysconf(_SC_PAGESIZE)).
STRAIT_API std::size_t page_size() noexcept;

/// x86-64's (and most systems') transparent huge page size.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// How a PinnedBuffer is placed and registered.
struct PinnedBufferOptions {
  std::optional<unsigned> numa_node;  ///< OS index of the node to bind to; nullopt: no binding
  bool register_with_cuda = false;    ///< cudaHostRegister when a CUDA device is present
};

/// A page-aligned, zero-filled, locked host buffer (see the file comment). Move-only; owns its
/// mapping.
class STRAIT_API PinnedBuffer {
 public:
  PinnedBuffer() = default;  ///< empty: data() is null, size() is 0
  /// A buffer of at least `bytes` bytes (rounded up to a page multiple), unbound and not
  /// CUDA-registered.
  explicit PinnedBuffer(std::size_t bytes) : PinnedBuffer(bytes, PinnedBufferOptions{}) {}
  /// A buffer of at least `bytes` bytes placed and registered as `options` ask. Errors: Io,
  /// InvalidArgument.
  PinnedBuffer(std::size_t bytes, const PinnedBufferOptions& options);
  /// Takes `other`'s mapping, leaving it empty.
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  /// Frees this mapping, then takes `other`'s.
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  /// The first byte (page-aligned; 2 MiB-aligned from kHugePageBytes on); null when empty.
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// Bytes, a page multiple; 0 when empty.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }  // bytes, a page multiple
  /// True when the pages are mlock'ed.
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  /// The node the pages are bound to; nullopt when no node was asked for or the kernel refused.
  [[nodiscard]] std::optional<unsigned> numa_node() const noexcept { return numa_node_; }
  /// True when the pages are registered with cudaHostRegister.
  [[nodiscard]] bool cuda_registered() const noexcept { return cuda_registered_; }
  /// data() and size() as a span.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool locked_ = false;
  std::optional<unsigned> numa_node_;
  bool cuda_registered_ = false;
};

}  // namespace strait::offload
