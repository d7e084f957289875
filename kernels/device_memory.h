// Which memory a pointer points to, as the CUDA runtime sees it: the test that routes a
// Communicator's buffers to NCCL (device memory) or to the host transports (everything else).
//
// pointer_device(p): the ordinal of the CUDA device whose memory `p` points into (cudaMalloc,
// cudaMallocAsync, or any address inside such an allocation); nullopt for host memory, whether
// pageable, pinned (cudaHostAlloc / cudaHostRegister) or unregistered, for managed memory
// (cudaMallocManaged: the host can read it), for null, and whenever the process has no usable CUDA
// driver or device or strait was built without CUDA. is_device_pointer(p) is
// pointer_device(p).has_value().
// Cost: one cudaPointerGetAttributes call (well under a microsecond); the device count is asked
// once per process, so a machine without a GPU pays nothing after the first call. On a machine with
// a GPU the first call initialises the CUDA runtime (a context on the current device), as any
// CUDA-aware library does.
// Thread-safety: safe from any thread. Errors: never throws; CUDA's error slot is left clear.
//
// host_register(p, bytes): page-locks host memory [p, p + bytes) for every CUDA device
// (cudaHostRegister, portable), so asynchronous copies from and to it are DMA transfers. p and
// bytes should be page-aligned. Registered when a device is present and the runtime accepts;
// NoDevice (nothing done) without CUDA or a device; Failed (nothing done, `why` says why) when the
// runtime refuses. host_unregister(p) undoes a Registered call before the memory is freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace strait::kernels {

[[nodiscard]] std::optional<int> pointer_device(const void* p) noexcept;

[[nodiscard]] inline bool is_device_pointer(const void* p) noexcept {
  return pointer_device(p).has_value();
}

enum class HostRegistration : std::uint8_t { Registered, NoDevice, Failed };

[[nodiscard]] HostRegistration host_register(void* p, std::size_t bytes,
                                             std::string* why = nullptr) noexcept;
void host_unregister(void* p) noexcept;

}  // namespace strait::kernels
