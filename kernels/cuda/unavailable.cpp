// kernels/device_reduce.h, kernels/device_memory.h and kernels/cuda/quantize.h for builds without
// CUDA (STRAIT_WITH_CUDA=OFF or no nvcc found): there is no device to run on, so the query says
// why, the operations report Unavailable, and every pointer is host memory.
#include <fmt/format.h>

#include <optional>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/quantize.h"
#include "kernels/device_memory.h"
#include "kernels/device_reduce.h"

namespace strait::kernels {
namespace {

constexpr std::string_view kReason =
    "strait was built without CUDA: install the CUDA toolkit (nvcc) and reconfigure with "
    "-DSTRAIT_WITH_CUDA=ON";

[[noreturn]] void unavailable(std::string_view what) {
  throw Error(ErrorCode::Unavailable, fmt::format("{}: {}", what, kReason));
}

}  // namespace

std::optional<int> pointer_device(const void* /*p*/) noexcept {
  return std::nullopt;
}

HostRegistration host_register(void* /*p*/, std::size_t /*bytes*/, std::string* /*why*/) noexcept {
  return HostRegistration::NoDevice;
}

void host_unregister(void* /*p*/) noexcept {}

bool cuda_device_available(std::string* why) {
  if (why != nullptr) *why = kReason;
  return false;
}

void device_sum(DType /*dtype*/, void* /*inout*/, const void* /*in*/, std::size_t /*count*/,
                CudaStream /*stream*/) {
  unavailable("kernels::device_sum");
}

void device_avg(DType /*dtype*/, void* /*inout*/, const void* /*in*/, std::size_t /*count*/,
                double /*factor*/, CudaStream /*stream*/) {
  unavailable("kernels::device_avg");
}

void device_scale(DType /*dtype*/, void* /*inout*/, std::size_t /*count*/, double /*factor*/,
                  CudaStream /*stream*/) {
  unavailable("kernels::device_scale");
}

std::optional<std::size_t> read_device_status(const std::uint64_t* /*status*/,
                                              CudaStream /*stream*/) {
  unavailable("kernels::read_device_status");
}

void device_encode_bf16(std::span<const float> /*in*/, std::span<std::byte> /*out*/,
                        std::uint64_t* /*status*/, CudaStream /*stream*/) {
  unavailable("kernels::device_encode_bf16");
}

void device_decode_bf16(std::span<const std::byte> /*in*/, std::span<float> /*out*/,
                        Accumulate /*acc*/, CudaStream /*stream*/) {
  unavailable("kernels::device_decode_bf16");
}

void device_encode_f16(std::span<const float> /*in*/, std::span<std::byte> /*out*/,
                       std::uint64_t* /*status*/, CudaStream /*stream*/) {
  unavailable("kernels::device_encode_f16");
}

void device_decode_f16(std::span<const std::byte> /*in*/, std::span<float> /*out*/,
                       Accumulate /*acc*/, CudaStream /*stream*/) {
  unavailable("kernels::device_decode_f16");
}

void device_absmax_encode(const AbsmaxFormat& /*format*/, std::span<const float> /*in*/,
                          std::span<std::byte> /*out*/, Rounding /*rounding*/,
                          std::uint64_t /*seed*/, std::uint64_t* /*status*/,
                          CudaStream /*stream*/) {
  unavailable("kernels::device_absmax_encode");
}

void device_absmax_decode(const AbsmaxFormat& /*format*/, std::span<const std::byte> /*in*/,
                          std::span<float> /*out*/, Accumulate /*acc*/, CudaStream /*stream*/) {
  unavailable("kernels::device_absmax_decode");
}

void device_sign_encode(std::size_t /*block*/, std::span<const float> /*in*/,
                        std::span<std::byte> /*out*/, std::uint64_t* /*status*/,
                        CudaStream /*stream*/) {
  unavailable("kernels::device_sign_encode");
}

void device_sign_decode(std::size_t /*block*/, std::span<const std::byte> /*in*/,
                        std::span<float> /*out*/, Accumulate /*acc*/, CudaStream /*stream*/) {
  unavailable("kernels::device_sign_decode");
}

void device_topk_encode(std::span<const float> /*in*/, std::size_t /*k*/,
                        std::span<std::byte> /*out*/, std::uint64_t* /*status*/,
                        CudaStream /*stream*/) {
  unavailable("kernels::device_topk_encode");
}

void device_topk_decode(std::span<const std::byte> /*in*/, std::span<float> /*out*/,
                        Accumulate /*acc*/, std::uint64_t* /*status*/, CudaStream /*stream*/) {
  unavailable("kernels::device_topk_decode");
}

}  // namespace strait::kernels
