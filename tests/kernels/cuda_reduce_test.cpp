#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/device_reduce.h"
#include "kernels/dtype.h"
#include "kernels/dtype_limits.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu.h"

#if STRAIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/common/cuda_test_stream.h"
#endif

namespace strait::kernels {

void PrintTo(DType dtype, std::ostream* os) {
  *os << dtype_name(dtype);
}

namespace {

using strait::test::expect_error;

// Runs everywhere without a device: a no-CUDA build, or a CUDA build on a machine without a GPU.
TEST(DeviceReduceNoDevice, OperationsReportUnavailable) {
  std::string why;
  if (cuda_device_available(&why)) {
    GTEST_SKIP() << "a CUDA device is present: the DeviceReduce tests cover this machine";
  }
  EXPECT_FALSE(why.empty());
#if !STRAIT_HAVE_CUDA
  EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
#endif
  // Never dereferenced: without a device the calls fail before any launch.
  std::vector<float> a(4, 1.0F), b(4, 2.0F);
  expect_error(ErrorCode::Unavailable, [&] { device_sum(DType::F32, a.data(), b.data(), 4, {}); });
  expect_error(ErrorCode::Unavailable,
               [&] { device_avg(DType::F32, a.data(), b.data(), 4, 0.5, {}); });
  expect_error(ErrorCode::Unavailable, [&] { device_scale(DType::F32, a.data(), 4, 0.5, {}); });
  EXPECT_EQ(a[0], 1.0F);
}

#if STRAIT_HAVE_CUDA

// Argument checks happen before any CUDA call, so these run without a device too.
TEST(DeviceReduceArgs, RejectsBadArgumentsBeforeTouchingTheDevice) {
  alignas(16) std::uint8_t raw[64] = {};
  void* p = raw;
  void* q = raw + 32;
  expect_error(ErrorCode::InvalidArgument, [&] { device_sum(DType::I32, p, q, 4, {}); });
  expect_error(ErrorCode::InvalidArgument, [&] { device_scale(DType::U8, p, 4, 2.0, {}); });
  expect_error(ErrorCode::InvalidArgument, [&] { device_sum(DType::F32, p, nullptr, 4, {}); });
  expect_error(ErrorCode::InvalidArgument, [&] { device_avg(DType::F32, nullptr, q, 4, 1.0, {}); });
  expect_error(ErrorCode::InvalidArgument, [&] { device_sum(DType::F32, raw + 2, q, 4, {}); });
  expect_error(ErrorCode::InvalidArgument, [&] { device_sum(DType::F16, p, raw + 1, 4, {}); });
  // Partial overlap: [0, 32) and [16, 48) bytes.
  expect_error(ErrorCode::InvalidArgument, [&] { device_sum(DType::F32, p, raw + 16, 8, {}); });
  // count 0 is a no-op and checks nothing.
  EXPECT_NO_THROW(device_sum(DType::I32, nullptr, nullptr, 0, {}));
}

enum class Op { Sum, Avg, Scale };

const char* op_name(Op op) {
  switch (op) {
    case Op::Sum: return "sum";
    case Op::Avg: return "avg";
    case Op::Scale: return "scale";
  }
  return "?";
}

// Readable parameter names in test listings (gtest prints unknown types as bytes).
void PrintTo(Op op, std::ostream* os) {
  *os << op_name(op);
}

constexpr double kFactor = 1.0 / 3.0;  // not a power of two: the scaling rounds

// Host values of one dtype, stored as raw bytes the device gets verbatim.
class HostArray {
 public:
  HostArray(DType dtype, std::size_t n) : dtype_(dtype), bytes_(n * dtype_size(dtype)) {}

  [[nodiscard]] std::size_t size() const { return bytes_.size() / dtype_size(dtype_); }
  [[nodiscard]] std::span<const std::uint8_t> bytes() const { return bytes_; }
  [[nodiscard]] std::span<std::uint8_t> bytes() { return bytes_; }

  [[nodiscard]] double at(std::size_t i) const {
    const std::uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::F32: return load<float>(p);
      case DType::F64: return load<double>(p);
      case DType::F16: return f16_to_f32(load<std::uint16_t>(p));
      case DType::BF16: return bf16_to_f32(load<std::uint16_t>(p));
      default: return std::numeric_limits<double>::quiet_NaN();
    }
  }

  // Stores x rounded to the dtype (to nearest even).
  void set(std::size_t i, double x) {
    std::uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    const auto f = static_cast<float>(x);
    switch (dtype_) {
      case DType::F32: store(p, f); break;
      case DType::F64: store(p, x); break;
      case DType::F16: store(p, f32_to_f16(f)); break;
      case DType::BF16: store(p, f32_to_bf16(f)); break;
      default: break;
    }
  }

 private:
  template <class T>
  static T load(const std::uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  template <class T>
  static void store(std::uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }

  DType dtype_;
  std::vector<std::uint8_t> bytes_;
};

HostArray random_array(DType dtype, std::size_t n, std::uint32_t seed) {
  HostArray a(dtype, n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (std::size_t i = 0; i < n; ++i) a.set(i, dist(rng));
  return a;
}

// A rounding to the dtype contributes at most half its epsilon (relative) for normal results and
// half its smallest subnormal (absolute) below; the f32 steps before it (sum, factor, product)
// add a few f32 half-ulps. Anything looser would hide a truncation or a double rounding.
double rel_tol(DType dtype) {
  constexpr double kF32Steps = 4.0 * unit_roundoff(DType::F32);
  if (dtype == DType::F64) return 4.0 * unit_roundoff(DType::F64);
  return dtype == DType::F32 ? kF32Steps : unit_roundoff(dtype) + kF32Steps;
}

// Half the smallest subnormal (f64's has no half).
double abs_tol(DType dtype) {
  return dtype == DType::F64 ? smallest_subnormal(dtype) : smallest_subnormal(dtype) / 2;
}

using Stream = strait::test::TestStream;

// Offsets (in elements) of inout and in from 256-byte-aligned allocations: equal offsets take the
// vector path with a peeled head, unequal ones the elementwise path.
struct Offsets {
  std::size_t a;
  std::size_t b;
};

class DeviceReduce : public ::testing::TestWithParam<std::tuple<DType, Op>> {
 protected:
  void SetUp() override { STRAIT_SKIP_WITHOUT_CUDA_DEVICE(); }
};

TEST_P(DeviceReduce, MatchesDoubleReference) {
  const auto [dtype, op] = GetParam();
  const std::size_t esz = dtype_size(dtype);
  Stream stream;
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000003}}) {
    for (const Offsets off : {Offsets{0, 0}, Offsets{1, 1}, Offsets{0, 3}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << op_name(op) << " n=" << n
                                        << " offsets " << off.a << "," << off.b);
      const HostArray a = random_array(dtype, n, static_cast<std::uint32_t>(n + 11));
      const HostArray b = random_array(dtype, n, static_cast<std::uint32_t>(n + 12));
      DeviceBuffer da((n + off.a) * esz);
      DeviceBuffer db((n + off.b) * esz);
      da.upload(a.bytes(), off.a * esz);
      db.upload(b.bytes(), off.b * esz);
      void* pa = static_cast<std::uint8_t*>(da.data()) + off.a * esz;
      const void* pb = static_cast<const std::uint8_t*>(db.data()) + off.b * esz;
      switch (op) {
        case Op::Sum: device_sum(dtype, pa, pb, n, stream.get()); break;
        case Op::Avg: device_avg(dtype, pa, pb, n, kFactor, stream.get()); break;
        case Op::Scale: device_scale(dtype, pa, n, kFactor, stream.get()); break;
      }
      stream.sync();
      HostArray got(dtype, n);
      da.download(got.bytes(), off.a * esz);

      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double x = a.at(i);
        const double y = b.at(i);
        const double ref = op == Op::Sum ? x + y : op == Op::Avg ? (x + y) * kFactor : x * kFactor;
        const double err = std::fabs(got.at(i) - ref);
        if (!(err <= rel_tol(dtype) * std::fabs(ref) + abs_tol(dtype)) && bad++ < 5) {
          ADD_FAILURE() << "element " << i << ": got " << got.at(i) << ", reference " << ref
                        << " (inputs " << x << ", " << y << ")";
        }
      }
      EXPECT_EQ(bad, 0U);
    }
  }
}

TEST_P(DeviceReduce, InPlaceWithItself) {
  const auto [dtype, op] = GetParam();
  const std::size_t n = 4099;
  const HostArray a = random_array(dtype, n, 5);
  DeviceBuffer da(n * dtype_size(dtype));
  da.upload(a.bytes());
  Stream stream;
  switch (op) {
    case Op::Sum: device_sum(dtype, da.data(), da.data(), n, stream.get()); break;
    case Op::Avg: device_avg(dtype, da.data(), da.data(), n, kFactor, stream.get()); break;
    case Op::Scale: device_scale(dtype, da.data(), n, kFactor, stream.get()); break;
  }
  stream.sync();
  HostArray got(dtype, n);
  da.download(got.bytes());
  for (std::size_t i = 0; i < n; ++i) {
    const double x = a.at(i);
    const double ref = op == Op::Sum ? 2 * x : op == Op::Avg ? 2 * x * kFactor : x * kFactor;
    ASSERT_LE(std::fabs(got.at(i) - ref), rel_tol(dtype) * std::fabs(ref) + abs_tol(dtype))
        << "element " << i << " of " << dtype_name(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceReduce,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F64, DType::F16,
                                                              DType::BF16),
                                            ::testing::Values(Op::Sum, Op::Avg, Op::Scale)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, Op>>& p) {
                           return std::string(dtype_name(std::get<0>(p.param))) + "_" +
                                  op_name(std::get<1>(p.param));
                         });

// Closed forms at the edges of f16: overflow of the rounded f32 sum to infinity, and infinities
// and NaNs passing through.
TEST(DeviceReduceSpecial, HalfOverflowInfinityAndNan) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {65504.0F, -65504.0F, inf, nan, 1.0F, 65504.0F};
  const std::vector<float> y = {65504.0F, -65504.0F, 1.0F, 1.0F, -inf, -65504.0F};
  std::vector<std::uint16_t> hx, hy;
  for (std::size_t i = 0; i < x.size(); ++i) {
    hx.push_back(f32_to_f16(x[i]));
    hy.push_back(f32_to_f16(y[i]));
  }
  DeviceBuffer dx(hx.size() * 2);
  DeviceBuffer dy(hy.size() * 2);
  dx.upload(std::span<const std::uint16_t>(hx));
  dy.upload(std::span<const std::uint16_t>(hy));
  device_sum(DType::F16, dx.data(), dy.data(), hx.size(), nullptr);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<std::uint16_t> out(hx.size());
  dx.download(std::span<std::uint16_t>(out));
  EXPECT_EQ(f16_to_f32(out[0]), inf);
  EXPECT_EQ(f16_to_f32(out[1]), -inf);
  EXPECT_EQ(f16_to_f32(out[2]), inf);
  EXPECT_TRUE(std::isnan(f16_to_f32(out[3])));
  EXPECT_EQ(f16_to_f32(out[4]), -inf);
  EXPECT_EQ(f16_to_f32(out[5]), 0.0F);
}

#endif  // STRAIT_HAVE_CUDA

}  // namespace
}  // namespace strait::kernels
