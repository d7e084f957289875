// reduce() with Band, Bor and Bxor on every SIMD level this CPU runs (scalar, AVX2, AVX-512; the
// levels it lacks are named as skipped), for every integer dtype, counts with tails of every
// length and misaligned buffers, against a byte-wise reference: a bitwise op on a w-byte integer
// is the same op on each of its bytes, so the reference needs no knowledge of the element width.
// Floating-point dtypes must be refused with InvalidArgument.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"
#include "tests/common/simd_levels.h"

namespace strait::kernels {
namespace {

constexpr std::array kIntDtypes = {DType::I8, DType::U8, DType::I32, DType::I64};
constexpr std::array kFloatDtypes = {DType::F32, DType::F64, DType::F16, DType::BF16};
constexpr std::array kBitwise = {ReduceOp::Band, ReduceOp::Bor, ReduceOp::Bxor};

inline std::vector<SimdLevel> cpu_levels() {
  return test::supported_simd_levels();
}
using LevelScope = test::ScopedSimdLevel;

unsigned char byte_op(ReduceOp op, unsigned char x, unsigned char y) {
  switch (op) {
    case ReduceOp::Band: return static_cast<unsigned char>(x & y);
    case ReduceOp::Bor: return static_cast<unsigned char>(x | y);
    default: return static_cast<unsigned char>(x ^ y);
  }
}

TEST(ReduceBitwise, EveryLevelDtypeCountAndAlignmentMatchesBytewiseReference) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> byte(0, 255);
  constexpr std::size_t kGuard = 64;
  for (SimdLevel level : cpu_levels()) {
    const LevelScope scope(level);
    for (DType t : kIntDtypes) {
      const std::size_t w = dtype_size(t);
      for (ReduceOp op : kBitwise) {
        for (std::size_t count : {0, 1, 3, 7, 31, 33, 64, 65, 130, 1000}) {
          for (std::size_t shift : {std::size_t{0}, w, std::size_t{1}}) {  // aligned, by one
            const std::size_t bytes = count * w;                           // element, by a byte
            std::vector<unsigned char> a(bytes + 2 * kGuard), b(bytes + 2 * kGuard);
            for (auto& x : a) x = static_cast<unsigned char>(byte(rng));
            for (auto& x : b) x = static_cast<unsigned char>(byte(rng));
            const std::vector<unsigned char> a0 = a, b0 = b;
            reduce(t, op, a.data() + kGuard + shift, b.data() + kGuard + shift, count);
            for (std::size_t i = 0; i < a.size(); ++i) {
              const bool inside = i >= kGuard + shift && i < kGuard + shift + bytes;
              const unsigned char want = inside ? byte_op(op, a0[i], b0[i]) : a0[i];
              ASSERT_EQ(a[i], want)
                  << simd_level_name(level) << " " << dtype_name(t) << " " << reduce_op_name(op)
                  << " count " << count << " shift " << shift << " byte " << i;
            }
            ASSERT_EQ(b, b0) << "in was written";
          }
        }
      }
    }
  }
}

TEST(ReduceBitwise, InoutEqualToInIsIdempotentForAndOrAndZeroForXor) {
  for (SimdLevel level : cpu_levels()) {
    const LevelScope scope(level);
    std::vector<std::int32_t> v(100);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>(i * 2654435761U);
    const auto v0 = v;
    reduce(DType::I32, ReduceOp::Band, v.data(), v.data(), v.size());
    EXPECT_EQ(v, v0) << simd_level_name(level);
    reduce(DType::I32, ReduceOp::Bor, v.data(), v.data(), v.size());
    EXPECT_EQ(v, v0) << simd_level_name(level);
    reduce(DType::I32, ReduceOp::Bxor, v.data(), v.data(), v.size());
    EXPECT_EQ(v, std::vector<std::int32_t>(v.size(), 0)) << simd_level_name(level);
  }
}

TEST(ReduceBitwise, FloatingPointDtypesAreRefused) {
  std::array<double, 4> a{}, b{};
  for (DType t : kFloatDtypes) {
    for (ReduceOp op : kBitwise) {
      try {
        reduce(t, op, a.data(), b.data(), 1);
        ADD_FAILURE() << reduce_op_name(op) << " of " << dtype_name(t) << " was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("integer"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(ReduceBitwise, Names) {
  EXPECT_EQ(reduce_op_name(ReduceOp::Band), "band");
  EXPECT_EQ(reduce_op_name(ReduceOp::Bor), "bor");
  EXPECT_EQ(reduce_op_name(ReduceOp::Bxor), "bxor");
}

}  // namespace
}  // namespace strait::kernels
