// Elementwise reductions of device buffers (CUDA), the GPU counterpart of kernels/reduce.h.
//
// device_sum(dtype, inout, in, count, stream):         inout[i] = inout[i] + in[i]
// device_avg(dtype, inout, in, count, factor, stream): inout[i] = (inout[i] + in[i]) * factor
// device_scale(dtype, inout, count, factor, stream):   inout[i] = inout[i] * factor
// for i < count, with count in elements. dtype is F32, F64, F16 or BF16; f16/bf16 are widened to
// f32 (f64 stays f64), combined, and rounded to nearest even once on the way back, as NCCL does.
// device_avg is Sum + scale fused: the last step of an average over n ranks passes factor = 1/n
// and rounds once, where kernels::reduce + kernels::scale round twice.
//
// Memory: inout and in are device-accessible pointers (cudaMalloc, managed, or mapped pinned host
// memory) aligned to the element size; inout == in is allowed, any other overlap is not. Loads and
// stores are 16-byte vectors when both pointers share their offset modulo 16 (the unaligned head
// and tail are done elementwise); other pointer pairs take an elementwise path.
// Execution: asynchronous on `stream` (nullptr = legacy default stream) of the calling thread's
// current device; the caller synchronises before reading the result. count == 0 does nothing and
// makes no CUDA call. Launch: a grid-stride loop, 256 threads a block, at most 8 blocks an SM.
// Thread-safety: pure launches over caller-owned memory; safe from several threads.
// Errors: InvalidArgument (dtype, null pointer with count > 0, misaligned or partially overlapping
// buffers, bad stream); Unavailable when strait was built without CUDA (then for every call, count
// 0 included), or there is no driver or device; Internal for any other CUDA failure at launch.
// Faults during the kernel (a host pointer, say) surface at the caller's next synchronisation, as
// CUDA reports them.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/cuda_stream.h"
#include "kernels/dtype.h"

namespace strait::kernels {

// True when the CUDA runtime finds a driver and at least one device. Otherwise false, and *why
// (when non-null) says what is missing: the build has no CUDA, no driver, or no device, with the
// runtime's own error text. Never throws.
bool cuda_device_available(std::string* why = nullptr);

void device_sum(DType dtype, void* inout, const void* in, std::size_t count, CudaStream stream);

void device_avg(DType dtype, void* inout, const void* in, std::size_t count, double factor,
                CudaStream stream);

void device_scale(DType dtype, void* inout, std::size_t count, double factor, CudaStream stream);

}  // namespace strait::kernels
