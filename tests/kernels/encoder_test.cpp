#include "kernels/encoder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/kernels/gradcheck.h"

namespace strait::kernels {
namespace {

using namespace strait::testing;  // tests/kernels/gradcheck.h

struct Shape {
  int B, T, C, V;
};

TEST(Encoder, ForwardIsTokenPlusPositionEmbedding) {
  std::mt19937_64 rng(11);
  const int B = 3, T = 4, C = 5, V = 7, ctx = 6;
  const auto wte = random_vector(rng, V * C);
  const auto wpe = random_vector(rng, ctx * C);
  const auto tokens = random_tokens(rng, B * T, V);
  std::vector<double> out(B * T * C);
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) {
        const double ref = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
        EXPECT_EQ(out[(b * T + t) * C + c], ref);
      }
    }
  }
}

TEST(Encoder, BackwardMatchesFiniteDifferences) {
  // Few tokens in a small vocabulary, so repeated tokens exercise the scatter-accumulate.
  for (const Shape s : {Shape{1, 1, 3, 2}, Shape{2, 5, 4, 3}, Shape{3, 2, 6, 9}}) {
    std::mt19937_64 rng(s.B * 100 + s.T);
    auto wte = random_vector(rng, s.V * s.C);
    auto wpe = random_vector(rng, s.T * s.C);
    const auto tokens = random_tokens(rng, s.B * s.T, s.V);
    const auto r = random_vector(rng, s.B * s.T * s.C);  // L = sum(out * r)
    std::vector<double> out(r.size());
    auto loss = [&] {
      encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C, s.V);
      return dot(out, r);
    };
    const auto dwte0 = random_vector(rng, wte.size());
    const auto dwpe0 = random_vector(rng, wpe.size());
    auto dwte = dwte0;
    auto dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), s.B, s.T, s.C, s.V);
    EXPECT_LT(relative_error(accumulated(dwte, dwte0), numeric_gradient(wte, loss)), 1e-6);
    EXPECT_LT(relative_error(accumulated(dwpe, dwpe0), numeric_gradient(wpe, loss)), 1e-6);
  }
}

TEST(Encoder, FloatMatchesDouble) {
  std::mt19937_64 rng(5);
  const int B = 2, T = 8, C = 16, V = 10;
  const auto wte = random_vector(rng, V * C);
  const auto wpe = random_vector(rng, T * C);
  const auto tokens = random_tokens(rng, B * T, V);
  const std::vector<float> wtef(wte.begin(), wte.end()), wpef(wpe.begin(), wpe.end());
  std::vector<double> out(B * T * C);
  std::vector<float> outf(out.size());
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  encoder_forward(outf.data(), tokens.data(), wtef.data(), wpef.data(), B, T, C, V);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outf[i], out[i], 1e-6);
}

TEST(Encoder, RejectsTokensOutsideVocabulary) {
  const std::vector<double> wte(3 * 2), wpe(2 * 2);
  std::vector<double> out(4);
  const std::vector<std::int32_t> bad = {1, 3};
  try {
    encoder_forward(out.data(), bad.data(), wte.data(), wpe.data(), 1, 2, 2, 3);
    FAIL() << "token 3 with V = 3 must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("token 3 at position 1"), std::string::npos) << e.what();
  }
  const std::vector<std::int32_t> negative = {-1, 0};
  EXPECT_THROW(encoder_forward(out.data(), negative.data(), wte.data(), wpe.data(), 1, 2, 2, 3),
               Error);
}

}  // namespace
}  // namespace strait::kernels
