// DeviceBuffer: an owned cudaMalloc allocation (RAII), with blocking copies to and from the host.
// CUDA-only header. The memory belongs to the device that was current at construction; copies use
// cudaMemcpy (legacy default stream, synchronous), which suits setup and tests, not hot paths.
// Thread-safety: like a std::vector: const members from several threads, otherwise one thread.
// Errors: through cuda_check (Unavailable for no device or out of memory, InvalidArgument for
// copies larger than the buffer).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/cuda_error.h"

namespace strait::kernels {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes),
               "DeviceBuffer: cudaMalloc of " + std::to_string(bytes) + " bytes");
    ptr_.reset(p);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::move(other.ptr_)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    ptr_ = std::move(other.ptr_);
    bytes_ = std::exchange(other.bytes_, 0);
    return *this;
  }

  [[nodiscard]] void* data() noexcept { return ptr_.get(); }
  [[nodiscard]] const void* data() const noexcept { return ptr_.get(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  // Copies host bytes to the buffer's start (plus offset bytes).
  template <class T>
  void upload(std::span<const T> host, std::size_t offset = 0) {
    check_range(host.size_bytes(), offset, "upload");
    if (host.empty()) return;
    cuda_check(cudaMemcpy(static_cast<std::byte*>(data()) + offset, host.data(), host.size_bytes(),
                          cudaMemcpyHostToDevice),
               "DeviceBuffer::upload: cudaMemcpy");
  }

  template <class T>
  void download(std::span<T> host, std::size_t offset = 0) const {
    check_range(host.size_bytes(), offset, "download");
    if (host.empty()) return;
    cuda_check(cudaMemcpy(host.data(), static_cast<const std::byte*>(data()) + offset,
                          host.size_bytes(), cudaMemcpyDeviceToHost),
               "DeviceBuffer::download: cudaMemcpy");
  }

 private:
  struct Free {
    void operator()(void* p) const noexcept { static_cast<void>(cudaFree(p)); }
  };

  void check_range(std::size_t n, std::size_t offset, const char* what) const {
    if (offset > bytes_ || n > bytes_ - offset) {
      throw Error(ErrorCode::InvalidArgument, std::string("DeviceBuffer::") + what + ": " +
                                                  std::to_string(n) + " bytes at offset " +
                                                  std::to_string(offset) + " exceed the buffer's " +
                                                  std::to_string(bytes_) + " bytes");
    }
  }

  std::unique_ptr<void, Free> ptr_;
  std::size_t bytes_ = 0;
};

}  // namespace strait::kernels
