// PinnedBuffer: a page-aligned, zero-filled host buffer for I/O and host<->device staging.
//
// The size is rounded up to a whole number of pages (so O_DIRECT and registered io_uring buffers
// can use any prefix of it). The pages are locked with mlock so they cannot be swapped out under
// an in-flight transfer; when the kernel refuses (RLIMIT_MEMLOCK too small and no CAP_IPC_LOCK)
// the buffer stays usable but unlocked, and the process logs one warning (spdlog) saying how to
// raise the limit. A later issue adds cudaHostRegister and NUMA placement (DESIGN.md PinnedPool).
// Thread-safety: a value type; concurrent use of the bytes is up to the caller.
// Errors: Io when the kernel has no memory for the mapping.
#pragma once

#include <cstddef>
#include <span>

namespace strait::offload {

// The system page size in bytes (sysconf(_SC_PAGESIZE)).
std::size_t page_size() noexcept;

class PinnedBuffer {
 public:
  PinnedBuffer() = default;  // empty: data() is null, size() is 0
  explicit PinnedBuffer(std::size_t bytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }  // bytes, a page multiple
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool locked_ = false;
};

}  // namespace strait::offload
