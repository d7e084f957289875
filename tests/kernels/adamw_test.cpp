#include "kernels/adamw.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "tests/common/expect_error.h"
#include "tests/common/simd_levels.h"

namespace strait::kernels {
namespace {

// The update written out in double exactly as the paper / torch.optim.AdamW state it.
struct Reference {
  std::vector<double> p, m, v;

  void step(const std::vector<float>& g, const AdamWHyper& h, int t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] -= h.lr * h.weight_decay * p[i];
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      // 1-bit Adam's frozen preconditioner: v and its bias correction stop at the freeze step.
      const bool frozen = h.freeze_variance_after > 0 && t > h.freeze_variance_after;
      if (!frozen) v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
      const double t2 = frozen ? static_cast<double>(h.freeze_variance_after) : t;
      const double m_hat = m[i] / (1 - std::pow(h.beta1, t));
      const double v_hat = v[i] / (1 - std::pow(h.beta2, t2));
      p[i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
  }
};

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Whether a and b hold the same bits element by element, which is stricter than equal values
// (-0 equals +0) and holds for NaNs too. On failure, names the first element that differs.
::testing::AssertionResult BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " and " << b.size();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto bits_a = std::bit_cast<std::uint32_t>(a[i]);
    const auto bits_b = std::bit_cast<std::uint32_t>(b[i]);
    if (bits_a != bits_b) {
      return ::testing::AssertionFailure()
             << "element " << i << " differs: " << a[i] << " (bits " << bits_a << ") vs " << b[i]
             << " (bits " << bits_b << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Gradients of mixed scale, with exact zeros, so eps and tiny v matter somewhere.
std::vector<float> gradients(std::size_t n, std::mt19937& rng, int t) {
  std::vector<float> g = random_vector(n, rng, t % 2 == 0 ? 1e-3F : 2.0F);
  for (std::size_t i = 0; i < n; i += 17) g[i] = 0.0F;
  return g;
}

::testing::AssertionResult IsBf16Of(const std::vector<std::uint16_t>& bf16,
                                    const std::vector<float>& p) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (bf16[i] != f32_to_bf16(p[i])) {
      return ::testing::AssertionFailure() << "bf16 copy of element " << i << " (" << p[i]
                                           << ") is " << bf16[i] << ", not " << f32_to_bf16(p[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

// Every SIMD level (the vector bodies and every tail length) against the double reference.
TEST(AdamW, MatchesDoubleReferenceOnEveryLevelAndSize) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16},
                              std::size_t{17}, std::size_t{1037}, std::size_t{1000003}}) {
    for (const AdamWHyper h :
         {AdamWHyper{1e-2, 0.9, 0.999, 1e-8, 0.1}, AdamWHyper{1e-1, 0.0, 0.5, 1e-3, 1.0}}) {
      strait::test::for_each_simd_level([&](SimdLevel level) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " lr=" << h.lr);
        std::mt19937 rng(11);
        std::vector<float> p = random_vector(n, rng, 1.0F);
        std::vector<float> m(n, 0.0F), v(n, 0.0F);
        std::vector<std::uint16_t> bf16(n, 0xffff);
        Reference ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
        std::vector<double> g_max(n, 0.0);  // bounds |m| and sqrt(v): the scale of their rounding
        const int steps = n > 100000 ? 4 : 12;
        for (int t = 1; t <= steps; ++t) {
          const std::vector<float> g = gradients(n, rng, t);
          adamw_step(p, g, m, v, h, t, bf16);
          ref.step(g, h, t);
          ASSERT_TRUE(IsBf16Of(bf16, p)) << simd_level_name(level) << " t=" << t;
          for (std::size_t i = 0; i < n; ++i) {
            g_max[i] = std::max(g_max[i], std::fabs(static_cast<double>(g[i])));
            // fp32 rounding accumulates about one ulp of p per step; the update itself is ~lr.
            const double tol_p = 4e-7 * t * (1.0 + std::fabs(ref.p[i]));
            ASSERT_NEAR(p[i], ref.p[i], tol_p) << "t=" << t << " i=" << i;
            // b1 m and (1 - b1) g may cancel: the error scales with the terms, not the result.
            ASSERT_NEAR(m[i], ref.m[i], 2e-7 * t * g_max[i]) << "t=" << t << " i=" << i;
            ASSERT_NEAR(v[i], ref.v[i], 2e-7 * t * g_max[i] * g_max[i]) << "t=" << t << " i=" << i;
          }
        }
      });
    }
  }
}

// With freeze_variance_after = 5, steps 6.. leave v bit for bit as step 5 left it and keep its
// bias correction at step 5's, on every SIMD level, and p still follows the double reference.
TEST(AdamW, FrozenVarianceStopsUpdatingVAfterTheFreezeStep) {
  const std::size_t n = 1037;
  AdamWHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1};
  h.freeze_variance_after = 5;
  strait::test::for_each_simd_level([&](SimdLevel level) {
    SCOPED_TRACE(simd_level_name(level));
    std::mt19937 rng(5);
    std::vector<float> p = random_vector(n, rng, 1.0F);
    std::vector<float> m(n, 0.0F), v(n, 0.0F);
    Reference ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
    std::vector<float> v_at_freeze;
    for (int t = 1; t <= 12; ++t) {
      const std::vector<float> g = gradients(n, rng, t);
      adamw_step(p, g, m, v, h, t);
      ref.step(g, h, t);
      if (t == 5) v_at_freeze = v;
      if (t > 5) {
        ASSERT_TRUE(BitIdentical(v, v_at_freeze)) << "t=" << t;
      }
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(p[i], ref.p[i], 4e-7 * t * (1.0 + std::fabs(ref.p[i]))) << "t=" << t;
      }
    }
    // The frozen v is not the one plain AdamW reaches: the freeze did something.
    std::mt19937 rng2(5);
    std::vector<float> p2 = random_vector(n, rng2, 1.0F);
    std::vector<float> m2(n, 0.0F), v2(n, 0.0F);
    AdamWHyper plain = h;
    plain.freeze_variance_after = 0;
    for (int t = 1; t <= 12; ++t) adamw_step(p2, gradients(n, rng2, t), m2, v2, plain, t);
    EXPECT_FALSE(BitIdentical(v2, v));
    EXPECT_FALSE(BitIdentical(p2, p));
  });
}

// Inputs that take every branch of the arithmetic and of the bf16 rounding: zeros of both signs,
// subnormals, huge values (v overflows to Inf), NaN and Inf gradients, bf16 rounding ties.
std::vector<float> awkward(std::size_t n, std::mt19937& rng) {
  std::vector<float> x = random_vector(n, rng, 1.0F);
  const float specials[] = {0.0F,
                            -0.0F,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min() * 77.0F,
                            3e38F,
                            -1e30F,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x3f808000U),   // a bf16 tie, rounds down
                            std::bit_cast<float>(0x3f818000U)};  // a bf16 tie, rounds up
  for (std::size_t i = 0; i < n; i += 7) x[i] = specials[(i / 7) % std::size(specials)];
  return x;
}

// Each level against the scalar path, bit for bit, at every start alignment and tail length.
TEST(AdamW, SimdLevelsAreBitIdenticalToScalar) {
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8, 0.1};
  std::mt19937 rng(23);
  const std::size_t n = 1200;
  const std::vector<float> p0 = awkward(n, rng), g1 = awkward(n, rng), g2 = awkward(n, rng);
  for (const std::size_t offset : {0, 1, 3, 8, 15}) {
    for (const std::size_t len : {0, 1, 7, 8, 9, 16, 31, 33, 64, 1000}) {
      std::vector<float> want_p, want_m, want_v;
      std::vector<std::uint16_t> want_bf16;
      strait::test::for_each_simd_level([&](SimdLevel level) {
        SCOPED_TRACE(::testing::Message() << "offset=" << offset << " len=" << len);
        std::vector<float> p = p0, m(n, 0.0F), v(n, 0.0F);
        std::vector<std::uint16_t> bf16(n, 0);
        const auto sub = [&](auto& x) { return std::span(x).subspan(offset, len); };
        for (int t = 1; t <= 2; ++t) {
          adamw_step(sub(p), std::span<const float>(t == 1 ? g1 : g2).subspan(offset, len), sub(m),
                     sub(v), h, t, sub(bf16));
        }
        if (level == SimdLevel::Scalar) {
          want_p = p, want_m = m, want_v = v, want_bf16 = bf16;
          return;
        }
        EXPECT_TRUE(BitIdentical(p, want_p));
        EXPECT_TRUE(BitIdentical(m, want_m));
        EXPECT_TRUE(BitIdentical(v, want_v));
        EXPECT_EQ(bf16, want_bf16);
      });
    }
  }
}

// The bf16 copy is optional: without it p, m and v are the same bits as with it.
TEST(AdamW, Bf16CopyIsTheCastOfTheFp32Result) {
  const AdamWHyper h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  std::mt19937 rng(3);
  const std::size_t n = 333;
  const std::vector<float> p0 = awkward(n, rng), g = awkward(n, rng);
  strait::test::for_each_simd_level([&](SimdLevel) {
    std::vector<float> p1 = p0, p2 = p0, m1(n), v1(n), m2(n), v2(n);
    std::vector<std::uint16_t> bf16(n);
    adamw_step(p1, g, m1, v1, h, 1, bf16);
    adamw_step(p2, g, m2, v2, h, 1);
    EXPECT_TRUE(IsBf16Of(bf16, p1));
    EXPECT_TRUE(BitIdentical(p1, p2));
    EXPECT_TRUE(BitIdentical(m1, m2));
    EXPECT_TRUE(BitIdentical(v1, v2));
  });
}

// 1 to 4 threads (several tiles and a partial one) give the bits of one single-threaded call.
TEST(AdamW, ThreadCountsAreBitIdentical) {
  const std::size_t n = 3 * ParallelAdamW::kTileParams + 1234;
  const AdamWHyper h{1e-3, 0.9, 0.999, 1e-8, 0.05};
  std::mt19937 rng(9);
  const std::vector<float> p0 = awkward(n, rng);
  std::vector<std::vector<float>> grads;
  for (int t = 1; t <= 3; ++t) grads.push_back(gradients(n, rng, t));
  std::vector<float> want_p = p0, want_m(n), want_v(n);
  std::vector<std::uint16_t> want_bf16(n);
  for (int t = 1; t <= 3; ++t) {
    adamw_step(want_p, grads[t - 1], want_m, want_v, h, t, want_bf16);
  }
  for (unsigned threads = 1; threads <= 4; ++threads) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    ParallelAdamW opt(threads);
    ASSERT_EQ(opt.threads(), threads);
    std::vector<float> p = p0, m(n), v(n);
    std::vector<std::uint16_t> bf16(n);
    for (int t = 1; t <= 3; ++t) opt.step(p, grads[t - 1], m, v, h, t, bf16);
    EXPECT_TRUE(BitIdentical(p, want_p));
    EXPECT_TRUE(BitIdentical(m, want_m));
    EXPECT_TRUE(BitIdentical(v, want_v));
    EXPECT_EQ(bf16, want_bf16);
    // Ranges of a tile or less, and empty ones, on the same pool.
    std::vector<float> q = {1.0F, 2.0F}, q_ref = q, gq = {0.5F, -0.5F}, mq(2), vq(2), mr(2), vr(2);
    opt.step(q, gq, mq, vq, h, 1);
    adamw_step(q_ref, gq, mr, vr, h, 1);
    EXPECT_TRUE(BitIdentical(q, q_ref));
    opt.step(std::span<float>{}, {}, {}, {}, h, 1);
  }
  EXPECT_GE(ParallelAdamW(0).threads(), 1U);
}

TEST(AdamW, ParallelRejectsBadArgumentsBeforeTouchingAnything) {
  ParallelAdamW opt(2);
  std::vector<float> p(100000, 1.0F), g(100000, 1.0F), m(100000), v(100000);
  std::vector<std::uint16_t> short_bf16(99999);
  strait::test::expect_error(ErrorCode::InvalidArgument,
                             [&] { opt.step(p, g, m, v, AdamWHyper{}, 1, short_bf16); });
  strait::test::expect_error(ErrorCode::InvalidArgument,
                             [&] { opt.step(p, g, m, v, AdamWHyper{-1.0}, 1); });
  EXPECT_EQ(p, std::vector<float>(100000, 1.0F));
  EXPECT_EQ(m, std::vector<float>(100000, 0.0F));
}

TEST(AdamW, FirstStepIsSignTimesLrPlusDecay) {
  // Closed form at t = 1 from zero moments: m_hat = g and sqrt(v_hat) = |g|, so
  // p1 = p0 (1 - lr wd) - lr g / (|g| + eps). Without bias correction the step would be
  // (1 - b1) / sqrt(1 - b2) = 3.16 times larger.
  const AdamWHyper h{0.05, 0.9, 0.999, 1e-8, 0.2};
  std::vector<float> p = {1.0F, -2.0F, 0.5F, 3.0F, -0.25F};
  const std::vector<float> g = {0.3F, -4.0F, 1e-3F, -7.0F, 2.0F};
  std::vector<float> m(p.size()), v(p.size());
  const std::vector<float> p0 = p;
  adamw_step(p, g, m, v, h, 1);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expect =
        p0[i] * (1 - h.lr * h.weight_decay) - h.lr * g[i] / (std::fabs(g[i]) + h.eps);
    EXPECT_NEAR(p[i], expect, 1e-6) << i;
  }
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  // With zero gradients the moments stay zero and only the decay acts: p_t = p0 (1 - lr wd)^t.
  // (Adam with L2 would fold wd * p into g and move p by about lr per step instead.)
  const AdamWHyper h{0.01, 0.9, 0.999, 1e-8, 0.5};
  std::vector<float> p = {1.0F, -3.0F, 100.0F};
  const std::vector<float> p0 = p;
  const std::vector<float> g(p.size(), 0.0F);
  std::vector<float> m(p.size()), v(p.size());
  for (int t = 1; t <= 50; ++t) adamw_step(p, g, m, v, h, t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expect = p0[i] * std::pow(1 - h.lr * h.weight_decay, 50);
    EXPECT_NEAR(p[i], expect, 1e-5 * std::fabs(expect)) << i;
    EXPECT_EQ(m[i], 0.0F);
    EXPECT_EQ(v[i], 0.0F);
  }
}

TEST(AdamW, SplittingTheRangeIsBitIdentical) {
  // Offload streams ranges in chunks: any split must give the same bits as one call.
  std::mt19937 rng(5);
  const std::size_t n = 4099;
  const AdamWHyper h{2e-3, 0.9, 0.99, 1e-8, 0.05};
  std::vector<float> p1 = random_vector(n, rng, 1.0F), p2 = p1;
  std::vector<float> m1(n), v1(n), m2(n), v2(n);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, rng, 0.5F);
    adamw_step(p1, g, m1, v1, h, t);
    const std::span<float> sp(p2), sm(m2), sv(v2);
    const std::span<const float> sg(g);
    for (const auto& [lo, len] :
         {std::pair<std::size_t, std::size_t>{0, 3}, {3, 1030}, {1033, 3066}}) {
      adamw_step(sp.subspan(lo, len), sg.subspan(lo, len), sm.subspan(lo, len), sv.subspan(lo, len),
                 h, t);
    }
  }
  EXPECT_TRUE(BitIdentical(p1, p2));
  EXPECT_TRUE(BitIdentical(m1, m2));
  EXPECT_TRUE(BitIdentical(v1, v2));
}

// torch.optim.AdamW itself (Debian's python3-torch, through a subprocess) on a small tensor for a
// few steps, in its single-tensor and foreach forms: same weight decay, bias correction and eps
// placement. torch may fuse multiply-adds, so the comparison allows a few ulps, far less than a
// difference of semantics would give (e.g. eps inside the sqrt, or no bias correction).
TEST(AdamW, MatchesTorchAdamW) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not installed (python3-torch)";
  }
  const std::size_t n = 257;
  const int steps = 6;
  const AdamWHyper h{5e-2, 0.8, 0.95, 1e-6, 0.3};
  std::mt19937 rng(17);
  const std::vector<float> p0 = random_vector(n, rng, 1.0F);
  std::vector<float> all_g;
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> g = gradients(n, rng, t);
    all_g.insert(all_g.end(), g.begin(), g.end());
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strait_adamw_torch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::vector<float>& x) {
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(x.data()),
               static_cast<std::streamsize>(x.size() * sizeof(float)));
  };
  write("p0.bin", p0);
  write("g.bin", all_g);
  std::ofstream(dir / "run.py") << R"(import sys
import numpy as np
import torch
d, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lr, b1, b2, eps, wd = (float(x) for x in sys.argv[4:9])
torch.set_num_threads(1)
g = np.fromfile(d + "/g.bin", dtype=np.float32).reshape(steps, n)
for foreach in (False, True):
    param = torch.nn.Parameter(torch.from_numpy(np.fromfile(d + "/p0.bin", dtype=np.float32)))
    opt = torch.optim.AdamW([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd,
                            foreach=foreach)
    for t in range(steps):
        param.grad = torch.from_numpy(g[t].copy())
        opt.step()
    st = opt.state[param]
    out = [param.detach().numpy(), st["exp_avg"].numpy(), st["exp_avg_sq"].numpy()]
    np.concatenate(out).astype(np.float32).tofile(d + "/out_" + str(foreach) + ".bin")
)";
  const std::string cmd =
      fmt::format("/usr/bin/python3 {}/run.py {} {} {} {} {} {} {} {}", dir.string(), dir.string(),
                  n, steps, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  std::vector<float> p = p0, m(n), v(n);
  for (int t = 1; t <= steps; ++t) {
    adamw_step(p, std::span<const float>(all_g).subspan((t - 1) * n, n), m, v, h, t);
  }
  for (const char* name : {"out_False.bin", "out_True.bin"}) {
    SCOPED_TRACE(name);
    std::vector<float> out(3 * n);
    std::ifstream(dir / name, std::ios::binary)
        .read(reinterpret_cast<char*>(out.data()),
              static_cast<std::streamsize>(out.size() * sizeof(float)));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], out[i], 1e-6 * (1.0 + std::fabs(p[i]))) << i;
      ASSERT_NEAR(m[i], out[n + i], 1e-6 * (1.0 + std::fabs(m[i]))) << i;
      ASSERT_NEAR(v[i], out[2 * n + i], 1e-6 * (1.0 + std::fabs(v[i]))) << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(AdamW, RejectsBadArguments) {
  std::vector<float> p(4), g(4), m(4), v(4), short_v(3);
  std::vector<std::uint16_t> short_bf16(3);
  const AdamWHyper ok;
  // The code and the argument the message names.
  const auto error_of = [](auto&& fn) -> std::pair<ErrorCode, std::string> {
    try {
      fn();
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {ErrorCode::Internal, "no throw"};
  };
  const auto expect_named = [&](auto&& fn, const std::string& name) {
    const auto [code, what] = error_of(fn);
    EXPECT_EQ(code, ErrorCode::InvalidArgument) << what;
    EXPECT_NE(what.find(name), std::string::npos) << "'" << what << "' does not name " << name;
  };
  expect_named([&] { adamw_step(p, g, m, v, ok, 0); }, "step is 0");
  expect_named([&] { adamw_step(p, g, m, v, ok, -3); }, "step is -3");
  expect_named([&] { adamw_step(p, g, m, short_v, ok, 1); }, "same length");
  expect_named([&] { adamw_step(p, g, m, v, ok, 1, short_bf16); }, "params_bf16");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::pair<AdamWHyper, std::string> bad[] = {
      {AdamWHyper{-1e-3}, "lr = -0.001"},
      {AdamWHyper{nan}, "lr = nan"},
      {AdamWHyper{1e-3, 1.0}, "beta1 = 1"},
      {AdamWHyper{1e-3, 0.9, 1.5}, "beta2 = 1.5"},
      {AdamWHyper{1e-3, 0.9, -0.1}, "beta2 = -0.1"},
      {AdamWHyper{1e-3, 0.9, 0.999, -1.0}, "eps = -1"},
      {AdamWHyper{1e-3, 0.9, 0.999, 1e-8, nan}, "weight_decay = nan"},
      {AdamWHyper{1e-3, 0.9, 0.999, 1e-8, -0.5}, "weight_decay = -0.5"},
      {AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0, -2}, "freeze_variance_after = -2"},
  };
  for (const auto& item : bad) {  // not a structured binding: lambdas cannot capture one in clang
    const AdamWHyper& hyper = item.first;
    expect_named([&] { adamw_step(p, g, m, v, hyper, 1); }, item.second);
  }
  adamw_step(std::span<float>{}, {}, {}, {}, ok, 1);  // empty range: nothing to do
}

}  // namespace
}  // namespace strait::kernels
