// Top-k kernels of kernels/cuda/quantize.h. Encode: the k-th largest magnitude T (as |bits|,
// ordered like |x| for finite x) by a 4-pass radix select over 8-bit digits, most significant
// first, which also counts the elements strictly above T; then every element above T is kept and
// the first (k - above) equal to T by index, emitted in index order at
//   position = (elements above T before it) + min(elements equal to T before it, k - above),
// from per-tile counts, a CUB scan of the tiles and a block scan inside each tile. That is the
// CPU's selection and order (kernels/topk.cpp), without its sample: the result never depended on
// it. Decode: validate every pair first, write only when all are valid.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <memory>

#include "kernels/cuda/codec_device.cuh"
#include "kernels/cuda/codec_launch.h"

namespace strait::kernels::detail {
namespace {

constexpr int kItemsPerThread = 16;
constexpr std::size_t kTile = std::size_t{kCodecThreads} * kItemsPerThread;
constexpr int kRadixBins = 256;
constexpr int kRadixPasses = 4;
// A tile's count: elements above T in the high 32 bits, equal to T in the low. Sums never carry
// between the halves because count < 2^32.
constexpr unsigned long long kAboveOne = 1ULL << 32;

struct SelectState {
  unsigned int hist[kRadixBins];
  std::uint32_t prefix;     // the digits of T chosen so far (all of T after the last pass)
  std::uint32_t remaining;  // how many of the elements matching prefix are still to be taken
  std::uint32_t above;      // elements known to be strictly above T
};

__device__ __forceinline__ std::uint32_t digit_shift(int pass) {
  return 24U - 8U * static_cast<std::uint32_t>(pass);
}

// Histogram of this pass's digit over the elements whose higher digits equal the prefix; pass 0
// also finds the first NaN / Inf.
__global__ void __launch_bounds__(kCodecThreads)
    radix_hist_kernel(const float* __restrict__ in, std::size_t n, int pass, SelectState* state,
                      std::uint64_t* status) {
  __shared__ unsigned int hist[kRadixBins];
  for (int d = static_cast<int>(threadIdx.x); d < kRadixBins; d += kCodecThreads) hist[d] = 0;
  __syncthreads();
  const std::uint32_t shift = digit_shift(pass);
  const std::uint32_t mask = pass == 0 ? 0U : ~0U << (shift + 8U);
  const std::uint32_t prefix = state->prefix;
  unsigned long long first_bad = kNoIndex;
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) {
    const std::uint32_t mag = abs_bits(in[i]);
    if (pass == 0 && mag >= kInfBits && first_bad == kNoIndex) first_bad = i;
    if ((mag & mask) == prefix) atomicAdd(&hist[(mag >> shift) & 0xffU], 1U);
  }
  if (first_bad != kNoIndex) report_index(status, first_bad);
  __syncthreads();
  for (int d = static_cast<int>(threadIdx.x); d < kRadixBins; d += kCodecThreads) {
    if (hist[d] != 0) atomicAdd(&state->hist[d], hist[d]);
  }
}

// One block: walks the digits from the top until the k-th largest is inside one, fixes that digit
// and clears the histogram for the next pass.
__global__ void __launch_bounds__(kCodecThreads)
    radix_pick_kernel(int pass, std::uint32_t k, SelectState* state) {
  if (threadIdx.x == 0) {
    std::uint32_t remaining = pass == 0 ? k : state->remaining;
    std::uint32_t above = pass == 0 ? 0U : state->above;
    std::uint32_t digit = 0;
    for (int d = kRadixBins - 1; d >= 0; --d) {
      const std::uint32_t c = state->hist[d];
      if (c >= remaining) {
        digit = static_cast<std::uint32_t>(d);
        break;
      }
      remaining -= c;
      above += c;
    }
    state->prefix |= digit << digit_shift(pass);
    state->remaining = remaining;
    state->above = above;
  }
  __syncthreads();
  for (int d = static_cast<int>(threadIdx.x); d < kRadixBins; d += kCodecThreads) {
    state->hist[d] = 0;
  }
}

__device__ __forceinline__ unsigned long long classify(std::uint32_t mag, std::uint32_t threshold) {
  return mag > threshold ? kAboveOne : (mag == threshold ? 1ULL : 0ULL);
}

__global__ void __launch_bounds__(kCodecThreads)
    topk_count_kernel(const float* __restrict__ in, std::size_t n, const SelectState* state,
                      unsigned long long* tile_counts) {
  using Reduce = cub::BlockReduce<unsigned long long, kCodecThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const std::uint32_t threshold = state->prefix;
  const std::size_t base = blockIdx.x * kTile;
  const std::size_t end = dmin(base + kTile, n);
  unsigned long long c = 0;
  for (std::size_t i = base + threadIdx.x; i < end; i += kCodecThreads) {
    c += classify(abs_bits(in[i]), threshold);
  }
  c = Reduce(temp).Sum(c);
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = c;
}

__global__ void __launch_bounds__(kCodecThreads)
    topk_emit_kernel(const float* __restrict__ in, std::size_t n, const SelectState* state,
                     const unsigned long long* tile_offsets, std::byte* __restrict__ out) {
  using Load = cub::BlockLoad<float, kCodecThreads, kItemsPerThread, cub::BLOCK_LOAD_TRANSPOSE>;
  using Scan = cub::BlockScan<unsigned long long, kCodecThreads>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
  } temp;
  const std::uint32_t threshold = state->prefix;
  const std::uint32_t quota = state->remaining;  // elements equal to T to keep
  const std::size_t base = blockIdx.x * kTile;
  const auto valid = static_cast<int>(dmin(kTile, n - base));
  float x[kItemsPerThread];
  Load(temp.load).Load(in + base, x, valid, 0.0F);
  __syncthreads();  // the scan reuses the load's shared memory
  // Items of this thread: base + first .. base + first + 15, in index order.
  const std::size_t first = std::size_t{threadIdx.x} * kItemsPerThread;
  unsigned long long mine = 0;
#pragma unroll
  for (int j = 0; j < kItemsPerThread; ++j) {
    if (first + j < static_cast<std::size_t>(valid)) mine += classify(abs_bits(x[j]), threshold);
  }
  unsigned long long before = 0;
  Scan(temp.scan).ExclusiveSum(mine, before);
  before += tile_offsets[blockIdx.x];
#pragma unroll
  for (int j = 0; j < kItemsPerThread; ++j) {
    if (first + j >= static_cast<std::size_t>(valid)) break;
    const std::uint32_t mag = abs_bits(x[j]);
    const auto above_before = static_cast<std::uint32_t>(before >> 32);
    const auto equal_before = static_cast<std::uint32_t>(before);
    bool keep = false;
    std::size_t pos = 0;
    if (mag > threshold) {
      keep = true;
      pos = std::size_t{above_before} + dmin(equal_before, quota);
    } else if (mag == threshold && equal_before < quota) {
      keep = true;
      pos = std::size_t{above_before} + equal_before;
    }
    if (keep) {
      std::byte* p = out + pos * 8;
      store_wire_u32(p, static_cast<std::uint32_t>(base + first + j));
      store_wire_u32(p + 4, __float_as_uint(x[j]));
    }
    before += classify(mag, threshold);
  }
}

__global__ void __launch_bounds__(kCodecThreads)
    topk_validate_kernel(const std::byte* __restrict__ in, std::size_t k, std::size_t n,
                         std::uint64_t* status) {
  unsigned long long first_bad = kNoIndex;
  for (std::size_t j = global_thread(); j < k; j += grid_threads()) {
    const std::uint32_t index = load_wire_u32(in + 8 * j);
    const bool bad = index >= n || (j > 0 && index <= load_wire_u32(in + 8 * (j - 1)));
    if (bad && first_bad == kNoIndex) first_bad = j;
  }
  if (first_bad != kNoIndex) report_index(status, first_bad);
}

__global__ void __launch_bounds__(kCodecThreads)
    topk_zero_kernel(float* __restrict__ out, std::size_t n, const std::uint64_t* status) {
  if (*status != kNoIndex) return;
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) out[i] = 0.0F;
}

__global__ void __launch_bounds__(kCodecThreads)
    topk_scatter_kernel(const std::byte* __restrict__ in, std::size_t k, float* __restrict__ out,
                        bool add, const std::uint64_t* status) {
  if (*status != kNoIndex) return;
  for (std::size_t j = global_thread(); j < k; j += grid_threads()) {
    const std::uint32_t index = load_wire_u32(in + 8 * j);
    put(out, index, load_wire_f32(in + 8 * j + 4), add);
  }
}

unsigned grid_for(std::size_t items, unsigned max_blocks) {
  return static_cast<unsigned>(
      std::clamp<std::size_t>((items + kCodecThreads - 1) / kCodecThreads, 1, max_blocks));
}

// Stream-ordered scratch: freed on the stream after the kernels that use it.
struct FreeAsync {
  cudaStream_t stream;
  void operator()(void* p) const noexcept { static_cast<void>(cudaFreeAsync(p, stream)); }
};

constexpr std::size_t round_up(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

cudaError_t launch_topk_encode(const float* in, std::size_t count, std::size_t k, std::byte* out,
                               std::uint64_t* status, unsigned max_blocks, cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  const std::size_t tiles = (count + kTile - 1) / kTile;
  std::size_t scan_bytes = 0;
  cudaError_t err = cub::DeviceScan::ExclusiveSum(
      nullptr, scan_bytes, static_cast<const unsigned long long*>(nullptr),
      static_cast<unsigned long long*>(nullptr), static_cast<std::int64_t>(tiles), stream);
  if (err != cudaSuccess) return err;
  const std::size_t state_bytes = round_up(sizeof(SelectState));
  const std::size_t tile_bytes = round_up(tiles * sizeof(unsigned long long));
  void* raw = nullptr;
  err = cudaMallocAsync(&raw, state_bytes + 2 * tile_bytes + scan_bytes, stream);
  if (err != cudaSuccess) return err;
  const std::unique_ptr<void, FreeAsync> scratch(raw, FreeAsync{stream});
  auto* bytes = static_cast<std::byte*>(raw);
  auto* state = reinterpret_cast<SelectState*>(bytes);
  auto* tile_counts = reinterpret_cast<unsigned long long*>(bytes + state_bytes);
  auto* tile_offsets = reinterpret_cast<unsigned long long*>(bytes + state_bytes + tile_bytes);
  void* scan_temp = bytes + state_bytes + 2 * tile_bytes;

  err = cudaMemsetAsync(state, 0, sizeof(SelectState), stream);
  if (err != cudaSuccess) return err;
  const unsigned grid = grid_for(count, max_blocks);
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    radix_hist_kernel<<<grid, kCodecThreads, 0, stream>>>(in, count, pass, state, status);
    radix_pick_kernel<<<1, kCodecThreads, 0, stream>>>(pass, static_cast<std::uint32_t>(k), state);
  }
  topk_count_kernel<<<static_cast<unsigned>(tiles), kCodecThreads, 0, stream>>>(in, count, state,
                                                                                tile_counts);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = cub::DeviceScan::ExclusiveSum(scan_temp, scan_bytes, tile_counts, tile_offsets,
                                      static_cast<std::int64_t>(tiles), stream);
  if (err != cudaSuccess) return err;
  topk_emit_kernel<<<static_cast<unsigned>(tiles), kCodecThreads, 0, stream>>>(in, count, state,
                                                                               tile_offsets, out);
  return cudaGetLastError();
}

cudaError_t launch_topk_decode(const std::byte* in, std::size_t k, float* out, std::size_t count,
                               bool add, std::uint64_t* status, unsigned max_blocks,
                               cudaStream_t stream) {
  if (const cudaError_t err = launch_status_ok(status, stream); err != cudaSuccess) return err;
  if (k > 0) {
    topk_validate_kernel<<<grid_for(k, max_blocks), kCodecThreads, 0, stream>>>(in, k, count,
                                                                                status);
  }
  if (!add && count > 0) {
    topk_zero_kernel<<<grid_for(count, max_blocks), kCodecThreads, 0, stream>>>(out, count, status);
  }
  if (k > 0) {
    topk_scatter_kernel<<<grid_for(k, max_blocks), kCodecThreads, 0, stream>>>(in, k, out, add,
                                                                               status);
  }
  return cudaGetLastError();
}

}  // namespace strait::kernels::detail
