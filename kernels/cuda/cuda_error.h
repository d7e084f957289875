// CUDA runtime errors as strait::Error. CUDA-only header: include it from code built when
// STRAIT_HAVE_CUDA is set (it includes cuda_runtime_api.h).
//
// cuda_check(err, what) throws when err != cudaSuccess, after clearing the runtime's last-error
// slot so a later cudaGetLastError() does not report the same failure twice. The message names
// `what` (the operation), the CUDA error's name and text, and what to do about it.
// Codes: Unavailable when the driver, a device, device memory or a kernel image for this GPU is
// missing; InvalidArgument for invalid values, pointers, devices or handles; Internal otherwise.
// Thread-safety: thread-safe (the last-error slot is per thread).
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "core/error.h"

namespace strait::kernels {

ErrorCode cuda_error_code(cudaError_t err) noexcept;

void cuda_check(cudaError_t err, std::string_view what);

}  // namespace strait::kernels
