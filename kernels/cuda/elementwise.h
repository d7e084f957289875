// Internal interface between the host-side argument checks (device_reduce.cpp, built by the C++
// compiler) and the kernels (elementwise.cu, built by nvcc). Not a public header. CUDA-only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/dtype.h"

namespace strait::kernels::detail {

enum class ElementwiseOp { Sum, SumScale, Scale };

inline constexpr unsigned kElementwiseThreads = 256;

// Enqueues `op` over count elements of dtype (F32, F64, F16 or BF16; checked by the caller) with
// at most max_blocks blocks, and returns the launch's error. `in` is ignored for Scale. Pointers
// are element-aligned and non-null; count > 0.
cudaError_t launch_elementwise(DType dtype, ElementwiseOp op, void* inout, const void* in,
                               std::size_t count, double factor, unsigned max_blocks,
                               cudaStream_t stream);

}  // namespace strait::kernels::detail
