#include "kernels/device_memory.h"

#include <cuda_runtime_api.h>

namespace strait::kernels {
namespace {

// Asked once: without a driver or device every pointer is host memory, and the runtime is not
// asked again (each failing call would also set its error slot).
bool have_device() noexcept {
  static const bool have = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) static_cast<void>(cudaGetLastError());
    return err == cudaSuccess && n > 0;
  }();
  return have;
}

}  // namespace

std::optional<int> pointer_device(const void* p) noexcept {
  if (p == nullptr || !have_device()) return std::nullopt;
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    // Older runtimes report unregistered host memory as cudaErrorInvalidValue: host memory.
    static_cast<void>(cudaGetLastError());
    return std::nullopt;
  }
  if (attr.type != cudaMemoryTypeDevice) return std::nullopt;  // host, pinned, managed
  return attr.device;
}

}  // namespace strait::kernels
