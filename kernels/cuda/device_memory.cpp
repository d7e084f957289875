#include "kernels/device_memory.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <exception>

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

HostRegistration host_register(void* p, std::size_t bytes, std::string* why) noexcept {
  if (p == nullptr || bytes == 0 || !have_device()) return HostRegistration::NoDevice;
  const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (err == cudaSuccess) return HostRegistration::Registered;
  static_cast<void>(cudaGetLastError());
  if (why != nullptr) {
    try {
      *why = fmt::format("cudaHostRegister of {} bytes: {} ({})", bytes, cudaGetErrorName(err),
                         cudaGetErrorString(err));
    } catch (const std::exception&) {  // no memory for the text: the result still says Failed
    }
  }
  return HostRegistration::Failed;
}

void host_unregister(void* p) noexcept {
  if (p == nullptr) return;
  if (cudaHostUnregister(p) != cudaSuccess) static_cast<void>(cudaGetLastError());
}

}  // namespace strait::kernels
