// DeviceGuard: makes a CUDA device current for a scope and restores the previous one (RAII), so a
// library call does not change its caller's current device. CUDA-only header.
// Thread-safety: the current device is per host thread; a guard belongs to the thread that made it.
// Errors: constructor throws through cuda_check (InvalidArgument for a device that does not exist,
// Unavailable without driver or device); the destructor never throws.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/cuda_error.h"

namespace strait::kernels {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    cuda_check(cudaGetDevice(&previous_), "DeviceGuard: cudaGetDevice");
    if (previous_ != device_) {
      cuda_check(cudaSetDevice(device_),
                 "DeviceGuard: cudaSetDevice(" + std::to_string(device_) + ")");
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
  }

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace strait::kernels
