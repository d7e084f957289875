#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace strait::kernels {
namespace {

TEST(Dtype, F16RoundTripsEveryHalf) {
  // Every finite binary16 value converts to f32 and back unchanged; NaNs stay NaN.
  for (std::uint32_t h = 0; h <= 0xffffU; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(half);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
    } else {
      EXPECT_EQ(f32_to_f16(f), half) << "half bits " << h;
    }
  }
}

TEST(Dtype, F16RoundsToNearestEvenAgainstDouble) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0F, 70000.0F);
  for (int i = 0; i < 100000; ++i) {
    const float x = i % 3 == 0 ? dist(rng) * 1e-6F : dist(rng);
    const float y = f16_to_f32(f32_to_f16(x));
    if (std::fabs(x) >= 65520.0F) {
      EXPECT_TRUE(std::isinf(y)) << x;
      continue;
    }
    // y must be the closest half to x: no neighbour half is closer.
    const std::uint16_t hy = f32_to_f16(x);
    for (int d : {-1, 1}) {
      const auto nb = static_cast<std::uint16_t>(hy + d);
      const float fn = f16_to_f32(nb);
      if (std::isnan(fn) || std::isinf(fn) || ((nb ^ hy) & 0x8000U) != 0) continue;
      EXPECT_LE(std::fabs(static_cast<double>(y) - x), std::fabs(static_cast<double>(fn) - x))
          << "x=" << x;
    }
  }
}

TEST(Dtype, Bf16IsTruncatedF32RoundedToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0F), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0F);
  // 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(f32_to_bf16(1.00390625F), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(f32_to_bf16(1.01171875F), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Reduce, F32OpsMatchDoubleReference) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-2.0F, 2.0F);
  const std::size_t n = 1003;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
    std::vector<float> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = dist(rng);
      b[i] = dist(rng);
    }
    std::vector<float> out = a;
    reduce(DType::F32, op, out.data(), b.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = a[i], y = b[i];
      double ref = 0;
      switch (op) {
        case ReduceOp::Sum: ref = x + y; break;
        case ReduceOp::Prod: ref = x * y; break;
        case ReduceOp::Min: ref = std::min(x, y); break;
        case ReduceOp::Max: ref = std::max(x, y); break;
        case ReduceOp::Avg:
        case ReduceOp::Band:
        case ReduceOp::Bor:
        case ReduceOp::Bxor: break;  // not elementwise / integer-only: reduce_bitwise_test.cpp
      }
      EXPECT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-7) << reduce_op_name(op) << " i=" << i;
    }
  }
}

TEST(Reduce, HalfTypesWidenThenRound) {
  const std::vector<float> xs = {1.0F, -3.5F, 1000.25F, 0.001F};
  const std::vector<float> ys = {2.0F, 0.25F, 7.0F, 0.002F};
  for (DType t : {DType::F16, DType::BF16}) {
    const bool bf = t == DType::BF16;
    std::vector<std::uint16_t> a, b;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      a.push_back(bf ? f32_to_bf16(xs[i]) : f32_to_f16(xs[i]));
      b.push_back(bf ? f32_to_bf16(ys[i]) : f32_to_f16(ys[i]));
    }
    std::vector<std::uint16_t> out = a;
    reduce(t, ReduceOp::Sum, out.data(), b.data(), out.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float wa = bf ? bf16_to_f32(a[i]) : f16_to_f32(a[i]);
      const float wb = bf ? bf16_to_f32(b[i]) : f16_to_f32(b[i]);
      const std::uint16_t expect = bf ? f32_to_bf16(wa + wb) : f32_to_f16(wa + wb);
      EXPECT_EQ(out[i], expect) << dtype_name(t) << " i=" << i;
    }
  }
}

TEST(Reduce, IntegersAndAliasedBuffers) {
  std::vector<std::int64_t> a = {1, -5, 1LL << 40}, b = {2, 7, 3};
  reduce(DType::I64, ReduceOp::Sum, a.data(), b.data(), a.size());
  EXPECT_EQ(a, (std::vector<std::int64_t>{3, 2, (1LL << 40) + 3}));
  reduce(DType::I64, ReduceOp::Max, a.data(), a.data(), a.size());  // in == inout
  EXPECT_EQ(a, (std::vector<std::int64_t>{3, 2, (1LL << 40) + 3}));
  std::vector<std::uint8_t> u = {250, 3}, v = {10, 4};
  reduce(DType::U8, ReduceOp::Sum, u.data(), v.data(), 2);  // wraps modulo 256 like NCCL
  EXPECT_EQ(u, (std::vector<std::uint8_t>{4, 7}));
}

TEST(Reduce, AvgAndIntegerScaleAreRejected) {
  std::vector<float> a(4, 1.0F);
  EXPECT_THROW(reduce(DType::F32, ReduceOp::Avg, a.data(), a.data(), a.size()), Error);
  std::vector<std::int32_t> i(4, 1);
  try {
    scale(DType::I32, i.data(), i.size(), 0.5);
    FAIL() << "integer scale must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos);
  }
  scale(DType::F32, a.data(), a.size(), 0.25);
  for (float x : a) EXPECT_EQ(x, 0.25F);
}

}  // namespace
}  // namespace strait::kernels
