#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

struct Shape {
  int B, T, C, NH;
};

struct Reference {
  std::vector<double> out, preatt, att;
};

// Textbook causal attention, one (b, h, query) at a time.
Reference naive_attention(const std::vector<double>& qkv, Shape s) {
  const int hs = s.C / s.NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Reference r{std::vector<double>(s.B * s.T * s.C),
              std::vector<double>(s.B * s.NH * s.T * s.T, -std::numeric_limits<double>::infinity()),
              std::vector<double>(s.B * s.NH * s.T * s.T, 0.0)};
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(b * s.T + t) * 3 * s.C + part * s.C + h * hs + i];
  };
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      for (int t = 0; t < s.T; ++t) {
        const int base = ((b * s.NH + h) * s.T + t) * s.T;
        double mx = -std::numeric_limits<double>::infinity();
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < hs; ++i) d += at(b, t, 0, h, i) * at(b, u, 1, h, i);
          r.preatt[base + u] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += std::exp(r.preatt[base + u] - mx);
        for (int u = 0; u <= t; ++u) r.att[base + u] = std::exp(r.preatt[base + u] - mx) / z;
        for (int i = 0; i < hs; ++i) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += r.att[base + u] * at(b, u, 2, h, i);
          r.out[(b * s.T + t) * s.C + h * hs + i] = o;
        }
      }
    }
  }
  return r;
}

const Shape kShapes[] = {{1, 1, 4, 2}, {2, 5, 6, 3}, {3, 4, 8, 1}, {1, 7, 8, 4}, {2, 3, 2, 2}};

TEST(Attention, ForwardMatchesNaiveReference) {
  for (const Shape s : kShapes) {
    std::mt19937_64 rng(s.B * 17 + s.T * 5 + s.NH);
    const auto qkv = random_vector(rng, s.B * s.T * 3 * s.C, -2.0, 2.0);
    const Reference ref = naive_attention(qkv, s);
    std::vector<double> out(ref.out.size()), preatt(ref.preatt.size()), att(ref.att.size());
    attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    EXPECT_LT(relative_error(out, ref.out), 1e-13);
    EXPECT_LT(relative_error(att, ref.att), 1e-13);
    for (std::size_t i = 0; i < preatt.size(); ++i) {
      if (std::isinf(ref.preatt[i])) {
        EXPECT_EQ(preatt[i], ref.preatt[i]) << "masked score " << i;
      } else {
        EXPECT_NEAR(preatt[i], ref.preatt[i], 1e-13) << i;
      }
    }
    // preatt is optional: the outputs do not depend on it.
    std::vector<double> out2(out.size()), att2(att.size());
    attention_forward<double>(out2.data(), nullptr, att2.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    EXPECT_EQ(out2, out);
    EXPECT_EQ(att2, att);
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (const Shape s : kShapes) {
    std::mt19937_64 rng(s.B * 3 + s.T * 11 + s.C);
    auto qkv = random_vector(rng, s.B * s.T * 3 * s.C, -1.5, 1.5);
    const auto r = random_vector(rng, s.B * s.T * s.C);
    std::vector<double> out(r.size()), att(s.B * s.NH * s.T * s.T);
    auto loss = [&] {
      attention_forward<double>(out.data(), nullptr, att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
      return dot(out, r);
    };
    loss();
    const auto saved_att = att;
    const auto dqkv0 = random_vector(rng, qkv.size());
    auto dqkv = dqkv0;
    std::vector<double> scratch(s.T * s.T);
    attention_backward(dqkv.data(), scratch.data(), r.data(), qkv.data(), saved_att.data(), s.B,
                       s.T, s.C, s.NH);
    EXPECT_LT(relative_error(accumulated(dqkv, dqkv0), numeric_gradient(qkv, loss)), 1e-6)
        << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH;
  }
}

TEST(Attention, FloatMatchesDouble) {
  const Shape s{2, 64, 32, 4};
  std::mt19937_64 rng(77);
  const auto qkv = random_vector(rng, s.B * s.T * 3 * s.C, -2.0, 2.0);
  const auto r = random_vector(rng, s.B * s.T * s.C);
  std::vector<double> out(r.size()), att(s.B * s.NH * s.T * s.T), dqkv(qkv.size()),
      scratch(s.T * s.T);
  attention_forward<double>(out.data(), nullptr, att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  attention_backward(dqkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), s.B, s.T, s.C,
                     s.NH);
  const std::vector<float> qkvf(qkv.begin(), qkv.end()), rf(r.begin(), r.end());
  std::vector<float> outf(out.size()), attf(att.size()), dqkvf(dqkv.size()), scratchf(s.T * s.T);
  attention_forward<float>(outf.data(), nullptr, attf.data(), qkvf.data(), s.B, s.T, s.C, s.NH);
  attention_backward(dqkvf.data(), scratchf.data(), rf.data(), qkvf.data(), attf.data(), s.B, s.T,
                     s.C, s.NH);
  auto widen = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_LT(relative_error(widen(outf), out), 1e-5);
  EXPECT_LT(relative_error(widen(dqkvf), dqkv), 1e-4);
}

TEST(Attention, RejectsChannelsNotDivisibleByHeads) {
  std::vector<double> buf(64);
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), 1, 2, 6, 4),
               Error);
}

}  // namespace
}  // namespace strait::kernels
