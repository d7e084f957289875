// comm/compress/: the Codec interface and factory, wire sizes, non-finite input reported with its
// index, and error feedback keeping the running sums of sent and intended updates together.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/compress/codec_factory.h"
#include "comm/compress/error_feedback.h"
#include "comm/compress/int8_codec.h"
#include "core/error.h"
#include "tests/common/expect_error.h"
#include "tests/common/simd_levels.h"

namespace strait::comm {
namespace {

using strait::test::for_each_simd_level;

std::vector<float> normal_floats(std::size_t n, std::uint32_t seed, float sigma = 1.0F) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::byte> encoded(Codec& c, std::span<const float> x) {
  std::vector<std::byte> wire(c.encoded_bytes(x.size()));
  c.encode(x, wire);
  return wire;
}

std::vector<float> decoded(const Codec& c, std::span<const std::byte> wire, std::size_t n) {
  std::vector<float> out(n, 17.0F);
  c.decode(wire, out);
  return out;
}

// Every codec with its default arguments, and a few non-default ones.
const char* const kSpecs[] = {"none",
                              "bf16",
                              "fp16",
                              "int8",
                              "int8:block=100,stochastic=1,seed=3",
                              "int4",
                              "int4:block=32",
                              "topk",
                              "topk:fraction=0.25",
                              "onebit",
                              "onebit:block=64"};

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument, nothing was thrown";
  return {};
}

// --- factory ------------------------------------------------------------------------------------

TEST(CodecFactory, MakesEveryCodecAndItsSpecRoundTrips) {
  for (const auto name : codec_names()) {
    const auto c = make_codec(name);
    EXPECT_EQ(c->name(), name);
    EXPECT_EQ(make_codec_from_spec(c->spec())->spec(), c->spec());
  }
  for (const char* spec : kSpecs) {
    const auto c = make_codec_from_spec(spec);
    EXPECT_EQ(make_codec_from_spec(c->spec())->spec(), c->spec()) << spec;
  }
  EXPECT_EQ(make_codec("int8", " block = 64 , stochastic=true,seed=7")->spec(),
            "int8:block=64,stochastic=1,seed=7");
  EXPECT_EQ(make_codec("int4")->spec(), "int4:block=64,stochastic=0,seed=0");
  EXPECT_EQ(make_codec("topk", "fraction=0.05")->spec(), "topk:fraction=0.05");
  EXPECT_EQ(make_codec("onebit")->spec(), "onebit:block=256");
}

TEST(CodecFactory, OnlyNoneIsSummableAndTheBiasedOnesAskForErrorFeedback) {
  for (const auto name : codec_names()) {
    const auto c = make_codec(name);
    EXPECT_EQ(c->summable(), name == "none") << name;
    EXPECT_EQ(c->needs_error_feedback(), name == "topk" || name == "onebit") << name;
  }
}

TEST(CodecFactory, ErrorsNameTheBadNameKeyOrValueAndWhatIsValid) {
  auto text = error_text([] { (void)make_codec("int3"); });
  EXPECT_NE(text.find("'int3'"), std::string::npos) << text;
  EXPECT_NE(text.find("none, bf16, fp16, int8, int4, topk, onebit"), std::string::npos) << text;

  text = error_text([] { (void)make_codec("int8", "blok=256"); });
  EXPECT_NE(text.find("int8 codec: unknown argument 'blok'"), std::string::npos) << text;
  EXPECT_NE(text.find("valid keys: block, stochastic, seed"), std::string::npos) << text;

  text = error_text([] { (void)make_codec("bf16", "block=4"); });
  EXPECT_NE(text.find("'block'"), std::string::npos) << text;
  EXPECT_NE(text.find("takes no arguments"), std::string::npos) << text;

  text = error_text([] { (void)make_codec("topk", "fraction=0.1,fraction=0.2"); });
  EXPECT_NE(text.find("'fraction' is given twice"), std::string::npos) << text;

  text = error_text([] { (void)make_codec("int8", "block"); });
  EXPECT_NE(text.find("not key=value"), std::string::npos) << text;

  const std::pair<const char*, const char*> bad_values[] = {
      {"int8", "block=0"},    {"int8", "block=abc"},    {"int8", "block=-4"},
      {"int4", "block=33"},   {"int8", "stochastic=2"}, {"int8", "seed=x"},
      {"topk", "fraction=0"}, {"topk", "fraction=1.5"}, {"topk", "fraction=nan"},
      {"onebit", "block=12"}, {"onebit", "block=0"},
  };
  for (const auto& [name, args] : bad_values) {
    text = error_text([&] { (void)make_codec(name, args); });
    const std::string key(args, std::strchr(args, '='));
    EXPECT_NE(text.find(fmt::format("{} codec: {}=", name, key)), std::string::npos) << text;
  }
}

// --- wire sizes ---------------------------------------------------------------------------------

TEST(CodecWire, EncodedBytesAreExactAndOtherSizesAreRefused) {
  EXPECT_EQ(make_codec("none")->encoded_bytes(10), 40U);
  EXPECT_EQ(make_codec("bf16")->encoded_bytes(10), 20U);
  EXPECT_EQ(make_codec("fp16")->encoded_bytes(10), 20U);
  EXPECT_EQ(make_codec("int8")->encoded_bytes(256), 256U + 4);
  EXPECT_EQ(make_codec("int8")->encoded_bytes(257), 257U + 8);
  EXPECT_EQ(make_codec("int4")->encoded_bytes(65), 33U + 8);
  EXPECT_EQ(make_codec("topk")->encoded_bytes(1000), 80U);
  EXPECT_EQ(make_codec("topk")->encoded_bytes(1), 8U);
  EXPECT_EQ(make_codec("onebit")->encoded_bytes(300), 38U + 8);
  for (const char* spec : kSpecs) {
    auto c = make_codec_from_spec(spec);
    EXPECT_EQ(c->encoded_bytes(0), 0U) << spec;
    for (const std::size_t n : {0UL, 1UL, 7UL, 255UL, 256UL, 257UL, 1000UL}) {
      const auto x = normal_floats(n, static_cast<std::uint32_t>(n));
      const auto wire = encoded(*c, x);  // encode accepts exactly encoded_bytes(n)
      const auto back = decoded(*c, wire, n);
      ASSERT_EQ(back.size(), n);
      std::vector<std::byte> longer(wire.size() + 1);
      test::expect_error(ErrorCode::InvalidArgument, [&] { c->encode(x, longer); });
      test::expect_error(ErrorCode::InvalidArgument, [&] {
        std::vector<float> out(n);
        c->decode(longer, out);
      });
      if (!wire.empty()) {
        std::vector<std::byte> shorter(wire.size() - 1);
        test::expect_error(ErrorCode::InvalidArgument, [&] { c->encode(x, shorter); });
        std::vector<float> out(n);
        test::expect_error(ErrorCode::InvalidArgument, [&] { c->decode_add(shorter, out); });
      }
    }
  }
}

// --- round trips through the interface
// ------------------------------------------------------------

TEST(CodecRoundTrip, EachCodecMeetsItsBoundAndDecodeAddAdds) {
  const std::size_t n = 3001;
  const auto x = normal_floats(n, 11);
  const auto base = normal_floats(n, 12);
  for_each_simd_level([&](kernels::SimdLevel) {
    for (const char* spec : kSpecs) {
      SCOPED_TRACE(spec);
      auto c = make_codec_from_spec(spec);
      const auto wire = encoded(*c, x);
      const auto dec = decoded(*c, wire, n);
      auto acc = base;
      c->decode_add(wire, acc);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], base[i] + dec[i]) << i;
      const std::string name(c->name());
      const std::size_t block = name == "int8" || name == "int4" || name == "onebit"
                                    ? std::stoul(c->spec().substr(c->spec().find("block=") + 6))
                                    : n;
      for (std::size_t start = 0; start < n; start += block) {
        const std::size_t end = std::min(n, start + block);
        double absmax = 0.0;
        double mean = 0.0;
        for (std::size_t i = start; i < end; ++i) {
          absmax = std::max(absmax, std::fabs(double{x[i]}));
          mean += std::fabs(double{x[i]}) / static_cast<double>(end - start);
        }
        for (std::size_t i = start; i < end; ++i) {
          const double err = std::fabs(double{x[i]} - dec[i]);
          const double ax = std::fabs(double{x[i]});
          if (name == "none") {
            ASSERT_EQ(dec[i], x[i]);
          } else if (name == "bf16") {
            ASSERT_LE(err, std::ldexp(ax, -8)) << i;
          } else if (name == "fp16") {
            ASSERT_LE(err, std::max(std::ldexp(ax, -11), 0x1p-25)) << i;
          } else if (name == "int8" || name == "int4") {
            const double s = absmax / (name == "int8" ? 127.0 : 7.0);
            const bool stochastic = c->spec().find("stochastic=1") != std::string::npos;
            ASSERT_LE(err, (stochastic ? s : s / 2) + std::ldexp(absmax, -21)) << i;
          } else if (name == "onebit") {
            ASSERT_NEAR(std::fabs(dec[i]), mean, 1e-5 * mean) << i;
            ASSERT_EQ(std::signbit(dec[i]), std::signbit(x[i])) << i;
          }
        }
      }
      if (name == "topk") {
        std::size_t kept = 0;
        float smallest_kept = std::numeric_limits<float>::max();
        float largest_dropped = 0.0F;
        for (std::size_t i = 0; i < n; ++i) {
          if (dec[i] != 0.0F) {
            ASSERT_EQ(dec[i], x[i]);
            ++kept;
            smallest_kept = std::min(smallest_kept, std::fabs(x[i]));
          } else {
            largest_dropped = std::max(largest_dropped, std::fabs(x[i]));
          }
        }
        EXPECT_EQ(8 * kept, wire.size());
        EXPECT_GE(smallest_kept, largest_dropped);
      }
    }
  });
}

TEST(CodecRoundTrip, StochasticEncodesDrawFreshNoiseEachCallAndRepeatPerSeed) {
  const auto x = normal_floats(2000, 13);
  auto a = make_codec("int8", "stochastic=1,seed=5");
  auto b = make_codec("int8", "stochastic=1,seed=5");
  auto other = make_codec("int8", "stochastic=1,seed=6");
  const auto a1 = encoded(*a, x);
  const auto a2 = encoded(*a, x);
  EXPECT_NE(a1, a2) << "the second call must not repeat the first call's rounding";
  EXPECT_EQ(encoded(*b, x), a1);
  EXPECT_EQ(encoded(*b, x), a2);
  EXPECT_NE(encoded(*other, x), a1);
  auto nearest = make_codec("int8");
  EXPECT_EQ(encoded(*nearest, x), encoded(*nearest, x));
}

// --- non-finite input ---------------------------------------------------------------------------

TEST(CodecNonFinite, EncodeThrowsNamingTheCodecTheFirstIndexAndTheValue) {
  const std::size_t n = 1000;
  const auto clean = normal_floats(n, 14);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for_each_simd_level([&](kernels::SimdLevel) {
    for (const char* spec : kSpecs) {
      auto c = make_codec_from_spec(spec);
      if (c->name() == "none") continue;  // passes values through unchecked (cast_codec.h)
      std::vector<std::byte> wire(c->encoded_bytes(n));
      // First element, a vector body, a later block, the scalar tail.
      for (const std::size_t at : {0UL, 37UL, 300UL, n - 1}) {
        for (const float bad : {nan, inf, -inf}) {
          auto x = clean;
          x[at] = bad;
          const auto text = error_text([&] { c->encode(x, wire); });
          const auto want = fmt::format(
              "{} codec: element {} is {}: a non-finite gradient cannot "
              "be compressed; check the loss scale / learning rate",
              c->name(), at, bad);
          EXPECT_NE(text.find(want), std::string::npos) << spec << ": " << text;
        }
      }
      auto x = clean;
      x[812] = nan;
      x[611] = -inf;
      const auto text = error_text([&] { c->encode(x, wire); });
      EXPECT_NE(text.find("element 611 is -inf"), std::string::npos) << spec << ": " << text;
    }
  });
}

// --- error feedback -----------------------------------------------------------------------------

struct Drift {
  std::vector<double> gap;  // sum(inputs) - sum(decoded), per element
  double max_compensated = 0.0;
  [[nodiscard]] double norm() const {
    double s = 0.0;
    for (const double g : gap) s += g * g;
    return std::sqrt(s);
  }
};

// Runs `steps` random gradients through the codec, with error feedback or without.
Drift run_steps(const std::string& spec, bool feedback, int steps, std::size_t n,
                ErrorFeedback& ef) {
  auto c = make_codec_from_spec(spec);
  Drift d;
  d.gap.assign(n, 0.0);
  std::vector<std::byte> wire(c->encoded_bytes(n));
  std::vector<float> dec(n);
  for (int step = 0; step < steps; ++step) {
    const auto g = normal_floats(n, static_cast<std::uint32_t>(1000 + step));
    if (feedback) {
      const auto r = ef.residual("layer.0.weight", n);
      for (std::size_t i = 0; i < n; ++i) {
        d.max_compensated = std::max(d.max_compensated, std::fabs(double{g[i]}) + std::fabs(r[i]));
      }
      ef.encode(*c, "layer.0.weight", g, wire);
    } else {
      c->encode(g, wire);
    }
    c->decode(wire, dec);
    for (std::size_t i = 0; i < n; ++i) d.gap[i] += double{g[i]} - double{dec[i]};
  }
  return d;
}

TEST(ErrorFeedback, RunningSumOfDecodedTracksTheInputsToWithinTheResidual) {
  const std::size_t n = 1000;
  const int steps = 200;
  for (const char* spec : {"bf16", "fp16", "int8", "int8:block=64,stochastic=1,seed=1", "int4",
                           "topk:fraction=0.1", "onebit:block=64"}) {
    SCOPED_TRACE(spec);
    ErrorFeedback ef;
    const Drift with = run_steps(spec, true, steps, n, ef);
    const auto r = ef.residual("layer.0.weight", n);
    // sum(g) - sum(decoded) is the final residual, up to two fp32 roundings per element and step.
    const double tol = steps * 3 * std::ldexp(with.max_compensated, -24);
    double residual_norm = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(with.gap[i], r[i], tol) << "element " << i;
      residual_norm += double{r[i]} * r[i];
    }
    EXPECT_NEAR(with.norm(), std::sqrt(residual_norm), n * tol);

    // Without feedback the gap keeps growing, and ends far above one residual.
    ErrorFeedback unused;
    const Drift early = run_steps(spec, false, steps / 4, n, unused);
    const Drift late = run_steps(spec, false, steps, n, unused);
    EXPECT_GT(late.norm(), 1.5 * early.norm());
    EXPECT_GT(late.norm(), 3 * with.norm());
  }
}

TEST(ErrorFeedback, ResidualResetsWhenTheCountChangesAndKeysAreIndependent) {
  ErrorFeedback ef;
  auto c = make_codec("topk", "fraction=0.1");
  const auto g = normal_floats(100, 15);
  std::vector<std::byte> wire(c->encoded_bytes(100));
  ef.encode(*c, "a", g, wire);
  EXPECT_TRUE(ef.contains("a"));
  EXPECT_FALSE(ef.contains("b"));
  auto r = ef.residual("a", 100);
  std::size_t nonzero = 0;
  for (const float v : r) nonzero += v != 0.0F ? 1 : 0;
  EXPECT_EQ(nonzero, 90U);  // what top-k dropped
  EXPECT_EQ(ef.residual("b", 100)[0], 0.0F);
  EXPECT_EQ(ef.size(), 2U);

  r = ef.residual("a", 50);  // the tensor changed shape: start again
  ASSERT_EQ(r.size(), 50U);
  for (const float v : r) EXPECT_EQ(v, 0.0F);
  ef.erase("a");
  EXPECT_FALSE(ef.contains("a"));
  ef.clear();
  EXPECT_EQ(ef.size(), 0U);
}

TEST(ErrorFeedback, AFailedEncodeLeavesTheResidualAsItWas) {
  ErrorFeedback ef;
  auto c = make_codec("int4");
  auto g = normal_floats(200, 16);
  std::vector<std::byte> wire(c->encoded_bytes(200));
  ef.encode(*c, "w", g, wire);
  const auto r = ef.residual("w", 200);
  const std::vector<float> before(r.begin(), r.end());
  g[150] = std::numeric_limits<float>::quiet_NaN();
  const auto text = error_text([&] { ef.encode(*c, "w", g, wire); });
  EXPECT_NE(text.find("int4 codec: element 150 is nan"), std::string::npos) << text;
  const auto after = ef.residual("w", 200);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
}

}  // namespace
}  // namespace strait::comm
