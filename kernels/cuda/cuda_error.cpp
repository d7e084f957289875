#include "kernels/cuda/cuda_error.h"

#include <fmt/format.h>

namespace strait::kernels {

ErrorCode cuda_error_code(cudaError_t err) noexcept {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorMemoryAllocation: return ErrorCode::Unavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidConfiguration: return ErrorCode::InvalidArgument;
    default: return ErrorCode::Internal;
  }
}

namespace {

std::string_view hint(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
      return "check nvidia-smi, CUDA_VISIBLE_DEVICES and the GPU's compute mode";
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return "install an NVIDIA driver that supports this CUDA runtime";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "rebuild with this GPU's architecture in CMAKE_CUDA_ARCHITECTURES";
    case cudaErrorMemoryAllocation: return "free device memory or use smaller buffers";
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidConfiguration:
      return "check the pointers, sizes, device index and stream passed";
    default: return "the CUDA context may be unusable; see compute-sanitizer for faults in kernels";
  }
}

}  // namespace

void cuda_check(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());
  throw Error(cuda_error_code(err),
              fmt::format("{}: CUDA error {} ({}): {}", what, cudaGetErrorName(err),
                          cudaGetErrorString(err), hint(err)));
}

}  // namespace strait::kernels
