// Codec kernels of kernels/cuda/quantize.h: 16-bit casts, blockwise absmax int8 / int4, 1-bit sign.
// The per-element arithmetic is the CPU's own (kernels/codec_math.h); the rest mirrors the scalar
// CPU path of kernels/quantize_impl.h operation for operation with explicit _rn intrinsics, and the
// file is built with -fmad=false, so nothing is fused or reordered behind our back.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/codec_math.h"
#include "kernels/cuda/codec_device.cuh"
#include "kernels/cuda/codec_launch.h"
#include "kernels/quantize.h"

namespace strait::kernels::detail {
namespace {

constexpr unsigned kWarpsPerBlock = kCodecThreads / 32;

unsigned grid_for(std::size_t work_items, unsigned max_blocks) {
  const std::size_t wanted = (work_items + kCodecThreads - 1) / kCodecThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(wanted, 1, max_blocks));
}

// --- casts ---------------------------------------------------------------------------------------

// cvt.rn.f16.f32 is IEEE nearest even, subnormals included: kernels::f32_to_f16 for finite input.
__device__ __forceinline__ std::uint16_t f16_clamped(float x) {
  return __half_as_ushort(__float2half_rn(fminf(fmaxf(x, -kF16Max), kF16Max)));
}

__global__ void __launch_bounds__(kCodecThreads)
    find_non_finite_kernel(const float* __restrict__ in, std::size_t n, std::uint64_t* status) {
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) {
    if (abs_bits(in[i]) >= kInfBits) {
      report_index(status, i);  // this thread's first; later ones are larger
      return;
    }
  }
}

template <HalfFormat kFormat>
__global__ void __launch_bounds__(kCodecThreads)
    encode_half_kernel(const float* __restrict__ in, std::size_t n, std::byte* __restrict__ out,
                       std::uint64_t* status) {
  unsigned long long first_bad = kNoIndex;  // this thread's first: indices only grow
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) {
    const float x = in[i];
    if (abs_bits(x) >= kInfBits && first_bad == kNoIndex) first_bad = i;
    store_wire_u16(out + 2 * i, kFormat == HalfFormat::Bf16 ? bf16_from_bits(__float_as_uint(x))
                                                            : f16_clamped(x));
  }
  if (first_bad != kNoIndex) report_index(status, first_bad);
}

// kernels::f16_to_f32: the hardware conversion for numbers (exact, subnormals included), the CPU's
// bit layout for Inf and NaN (cvt.f32.f16 would give the canonical NaN, not the payload).
__device__ __forceinline__ float f16_to_f32_exact(std::uint16_t h) {
  if ((h & 0x7c00U) == 0x7c00U) {
    return __uint_as_float(((h & 0x8000U) << 16) | 0x7f800000U | ((h & 0x3ffU) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

template <HalfFormat kFormat>
__global__ void __launch_bounds__(kCodecThreads)
    decode_half_kernel(const std::byte* __restrict__ in, std::size_t n, float* __restrict__ out,
                       bool add) {
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) {
    const std::uint16_t h = load_wire_u16(in + 2 * i);
    const float v =
        kFormat == HalfFormat::Bf16 ? __uint_as_float(std::uint32_t{h} << 16) : f16_to_f32_exact(h);
    put(out, i, v, add);
  }
}

// --- absmax --------------------------------------------------------------------------------------

// One warp per block of the format: the max of |bits| (which also finds NaN/Inf), the scale as the
// CPU driver computes it, then the elements.
template <int kBits>
__global__ void __launch_bounds__(kCodecThreads)
    absmax_encode_kernel(const float* __restrict__ in, std::size_t n, std::size_t block,
                         std::size_t nblocks, std::byte* __restrict__ out, bool stochastic,
                         std::uint32_t key0, std::uint32_t key1, std::uint64_t* status) {
  constexpr float kLimit = kBits == 8 ? 127.0F : 7.0F;
  const unsigned lane = threadIdx.x % 32;
  const std::size_t warps = grid_threads() / 32;
  std::byte* payload = out + 4 * nblocks;
  for (std::size_t b = global_thread() / 32; b < nblocks; b += warps) {
    const std::size_t start = b * block;
    const std::size_t m = dmin(block, n - start);
    const float* x = in + start;
    std::uint32_t max_bits = 0;
    for (std::size_t i = lane; i < m; i += 32) max_bits = dmax(max_bits, abs_bits(x[i]));
    max_bits = __reduce_max_sync(kFullMask, max_bits);
    if (max_bits >= kInfBits) {
      for (std::size_t i = lane; i < m; i += 32) {
        if (abs_bits(x[i]) >= kInfBits) {
          report_index(status, start + i);
          break;
        }
      }
      continue;
    }
    const AbsmaxScale s = absmax_scale(__uint_as_float(max_bits), kLimit, kAbsmaxFloor);
    if (lane == 0) store_wire_f32(out + 4 * b, s.scale);
    const StochasticKey key{key0, key1};
    const auto q = [&](std::size_t i) {
      return quantize_one(x[i], s.inv, kLimit, stochastic, key, start + i);
    };
    if constexpr (kBits == 8) {
      for (std::size_t i = lane; i < m; i += 32) payload[start + i] = int8_byte(q(i));
    } else {
      // Byte j holds elements 2j (low nibble) and 2j + 1 (high; 0 past the end).
      for (std::size_t i = 2 * lane; i < m; i += 64) {
        const auto lo = static_cast<int>(q(i));
        const int hi = i + 1 < m ? static_cast<int>(q(i + 1)) : 0;
        payload[(start + i) / 2] = nibble_pair(lo, hi);
      }
    }
  }
}

// The decoders' loop: a warp per block (its scale in the first 4 * nblocks bytes of the wire), the
// lanes striding over the block's elements; fn(e, scale) decodes element e.
template <class Fn>
__device__ __forceinline__ void for_each_scaled(const std::byte* in, std::size_t n,
                                                std::size_t block, std::size_t nblocks, Fn fn) {
  const unsigned lane = threadIdx.x % 32;
  const std::size_t warps = grid_threads() / 32;
  for (std::size_t b = global_thread() / 32; b < nblocks; b += warps) {
    const std::size_t start = b * block;
    const std::size_t m = dmin(block, n - start);
    const float scale = load_wire_f32(in + 4 * b);
    for (std::size_t i = lane; i < m; i += 32) fn(start + i, scale);
  }
}

template <int kBits>
__global__ void __launch_bounds__(kCodecThreads)
    absmax_decode_kernel(const std::byte* __restrict__ in, std::size_t n, std::size_t block,
                         std::size_t nblocks, float* __restrict__ out, bool add) {
  const std::byte* payload = in + 4 * nblocks;
  for_each_scaled(in, n, block, nblocks, [&](std::size_t e, float scale) {
    const std::byte byte = payload[kBits == 8 ? e : e / 2];
    const int q = kBits == 8 ? static_cast<std::int8_t>(byte) : nibble_code(byte, (e & 1U) != 0);
    put(out, e, __fmul_rn(static_cast<float>(q), scale), add);
  });
}

// --- sign ----------------------------------------------------------------------------------------

// Half a warp per block: lane l of the half sums |x| over elements l, l + 16, ... in order (the
// CPU's lane i % 16), the halves reduce by shuffles within 16 lanes in the CPU's pairwise order,
// and each pass's ballot packs the 16 elements' sign bits into the two bytes they own.
__global__ void __launch_bounds__(kCodecThreads)
    sign_encode_kernel(const float* __restrict__ in, std::size_t n, std::size_t block,
                       std::size_t nblocks, std::byte* __restrict__ out, std::uint64_t* status) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned l16 = lane % 16;
  const unsigned half = lane / 16;
  const std::size_t pairs = grid_threads() / 32;
  std::byte* bits = out + 4 * nblocks;
  for (std::size_t b0 = global_thread() / 32 * 2; b0 < nblocks; b0 += 2 * pairs) {
    const std::size_t b = b0 + half;
    const std::size_t start = b * block;
    const std::size_t m = b < nblocks ? dmin(block, n - start) : 0;
    const float* x = in + start;
    // Both halves run the same number of passes so the ballots see every lane.
    const std::size_t passes_own = (m + 15) / 16;
    const std::size_t passes =
        dmax<std::size_t>(passes_own, __shfl_xor_sync(kFullMask, passes_own, 16));
    float sum = 0.0F;
    std::uint32_t max_bits = 0;
    unsigned long long first_bad = kNoIndex;
    for (std::size_t p = 0; p < passes; ++p) {
      const std::size_t i = p * 16 + l16;
      const bool in_block = i < m;
      const float v = in_block ? x[i] : 0.0F;
      if (in_block) {
        sum = __fadd_rn(sum, fabsf(v));
        const std::uint32_t a = abs_bits(v);
        max_bits = dmax(max_bits, a);
        if (a >= kInfBits && first_bad == kNoIndex) first_bad = start + i;
      }
      const unsigned ballot = __ballot_sync(kFullMask, in_block && (__float_as_uint(v) >> 31) != 0);
      // Lanes 0 and 1 of a half write its 16 elements' two bytes, where they lie in the block
      // (a block is a whole number of bytes; the last byte of the data may be partial).
      if (l16 < 2 && p * 16 + 8 * l16 < m) {
        bits[(start + p * 16) / 8 + l16] =
            static_cast<std::byte>((ballot >> (16 * half + 8 * l16)) & 0xffU);
      }
    }
    for (unsigned width = 8; width >= 1; width /= 2) {
      sum = __fadd_rn(sum, __shfl_down_sync(kFullMask, sum, width, 16));
      max_bits = dmax(max_bits, __shfl_xor_sync(kFullMask, max_bits, width, 16));
      first_bad = dmin(first_bad, __shfl_xor_sync(kFullMask, first_bad, width, 16));
    }
    if (l16 != 0 || m == 0) continue;
    if (max_bits >= kInfBits) {
      report_index(status, first_bad);
      continue;
    }
    float scale = __fdiv_rn(sum, __ull2float_rn(m));
    if (abs_bits(scale) >= kInfBits) {
      // The CPU's fallback for a sum beyond fp32: double, in index order.
      double total = 0.0;
      for (std::size_t i = 0; i < m; ++i) total = __dadd_rn(total, fabs(static_cast<double>(x[i])));
      scale = __double2float_rn(__ddiv_rn(total, __ull2double_rn(m)));
    }
    store_wire_f32(out + 4 * b, scale);
  }
}

__global__ void __launch_bounds__(kCodecThreads)
    sign_decode_kernel(const std::byte* __restrict__ in, std::size_t n, std::size_t block,
                       std::size_t nblocks, float* __restrict__ out, bool add) {
  const std::byte* bits = in + 4 * nblocks;
  for_each_scaled(in, n, block, nblocks, [&](std::size_t e, float scale) {
    put(out, e, sign_value(bits, e, scale), add);
  });
}

unsigned warp_grid(std::size_t warps_needed, unsigned max_blocks) {
  return static_cast<unsigned>(
      std::clamp<std::size_t>((warps_needed + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, max_blocks));
}

}  // namespace

cudaError_t launch_status_ok(std::uint64_t* status, cudaStream_t stream) {
  return cudaMemsetAsync(status, 0xff, sizeof *status, stream);
}

cudaError_t launch_find_non_finite(const float* in, std::size_t count, std::uint64_t* status,
                                   unsigned max_blocks, cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  find_non_finite_kernel<<<grid_for(count, max_blocks), kCodecThreads, 0, stream>>>(in, count,
                                                                                    status);
  return cudaGetLastError();
}

cudaError_t launch_encode_half(HalfFormat format, const float* in, std::size_t count,
                               std::byte* out, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  const unsigned grid = grid_for(count, max_blocks);
  if (format == HalfFormat::Bf16) {
    encode_half_kernel<HalfFormat::Bf16>
        <<<grid, kCodecThreads, 0, stream>>>(in, count, out, status);
  } else {
    encode_half_kernel<HalfFormat::F16><<<grid, kCodecThreads, 0, stream>>>(in, count, out, status);
  }
  return cudaGetLastError();
}

cudaError_t launch_decode_half(HalfFormat format, const std::byte* in, std::size_t count,
                               float* out, bool add, unsigned max_blocks, cudaStream_t stream) {
  const unsigned grid = grid_for(count, max_blocks);
  if (format == HalfFormat::Bf16) {
    decode_half_kernel<HalfFormat::Bf16><<<grid, kCodecThreads, 0, stream>>>(in, count, out, add);
  } else {
    decode_half_kernel<HalfFormat::F16><<<grid, kCodecThreads, 0, stream>>>(in, count, out, add);
  }
  return cudaGetLastError();
}

cudaError_t launch_absmax_encode(int bits, std::size_t block, const float* in, std::size_t count,
                                 std::byte* out, bool stochastic, std::uint32_t key0,
                                 std::uint32_t key1, std::uint64_t* status, unsigned max_blocks,
                                 cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  const std::size_t nblocks = (count + block - 1) / block;
  const unsigned grid = warp_grid(nblocks, max_blocks);
  if (bits == 8) {
    absmax_encode_kernel<8><<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out,
                                                                stochastic, key0, key1, status);
  } else {
    absmax_encode_kernel<4><<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out,
                                                                stochastic, key0, key1, status);
  }
  return cudaGetLastError();
}

cudaError_t launch_absmax_decode(int bits, std::size_t block, const std::byte* in,
                                 std::size_t count, float* out, bool add, unsigned max_blocks,
                                 cudaStream_t stream) {
  const std::size_t nblocks = (count + block - 1) / block;
  const unsigned grid = warp_grid(nblocks, max_blocks);
  if (bits == 8) {
    absmax_decode_kernel<8>
        <<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out, add);
  } else {
    absmax_decode_kernel<4>
        <<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out, add);
  }
  return cudaGetLastError();
}

cudaError_t launch_sign_encode(std::size_t block, const float* in, std::size_t count,
                               std::byte* out, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  const std::size_t nblocks = (count + block - 1) / block;
  const unsigned grid = warp_grid((nblocks + 1) / 2, max_blocks);
  sign_encode_kernel<<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out, status);
  return cudaGetLastError();
}

cudaError_t launch_sign_decode(std::size_t block, const std::byte* in, std::size_t count,
                               float* out, bool add, unsigned max_blocks, cudaStream_t stream) {
  const std::size_t nblocks = (count + block - 1) / block;
  const unsigned grid = warp_grid(nblocks, max_blocks);
  sign_decode_kernel<<<grid, kCodecThreads, 0, stream>>>(in, count, block, nblocks, out, add);
  return cudaGetLastError();
}

}  // namespace strait::kernels::detail
