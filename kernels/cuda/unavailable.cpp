// kernels/device_reduce.h and kernels/device_memory.h for builds without CUDA (STRAIT_WITH_CUDA=OFF
// or no nvcc found): there is no device to run on, so the query says why, the operations report
// Unavailable, and every pointer is host memory.
#include <fmt/format.h>

#include <optional>
#include <string_view>

#include "core/error.h"
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

}  // namespace strait::kernels
