// Host side of kernels/cuda/quantize.h for builds with CUDA: the CPU kernels' argument checks (the
// same size functions, so the formats cannot drift apart), pointer checks, grid size, errors.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/codec_launch.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/quantize.h"
#include "kernels/quantize_impl.h"
#include "kernels/topk.h"

namespace strait::kernels {
namespace {

// 8 blocks of 256 threads fill an SM (2048 resident threads on Ampere and Hopper).
constexpr unsigned kBlocksPerSm = 8;

[[noreturn]] void invalid(std::string_view what, const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, fmt::format("kernels::{}: {}", what, message));
}

void check_size(std::string_view what, std::string_view buffer, std::size_t got, std::size_t want) {
  if (got != want) {
    invalid(what, fmt::format("{} holds {} bytes, the format needs {}", buffer, got, want));
  }
}

template <class T>
void check_pointer(std::string_view what, std::string_view name, std::span<T> s) {
  if (!s.empty() && s.data() == nullptr) {
    invalid(what, fmt::format("{} is null with {} elements: pass a device buffer", name, s.size()));
  }
}

void check_floats(std::string_view what, std::string_view name, const float* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(float) != 0) {
    invalid(what, fmt::format("{} ({}) is not 4-byte aligned", name, static_cast<const void*>(p)));
  }
}

void check_status(std::string_view what, const std::uint64_t* status) {
  if (status == nullptr) invalid(what, "status is null: pass one device-accessible u64");
}

// The encoders' common checks: the input floats, the output bytes and status.
void check_encode(std::string_view what, std::span<const float> in, std::span<std::byte> out,
                  const std::uint64_t* status) {
  check_pointer(what, "in", in);
  check_pointer(what, "out", out);
  check_floats(what, "in", in.data());
  check_status(what, status);
}

void check_decode(std::string_view what, std::span<const std::byte> in, std::span<float> out) {
  check_pointer(what, "in", in);
  check_pointer(what, "out", out);
  check_floats(what, "out", out.data());
}

unsigned max_blocks(std::string_view what) {
  int device = 0;
  cuda_check(cudaGetDevice(&device), fmt::format("kernels::{}: cudaGetDevice", what));
  int sms = 0;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             fmt::format("kernels::{}: cudaDeviceGetAttribute(multiProcessorCount) of device {}",
                         what, device));
  return static_cast<unsigned>(sms > 0 ? sms : 1) * kBlocksPerSm;
}

void launched(std::string_view what, std::size_t count, cudaError_t err) {
  cuda_check(err, fmt::format("kernels::{}: launch over {} elements", what, count));
}

// A size-0 encode still answers: every element (none) was finite.
void status_ok(std::string_view what, std::uint64_t* status, CudaStream stream) {
  cuda_check(detail::launch_status_ok(status, stream),
             fmt::format("kernels::{}: cudaMemsetAsync of status", what));
}

void encode_half(std::string_view what, detail::HalfFormat format, std::span<const float> in,
                 std::span<std::byte> out, std::uint64_t* status, CudaStream stream) {
  check_size(what, "out", out.size(), 2 * in.size());
  check_encode(what, in, out, status);
  if (in.empty()) return status_ok(what, status, stream);
  launched(what, in.size(),
           detail::launch_encode_half(format, in.data(), in.size(), out.data(), status,
                                      max_blocks(what), stream));
}

void decode_half(std::string_view what, detail::HalfFormat format, std::span<const std::byte> in,
                 std::span<float> out, Accumulate acc, CudaStream stream) {
  check_size(what, "in", in.size(), 2 * out.size());
  check_decode(what, in, out);
  if (out.empty()) return;
  launched(what, out.size(),
           detail::launch_decode_half(format, in.data(), out.size(), out.data(),
                                      acc == Accumulate::Yes, max_blocks(what), stream));
}

}  // namespace

std::optional<std::size_t> read_device_status(const std::uint64_t* status, CudaStream stream) {
  check_status("read_device_status", status);
  std::uint64_t value = kDeviceStatusOk;
  cuda_check(cudaMemcpyAsync(&value, status, sizeof value, cudaMemcpyDefault, stream),
             "kernels::read_device_status: cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "kernels::read_device_status: cudaStreamSynchronize");
  if (value == kDeviceStatusOk) return std::nullopt;
  return static_cast<std::size_t>(value);
}

void device_encode_bf16(std::span<const float> in, std::span<std::byte> out, std::uint64_t* status,
                        CudaStream stream) {
  encode_half("device_encode_bf16", detail::HalfFormat::Bf16, in, out, status, stream);
}

void device_decode_bf16(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                        CudaStream stream) {
  decode_half("device_decode_bf16", detail::HalfFormat::Bf16, in, out, acc, stream);
}

void device_encode_f16(std::span<const float> in, std::span<std::byte> out, std::uint64_t* status,
                       CudaStream stream) {
  encode_half("device_encode_f16", detail::HalfFormat::F16, in, out, status, stream);
}

void device_decode_f16(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                       CudaStream stream) {
  decode_half("device_decode_f16", detail::HalfFormat::F16, in, out, acc, stream);
}

void device_absmax_encode(const AbsmaxFormat& format, std::span<const float> in,
                          std::span<std::byte> out, Rounding rounding, std::uint64_t seed,
                          std::uint64_t* status, CudaStream stream) {
  constexpr std::string_view kWhat = "device_absmax_encode";
  check_size(kWhat, "out", out.size(), absmax_encoded_bytes(format, in.size()));  // checks format
  check_encode(kWhat, in, out, status);
  if (in.empty()) return status_ok(kWhat, status, stream);
  const detail::StochasticKey key = detail::stochastic_key(seed);
  launched(kWhat, in.size(),
           detail::launch_absmax_encode(format.bits, format.block, in.data(), in.size(), out.data(),
                                        rounding == Rounding::Stochastic, key.k0, key.k1, status,
                                        max_blocks(kWhat), stream));
}

void device_absmax_decode(const AbsmaxFormat& format, std::span<const std::byte> in,
                          std::span<float> out, Accumulate acc, CudaStream stream) {
  constexpr std::string_view kWhat = "device_absmax_decode";
  check_size(kWhat, "in", in.size(), absmax_encoded_bytes(format, out.size()));
  check_decode(kWhat, in, out);
  if (out.empty()) return;
  launched(
      kWhat, out.size(),
      detail::launch_absmax_decode(format.bits, format.block, in.data(), out.size(), out.data(),
                                   acc == Accumulate::Yes, max_blocks(kWhat), stream));
}

void device_sign_encode(std::size_t block, std::span<const float> in, std::span<std::byte> out,
                        std::uint64_t* status, CudaStream stream) {
  constexpr std::string_view kWhat = "device_sign_encode";
  check_size(kWhat, "out", out.size(), sign_encoded_bytes(block, in.size()));  // checks block
  check_encode(kWhat, in, out, status);
  if (in.empty()) return status_ok(kWhat, status, stream);
  launched(kWhat, in.size(),
           detail::launch_sign_encode(block, in.data(), in.size(), out.data(), status,
                                      max_blocks(kWhat), stream));
}

void device_sign_decode(std::size_t block, std::span<const std::byte> in, std::span<float> out,
                        Accumulate acc, CudaStream stream) {
  constexpr std::string_view kWhat = "device_sign_decode";
  check_size(kWhat, "in", in.size(), sign_encoded_bytes(block, out.size()));
  check_decode(kWhat, in, out);
  if (out.empty()) return;
  launched(kWhat, out.size(),
           detail::launch_sign_decode(block, in.data(), out.size(), out.data(),
                                      acc == Accumulate::Yes, max_blocks(kWhat), stream));
}

void device_topk_encode(std::span<const float> in, std::size_t k, std::span<std::byte> out,
                        std::uint64_t* status, CudaStream stream) {
  constexpr std::string_view kWhat = "device_topk_encode";
  const std::size_t n = in.size();
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    invalid(kWhat, fmt::format("{} elements; indices are u32, so split the tensor", n));
  }
  if (k > n) invalid(kWhat, fmt::format("k = {} > count = {}", k, n));
  check_size(kWhat, "out", out.size(), k * kTopkPairBytes);
  check_encode(kWhat, in, out, status);
  if (n == 0) return status_ok(kWhat, status, stream);
  if (k == 0) {
    // Nothing to select, but NaN / Inf is still reported, as on the CPU.
    launched(kWhat, n,
             detail::launch_find_non_finite(in.data(), n, status, max_blocks(kWhat), stream));
    return;
  }
  launched(
      kWhat, n,
      detail::launch_topk_encode(in.data(), n, k, out.data(), status, max_blocks(kWhat), stream));
}

void device_topk_decode(std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                        std::uint64_t* status, CudaStream stream) {
  constexpr std::string_view kWhat = "device_topk_decode";
  if (in.size() % kTopkPairBytes != 0) {
    invalid(kWhat, fmt::format("{} bytes is not a whole number of 8-byte pairs", in.size()));
  }
  check_decode(kWhat, in, out);
  check_status(kWhat, status);
  launched(kWhat, out.size(),
           detail::launch_topk_decode(in.data(), in.size() / kTopkPairBytes, out.data(), out.size(),
                                      acc == Accumulate::Yes, status, max_blocks(kWhat), stream));
}

}  // namespace strait::kernels
