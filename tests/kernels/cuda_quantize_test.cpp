// GPU codec kernels (kernels/cuda/quantize.h) against the CPU kernels (kernels/quantize.h,
// kernels/topk.h): the same input must give the same bytes, the same first NaN/Inf index, and the
// same decoded floats bit for bit. The GPU cases skip without a device (or fail under
// STRAIT_REQUIRE_GPU=1); the argument checks and the no-device errors run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/quantize.h"
#include "kernels/quantize.h"
#include "kernels/topk.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu.h"

#if STRAIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/common/cuda_test_stream.h"
#endif

namespace strait::kernels {
namespace {

using strait::test::expect_error;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs everywhere without a device: a no-CUDA build, or a CUDA build on a machine without a GPU.
// Host buffers are never dereferenced: the calls fail before any launch.
TEST(DeviceCodecNoDevice, OperationsReportUnavailable) {
  std::string why;
  if (cuda_device_available(&why)) {
    GTEST_SKIP() << "a CUDA device is present: the DeviceCodec tests cover this machine";
  }
  std::vector<float> x(64, 1.0F);
  std::vector<std::byte> wire(1024);
  std::uint64_t status = 0;
  const AbsmaxFormat int8{8, 32};
  expect_error(ErrorCode::Unavailable,
               [&] { device_encode_bf16(x, std::span(wire).first(128), &status, nullptr); });
  expect_error(ErrorCode::Unavailable,
               [&] { device_decode_f16(std::span(wire).first(128), x, Accumulate::No, nullptr); });
  expect_error(ErrorCode::Unavailable, [&] {
    device_absmax_encode(int8, x, std::span(wire).first(absmax_encoded_bytes(int8, 64)),
                         Rounding::Nearest, 0, &status, nullptr);
  });
  expect_error(ErrorCode::Unavailable, [&] {
    device_sign_encode(32, x, std::span(wire).first(sign_encoded_bytes(32, 64)), &status, nullptr);
  });
  expect_error(ErrorCode::Unavailable, [&] {
    device_topk_encode(x, 4, std::span(wire).first(4 * kTopkPairBytes), &status, nullptr);
  });
  expect_error(ErrorCode::Unavailable, [&] {
    device_topk_decode(std::span(wire).first(0), x, Accumulate::No, &status, nullptr);
  });
  EXPECT_EQ(x[0], 1.0F);
}

#if STRAIT_HAVE_CUDA

// The CPU's argument checks, made before any CUDA call, so these run without a device too.
TEST(DeviceCodecArgs, RejectsWhatTheCpuRejects) {
  alignas(16) std::array<float, 64> x{};
  std::vector<std::byte> wire(1024);
  std::uint64_t status = 0;
  const std::span<const float> in(x);
  const std::span<std::byte> w(wire);
  expect_error(ErrorCode::InvalidArgument,
               [&] { device_encode_bf16(in, w.first(127), &status, nullptr); });
  expect_error(ErrorCode::InvalidArgument,
               [&] { device_encode_f16(in, w.first(128), nullptr, nullptr); });  // no status
  expect_error(ErrorCode::InvalidArgument,
               [&] { device_decode_bf16(w.first(130), std::span(x), Accumulate::No, nullptr); });
  expect_error(ErrorCode::InvalidArgument, [&] {  // odd int4 block
    device_absmax_encode({4, 33}, in, w.first(200), Rounding::Nearest, 0, &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {  // wrong size
    device_absmax_encode({8, 32}, in, w.first(71), Rounding::Nearest, 0, &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {  // misaligned floats
    const auto* odd =
        reinterpret_cast<const float*>(reinterpret_cast<const std::byte*>(x.data()) + 2);
    device_absmax_encode({8, 32}, std::span(odd, 8), w.first(absmax_encoded_bytes({8, 32}, 8)),
                         Rounding::Nearest, 0, &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {  // sign block not a multiple of 8
    device_sign_encode(12, in, w.first(20), &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {
    device_sign_decode(32, w.first(15), std::span(x), Accumulate::Yes, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {  // k > count
    device_topk_encode(in, 65, w.first(65 * kTopkPairBytes), &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument,
               [&] { device_topk_encode(in, 4, w.first(31), &status, nullptr); });
  expect_error(ErrorCode::InvalidArgument, [&] {
    device_topk_decode(w.first(12), std::span(x), Accumulate::No, &status, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {  // null data with a size
    device_encode_bf16(std::span<const float>(static_cast<const float*>(nullptr), 4), w.first(8),
                       &status, nullptr);
  });
}

using Stream = strait::test::TestStream;

// Device copies of host data at a byte offset from a 256-byte-aligned allocation (offset 1 or 3
// exercises the unaligned wire stores and loads).
template <class T>
class Device {
 public:
  explicit Device(std::span<const T> host, std::size_t offset = 0)
      : buf_(host.size_bytes() + offset + 1), offset_(offset), size_(host.size()) {
    buf_.upload(host, offset_);
  }
  explicit Device(std::size_t n, std::size_t offset = 0)
      : buf_(n * sizeof(T) + offset + 1), offset_(offset), size_(n) {}

  [[nodiscard]] std::span<T> span() {
    return {reinterpret_cast<T*>(static_cast<std::byte*>(buf_.data()) + offset_), size_};
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(size_);
    buf_.download(std::span<T>(out), offset_);
    return out;
  }

 private:
  DeviceBuffer buf_;
  std::size_t offset_;
  std::size_t size_;
};

// First differing byte, or -1.
std::ptrdiff_t first_difference(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

template <class T>
std::span<const std::byte> as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// Gradient-like values with the cases every codec must agree on: per-block magnitudes spread over
// 2^-30..2^10, an all-zero block, a block below kAbsmaxFloor, a block near FLT_MAX (absmax's
// overflow guard and the 1-bit double fallback), zeros of both signs, subnormals and exact ties.
std::vector<float> codec_input(std::size_t n, std::size_t block, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_int_distribution<int> exponent(-30, 10);
  std::vector<float> v(n);
  int e = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = i / block;
    if (i % block == 0) e = exponent(rng);
    float x = std::ldexp(normal(rng), e);
    if (b == 1) x = 0.0F;
    if (b == 2) x = std::ldexp(normal(rng), -110);
    if (b == 3) x = std::numeric_limits<float>::max() * (i % 2 == 0 ? 0.99F : -1.0F);
    if (i % 97 == 5) x = 0.0F;
    if (i % 89 == 7) x = -0.0F;
    if (i % 101 == 3) x = std::numeric_limits<float>::denorm_min() * 37.0F;
    if (i % 53 == 11) x = 0.25F;  // ties for top-k and rounding
    v[i] = x;
  }
  return v;
}

// The sizes the brief names: empty, one, around a block, odd, and over a million.
std::vector<std::size_t> sizes_for(std::size_t block) {
  return {0, 1, block - 1, block, block + 1, 7 * block + 5, 10007, (std::size_t{1} << 20) + 3};
}

using CpuEncode =
    std::function<std::optional<std::size_t>(std::span<const float>, std::span<std::byte>)>;
using GpuEncode =
    std::function<void(std::span<const float>, std::span<std::byte>, std::uint64_t*, cudaStream_t)>;
using CpuDecode = std::function<void(std::span<const std::byte>, std::span<float>, Accumulate)>;
using GpuDecode =
    std::function<void(std::span<const std::byte>, std::span<float>, Accumulate, cudaStream_t)>;

class DeviceCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
    stream_.emplace();  // only with a device: creating it initialises CUDA
  }

  [[nodiscard]] const Stream& stream() const { return *stream_; }

  // Encodes x on both sides; expects the same first-bad index and, when all are finite, the same
  // bytes (written at wire_offset from an aligned address). Returns the CPU's bytes.
  std::vector<std::byte> expect_same_encoding(std::span<const float> x, std::size_t wire_bytes,
                                              const CpuEncode& cpu, const GpuEncode& gpu,
                                              std::size_t wire_offset = 0) {
    std::vector<std::byte> want(wire_bytes);
    const std::optional<std::size_t> want_bad = cpu(x, want);
    Device<float> din(x);
    Device<std::byte> dout(wire_bytes, wire_offset);
    Device<std::uint64_t> status(1);
    gpu(din.span(), dout.span(), status.span().data(), stream().get());
    const std::optional<std::size_t> got_bad =
        read_device_status(status.span().data(), stream().get());
    EXPECT_EQ(got_bad, want_bad);
    if (!want_bad) {
      const std::vector<std::byte> got = dout.download();
      const std::ptrdiff_t at = first_difference(got, want);
      EXPECT_EQ(at, -1) << "first differing byte of " << wire_bytes << " (GPU "
                        << (at >= 0 ? static_cast<int>(got[at]) : 0) << ", CPU "
                        << (at >= 0 ? static_cast<int>(want[at]) : 0) << ")";
    }
    return want;
  }

  // Decodes the same bytes on both sides, overwriting and adding into the same prior values.
  void expect_same_decoding(std::span<const std::byte> wire, std::size_t n, const CpuDecode& cpu,
                            const GpuDecode& gpu, std::size_t wire_offset = 0) {
    Device<std::byte> din(wire, wire_offset);
    for (const Accumulate acc : {Accumulate::No, Accumulate::Yes}) {
      SCOPED_TRACE(acc == Accumulate::Yes ? "decode-add" : "decode");
      std::vector<float> want = prior(n);
      Device<float> dout{std::span<const float>(want)};
      cpu(wire, want, acc);
      gpu(din.span(), dout.span(), acc, stream().get());
      stream().sync();
      const std::vector<float> got = dout.download();
      const std::ptrdiff_t at = first_difference(as_bytes_of(got), as_bytes_of(want));
      EXPECT_EQ(at, -1) << "element " << at / 4 << " of " << n << ": GPU "
                        << (at >= 0 ? got[at / 4] : 0.0F) << ", CPU "
                        << (at >= 0 ? want[at / 4] : 0.0F);
    }
  }

  static std::vector<float> prior(std::size_t n) {
    std::vector<float> v(n);
    std::mt19937 rng(static_cast<std::uint32_t>(n));
    std::uniform_real_distribution<float> dist(-3.0F, 3.0F);
    for (float& x : v) x = dist(rng);
    return v;
  }

  // Non-finite inputs: each pattern's first NaN/Inf index must be the CPU's.
  void expect_same_non_finite(std::size_t n, std::size_t block, std::size_t wire_bytes,
                              const CpuEncode& cpu, const GpuEncode& gpu) {
    std::vector<float> x = codec_input(n, block, 99);
    const std::vector<std::vector<std::size_t>> patterns = {
        {n - 1}, {0}, {n / 2, n / 2 + 1}, {n / 3, 2 * n / 3}, {n - 1, n / 5}};
    for (const auto& where : patterns) {
      std::vector<float> y = x;
      for (std::size_t j = 0; j < where.size(); ++j) y[where[j]] = j % 2 == 0 ? kNan : -kInf;
      SCOPED_TRACE(::testing::Message() << "NaN/Inf at " << where[0]);
      static_cast<void>(expect_same_encoding(y, wire_bytes, cpu, gpu));
    }
  }

  std::optional<Stream> stream_;
};

TEST_F(DeviceCodec, CastsMatchTheCpu) {
  for (const bool bf16 : {true, false}) {
    const CpuEncode cpu = [&](std::span<const float> x, std::span<std::byte> out) {
      return bf16 ? encode_bf16(x, out) : encode_f16(x, out);
    };
    const GpuEncode gpu = [&](std::span<const float> x, std::span<std::byte> out, std::uint64_t* st,
                              cudaStream_t s) {
      bf16 ? device_encode_bf16(x, out, st, s) : device_encode_f16(x, out, st, s);
    };
    const CpuDecode cpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                  Accumulate acc) {
      bf16 ? decode_bf16(in, out, acc) : decode_f16(in, out, acc);
    };
    const GpuDecode gpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                  Accumulate acc, cudaStream_t s) {
      bf16 ? device_decode_bf16(in, out, acc, s) : device_decode_f16(in, out, acc, s);
    };
    for (const std::size_t n : sizes_for(256)) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        SCOPED_TRACE(::testing::Message()
                     << (bf16 ? "bf16" : "f16") << " n=" << n << " wire offset " << offset);
        const std::vector<float> x = codec_input(n, 256, static_cast<std::uint32_t>(n));
        const auto wire = expect_same_encoding(x, 2 * n, cpu, gpu, offset);
        expect_same_decoding(wire, n, cpu_dec, gpu_dec, offset);
      }
    }
    expect_same_non_finite(4099, 256, 2 * 4099, cpu, gpu);
  }
}

// Every 16-bit pattern decodes to the CPU's bits, Inf included; NaN patterns decode to NaN (the
// payload may differ: the CPU's F16C path quiets signaling NaNs, its scalar path does not).
TEST_F(DeviceCodec, DecodesEveryHalfPattern) {
  std::vector<std::uint16_t> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  const auto wire = std::as_bytes(std::span<const std::uint16_t>(all));
  Device<std::byte> din(wire);
  for (const bool bf16 : {true, false}) {
    for (const Accumulate acc : {Accumulate::No, Accumulate::Yes}) {
      SCOPED_TRACE(::testing::Message() << (bf16 ? "bf16" : "f16")
                                        << (acc == Accumulate::Yes ? " decode-add" : " decode"));
      std::vector<float> want = prior(all.size());
      Device<float> dout{std::span<const float>(want)};
      bf16 ? decode_bf16(wire, want, acc) : decode_f16(wire, want, acc);
      bf16 ? device_decode_bf16(din.span(), dout.span(), acc, stream().get())
           : device_decode_f16(din.span(), dout.span(), acc, stream().get());
      stream().sync();
      const std::vector<float> got = dout.download();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < all.size(); ++i) {
        const bool same =
            std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]) ||
            (std::isnan(got[i]) && std::isnan(want[i]));
        if (!same && bad++ < 5) {
          ADD_FAILURE() << "pattern " << i << ": GPU " << got[i] << ", CPU " << want[i];
        }
      }
      EXPECT_EQ(bad, 0U);
    }
  }
}

TEST_F(DeviceCodec, AbsmaxMatchesTheCpu) {
  const std::vector<AbsmaxFormat> formats = {{8, 256}, {8, 100}, {8, 1}, {4, 64}, {4, 30}, {4, 2}};
  for (const AbsmaxFormat& f : formats) {
    for (const Rounding r : {Rounding::Nearest, Rounding::Stochastic}) {
      const std::uint64_t seed = 0x5eed0000ULL + f.block;
      const CpuEncode cpu = [&](std::span<const float> x, std::span<std::byte> out) {
        return absmax_encode(f, x, out, r, seed);
      };
      const GpuEncode gpu = [&](std::span<const float> x, std::span<std::byte> out,
                                std::uint64_t* st, cudaStream_t s) {
        device_absmax_encode(f, x, out, r, seed, st, s);
      };
      const CpuDecode cpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                    Accumulate acc) { absmax_decode(f, in, out, acc); };
      const GpuDecode gpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                    Accumulate acc,
                                    cudaStream_t s) { device_absmax_decode(f, in, out, acc, s); };
      for (const std::size_t n : sizes_for(f.block)) {
        const std::size_t offset = n % 3;  // 0, 1 or 2: aligned and unaligned scales
        SCOPED_TRACE(::testing::Message()
                     << "int" << f.bits << " block " << f.block
                     << (r == Rounding::Stochastic ? " stochastic" : " nearest") << " n=" << n);
        const std::vector<float> x = codec_input(n, f.block, static_cast<std::uint32_t>(n + 1));
        const auto wire = expect_same_encoding(x, absmax_encoded_bytes(f, n), cpu, gpu, offset);
        expect_same_decoding(wire, n, cpu_dec, gpu_dec, offset);
      }
      expect_same_non_finite(4099, f.block, absmax_encoded_bytes(f, 4099), cpu, gpu);
    }
  }
}

TEST_F(DeviceCodec, StochasticSeedsChangeTheBytesAsOnTheCpu) {
  const AbsmaxFormat f{8, 256};
  const std::vector<float> x = codec_input(5000, 256, 3);
  for (const std::uint64_t seed : {0ULL, 1ULL, 0xffffffffffffffffULL}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    static_cast<void>(expect_same_encoding(
        x, absmax_encoded_bytes(f, x.size()),
        [&](std::span<const float> in, std::span<std::byte> out) {
          return absmax_encode(f, in, out, Rounding::Stochastic, seed);
        },
        [&](std::span<const float> in, std::span<std::byte> out, std::uint64_t* st,
            cudaStream_t s) {
          device_absmax_encode(f, in, out, Rounding::Stochastic, seed, st, s);
        }));
  }
}

TEST_F(DeviceCodec, SignMatchesTheCpu) {
  for (const std::size_t block :
       {std::size_t{256}, std::size_t{8}, std::size_t{24}, std::size_t{4096}}) {
    const CpuEncode cpu = [&](std::span<const float> x, std::span<std::byte> out) {
      return sign_encode(block, x, out);
    };
    const GpuEncode gpu = [&](std::span<const float> x, std::span<std::byte> out, std::uint64_t* st,
                              cudaStream_t s) { device_sign_encode(block, x, out, st, s); };
    const CpuDecode cpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                  Accumulate acc) { sign_decode(block, in, out, acc); };
    const GpuDecode gpu_dec = [&](std::span<const std::byte> in, std::span<float> out,
                                  Accumulate acc,
                                  cudaStream_t s) { device_sign_decode(block, in, out, acc, s); };
    for (const std::size_t n : sizes_for(block)) {
      const std::size_t offset = n % 3;
      SCOPED_TRACE(::testing::Message() << "block " << block << " n=" << n);
      const std::vector<float> x = codec_input(n, block, static_cast<std::uint32_t>(n + 2));
      const auto wire = expect_same_encoding(x, sign_encoded_bytes(block, n), cpu, gpu, offset);
      expect_same_decoding(wire, n, cpu_dec, gpu_dec, offset);
    }
    expect_same_non_finite(4099, block, sign_encoded_bytes(block, 4099), cpu, gpu);
  }
}

// Magnitudes from a handful of values, so most of the top k are ties broken by index.
std::vector<float> tied_input(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(-6, 6);
  std::vector<float> v(n);
  for (float& x : v) {
    const int l = level(rng);
    x = l == 0 ? (rng() % 2 == 0 ? 0.0F : -0.0F) : 0.5F * static_cast<float>(l);
  }
  return v;
}

TEST_F(DeviceCodec, TopkMatchesTheCpu) {
  const CpuDecode cpu_dec = [](std::span<const std::byte> in, std::span<float> out,
                               Accumulate acc) { topk_decode(in, out, acc); };
  Device<std::uint64_t> status(1);
  const GpuDecode gpu_dec = [&](std::span<const std::byte> in, std::span<float> out, Accumulate acc,
                                cudaStream_t s) {
    device_topk_decode(in, out, acc, status.span().data(), s);
  };
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{4095},
                              std::size_t{4097}, std::size_t{100003}, (std::size_t{1} << 20) + 3}) {
    for (const bool tied : {false, true}) {
      std::vector<std::size_t> ks = {0, n, topk_count(0.01, std::max<std::size_t>(n, 1)),
                                     topk_count(0.3, std::max<std::size_t>(n, 1)), 1};
      for (std::size_t k : ks) {
        k = std::min(k, n);
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << (tied ? " tied" : ""));
        const std::vector<float> x =
            tied ? tied_input(n, static_cast<std::uint32_t>(n)) : codec_input(n, 256, 5);
        const auto wire = expect_same_encoding(
            x, k * kTopkPairBytes,
            [&](std::span<const float> in, std::span<std::byte> out) {
              return topk_encode(in, k, out);
            },
            [&](std::span<const float> in, std::span<std::byte> out, std::uint64_t* st,
                cudaStream_t s) { device_topk_encode(in, k, out, st, s); },
            n % 3);
        expect_same_decoding(wire, n, cpu_dec, gpu_dec, n % 2);
        EXPECT_EQ(read_device_status(status.span().data(), stream().get()), std::nullopt);
      }
    }
  }
  // All zeros: the lowest indices, with their signs.
  std::vector<float> zeros(1000, 0.0F);
  zeros[3] = -0.0F;
  static_cast<void>(expect_same_encoding(
      zeros, 7 * kTopkPairBytes,
      [&](std::span<const float> in, std::span<std::byte> out) { return topk_encode(in, 7, out); },
      [&](std::span<const float> in, std::span<std::byte> out, std::uint64_t* st, cudaStream_t s) {
        device_topk_encode(in, 7, out, st, s);
      }));
  for (const std::size_t k : {std::size_t{0}, std::size_t{10}}) {
    SCOPED_TRACE(::testing::Message() << "non-finite, k=" << k);
    expect_same_non_finite(
        4099, 256, k * kTopkPairBytes,
        [&](std::span<const float> in, std::span<std::byte> out) {
          return topk_encode(in, k, out);
        },
        [&](std::span<const float> in, std::span<std::byte> out, std::uint64_t* st,
            cudaStream_t s) { device_topk_encode(in, k, out, st, s); });
  }
}

// Pairs from a peer are checked: the first bad pair is reported and nothing is written (the CPU
// throws InvalidArgument for the same bytes).
TEST_F(DeviceCodec, TopkDecodeReportsTheFirstBadPair) {
  struct Pair {
    std::uint32_t index;
    float value;
  };
  const std::size_t n = 100;
  const std::vector<std::vector<Pair>> cases = {
      {{1, 1.0F}, {5, 2.0F}, {100, 3.0F}},            // out of range: pair 2
      {{1, 1.0F}, {5, 2.0F}, {5, 3.0F}, {7, 1.0F}},   // repeated: pair 2
      {{9, 1.0F}, {3, 2.0F}, {200, 3.0F}},            // decreasing: pair 1
      {{0, 1.0F}, {1, 2.0F}, {99, 3.0F}, {4, 1.0F}},  // decreasing: pair 3
  };
  const std::vector<std::size_t> first_bad = {2, 2, 1, 3};
  Device<std::uint64_t> status(1);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    std::vector<std::byte> wire(cases[c].size() * kTopkPairBytes);
    std::memcpy(wire.data(), cases[c].data(), wire.size());
    const std::vector<float> before = prior(n);
    std::vector<float> cpu_out = before;
    expect_error(ErrorCode::InvalidArgument, [&] { topk_decode(wire, cpu_out, Accumulate::Yes); });
    for (const Accumulate acc : {Accumulate::No, Accumulate::Yes}) {
      Device<std::byte> din{std::span<const std::byte>(wire)};
      Device<float> dout{std::span<const float>(before)};
      device_topk_decode(din.span(), dout.span(), acc, status.span().data(), stream().get());
      EXPECT_EQ(read_device_status(status.span().data(), stream().get()), first_bad[c]);
      EXPECT_EQ(dout.download(), before) << "case " << c << ": out must stay untouched";
    }
  }
}

#endif  // STRAIT_HAVE_CUDA

}  // namespace
}  // namespace strait::kernels
