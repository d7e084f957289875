// STRAIT_HOST_DEVICE: marks an inline function that both the C++ compiler and nvcc build, for the
// arithmetic the CPU and CUDA paths must share to give the same bits (kernels/codec_math.h).
// `__host__ __device__` under nvcc, empty elsewhere. Thread-safety: a macro.
#pragma once

#if defined(__CUDACC__)
#define STRAIT_HOST_DEVICE __host__ __device__
#else
#define STRAIT_HOST_DEVICE
#endif
