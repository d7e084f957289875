// Codec kernels on the GPU (CUDA): the device counterparts of kernels/quantize.h and
// kernels/topk.h, writing the same bytes as the CPU kernels for the same input, so ranks that mix
// CPU and GPU encoders agree bit for bit. Plain C++ header (no CUDA include): without CUDA the
// functions exist and report Unavailable.
//
// Wire layouts: exactly those of kernels/quantize.h (bf16 / f16, blockwise absmax int8 / int4,
// 1-bit sign with per-block mean |x|) and kernels/topk.h (k pairs u32 index, f32 value, increasing
// index). How bit-exactness holds: every element goes through the CPU's IEEE operations in the
// same order (__fmul_rn / __fadd_rn / __fdiv_rn, built with -fmad=false and without fast math);
// bf16 uses the CPU's integer rounding; stochastic rounding recomputes the CPU's counter-based
// stream (stochastic_uniform) per element; the 1-bit mean sums in the CPU's 16 fixed lanes
// (16 threads, each summing its lane in index order, reduced pairwise by shuffles: +8, +4, +2, +1)
// and falls back to the same double sum in index order when fp32 overflows; top-k finds the exact
// k-th largest |bits| by radix select and keeps ties lowest index first, as the CPU does.
//
// One exception to bit-identity, outside what encoders produce: a NaN met by a decoder (an f16 NaN
// pattern on the wire, or a NaN already in `out` for decode-add) stays NaN, but its payload may
// differ (the GPU adds give the canonical NaN; the CPU's SIMD levels differ among themselves too).
//
// Memory: `in` and `out` spans hold device-accessible pointers (cudaMalloc, managed, or mapped
// pinned memory); spans give sizes only and are never dereferenced on the host. Wire buffers need
// no alignment (unaligned scales and pairs are stored byte by byte); f32 buffers are 4-aligned.
// Input and output must not overlap. `status` points to one device-accessible u64.
// Execution: asynchronous on `stream` (nullptr = legacy default stream) of the calling thread's
// current device. Top-k encode takes scratch with cudaMallocAsync on the stream (the device's
// default memory pool: O(count / 4096) bytes plus CUB's scan storage). A size-0 call makes no
// kernel launch but still sets *status.
// Errors reported on the host (exceptions): the CPU's InvalidArgument checks (sizes, formats, k),
// plus InvalidArgument for null pointers with size > 0; Unavailable without CUDA, a driver or a
// device; Internal for other launch failures. Errors in the data (exceptions on the CPU) arrive in
// *status, on the stream:
//   encoders: the index of the first NaN or +-Inf element (out unspecified, never to be sent), or
//             kDeviceStatusOk when every element was finite (the CPU returns std::nullopt);
//   topk decode: the first pair whose index is out of range or not increasing (out then untouched,
//             where the CPU throws InvalidArgument after writing the pairs before it), or
//             kDeviceStatusOk.
// read_device_status() synchronises the stream and turns *status into the CPU's optional.
// Thread-safety: pure launches over caller-owned memory; safe from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kernels/cuda_stream.h"
#include "kernels/quantize.h"

namespace strait::kernels {

inline constexpr std::uint64_t kDeviceStatusOk = ~std::uint64_t{0};

// Waits for `stream`, then reads *status (device memory): nullopt for kDeviceStatusOk, else the
// index it holds.
[[nodiscard]] std::optional<std::size_t> read_device_status(const std::uint64_t* status,
                                                            CudaStream stream);

// --- 16-bit casts (kernels/quantize.h: encode_bf16 / encode_f16, clamped, nearest even) ---------
void device_encode_bf16(std::span<const float> in, std::span<std::byte> out, std::uint64_t* status,
                        CudaStream stream);
void device_decode_bf16(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                        CudaStream stream);
void device_encode_f16(std::span<const float> in, std::span<std::byte> out, std::uint64_t* status,
                       CudaStream stream);
void device_decode_f16(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                       CudaStream stream);

// --- blockwise absmax int8 / int4 (kernels/quantize.h: absmax_encode) ---------------------------
// out.size() is absmax_encoded_bytes(format, in.size()). One warp per block of `format.block`
// elements: blocks much smaller than 32 leave lanes idle, very large ones (over ~64K) with few
// blocks leave SMs idle. Stochastic rounding with `seed` gives the CPU's bytes for the same seed.
void device_absmax_encode(const AbsmaxFormat& format, std::span<const float> in,
                          std::span<std::byte> out, Rounding rounding, std::uint64_t seed,
                          std::uint64_t* status, CudaStream stream);
void device_absmax_decode(const AbsmaxFormat& format, std::span<const std::byte> in,
                          std::span<float> out, Accumulate acc, CudaStream stream);

// --- 1-bit sign with per-block mean |x| (kernels/quantize.h: sign_encode) -----------------------
// out.size() is sign_encoded_bytes(block, in.size()). Each block's sum is 16 sequential chains of
// block / 16 adds (the CPU's order), so very large blocks are latency-bound.
void device_sign_encode(std::size_t block, std::span<const float> in, std::span<std::byte> out,
                        std::uint64_t* status, CudaStream stream);
void device_sign_decode(std::size_t block, std::span<const std::byte> in, std::span<float> out,
                        Accumulate acc, CudaStream stream);

// --- top-k (kernels/topk.h: topk_encode / topk_decode) -----------------------------------------
// out.size() is k * kTopkPairBytes; k <= in.size() < 2^32. Four radix-select passes over the
// input, then one count and one emit pass: O(count) work, no sort.
void device_topk_encode(std::span<const float> in, std::size_t k, std::span<std::byte> out,
                        std::uint64_t* status, CudaStream stream);
// out.size() is the dense count; elements not in the pairs are zeroed (Accumulate::No) or kept.
void device_topk_decode(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                        std::uint64_t* status, CudaStream stream);

}  // namespace strait::kernels
