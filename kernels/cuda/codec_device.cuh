// Device helpers shared by the codec kernels (quantize.cu, topk.cu): unaligned little-endian wire
// loads and stores, the status word, grid-stride indices. Internal, CUDA device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/codec_math.h"

namespace strait::kernels::detail {

inline constexpr unsigned long long kNoIndex = ~0ULL;  // kDeviceStatusOk
inline constexpr unsigned kFullMask = 0xffffffffU;

// min / max for any one integer type (CUDA's overloads differ between long and long long).
template <class T>
__device__ __forceinline__ T dmin(T a, T b) {
  return b < a ? b : a;
}
template <class T>
__device__ __forceinline__ T dmax(T a, T b) {
  return a < b ? b : a;
}

__device__ __forceinline__ std::size_t global_thread() {
  return std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ std::size_t grid_threads() {
  return std::size_t{gridDim.x} * blockDim.x;
}

// Wire buffers have no alignment guarantee: aligned addresses take one access, others go byte by
// byte (little-endian, as the host).
__device__ __forceinline__ void store_wire_u16(std::byte* p, std::uint16_t v) {
  if ((reinterpret_cast<std::uintptr_t>(p) & 1U) == 0) {
    *reinterpret_cast<std::uint16_t*>(p) = v;
  } else {
    p[0] = static_cast<std::byte>(v & 0xffU);
    p[1] = static_cast<std::byte>(v >> 8);
  }
}

__device__ __forceinline__ std::uint16_t load_wire_u16(const std::byte* p) {
  if ((reinterpret_cast<std::uintptr_t>(p) & 1U) == 0) {
    return *reinterpret_cast<const std::uint16_t*>(p);
  }
  return static_cast<std::uint16_t>(static_cast<unsigned>(p[0]) |
                                    (static_cast<unsigned>(p[1]) << 8));
}

__device__ __forceinline__ void store_wire_u32(std::byte* p, std::uint32_t v) {
  if ((reinterpret_cast<std::uintptr_t>(p) & 3U) == 0) {
    *reinterpret_cast<std::uint32_t*>(p) = v;
  } else {
    for (int j = 0; j < 4; ++j) p[j] = static_cast<std::byte>((v >> (8 * j)) & 0xffU);
  }
}

__device__ __forceinline__ std::uint32_t load_wire_u32(const std::byte* p) {
  if ((reinterpret_cast<std::uintptr_t>(p) & 3U) == 0) {
    return *reinterpret_cast<const std::uint32_t*>(p);
  }
  std::uint32_t v = 0;
  for (int j = 0; j < 4; ++j) v |= static_cast<std::uint32_t>(p[j]) << (8 * j);
  return v;
}

__device__ __forceinline__ void store_wire_f32(std::byte* p, float v) {
  store_wire_u32(p, __float_as_uint(v));
}

__device__ __forceinline__ float load_wire_f32(const std::byte* p) {
  return __uint_as_float(load_wire_u32(p));
}

// Records a bad index: the status ends as the smallest one reported (the first, in CPU terms).
__device__ __forceinline__ void report_index(std::uint64_t* status, unsigned long long index) {
  atomicMin(reinterpret_cast<unsigned long long*>(status), index);
}

// out[i] = v, or out[i] + v rounded once (the CPU's decode-add).
__device__ __forceinline__ void put(float* out, std::size_t i, float v, bool add) {
  out[i] = add ? __fadd_rn(out[i], v) : v;
}

}  // namespace strait::kernels::detail
