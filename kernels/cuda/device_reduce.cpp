// Host side of kernels/device_reduce.h for builds with CUDA: argument checks, grid sizing, errors.
#include "kernels/device_reduce.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/elementwise.h"

namespace strait::kernels {
namespace {

// 8 blocks of 256 threads fill an SM (2048 resident threads on Ampere and Hopper).
constexpr unsigned kBlocksPerSm = 8;

void check_buffer(std::string_view what, DType dtype, const void* p, std::string_view name) {
  if (p == nullptr) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} is null with count > 0: pass a device buffer", what, name));
  }
  if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(dtype) != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} ({}) is not aligned to its {}-byte {} elements", what, name, p,
                            dtype_size(dtype), dtype_name(dtype)));
  }
}

// dtype, count and inout: what every operation needs.
void check_args(std::string_view what, DType dtype, const void* inout, std::size_t count) {
  if (dtype != DType::F32 && dtype != DType::F64 && dtype != DType::F16 && dtype != DType::BF16) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: dtype {} is not supported on the device: use f32, f64, f16 or bf16", what,
                    dtype_name(dtype)));
  }
  if (count > std::numeric_limits<std::size_t>::max() / dtype_size(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: count {} overflows the address space", what, count));
  }
  check_buffer(what, dtype, inout, "inout");
}

// The second operand: aligned, and either inout itself or disjoint from it.
void check_in(std::string_view what, DType dtype, const void* inout, const void* in,
              std::size_t count) {
  check_buffer(what, dtype, in, "in");
  const auto a = reinterpret_cast<std::uintptr_t>(inout);
  const auto b = reinterpret_cast<std::uintptr_t>(in);
  const std::size_t bytes = count * dtype_size(dtype);
  if (a != b && a < b + bytes && b < a + bytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: inout ({}) and in ({}) overlap partially over {} bytes each: "
                            "use the same pointer for in-place, or disjoint buffers",
                            what, inout, in, bytes));
  }
}

unsigned max_blocks(std::string_view what) {
  int device = 0;
  cuda_check(cudaGetDevice(&device), fmt::format("{}: cudaGetDevice", what));
  int sms = 0;
  cuda_check(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
      fmt::format("{}: cudaDeviceGetAttribute(multiProcessorCount) of device {}", what, device));
  return static_cast<unsigned>(sms > 0 ? sms : 1) * kBlocksPerSm;
}

void run(std::string_view what, DType dtype, detail::ElementwiseOp op, void* inout, const void* in,
         std::size_t count, double factor, CudaStream stream) {
  const unsigned blocks = max_blocks(what);
  cuda_check(detail::launch_elementwise(dtype, op, inout, in, count, factor, blocks, stream),
             fmt::format("{}: launch over {} {} elements", what, count, dtype_name(dtype)));
}

}  // namespace

bool cuda_device_available(std::string* why) {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    static_cast<void>(cudaGetLastError());
    if (why != nullptr) {
      *why =
          "no NVIDIA driver found (libcuda.so.1 could not be loaded): install the driver or "
          "run on a machine with a GPU";
    }
    return false;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (why != nullptr) {
      *why = fmt::format("cudaGetDeviceCount failed with driver {}.{}: {} ({})", driver / 1000,
                         driver % 1000 / 10, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "the driver reports no CUDA device: check CUDA_VISIBLE_DEVICES";
    return false;
  }
  if (why != nullptr) why->clear();
  return true;
}

void device_sum(DType dtype, void* inout, const void* in, std::size_t count, CudaStream stream) {
  constexpr std::string_view kWhat = "kernels::device_sum";
  if (count == 0) return;
  check_args(kWhat, dtype, inout, count);
  check_in(kWhat, dtype, inout, in, count);
  run(kWhat, dtype, detail::ElementwiseOp::Sum, inout, in, count, 1.0, stream);
}

void device_avg(DType dtype, void* inout, const void* in, std::size_t count, double factor,
                CudaStream stream) {
  constexpr std::string_view kWhat = "kernels::device_avg";
  if (count == 0) return;
  check_args(kWhat, dtype, inout, count);
  check_in(kWhat, dtype, inout, in, count);
  run(kWhat, dtype, detail::ElementwiseOp::SumScale, inout, in, count, factor, stream);
}

void device_scale(DType dtype, void* inout, std::size_t count, double factor, CudaStream stream) {
  constexpr std::string_view kWhat = "kernels::device_scale";
  if (count == 0) return;
  check_args(kWhat, dtype, inout, count);
  run(kWhat, dtype, detail::ElementwiseOp::Scale, inout, nullptr, count, factor, stream);
}

}  // namespace strait::kernels
