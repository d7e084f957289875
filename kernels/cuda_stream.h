/// \file
/// CudaStream: a CUDA stream handle that plain C++ headers can name without including CUDA.
///
/// cudaStream_t is `struct CUstream_st*`; forward-declaring the struct gives the identical type, so
/// CUDA code passes its cudaStream_t unchanged (no casts) and callers without CUDA can still name
/// it. nullptr is the legacy default stream, as in the CUDA runtime.
#pragma once

struct CUstream_st;

namespace strait::kernels {

/// A cudaStream_t without CUDA's headers; nullptr is the legacy default stream.
using CudaStream = CUstream_st*;

}  // namespace strait::kernels
