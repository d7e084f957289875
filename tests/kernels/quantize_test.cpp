// Codec kernels (kernels/quantize.h, kernels/topk.h) against fp64 references, on every SIMD level
// this CPU supports, and every level against the scalar one bit for bit.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/dtype.h"
#include "kernels/topk.h"
#include "tests/common/expect_error.h"
#include "tests/common/simd_levels.h"

namespace strait::kernels {
namespace {

using strait::test::for_each_simd_level;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Gradient-like values: normal, with magnitudes spread over 2^-20..2^4, and exact zeros, negative
// zeros and subnormals sprinkled in.
std::vector<float> gradient_like(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_int_distribution<int> exponent(-20, 4);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = std::ldexp(normal(rng), exponent(rng));
    if (i % 97 == 5) v[i] = 0.0F;
    if (i % 89 == 7) v[i] = -0.0F;
    if (i % 101 == 3) v[i] = std::numeric_limits<float>::denorm_min() * 37.0F;
  }
  return v;
}

// x through a 16-bit cast (encode_bf16 / decode_bf16 or the f16 pair) and back, decoded over a
// buffer of 5s so that an element the decoder skips shows.
template <class Encode, class Decode>
std::vector<float> cast_round_trip(const std::vector<float>& x, Encode encode, Decode decode) {
  std::vector<std::byte> wire(2 * x.size());
  EXPECT_FALSE(encode(x, wire).has_value());
  std::vector<float> dec(x.size(), 5.0F);
  decode(wire, dec, Accumulate::No);
  return dec;
}

float scale_at(std::span<const std::byte> wire, std::size_t block_index) {
  float s = 0.0F;
  std::memcpy(&s, wire.data() + 4 * block_index, 4);
  return s;
}

std::vector<std::byte> absmax_bytes(const AbsmaxFormat& f, std::span<const float> x,
                                    Rounding r = Rounding::Nearest, std::uint64_t seed = 0) {
  std::vector<std::byte> wire(absmax_encoded_bytes(f, x.size()));
  EXPECT_FALSE(absmax_encode(f, x, wire, r, seed).has_value());
  return wire;
}

std::vector<float> absmax_decoded(const AbsmaxFormat& f, std::span<const std::byte> wire,
                                  std::size_t n) {
  std::vector<float> out(n, 123.0F);  // decode must overwrite
  absmax_decode(f, wire, out, Accumulate::No);
  return out;
}

// Checks |x - decode| against the fp64 scale of each block: <= s/2 (nearest) or < s (stochastic),
// plus fp32 rounding of the arithmetic (2^-21 of the block's absmax).
void expect_absmax_bound(const AbsmaxFormat& f, std::span<const float> x,
                         std::span<const float> dec, Rounding r) {
  const double limit = f.bits == 8 ? 127.0 : 7.0;
  for (std::size_t start = 0; start < x.size(); start += f.block) {
    const std::size_t end = std::min(x.size(), start + f.block);
    double absmax = 0.0;
    for (std::size_t i = start; i < end; ++i) absmax = std::max(absmax, std::fabs(double{x[i]}));
    const double s = absmax / limit;
    const double slack = std::ldexp(absmax, -21);
    const double bound = (r == Rounding::Nearest ? s / 2 : s) + slack;
    for (std::size_t i = start; i < end; ++i) {
      ASSERT_LE(std::fabs(double{x[i]} - double{dec[i]}), bound)
          << "element " << i << " x=" << x[i] << " decoded " << dec[i] << " scale " << s;
    }
  }
}

std::vector<std::size_t> interesting_counts(std::size_t block) {
  return {0, 1, 2, block - 1, block, block + 1, 3 * block + 7, 1000, 4099};
}

// --- 16-bit casts -------------------------------------------------------------------------------

TEST(CodecKernels, Bf16WithinHalfAnUlpAndClampedToItsRange) {
  auto x = gradient_like(5000, 1);
  x[10] = 3.4e38F;  // rounds to Inf in bf16 without the clamp
  x[11] = -3.4e38F;
  x[12] = 1.00390625F;  // exact tie: to even (1.0)
  for_each_simd_level([&](SimdLevel) {
    const std::vector<float> dec = cast_round_trip(x, encode_bf16, decode_bf16);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(dec[i])) << i;
      const double err = std::fabs(double{x[i]} - double{dec[i]});
      if (i == 10 || i == 11) {
        EXPECT_EQ(std::fabs(dec[i]), bf16_to_f32(0x7f7f)) << "clamped to the largest bf16";
        continue;
      }
      // Independent reference: dtype.h's conversion (round to nearest even, no clamp needed here).
      ASSERT_EQ(dec[i], bf16_to_f32(f32_to_bf16(x[i]))) << "element " << i << " x=" << x[i];
      // Half an ulp: 2^-8 relative, or half of bf16's subnormal spacing (2^-133) below 2^-126.
      ASSERT_LE(err, std::max(std::ldexp(std::fabs(double{x[i]}), -8), std::ldexp(1.0, -134)))
          << "element " << i;
    }
    EXPECT_EQ(dec[12], 1.0F);
  });
}

TEST(CodecKernels, Fp16WithinHalfAnUlpAndClampedTo65504) {
  auto x = gradient_like(5000, 2);
  const std::vector<float> edges = {65504.0F,  65519.0F, 65520.0F, 1e6F,    -1e30F,
                                    -65535.0F, 6.1e-5F,  3e-8F,    2.9e-8F, 1e-30F};
  std::copy(edges.begin(), edges.end(), x.begin() + 20);
  for_each_simd_level([&](SimdLevel) {
    const std::vector<float> dec = cast_round_trip(x, encode_f16, decode_f16);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(dec[i])) << "element " << i << " x=" << x[i];
      const double ax = std::fabs(double{x[i]});
      const double err = std::fabs(double{x[i]} - double{dec[i]});
      if (ax >= 65504.0) {
        ASSERT_EQ(dec[i], std::copysign(65504.0F, x[i])) << "element " << i << " x=" << x[i];
      } else if (ax >= std::ldexp(1.0, -14)) {
        ASSERT_LE(err, std::ldexp(ax, -11)) << "element " << i << " x=" << x[i];
      } else {
        ASSERT_LE(err, std::ldexp(1.0, -25)) << "element " << i << " x=" << x[i];
      }
    }
  });
}

TEST(CodecKernels, CastDecodeAddAccumulatesIntoFp32) {
  const auto x = gradient_like(777, 3);
  const auto base = gradient_like(777, 4);
  for_each_simd_level([&](SimdLevel) {
    for (const bool bf : {true, false}) {
      std::vector<std::byte> wire(2 * x.size());
      ASSERT_FALSE((bf ? encode_bf16(x, wire) : encode_f16(x, wire)).has_value());
      std::vector<float> dec(x.size());
      auto acc = base;
      if (bf) {
        decode_bf16(wire, dec, Accumulate::No);
        decode_bf16(wire, acc, Accumulate::Yes);
      } else {
        decode_f16(wire, dec, Accumulate::No);
        decode_f16(wire, acc, Accumulate::Yes);
      }
      for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(acc[i], base[i] + dec[i]) << i;
    }
  });
}

// --- blockwise absmax ---------------------------------------------------------------------------

TEST(QuantKernels, Int8AndInt4NearestWithinHalfAScaleOfFp64) {
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      for (const std::size_t block : {2UL, 16UL, 64UL, 256UL, 1000UL}) {
        const AbsmaxFormat f{bits, block};
        for (const std::size_t n : interesting_counts(block)) {
          SCOPED_TRACE(testing::Message() << "bits " << bits << " block " << block << " n " << n);
          const auto x = gradient_like(n, static_cast<std::uint32_t>(n + block + bits));
          const auto wire = absmax_bytes(f, x);
          ASSERT_EQ(wire.size(), absmax_encoded_bytes(f, n));
          expect_absmax_bound(f, x, absmax_decoded(f, wire, n), Rounding::Nearest);
        }
      }
    }
  });
}

TEST(QuantKernels, Int8TiesRoundToEven) {
  // absmax 127 makes the scale exactly 1, so x * 127 / absmax = x and x.5 is a tie.
  std::vector<float> x(40);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 20.0F + 0.5F;
  x[0] = 127.0F;
  for_each_simd_level([&](SimdLevel) {
    const AbsmaxFormat f{8, 64};
    const auto dec = absmax_decoded(f, absmax_bytes(f, x), x.size());
    for (std::size_t i = 1; i < x.size(); ++i) {
      ASSERT_EQ(dec[i], std::nearbyint(x[i])) << "x=" << x[i];  // the default mode: to even
    }
  });
}

TEST(QuantKernels, StochasticRoundingStaysWithinOneScale) {
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      const AbsmaxFormat f{bits, 64};
      for (const std::size_t n : interesting_counts(64)) {
        SCOPED_TRACE(testing::Message() << "bits " << bits << " n " << n);
        const auto x = gradient_like(n, static_cast<std::uint32_t>(n * 3 + bits));
        const auto wire = absmax_bytes(f, x, Rounding::Stochastic, 99);
        expect_absmax_bound(f, x, absmax_decoded(f, wire, n), Rounding::Stochastic);
      }
    }
  });
}

TEST(QuantKernels, StochasticRoundingIsUnbiasedAndDeterministicPerSeed) {
  // One block with absmax 1: element i sits at a fixed fraction between two grid points, so its
  // decoded mean over seeds must come within a few standard errors of x.
  const std::size_t n = 48;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = -1.0F + 2.0F * static_cast<float>(i) / (n - 1);
  x[7] = 0.3F;
  const int seeds = 4000;
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      const AbsmaxFormat f{bits, 64};
      const double s = 1.0 / (bits == 8 ? 127.0 : 7.0);
      std::vector<double> sum(n, 0.0);
      for (int seed = 0; seed < seeds; ++seed) {
        const auto dec = absmax_decoded(f, absmax_bytes(f, x, Rounding::Stochastic, seed), n);
        for (std::size_t i = 0; i < n; ++i) sum[i] += dec[i];
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double frac = double{x[i]} / s - std::floor(double{x[i]} / s);
        const double se = s * std::sqrt(frac * (1 - frac) / seeds);
        // 3e-5 s: the fp32 rounding of x * L + u (2^-17 of a grid step near L) may bias by that
        // much.
        EXPECT_NEAR(sum[i] / seeds, x[i], 5 * se + 3e-5 * s) << "bits " << bits << " x=" << x[i];
      }
      EXPECT_EQ(absmax_bytes(f, x, Rounding::Stochastic, 7),
                absmax_bytes(f, x, Rounding::Stochastic, 7));
      EXPECT_NE(absmax_bytes(f, x, Rounding::Stochastic, 7),
                absmax_bytes(f, x, Rounding::Stochastic, 8));
    }
  });
}

TEST(QuantKernels, StochasticUniformIsInUnitIntervalAndVariesWithSeedAndIndex) {
  double sum = 0.0;
  for (std::size_t i = 0; i < 10000; ++i) {
    const float u = stochastic_uniform(5, i);
    ASSERT_GE(u, 0.0F);
    ASSERT_LT(u, 1.0F);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_NE(stochastic_uniform(5, 0), stochastic_uniform(6, 0));
  EXPECT_NE(stochastic_uniform(5, 0), stochastic_uniform(5, 1));
}

TEST(QuantKernels, AllZeroAndTinyBlocksDecodeToExactZerosWithScaleZero) {
  const std::size_t block = 32;
  std::vector<float> x(5 * block + 3, 0.0F);
  for (std::size_t i = block; i < 2 * block; ++i) x[i] = static_cast<float>(i) * 0.01F;
  for (std::size_t i = 3 * block; i < 4 * block; ++i) x[i] = 1e-35F;  // below kAbsmaxFloor
  x[3 * block + 1] = -0.0F;
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      for (const auto r : {Rounding::Nearest, Rounding::Stochastic}) {
        const AbsmaxFormat f{bits, block};
        const auto wire = absmax_bytes(f, x, r, 3);
        EXPECT_EQ(scale_at(wire, 0), 0.0F);
        EXPECT_EQ(scale_at(wire, 2), 0.0F);
        EXPECT_EQ(scale_at(wire, 3), 0.0F);
        EXPECT_EQ(scale_at(wire, 5), 0.0F);  // the 3-element tail block
        const auto dec = absmax_decoded(f, wire, x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          if (i >= block && i < 2 * block) continue;
          ASSERT_EQ(dec[i], 0.0F) << "element " << i << " bits " << bits;
        }
      }
    }
  });
}

TEST(QuantKernels, HugeBlocksDecodeFinite) {
  std::vector<float> x(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0F : 1.0F) * 3.4028e38F;
  x[5] = std::numeric_limits<float>::max();
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      const AbsmaxFormat f{bits, 16};
      const auto dec = absmax_decoded(f, absmax_bytes(f, x), x.size());
      for (std::size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(std::isfinite(dec[i])) << i;
      expect_absmax_bound(f, x, dec, Rounding::Nearest);
    }
  });
}

TEST(QuantKernels, DecodeAddAddsTheDecodedValues) {
  const auto x = gradient_like(1000, 5);
  const auto base = gradient_like(1000, 6);
  for_each_simd_level([&](SimdLevel) {
    for (const int bits : {8, 4}) {
      const AbsmaxFormat f{bits, 128};
      const auto wire = absmax_bytes(f, x);
      const auto dec = absmax_decoded(f, wire, x.size());
      auto acc = base;
      absmax_decode(f, wire, acc, Accumulate::Yes);
      for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(acc[i], base[i] + dec[i]) << i;
    }
  });
}

TEST(QuantKernels, WireSizesAndBadFormats) {
  EXPECT_EQ(absmax_encoded_bytes({8, 256}, 0), 0U);
  EXPECT_EQ(absmax_encoded_bytes({8, 256}, 256), 260U);
  EXPECT_EQ(absmax_encoded_bytes({8, 256}, 257), 4U * 2 + 257);
  EXPECT_EQ(absmax_encoded_bytes({4, 64}, 65), 4U * 2 + 33);
  EXPECT_EQ(sign_encoded_bytes(256, 300), 4U * 2 + 38);
  EXPECT_EQ(sign_encoded_bytes(8, 0), 0U);
  using strait::test::expect_error;
  expect_error(ErrorCode::InvalidArgument, [] { (void)absmax_encoded_bytes({8, 0}, 1); });
  expect_error(ErrorCode::InvalidArgument, [] { (void)absmax_encoded_bytes({4, 3}, 1); });
  expect_error(ErrorCode::InvalidArgument, [] { (void)absmax_encoded_bytes({5, 64}, 1); });
  expect_error(ErrorCode::InvalidArgument, [] { (void)sign_encoded_bytes(12, 1); });
  std::vector<float> x(10);
  std::vector<std::byte> wrong(3);
  expect_error(ErrorCode::InvalidArgument, [&] { (void)absmax_encode({8, 4}, x, wrong); });
  expect_error(ErrorCode::InvalidArgument, [&] {
    absmax_decode({8, 4}, wrong, x, Accumulate::No);
  });
  expect_error(ErrorCode::InvalidArgument, [&] { (void)encode_bf16(x, wrong); });
  expect_error(ErrorCode::InvalidArgument, [&] { (void)sign_encode(8, x, wrong); });
}

// --- 1-bit sign ---------------------------------------------------------------------------------

TEST(OneBitKernels, DecodesToSignTimesTheBlockMean) {
  for_each_simd_level([&](SimdLevel) {
    for (const std::size_t block : {8UL, 24UL, 256UL}) {
      for (const std::size_t n : interesting_counts(block)) {
        SCOPED_TRACE(testing::Message() << "block " << block << " n " << n);
        const auto x = gradient_like(n, static_cast<std::uint32_t>(n + 11 * block));
        std::vector<std::byte> wire(sign_encoded_bytes(block, n));
        ASSERT_FALSE(sign_encode(block, x, wire).has_value());
        std::vector<float> dec(n, 9.0F);
        sign_decode(block, wire, dec, Accumulate::No);
        for (std::size_t start = 0, b = 0; start < n; start += block, ++b) {
          const std::size_t end = std::min(n, start + block);
          double mean = 0.0;
          for (std::size_t i = start; i < end; ++i) mean += std::fabs(double{x[i]});
          mean /= static_cast<double>(end - start);
          const float s = scale_at(wire, b);
          ASSERT_NEAR(s, mean, 1e-5 * mean) << "block " << b;
          for (std::size_t i = start; i < end; ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(dec[i]),
                      std::bit_cast<std::uint32_t>(std::signbit(x[i]) ? -s : s))
                << "element " << i << " x=" << x[i];
          }
        }
      }
    }
  });
}

TEST(OneBitKernels, AllZeroBlockHasScaleZeroAndOverflowingSumsStayFinite) {
  std::vector<float> x(48, 0.0F);
  for (std::size_t i = 16; i < 32; ++i) x[i] = (i % 3 ? 3e38F : -3e38F);  // sum > FLT_MAX
  for_each_simd_level([&](SimdLevel) {
    std::vector<std::byte> wire(sign_encoded_bytes(16, x.size()));
    ASSERT_FALSE(sign_encode(16, x, wire).has_value());
    EXPECT_EQ(scale_at(wire, 0), 0.0F);
    EXPECT_EQ(scale_at(wire, 1), 3e38F);
    std::vector<float> dec(x.size(), 1.0F);
    sign_decode(16, wire, dec, Accumulate::No);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(dec[i])) << i;
      if (i < 16 || i >= 32) {
        ASSERT_EQ(dec[i], 0.0F) << i;
      }
    }
    auto acc = x;
    sign_decode(16, wire, acc, Accumulate::Yes);
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(acc[i], x[i] + dec[i]) << i;
  });
}

// --- non-finite input ---------------------------------------------------------------------------

// Every encoder through one signature.
struct NamedEncoder {
  const char* name;
  std::optional<std::size_t> (*encode)(std::span<const float>);
};

template <class F>
std::optional<std::size_t> with_wire(std::size_t bytes, F f) {
  std::vector<std::byte> wire(bytes);
  return f(std::span<std::byte>(wire));
}

const NamedEncoder kEncoders[] = {
    {"bf16",
     [](std::span<const float> x) {
       return with_wire(2 * x.size(), [&](std::span<std::byte> w) { return encode_bf16(x, w); });
     }},
    {"f16",
     [](std::span<const float> x) {
       return with_wire(2 * x.size(), [&](std::span<std::byte> w) { return encode_f16(x, w); });
     }},
    {"int8",
     [](std::span<const float> x) {
       const AbsmaxFormat f{8, 256};
       return with_wire(absmax_encoded_bytes(f, x.size()),
                        [&](std::span<std::byte> w) { return absmax_encode(f, x, w); });
     }},
    {"int4 stochastic",
     [](std::span<const float> x) {
       const AbsmaxFormat f{4, 64};
       return with_wire(absmax_encoded_bytes(f, x.size()), [&](std::span<std::byte> w) {
         return absmax_encode(f, x, w, Rounding::Stochastic, 1);
       });
     }},
    {"sign",
     [](std::span<const float> x) {
       return with_wire(sign_encoded_bytes(256, x.size()),
                        [&](std::span<std::byte> w) { return sign_encode(256, x, w); });
     }},
    {"topk",
     [](std::span<const float> x) {
       const std::size_t k = topk_count(0.1, x.size());
       return with_wire(k * kTopkPairBytes,
                        [&](std::span<std::byte> w) { return topk_encode(x, k, w); });
     }},
};

TEST(CodecKernels, NonFiniteInputIsReportedAtItsFirstIndex) {
  const std::size_t n = 1000;
  const auto clean = gradient_like(n, 8);
  for_each_simd_level([&](SimdLevel) {
    for (const auto& e : kEncoders) {
      EXPECT_FALSE(e.encode(clean).has_value()) << e.name;
      // First element, in a vector body, in the second block, the last (a scalar tail).
      for (const std::size_t at : {0UL, 37UL, 300UL, 999UL}) {
        for (const float bad : {kNan, kInf, -kInf, -kNan}) {
          auto x = clean;
          x[at] = bad;
          const auto found = e.encode(x);
          ASSERT_TRUE(found.has_value()) << e.name << " missed " << bad << " at " << at;
          EXPECT_EQ(*found, at) << e.name;
        }
      }
      auto x = clean;
      x[700] = kInf;
      x[500] = kNan;
      EXPECT_EQ(e.encode(x), std::optional<std::size_t>(500)) << e.name;
    }
  });
}

// --- every level writes the scalar level's bytes
// --------------------------------------------------

struct Produced {
  std::vector<std::byte> wire;
  std::vector<float> decoded;
  std::vector<float> added;
};

using Decoder = std::function<void(std::span<const std::byte>, std::span<float>, Accumulate)>;

std::vector<Produced> run_everything(std::span<const float> x, std::span<const float> base) {
  std::vector<Produced> out;
  auto finish = [&](std::vector<std::byte> wire, const Decoder& decode) {
    Produced p{std::move(wire), std::vector<float>(x.size()), {base.begin(), base.end()}};
    decode(p.wire, p.decoded, Accumulate::No);
    decode(p.wire, p.added, Accumulate::Yes);
    out.push_back(std::move(p));
  };
  std::vector<std::byte> w(2 * x.size());
  EXPECT_FALSE(encode_bf16(x, w).has_value());
  finish(w, decode_bf16);
  EXPECT_FALSE(encode_f16(x, w).has_value());
  finish(w, decode_f16);
  for (const int bits : {8, 4}) {
    for (const std::size_t block : {6UL, 64UL, 250UL}) {
      for (const auto r : {Rounding::Nearest, Rounding::Stochastic}) {
        const AbsmaxFormat f{bits, block};
        finish(absmax_bytes(f, x, r, 42), [f](std::span<const std::byte> in, std::span<float> o,
                                              Accumulate a) { absmax_decode(f, in, o, a); });
      }
    }
  }
  for (const std::size_t block : {8UL, 40UL, 256UL}) {
    std::vector<std::byte> s(sign_encoded_bytes(block, x.size()));
    EXPECT_FALSE(sign_encode(block, x, s).has_value());
    finish(s, [block](std::span<const std::byte> in, std::span<float> o, Accumulate a) {
      sign_decode(block, in, o, a);
    });
  }
  return out;
}

TEST(CodecKernels, EverySimdLevelIsBitIdenticalToScalar) {
  if (test::supported_simd_levels().size() == 1) GTEST_SKIP() << "this CPU runs scalar only";
  for (const std::size_t n : {1UL, 7UL, 31UL, 33UL, 1000UL, 4133UL}) {
    auto x = gradient_like(n, static_cast<std::uint32_t>(n));
    // Ties for the casts and the quantizers, values beyond the 16-bit ranges.
    for (std::size_t i = 0; i < n; i += 13) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(0x3f808000U + (i << 16)));
    }
    for (std::size_t i = 5; i < n; i += 29) x[i] = 70000.0F * (i % 2 ? 1.0F : -1.0F);
    const auto base = gradient_like(n, static_cast<std::uint32_t>(n + 1));
    const test::SimdLevelGuard guard;
    set_simd_level_for_testing(SimdLevel::Scalar);
    const auto reference = run_everything(x, base);
    for (const auto level : test::supported_simd_levels()) {
      set_simd_level_for_testing(level);
      const auto got = run_everything(x, base);
      ASSERT_EQ(got.size(), reference.size());
      for (std::size_t c = 0; c < got.size(); ++c) {
        SCOPED_TRACE(testing::Message() << simd_level_name(level) << " n " << n << " case " << c);
        ASSERT_EQ(got[c].wire, reference[c].wire);
        ASSERT_EQ(std::memcmp(got[c].decoded.data(), reference[c].decoded.data(), 4 * n), 0);
        ASSERT_EQ(std::memcmp(got[c].added.data(), reference[c].added.data(), 4 * n), 0);
      }
    }
  }
}

// --- top-k --------------------------------------------------------------------------------------

std::vector<std::pair<std::uint32_t, float>> topk_pairs(std::span<const std::byte> wire) {
  std::vector<std::pair<std::uint32_t, float>> out(wire.size() / kTopkPairBytes);
  for (std::size_t j = 0; j < out.size(); ++j) {
    std::memcpy(&out[j].first, wire.data() + 8 * j, 4);
    std::memcpy(&out[j].second, wire.data() + 8 * j + 4, 4);
  }
  return out;
}

TEST(TopKKernels, KeepsExactlyTheKLargestMagnitudesLowestIndexOnTies) {
  // 1000003 and 3000017 take the sampled-threshold path (more than 4 x 65536 elements); in the
  // last, the elements the sample sees (every 45th) are the largest, so the estimate is too high
  // for fraction 0.1 and the kernel must fall back to all elements.
  for (const std::size_t n : {1UL, 2UL, 10UL, 257UL, 5000UL, 1'000'003UL, 3'000'017UL}) {
    auto x = gradient_like(n, static_cast<std::uint32_t>(n + 77));
    // Ties: a run of equal magnitudes of both signs.
    for (std::size_t i = 0; i < n; i += 5) x[i] = (i % 2 ? 0.75F : -0.75F);
    if (n == 3'000'017UL) {
      for (std::size_t i = 0; i < n; i += n / 65536) x[i] = (i % 3 ? 100.0F : -100.0F);
    }
    for (const double fraction : {0.001, 0.01, 0.1, 0.5, 1.0}) {
      const std::size_t k = topk_count(fraction, n);
      std::vector<std::byte> wire(k * kTopkPairBytes);
      ASSERT_FALSE(topk_encode(x, k, wire).has_value());
      // Reference: sort by (|x| descending, index ascending), take k, order by index.
      std::vector<std::uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0U);
      std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
        return std::fabs(x[a]) > std::fabs(x[b]);
      });
      order.resize(k);
      std::sort(order.begin(), order.end());
      const auto pairs = topk_pairs(wire);
      ASSERT_EQ(pairs.size(), k);
      for (std::size_t j = 0; j < k; ++j) {
        ASSERT_EQ(pairs[j].first, order[j]) << "n " << n << " fraction " << fraction;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(pairs[j].second),
                  std::bit_cast<std::uint32_t>(x[order[j]]));
      }
      std::vector<float> dec(n, 3.0F);
      topk_decode(wire, dec, Accumulate::No);
      std::size_t kept = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (kept < k && order[kept] == i) {
          ASSERT_EQ(dec[i], x[i]);
          ++kept;
        } else {
          ASSERT_EQ(dec[i], 0.0F) << "element " << i << " should be dropped";
        }
      }
      auto acc = x;
      topk_decode(wire, acc, Accumulate::Yes);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], x[i] + dec[i]);
    }
  }
}

TEST(TopKKernels, AMostlyZeroInputKeepsItsNonZerosThenTheLowestIndexedZeros) {
  // Fewer non-zeros than k: zeros fill the rest, lowest index first (the fallback path).
  for (const std::size_t n : {3000UL, 300'007UL}) {
    std::vector<float> x(n, 0.0F);
    for (std::size_t i = 7; i < n; i += n / 50) x[i] = static_cast<float>(i % 13) - 6.5F;
    const std::size_t k = topk_count(0.001, n) + 60;
    std::vector<std::byte> wire(k * kTopkPairBytes);
    ASSERT_FALSE(topk_encode(x, k, wire).has_value());
    std::vector<std::uint32_t> expected;
    for (std::size_t i = 0; i < n; ++i) {
      if (x[i] != 0.0F) expected.push_back(static_cast<std::uint32_t>(i));
    }
    const std::size_t zeros = k - expected.size();
    for (std::size_t i = 0, taken = 0; taken < zeros; ++i) {
      if (x[i] == 0.0F) {
        expected.push_back(static_cast<std::uint32_t>(i));
        ++taken;
      }
    }
    std::sort(expected.begin(), expected.end());
    const auto pairs = topk_pairs(wire);
    ASSERT_EQ(pairs.size(), expected.size());
    for (std::size_t j = 0; j < pairs.size(); ++j) {
      ASSERT_EQ(pairs[j].first, expected[j]) << "n " << n << " pair " << j;
    }
  }
}

TEST(TopKKernels, CountIsTheCeilingOfFractionTimesCount) {
  EXPECT_EQ(topk_count(0.1, 30), 3U);  // 3.0000000000000004 in double
  EXPECT_EQ(topk_count(0.01, 100), 1U);
  EXPECT_EQ(topk_count(0.015, 100), 2U);
  EXPECT_EQ(topk_count(0.001, 10), 1U);  // at least one
  EXPECT_EQ(topk_count(0.5, 0), 0U);
  EXPECT_EQ(topk_count(1.0, 17), 17U);
  EXPECT_EQ(topk_count(0.3, 10), 3U);
  EXPECT_EQ(topk_count(0.31, 10), 4U);
  test::expect_error(ErrorCode::InvalidArgument, [] { (void)topk_count(0.0, 10); });
  test::expect_error(ErrorCode::InvalidArgument, [] { (void)topk_count(1.5, 10); });
  test::expect_error(ErrorCode::InvalidArgument, [] { (void)topk_count(kNan, 10); });
}

TEST(TopKKernels, DecodeRejectsIndicesOutOfRangeOrNotIncreasing) {
  auto pair_bytes = [](std::vector<std::pair<std::uint32_t, float>> pairs) {
    std::vector<std::byte> w(8 * pairs.size());
    for (std::size_t j = 0; j < pairs.size(); ++j) {
      std::memcpy(w.data() + 8 * j, &pairs[j].first, 4);
      std::memcpy(w.data() + 8 * j + 4, &pairs[j].second, 4);
    }
    return w;
  };
  std::vector<float> out(10);
  topk_decode(pair_bytes({{1, 1.0F}, {9, 2.0F}}), out, Accumulate::No);
  EXPECT_EQ(out[9], 2.0F);
  for (const auto& bad : {pair_bytes({{10, 1.0F}}), pair_bytes({{3, 1.0F}, {3, 1.0F}}),
                          pair_bytes({{4, 1.0F}, {2, 1.0F}})}) {
    test::expect_error(ErrorCode::InvalidArgument, [&] { topk_decode(bad, out, Accumulate::No); });
  }
  std::vector<std::byte> ragged(12);
  test::expect_error(ErrorCode::InvalidArgument, [&] { topk_decode(ragged, out, Accumulate::No); });
}

}  // namespace
}  // namespace strait::kernels
