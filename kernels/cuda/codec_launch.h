// Internal interface between the host side of kernels/cuda/quantize.h (device_codec.cpp: argument
// checks, grid size, errors) and the codec kernels (quantize.cu, topk.cu, built by nvcc). Not a
// public header. CUDA-only.
//
// Every launcher enqueues its kernels on `stream` with at most max_blocks blocks and returns the
// first CUDA error. Arguments are checked by the caller: sizes match the wire layout, pointers are
// non-null when their size is non-zero, f32 pointers are 4-aligned, count > 0 unless noted.
// Encoders and topk_decode set *status (kDeviceStatusOk first, then the atomic minimum of the bad
// indices found).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace strait::kernels::detail {

inline constexpr unsigned kCodecThreads = 256;

enum class HalfFormat : std::uint8_t { Bf16, F16 };

cudaError_t launch_status_ok(std::uint64_t* status, cudaStream_t stream);

// Only the status: the first NaN / Inf of in[0, count).
cudaError_t launch_find_non_finite(const float* in, std::size_t count, std::uint64_t* status,
                                   unsigned max_blocks, cudaStream_t stream);

cudaError_t launch_encode_half(HalfFormat format, const float* in, std::size_t count,
                               std::byte* out, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream);
cudaError_t launch_decode_half(HalfFormat format, const std::byte* in, std::size_t count,
                               float* out, bool add, unsigned max_blocks, cudaStream_t stream);

// bits 8 or 4; block > 0 (even for 4). key: detail::stochastic_key(seed), used when stochastic.
cudaError_t launch_absmax_encode(int bits, std::size_t block, const float* in, std::size_t count,
                                 std::byte* out, bool stochastic, std::uint32_t key0,
                                 std::uint32_t key1, std::uint64_t* status, unsigned max_blocks,
                                 cudaStream_t stream);
cudaError_t launch_absmax_decode(int bits, std::size_t block, const std::byte* in,
                                 std::size_t count, float* out, bool add, unsigned max_blocks,
                                 cudaStream_t stream);

// block a positive multiple of 8.
cudaError_t launch_sign_encode(std::size_t block, const float* in, std::size_t count,
                               std::byte* out, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream);
cudaError_t launch_sign_decode(std::size_t block, const std::byte* in, std::size_t count,
                               float* out, bool add, unsigned max_blocks, cudaStream_t stream);

// 0 < k <= count < 2^32. Allocates its scratch with cudaMallocAsync on the stream.
cudaError_t launch_topk_encode(const float* in, std::size_t count, std::size_t k, std::byte* out,
                               std::uint64_t* status, unsigned max_blocks, cudaStream_t stream);
// k pairs (k may be 0), dense count (may be 0).
cudaError_t launch_topk_decode(const std::byte* in, std::size_t k, float* out, std::size_t count,
                               bool add, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream);

}  // namespace strait::kernels::detail
