#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/rank_model.h"
#include "scheduler/schedule.h"
#include "tests/kernels/gradcheck.h"

namespace strait::sched {
namespace {

using testing::numeric_gradient;
using testing::random_tokens;
using testing::relative_error;

// The tiny model of the finite-difference tests.
GptConfig tiny(int layers = 2) {
  GptConfig c;
  c.vocab = 11;
  c.ctx = 5;
  c.layers = layers;
  c.dim = 8;
  c.heads = 2;
  return c;
}

std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// Moves every parameter away from its structured initial value (zero biases, unit layernorm
// weights), deterministically per tensor name so that split models get the same perturbation.
template <class F>
void perturb(StageModel<F>& m, double scale) {
  for (const TensorInfo& t : m.tensors()) {
    std::mt19937_64 rng(name_hash(t.name));
    std::uniform_real_distribution<double> dist(-scale, scale);
    for (F& x : m.param(t.name)) x += static_cast<F>(dist(rng));
  }
}

std::vector<double> to_vector(std::span<const double> s) {
  return {s.begin(), s.end()};
}

// ---- An independent GPT-2 forward: naive loops over named tensors, in double. ----

using Mat = std::vector<std::vector<double>>;  // [rows][cols]

struct Naive {
  GptConfig cfg;
  std::map<std::string, std::vector<double>> p;

  const std::vector<double>& at(const std::string& n) const { return p.at(n); }

  // y = x . w^T + b with w = name.weight (or the tied "wte") and b = name.bias.
  Mat linear(const Mat& x, const std::string& name, int out, bool bias = true) const {
    const auto& w = name == "wte" ? at(name) : at(name + ".weight");
    const int in = static_cast<int>(x[0].size());
    Mat y(x.size(), std::vector<double>(out, 0.0));
    for (std::size_t r = 0; r < x.size(); ++r) {
      for (int o = 0; o < out; ++o) {
        double acc = bias ? at(name + ".bias")[o] : 0.0;
        for (int i = 0; i < in; ++i) acc += x[r][i] * w[o * in + i];
        y[r][o] = acc;
      }
    }
    return y;
  }

  Mat layernorm(const Mat& x, const std::string& name) const {
    const auto& w = at(name + ".weight");
    const auto& b = at(name + ".bias");
    Mat y = x;
    for (std::size_t r = 0; r < x.size(); ++r) {
      const double n = static_cast<double>(x[r].size());
      double mean = 0;
      for (double v : x[r]) mean += v / n;
      double var = 0;
      for (double v : x[r]) var += (v - mean) * (v - mean) / n;
      for (std::size_t c = 0; c < x[r].size(); ++c) {
        y[r][c] = (x[r][c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
      }
    }
    return y;
  }

  // Returns logits [B*T][V] and sets the mean loss when targets are given.
  Mat forward(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>* targets,
              int B, int T, double* loss) const {
    const int C = cfg.dim, NH = cfg.heads, hs = C / NH;
    Mat x(B * T, std::vector<double>(C));
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int c = 0; c < C; ++c) {
          x[b * T + t][c] = at("wte")[tokens[b * T + t] * C + c] + at("wpe")[t * C + c];
        }
      }
    }
    for (int l = 0; l < cfg.layers; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      const Mat qkv = linear(layernorm(x, h + "ln_1"), h + "attn.c_attn", 3 * C);
      Mat y(B * T, std::vector<double>(C, 0.0));
      for (int b = 0; b < B; ++b) {
        for (int head = 0; head < NH; ++head) {
          for (int t = 0; t < T; ++t) {
            std::vector<double> w(t + 1);
            double mx = -1e300;
            for (int u = 0; u <= t; ++u) {
              double d = 0;
              for (int i = 0; i < hs; ++i) {
                d += qkv[b * T + t][head * hs + i] * qkv[b * T + u][C + head * hs + i];
              }
              w[u] = d / std::sqrt(static_cast<double>(hs));
              mx = std::max(mx, w[u]);
            }
            double z = 0;
            for (double& v : w) z += (v = std::exp(v - mx));
            for (int u = 0; u <= t; ++u) {
              for (int i = 0; i < hs; ++i) {
                y[b * T + t][head * hs + i] += w[u] / z * qkv[b * T + u][2 * C + head * hs + i];
              }
            }
          }
        }
      }
      const Mat a = linear(y, h + "attn.c_proj", C);
      for (int r = 0; r < B * T; ++r) {
        for (int c = 0; c < C; ++c) x[r][c] += a[r][c];
      }
      Mat f = linear(layernorm(x, h + "ln_2"), h + "mlp.c_fc", 4 * C);
      for (auto& row : f) {
        for (double& v : row) {
          v = 0.5 * v *
              (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
        }
      }
      const Mat m = linear(f, h + "mlp.c_proj", C);
      for (int r = 0; r < B * T; ++r) {
        for (int c = 0; c < C; ++c) x[r][c] += m[r][c];
      }
    }
    const Mat logits = linear(layernorm(x, "ln_f"), "wte", cfg.vocab, false);
    if (targets != nullptr) {
      double total = 0;
      for (int r = 0; r < B * T; ++r) {
        double z = 0;
        for (double v : logits[r]) z += std::exp(v);
        total += std::log(z) - logits[r][(*targets)[r]];
      }
      *loss = total / (B * T);
    }
    return logits;
  }
};

Naive naive_from(StageModel<double>& m) {
  Naive n{m.config(), {}};
  for (const TensorInfo& t : m.tensors()) n.p[t.name] = to_vector(m.param(t.name));
  return n;
}

// ---- Configuration, split and layout ----

TEST(GptConfig, ValidateNamesTheBadField) {
  GptConfig{}.validate();
  auto expect_invalid = [](GptConfig c, const std::string& needle) {
    try {
      c.validate();
      FAIL() << "expected InvalidArgument mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GptConfig c;
  c.vocab = 0;
  expect_invalid(c, "vocab");
  c = {};
  c.ctx = -1;
  expect_invalid(c, "ctx");
  c = {};
  c.layers = 0;
  expect_invalid(c, "layers");
  c = {};
  c.dim = 0;
  expect_invalid(c, "dim");
  c = {};
  c.heads = 0;
  expect_invalid(c, "heads");
  c = {};
  c.heads = 3;  // 128 % 3 != 0
  expect_invalid(c, "not divisible by heads");
}

TEST(SplitLayers, EvenAsPossibleAndContiguous) {
  EXPECT_EQ(split_layers(4, 1), (std::vector<LayerRange>{{0, 4}}));
  EXPECT_EQ(split_layers(4, 2), (std::vector<LayerRange>{{0, 2}, {2, 4}}));
  EXPECT_EQ(split_layers(5, 3), (std::vector<LayerRange>{{0, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(split_layers(3, 3), (std::vector<LayerRange>{{0, 1}, {1, 2}, {2, 3}}));
  for (int L = 1; L <= 12; ++L) {
    for (int P = 1; P <= L; ++P) {
      const auto r = split_layers(L, P);
      ASSERT_EQ(static_cast<int>(r.size()), P);
      EXPECT_EQ(r.front().first, 0);
      EXPECT_EQ(r.back().last, L);
      for (int s = 0; s < P; ++s) {
        const int n = r[s].last - r[s].first;
        EXPECT_TRUE(n == L / P || n == L / P + 1) << L << "/" << P;
        if (s > 0) {
          EXPECT_EQ(r[s].first, r[s - 1].last);
        }
      }
    }
  }
  EXPECT_THROW(split_layers(2, 3), Error);
  EXPECT_THROW(split_layers(2, 0), Error);
}

// Given counts: the ranges they name, in order; an even split's own counts give it back.
TEST(SplitLayers, GivenCountsAreTakenAsTheyAreAndCheckedAgainstTheModel) {
  EXPECT_EQ(split_layers(12, 4, std::vector<int>{3, 4, 4, 1}),
            (std::vector<LayerRange>{{0, 3}, {3, 7}, {7, 11}, {11, 12}}));
  EXPECT_EQ(split_layers(5, 3, std::vector<int>{}), split_layers(5, 3));
  EXPECT_EQ(split_layers(5, 3, std::vector<int>{2, 2, 1}), split_layers(5, 3));
  for (const std::vector<int>& bad : {std::vector<int>{3, 2}, std::vector<int>{4, 0},
                                      std::vector<int>{1, 1, 2}, std::vector<int>{5, -1}}) {
    try {
      (void)split_layers(4, 2, bad);
      ADD_FAILURE() << "accepted " << bad.size() << " counts";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(e.message().find("layers per stage"), std::string::npos) << e.message();
    }
  }
}

// A pipeline rank of an uneven split holds exactly its layers' tensors, named as in one stage.
TEST(RankModel, UnevenSplitHoldsItsLayersUnderTheirGlobalNames) {
  const GptConfig cfg = tiny(4);
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  const std::vector<int> split = {3, 1};
  const RankModel first(cfg, s, 0, 2, 7, 1, split);
  const RankModel last(cfg, s, 1, 2, 7, 1, split);
  EXPECT_EQ(first.params().size(), StageModel<float>::parameter_count(cfg, {0, 3}));
  EXPECT_EQ(last.params().size(), StageModel<float>::parameter_count(cfg, {3, 4}));
  const StageModel<float> whole(cfg, {0, 4}, 2, 1, 7);
  for (const RankModel* m : {&first, &last}) {
    for (const TensorInfo& t : m->tensors()) {
      const TensorInfo& w = whole.tensor(t.name);
      ASSERT_EQ(t.count, w.count) << t.name;
      // The same initial bits as the unsplit model's (the names seed them).
      EXPECT_EQ(std::memcmp(m->params().data() + t.offset, whole.params().data() + w.offset,
                            t.count * sizeof(float)),
                0)
          << t.name;
    }
  }
  EXPECT_NO_THROW((void)first.chunk(0).tensor("h.2.mlp.c_fc.weight"));
  EXPECT_THROW((void)last.chunk(0).tensor("h.2.mlp.c_fc.weight"), Error);
  EXPECT_THROW(RankModel(cfg, s, 0, 2, 7, 1, std::vector<int>{2, 1}), Error);
}

TEST(StageModel, TensorLayoutIsContiguousWithDecayOnMatrices) {
  const GptConfig cfg = tiny(3);
  StageModel<double> whole(cfg, {0, 3}, 2, 1, 1);
  EXPECT_EQ(whole.params().size(), cfg.num_params());
  EXPECT_EQ(whole.grads().size(), whole.params().size());
  std::size_t next = 0;
  for (const TensorInfo& t : whole.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    std::size_t count = 1;
    for (int d : t.shape) count *= static_cast<std::size_t>(d);
    EXPECT_EQ(t.count, count) << t.name;
    EXPECT_EQ(t.weight_decay, t.shape.size() == 2) << t.name;
    next += t.count;
  }
  EXPECT_EQ(whole.tensor("h.2.mlp.c_proj.weight").shape, (std::vector<int>{8, 32}));
  EXPECT_EQ(whole.tensor("h.0.attn.c_attn.weight").shape, (std::vector<int>{24, 8}));
  EXPECT_TRUE(whole.tensor("wpe").weight_decay);
  EXPECT_FALSE(whole.tensor("ln_f.bias").weight_decay);
  EXPECT_FALSE(whole.tensor("h.1.attn.c_attn.bias").weight_decay);
  EXPECT_THROW(static_cast<void>(whole.tensor("h.3.ln_1.weight")), Error);

  const auto ranges = split_layers(3, 3);
  StageModel<double> first(cfg, ranges[0], 2, 1, 1);
  StageModel<double> middle(cfg, ranges[1], 2, 1, 1);
  StageModel<double> last(cfg, ranges[2], 2, 1, 1);
  EXPECT_EQ(first.tensors().front().name, "wte");
  EXPECT_EQ(first.tensors()[1].name, "wpe");
  EXPECT_EQ(first.tensors().back().name, "h.0.mlp.c_proj.bias");
  EXPECT_EQ(middle.tensors().front().name, "h.1.ln_1.weight");
  EXPECT_FALSE(middle.tied_wte().has_value());
  EXPECT_EQ(last.tensors().front().name, "wte");
  EXPECT_EQ(last.tensors().back().name, "ln_f.bias");
  ASSERT_TRUE(last.tied_wte().has_value());
  EXPECT_EQ(last.tied_wte()->offset, last.tensor("wte").offset);
  EXPECT_EQ(last.tied_wte()->count, std::size_t{11 * 8});
  // Every parameter once, plus the last stage's copy of wte.
  EXPECT_EQ(first.params().size() + middle.params().size() + last.params().size(),
            cfg.num_params() + 11 * 8);
}

TEST(StageModel, InitialisationFollowsGpt2) {
  GptConfig cfg;  // defaults: V=256, ctx=128, L=4, C=128
  StageModel<double> m(cfg, {0, cfg.layers}, 1, 1, 42);
  auto stats = [&](const std::string& name) {
    const auto p = m.param(name);
    double mean = 0, sq = 0;
    for (double v : p) mean += v / static_cast<double>(p.size());
    for (double v : p) sq += (v - mean) * (v - mean) / static_cast<double>(p.size());
    return std::pair{mean, std::sqrt(sq)};
  };
  for (const std::string name : {"wte", "wpe", "h.0.attn.c_attn.weight", "h.3.mlp.c_fc.weight"}) {
    const auto [mean, sd] = stats(name);
    EXPECT_NEAR(mean, 0.0, 1e-3) << name;
    EXPECT_NEAR(sd, 0.02, 0.02 * 0.03) << name;
  }
  const double residual = 0.02 / std::sqrt(8.0);
  for (const std::string name : {"h.1.attn.c_proj.weight", "h.2.mlp.c_proj.weight"}) {
    const auto [mean, sd] = stats(name);
    EXPECT_NEAR(mean, 0.0, 1e-3) << name;
    EXPECT_NEAR(sd, residual, residual * 0.05) << name;
  }
  // Normal, not uniform: about 68.3% within one standard deviation.
  const auto w = m.param("h.0.mlp.c_fc.weight");
  double inside = 0;
  for (double v : w) inside += std::fabs(v) < 0.02 ? 1.0 : 0.0;
  EXPECT_NEAR(inside / static_cast<double>(w.size()), 0.6827, 0.01);
  for (double v : m.param("h.2.ln_2.weight")) EXPECT_EQ(v, 1.0);
  for (double v : m.param("ln_f.bias")) EXPECT_EQ(v, 0.0);
  for (double v : m.param("h.1.mlp.c_fc.bias")) EXPECT_EQ(v, 0.0);
  for (double v : m.grads()) EXPECT_EQ(v, 0.0);
  // Different layers and seeds draw different values; the same seed draws the same ones.
  EXPECT_NE(to_vector(m.param("h.0.attn.c_attn.weight")),
            to_vector(m.param("h.1.attn.c_attn.weight")));
  StageModel<double> again(cfg, {0, cfg.layers}, 1, 1, 42);
  StageModel<double> other(cfg, {0, cfg.layers}, 1, 1, 43);
  EXPECT_EQ(to_vector(again.params()), to_vector(m.params()));
  EXPECT_NE(to_vector(other.param("wte")), to_vector(m.param("wte")));
  // float starts from the double values, rounded.
  StageModel<float> f(cfg, {0, cfg.layers}, 1, 1, 42);
  for (std::size_t i = 0; i < f.params().size(); ++i) {
    ASSERT_EQ(f.params()[i], static_cast<float>(m.params()[i])) << i;
  }
}

TEST(StageModel, InitialValuesFollowTheDocumentedGenerator) {
  // Re-derives a few values from the header's specification alone: SplitMix64 / FNV-1a seeding of
  // std::mt19937_64 and Box-Muller on 53-bit uniforms.
  auto splitmix = [](std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  const std::uint64_t seed = 1234;
  const GptConfig cfg = tiny();
  StageModel<double> m(cfg, {0, cfg.layers}, 1, 1, seed);
  for (const std::string name : {"wte", "h.1.attn.c_proj.weight"}) {
    std::mt19937_64 gen(splitmix(splitmix(seed) ^ name_hash(name)));
    const double stddev = name == "wte" ? 0.02 : 0.02 / std::sqrt(2.0 * cfg.layers);
    const auto p = m.param(name);
    for (std::size_t i = 0; i < 6; i += 2) {
      const double u1 = 1.0 - static_cast<double>(gen() >> 11) / 9007199254740992.0;
      const double u2 = static_cast<double>(gen() >> 11) / 9007199254740992.0;
      const double r = std::sqrt(-2.0 * std::log(u1));
      EXPECT_EQ(p[i], stddev * r * std::cos(2.0 * std::numbers::pi * u2)) << name << " " << i;
      EXPECT_EQ(p[i + 1], stddev * r * std::sin(2.0 * std::numbers::pi * u2)) << name << " " << i;
    }
  }
}

// ---- Forward against the naive reference, gradients against finite differences ----

TEST(StageModel, ForwardMatchesNaiveGpt2) {
  const GptConfig cfg = tiny();
  StageModel<double> m(cfg, {0, cfg.layers}, 3, 1, 7);
  perturb(m, 0.5);
  const Naive ref = naive_from(m);
  std::mt19937_64 rng(5);
  for (const auto& [B, T] : {std::pair{3, 5}, std::pair{2, 3}, std::pair{1, 1}}) {
    const auto tokens = random_tokens(rng, B * T, cfg.vocab);
    const auto targets = random_tokens(rng, B * T, cfg.vocab);
    double ref_loss = 0;
    const Mat ref_logits = ref.forward(tokens, &targets, B, T, &ref_loss);
    const double loss = m.forward(0, tokens.data(), targets.data(), B, T);
    EXPECT_NEAR(loss, ref_loss, 1e-12 * ref_loss) << "B=" << B << " T=" << T;
    const auto logits = m.logits(0);
    ASSERT_EQ(logits.size(), static_cast<std::size_t>(B * T * cfg.vocab));
    std::vector<double> flat;
    for (const auto& row : ref_logits) flat.insert(flat.end(), row.begin(), row.end());
    EXPECT_LT(relative_error(to_vector(logits), flat), 1e-12);
    const auto losses = m.losses(0);
    double mean = 0;
    for (double v : losses) mean += v / (B * T);
    EXPECT_NEAR(mean, loss, 1e-14 * loss);
  }
}

TEST(StageModel, GenerationSeesOnlyThePast) {
  // Greedy generation runs B = 1 with a growing T; position t's logits must not depend on T.
  const GptConfig cfg = tiny();
  StageModel<double> m(cfg, {0, cfg.layers}, 2, 1, 3);
  perturb(m, 0.3);
  std::mt19937_64 rng(9);
  const auto tokens = random_tokens(rng, cfg.ctx, cfg.vocab);
  const double nan = m.forward(0, tokens.data(), nullptr, 1, cfg.ctx);
  EXPECT_TRUE(std::isnan(nan));
  const auto full = to_vector(m.logits(0));
  for (int T = 1; T < cfg.ctx; ++T) {
    m.forward(0, tokens.data(), nullptr, 1, T);
    const auto part = m.logits(0);
    ASSERT_EQ(part.size(), static_cast<std::size_t>(T * cfg.vocab));
    for (std::size_t i = 0; i < part.size(); ++i) EXPECT_NEAR(part[i], full[i], 1e-14) << T;
  }
  // A forward without targets cannot be backpropagated and has no losses.
  EXPECT_THROW(m.backward(0, nullptr, 1.0, nullptr), Error);
  EXPECT_THROW(static_cast<void>(m.losses(0)), Error);
}

TEST(StageModel, GradientsMatchFiniteDifferences) {
  const GptConfig cfg = tiny();
  std::mt19937_64 rng(1);
  for (const auto& [B, T] : {std::pair{2, 5}, std::pair{1, 1}, std::pair{3, 2}}) {
    StageModel<double> m(cfg, {0, cfg.layers}, 3, 1, 11);
    perturb(m, 0.3);
    const auto tokens = random_tokens(rng, B * T, cfg.vocab);
    const auto targets = random_tokens(rng, B * T, cfg.vocab);
    const double scale = 0.75;
    auto loss = [&] { return scale * m.forward(0, tokens.data(), targets.data(), B, T); };
    loss();
    m.backward(0, nullptr, scale, nullptr);
    for (const TensorInfo& t : m.tensors()) {
      const auto analytic = to_vector(m.grad(t.name));
      const auto numeric = numeric_gradient(m.param(t.name), loss);
      EXPECT_LT(relative_error(analytic, numeric), 1e-6) << t.name << " B=" << B << " T=" << T;
    }
  }
}

// ---- Pipeline stages and microbatch slots ----

struct Batch {
  std::vector<std::int32_t> tokens, targets;
};

std::vector<Batch> random_batches(std::mt19937_64& rng, int n, int B, int T, int V) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({random_tokens(rng, B * T, V), random_tokens(rng, B * T, V)});
  }
  return out;
}

// Runs microbatches through a chain of stages GPipe-style (all forwards, then all backwards in
// reverse), each microbatch in its own slot; returns the summed loss.
double run_pipeline(std::vector<StageModel<double>>& stages, const std::vector<Batch>& mbs, int B,
                    int T, double loss_scale) {
  const std::size_t P = stages.size();
  const std::size_t nc = static_cast<std::size_t>(B * T * stages[0].config().dim);
  std::vector<double> acts(nc), next(nc), grad(nc), grad_prev(nc);
  double total = 0;
  for (std::size_t mb = 0; mb < mbs.size(); ++mb) {
    const int slot = static_cast<int>(mb);
    if (P == 1) {
      total += stages[0].forward(slot, mbs[mb].tokens.data(), mbs[mb].targets.data(), B, T);
      continue;
    }
    stages[0].forward(slot, mbs[mb].tokens.data(), B, T, acts.data());
    for (std::size_t s = 1; s + 1 < P; ++s) {
      stages[s].forward(slot, acts.data(), B, T, next.data());
      acts.swap(next);
    }
    total += stages[P - 1].forward(slot, acts.data(), mbs[mb].targets.data(), B, T);
  }
  for (std::size_t mb = mbs.size(); mb-- > 0;) {
    const int slot = static_cast<int>(mb);
    if (P == 1) {
      stages[0].backward(slot, nullptr, loss_scale, nullptr);
      continue;
    }
    stages[P - 1].backward(slot, nullptr, loss_scale, grad.data());
    for (std::size_t s = P - 1; s-- > 1;) {
      stages[s].backward(slot, grad.data(), loss_scale, grad_prev.data());
      grad.swap(grad_prev);
    }
    stages[0].backward(slot, grad.data(), loss_scale, nullptr);
  }
  return total;
}

std::vector<StageModel<double>> make_stages(const GptConfig& cfg, int P, int max_batch, int slots,
                                            std::uint64_t seed) {
  std::vector<StageModel<double>> out;
  for (const LayerRange r : split_layers(cfg.layers, P)) {
    out.emplace_back(cfg, r, max_batch, slots, seed);
  }
  return out;
}

TEST(StageModel, SplitStagesMatchTheWholeModel) {
  const GptConfig cfg = tiny(3);
  const int B = 2, T = 4, M = 2;
  std::mt19937_64 rng(4);
  const auto mbs = random_batches(rng, M, B, T, cfg.vocab);
  auto whole = make_stages(cfg, 1, B, M, 99);
  const double whole_loss = run_pipeline(whole, mbs, B, T, 1.0 / M);
  for (const int P : {2, 3}) {
    auto stages = make_stages(cfg, P, B, M, 99);
    // Bit-identical initial parameters, whatever the split (the last stage's wte copy too).
    for (const auto& stage : stages) {
      for (const TensorInfo& t : stage.tensors()) {
        const auto mine = stage.params().subspan(t.offset, t.count);
        const auto ref = whole[0].params().subspan(whole[0].tensor(t.name).offset, t.count);
        ASSERT_TRUE(std::equal(mine.begin(), mine.end(), ref.begin())) << t.name << " P=" << P;
      }
    }
    const double loss = run_pipeline(stages, mbs, B, T, 1.0 / M);
    EXPECT_NEAR(loss, whole_loss, 1e-12 * whole_loss) << "P=" << P;
    for (const auto& stage : stages) {
      for (const TensorInfo& t : stage.tensors()) {
        if (t.name == "wte") continue;
        const auto mine = stage.grads().subspan(t.offset, t.count);
        const auto ref = whole[0].grads().subspan(whole[0].tensor(t.name).offset, t.count);
        EXPECT_LT(relative_error({mine.begin(), mine.end()}, {ref.begin(), ref.end()}), 1e-12)
            << t.name << " P=" << P;
      }
    }
    // The tied embedding: the first stage's (embedding) and the last stage's (unembedding) wte
    // gradients sum to the single model's.
    const auto a = stages.front().grads().subspan(stages.front().tied_wte()->offset,
                                                  stages.front().tied_wte()->count);
    const auto b = stages.back().grads().subspan(stages.back().tied_wte()->offset,
                                                 stages.back().tied_wte()->count);
    std::vector<double> sum(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    EXPECT_LT(relative_error(sum, to_vector(whole[0].grad("wte"))), 1e-12) << "P=" << P;
  }
}

TEST(StageModel, MicrobatchesInFlightMatchOneAtATime) {
  const GptConfig cfg = tiny(2);
  const int B = 2, T = 5, M = 3;
  std::mt19937_64 rng(6);
  const auto mbs = random_batches(rng, M, B, T, cfg.vocab);
  for (const int P : {1, 2}) {
    auto in_flight = make_stages(cfg, P, B, M, 5);
    const double loss_in_flight = run_pipeline(in_flight, mbs, B, T, 1.0 / M);
    auto serial = make_stages(cfg, P, B, 1, 5);
    double loss_serial = 0;
    for (const Batch& mb : mbs) {
      loss_serial += run_pipeline(serial, {mb}, B, T, 1.0 / M);
    }
    EXPECT_NEAR(loss_in_flight, loss_serial, 1e-13 * loss_serial);
    for (int s = 0; s < P; ++s) {
      EXPECT_LT(relative_error(to_vector(in_flight[s].grads()), to_vector(serial[s].grads())),
                1e-13)
          << "P=" << P << " stage " << s;
    }
  }
}

TEST(StageModel, LossScaleAndZeroGrads) {
  const GptConfig cfg = tiny();
  std::mt19937_64 rng(8);
  const auto tokens = random_tokens(rng, 4, cfg.vocab);
  const auto targets = random_tokens(rng, 4, cfg.vocab);
  StageModel<double> m(cfg, {0, cfg.layers}, 1, 1, 2);
  m.forward(0, tokens.data(), targets.data(), 1, 4);
  m.backward(0, nullptr, 1.0, nullptr);
  const auto g1 = to_vector(m.grads());
  m.zero_grads();
  for (double v : m.grads()) ASSERT_EQ(v, 0.0);
  m.forward(0, tokens.data(), targets.data(), 1, 4);
  m.backward(0, nullptr, 0.25, nullptr);
  auto g = to_vector(m.grads());
  for (double& v : g) v *= 4.0;
  EXPECT_LT(relative_error(g, g1), 1e-14);
}

TEST(StageModel, MisuseIsRejected) {
  const GptConfig cfg = tiny(2);
  StageModel<double> first(cfg, {0, 1}, 2, 2, 1);
  StageModel<double> last(cfg, {1, 2}, 2, 2, 1);
  std::vector<std::int32_t> tokens(10, 1);
  std::vector<double> acts(2 * 5 * 8), grad(acts.size());
  // Wrong role.
  EXPECT_THROW(first.forward(0, acts.data(), 2, 5, acts.data()), Error);
  EXPECT_THROW(last.forward(0, tokens.data(), tokens.data(), 2, 5), Error);
  EXPECT_THROW(static_cast<void>(first.logits(0)), Error);
  // Sizes and slots.
  EXPECT_THROW(first.forward(0, tokens.data(), 3, 1, acts.data()), Error);  // B > max_batch
  EXPECT_THROW(first.forward(0, tokens.data(), 1, 6, acts.data()), Error);  // T > ctx
  EXPECT_THROW(first.forward(2, tokens.data(), 1, 1, acts.data()), Error);  // slot
  // Backward needs a pending forward, exactly once.
  EXPECT_THROW(first.backward(0, grad.data(), 1.0, nullptr), Error);
  first.forward(1, tokens.data(), 2, 5, acts.data());
  EXPECT_THROW(first.backward(0, grad.data(), 1.0, nullptr), Error);  // other slot
  EXPECT_THROW(first.backward(1, nullptr, 1.0, nullptr), Error);      // dout required
  first.backward(1, grad.data(), 1.0, nullptr);
  EXPECT_THROW(first.backward(1, grad.data(), 1.0, nullptr), Error);  // already done
  last.forward(0, acts.data(), tokens.data(), 2, 5);
  EXPECT_THROW(last.backward(0, nullptr, 1.0, nullptr), Error);  // din required
  // Bad tokens and ranges.
  tokens[3] = cfg.vocab;
  EXPECT_THROW(first.forward(0, tokens.data(), 2, 5, acts.data()), Error);
  EXPECT_THROW(StageModel<double>(cfg, {1, 1}, 1, 1, 0), Error);
  EXPECT_THROW(StageModel<double>(cfg, {0, 3}, 1, 1, 0), Error);
  EXPECT_THROW(StageModel<double>(cfg, {0, 2}, 0, 1, 0), Error);
  EXPECT_THROW(StageModel<double>(cfg, {0, 2}, 1, 0, 0), Error);
}

// Activation offload moves a stash out of its slot and back into another: backward must compute
// the same bits as on the original slot, for every stage role (tokens and targets travel too).
TEST(StageModel, StashMovedToAnotherSlotBackpropagatesBitForBit) {
  const GptConfig cfg = tiny(3);
  const int B = 2, T = 5;
  const std::size_t acts = static_cast<std::size_t>(B) * T * cfg.dim;
  std::mt19937_64 rng(12);
  const auto tokens = random_tokens(rng, B * T, cfg.vocab);
  const auto targets = random_tokens(rng, B * T, cfg.vocab);
  std::vector<float> in(acts), dout(acts);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (float& x : in) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  for (const LayerRange range :
       {LayerRange{0, 3}, LayerRange{0, 1}, LayerRange{1, 2}, LayerRange{2, 3}}) {
    SCOPED_TRACE("layers [" + std::to_string(range.first) + ", " + std::to_string(range.last) +
                 ")");
    StageModel<float> ref(cfg, range, B, 2, 3);
    StageModel<float> moved(cfg, range, B, 2, 3);
    std::vector<float> out(acts), din_ref(acts), din_moved(acts);
    auto forward = [&](StageModel<float>& m, int slot) {
      if (m.is_first() && m.is_last()) {
        m.forward(slot, tokens.data(), targets.data(), B, T);
      } else if (m.is_first()) {
        m.forward(slot, tokens.data(), B, T, out.data());
      } else if (m.is_last()) {
        m.forward(slot, in.data(), targets.data(), B, T);
      } else {
        m.forward(slot, in.data(), B, T, out.data());
      }
    };
    auto backward = [&](StageModel<float>& m, int slot, std::vector<float>& din) {
      m.backward(slot, m.is_last() ? nullptr : dout.data(), 0.5F,
                 m.is_first() ? nullptr : din.data());
    };
    forward(ref, 0);
    backward(ref, 0, din_ref);

    forward(moved, 0);
    const auto info = moved.release_stash(0);
    EXPECT_EQ(info.B, B);
    EXPECT_EQ(info.T, T);
    EXPECT_EQ(info.has_loss, moved.is_last());
    EXPECT_THROW(backward(moved, 0, din_moved), Error);  // released: the slot holds nothing
    ASSERT_EQ(moved.stash(0).size(), moved.stash_bytes());
    EXPECT_EQ(moved.stash_bytes() % 4096, 0U);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(moved.stash(1).data()) % 4096, 0U);
    const std::vector<std::byte> saved(moved.stash(0).begin(), moved.stash(0).end());
    // Slot 0 is reused and slot 1 holds junk before the stash comes back into it.
    forward(moved, 0);
    std::fill(moved.stash(1).begin(), moved.stash(1).end(), std::byte{0x5a});
    std::copy(saved.begin(), saved.end(), moved.stash(1).begin());
    moved.restore_stash(1, info);
    backward(moved, 1, din_moved);
    EXPECT_TRUE(std::equal(moved.grads().begin(), moved.grads().end(), ref.grads().begin()));
    if (!moved.is_first()) {
      EXPECT_EQ(din_moved, din_ref);
    }
    // Shapes the model cannot hold, and a slot that holds nothing to release.
    EXPECT_THROW(moved.restore_stash(1, {B + 1, T, info.has_loss}), Error);
    EXPECT_THROW(moved.restore_stash(1, {B, T, !info.has_loss}), Error);
    EXPECT_THROW((void)moved.release_stash(1), Error);  // backpropagated already
    EXPECT_THROW((void)moved.stash(2), Error);
  }
}

// ---- The float instantiation at training size ----

TEST(StageModel, FloatAgreesWithDoubleAtTrainingSize) {
  GptConfig cfg;
  cfg.layers = 1;  // V=256, ctx=128, C=128, NH=4
  const int B = 4, T = 128;
  StageModel<float> f(cfg, {0, 1}, B, 1, 2024);
  StageModel<double> d(cfg, {0, 1}, B, 1, 2024);
  // Same starting point exactly: the double model takes the float values.
  for (std::size_t i = 0; i < f.params().size(); ++i) d.params()[i] = f.params()[i];
  std::mt19937_64 rng(3);
  const auto tokens = random_tokens(rng, B * T, cfg.vocab);
  const auto targets = random_tokens(rng, B * T, cfg.vocab);
  const double lf = f.forward(0, tokens.data(), targets.data(), B, T);
  const double ld = d.forward(0, tokens.data(), targets.data(), B, T);
  EXPECT_NEAR(lf, ld, 1e-5 * ld);
  EXPECT_NEAR(ld, std::log(256.0), 0.1);  // near-uniform predictions at initialisation
  f.backward(0, nullptr, 1.0F, nullptr);
  d.backward(0, nullptr, 1.0, nullptr);
  for (const TensorInfo& t : d.tensors()) {
    const auto gf = f.grad(t.name);
    EXPECT_LT(relative_error({gf.begin(), gf.end()}, to_vector(d.grad(t.name))), 1e-4) << t.name;
  }
}

// Backward split into B (backward_input) and W (backward_weight), as zero-bubble schedules run it:
// every stage shape (single, first, middle, last, with one block or two; the single stage's tied
// wte gets both its contributions), microbatches in flight, all Bs first and the Ws deferred. The
// input gradients and the accumulated weight gradients equal the fused backward's bit for bit.
TEST(StageModel, BackwardSplitIntoInputAndWeightIsBitIdentical) {
  const GptConfig cfg = tiny(3);
  const int B = 2, T = 5, M = 3;
  const auto nc = static_cast<std::size_t>(B) * T * static_cast<std::size_t>(cfg.dim);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  const auto same_bits = [](std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const int P : {1, 2, 3}) {  // P = 2: a first stage of two blocks, whose W runs them
    for (const LayerRange r : split_layers(cfg.layers, P)) {  // in the reverse of B's order
      SCOPED_TRACE("P=" + std::to_string(P) + " layers [" + std::to_string(r.first) + ", " +
                   std::to_string(r.last) + ")");
      StageModel<float> fused(cfg, r, B, M, 21);
      StageModel<float> split(cfg, r, B, M, 21);
      const bool first = fused.is_first(), last = fused.is_last();
      const auto mbs = random_batches(rng, M, B, T, cfg.vocab);
      std::vector<std::vector<float>> in(M, std::vector<float>(nc)), dout = in;
      for (auto* v : {&in, &dout}) {
        for (auto& mb : *v) {
          for (float& x : mb) x = normal(rng);
        }
      }
      std::vector<std::vector<float>> din_fused(M, std::vector<float>(nc)), din_split = din_fused;
      std::vector<float> out(nc);
      for (StageModel<float>* m : {&fused, &split}) {
        for (int i = 0; i < M; ++i) {
          const auto& mb = mbs[static_cast<std::size_t>(i)];
          const float* x = in[static_cast<std::size_t>(i)].data();
          if (first && last) {
            m->forward(i, mb.tokens.data(), mb.targets.data(), B, T);
          } else if (first) {
            m->forward(i, mb.tokens.data(), B, T, out.data());
          } else if (last) {
            m->forward(i, x, mb.targets.data(), B, T);
          } else {
            m->forward(i, x, B, T, out.data());
          }
        }
      }
      const float scale = 1.0F / M;
      for (int i = 0; i < M; ++i) {
        const auto j = static_cast<std::size_t>(i);
        fused.backward(i, last ? nullptr : dout[j].data(), scale,
                       first ? nullptr : din_fused[j].data());
      }
      for (int i = 0; i < M; ++i) {
        const auto j = static_cast<std::size_t>(i);
        split.backward_input(i, last ? nullptr : dout[j].data(), scale,
                             first ? nullptr : din_split[j].data());
      }
      // B leaves the weight gradients alone.
      for (const float g : split.grads()) ASSERT_EQ(g, 0.0F);
      for (int i = 0; i < M; ++i) {
        if (!first) {
          EXPECT_TRUE(same_bits(din_split[static_cast<std::size_t>(i)],
                                din_fused[static_cast<std::size_t>(i)]))
              << "microbatch " << i;
        }
        split.backward_weight(i);
      }
      EXPECT_TRUE(same_bits(split.grads(), fused.grads()));
      // The fused backward is no trivial reference: it changed the gradients.
      EXPECT_NE(fused.grads()[0], 0.0F);
    }
  }
}

TEST(StageModel, BackwardSplitMisuseIsRejected) {
  const GptConfig cfg = tiny(2);
  const int B = 1, T = 3;
  StageModel<float> m(cfg, {0, 2}, B, 1, 3);
  std::mt19937_64 rng(2);
  const auto mb = random_batches(rng, 1, B, T, cfg.vocab)[0];
  EXPECT_THROW(m.backward_weight(0), Error);  // nothing pending
  m.forward(0, mb.tokens.data(), mb.targets.data(), B, T);
  m.backward_input(0, nullptr, 1.0F, nullptr);
  EXPECT_THROW(m.backward_input(0, nullptr, 1.0F, nullptr), Error);  // B twice
  try {
    m.forward(0, mb.tokens.data(), mb.targets.data(), B, T);
    ADD_FAILURE() << "a forward overwrote a slot whose W was pending";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("waits for backward_weight"), std::string::npos)
        << e.what();
  }
  m.backward_weight(0);
  EXPECT_THROW(m.backward_weight(0), Error);                // W twice
  m.forward(0, mb.tokens.data(), mb.targets.data(), B, T);  // the slot is free again
}

}  // namespace
}  // namespace strait::sched
