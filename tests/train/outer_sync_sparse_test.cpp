// SparseLoCo's outer step (train/outer_sync.h) over real communicators, ranks as threads, against
// references written here:
// - SparseLoCo: e = beta * e + p, the codec's encoding of e sent, e -= decode(own), the global
//   weights moved by lr * the mean of every replica's decoded message; bit-identical on every
//   rank, and each rank's bytes per round exactly (R - 1) * encoded_bytes (the allgather).
// - its state (error feedback included) exported and imported mid-run continues bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/compress/codec_factory.h"
#include "core/error.h"
#include "tests/comm/comm_test_ranks.h"
#include "train/outer_sync.h"

namespace strait::train {
namespace {

using comm::testing::run_ranks;
using sched::PipelineComms;

// Replica r's inner step: a pull towards its own target, with a rate that changes per step.
template <class T>
void pull(std::vector<T>& w, int r, std::int64_t step) {
  const T eta = static_cast<T>(0.1 + 0.02 * static_cast<double>(step % 4));
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double goal = std::cos(0.11 * static_cast<double>(i) * (r + 1)) * (1 + i % 5);
    w[i] -= eta * (w[i] - static_cast<T>(goal));
  }
}

std::vector<float> start_weights(std::size_t n) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(0.3 * std::sin(0.5 * double(i)));
  return w;
}

OuterOptions sparse_options(const std::string& codec) {
  OuterOptions o;
  o.outer_steps = 3;
  o.lr = 1.0;
  o.momentum = 0;
  o.codec = codec;
  return o;
}

// SparseLoCo in float, the codec used as a black box (its own test checks it).
std::vector<float> sparseloco_reference(int replicas, int steps, const OuterOptions& o, double beta,
                                        const std::string& wire, std::size_t n) {
  auto codec = comm::make_codec_from_spec(wire);
  const auto rs = static_cast<std::size_t>(replicas);
  std::vector<float> g = start_weights(n);
  std::vector<std::vector<float>> w(rs, g), e(rs, std::vector<float>(n, 0.0f));
  std::vector<std::byte> bytes(codec->encoded_bytes(n));
  std::vector<float> dec(n);
  for (int step = 0; step < steps; ++step) {
    for (std::size_t r = 0; r < rs; ++r) pull(w[r], static_cast<int>(r), step);
    if ((step + 1) % o.outer_steps != 0 && step + 1 != steps) continue;
    std::vector<double> sum(n, 0.0);
    std::vector<float> total(n, 0.0f);
    for (std::size_t r = 0; r < rs; ++r) {
      for (std::size_t i = 0; i < n; ++i) e[r][i] = (g[i] - w[r][i]) + float(beta) * e[r][i];
      codec->encode(e[r], bytes);
      codec->decode(bytes, dec);
      for (std::size_t i = 0; i < n; ++i) {
        e[r][i] -= dec[i];
        sum[i] += dec[i];
      }
    }
    for (std::size_t i = 0; i < n; ++i) g[i] -= float(o.lr * sum[i] / replicas);
    for (auto& wr : w) wr = g;
  }
  return g;
}

TEST(OuterSyncSparseLoCo, MatchesTheReferenceBitIdenticalWithTheFormatsBytesPerRound) {
  constexpr int kReplicas = 3, kSteps = 10;  // rounds end after steps 3, 6, 9 and 10
  constexpr std::size_t kN = 1000;
  const OuterOptions o = sparse_options("sparseloco:density=0.05,chunk=128,beta=0.9");
  const std::string wire = "sparseloco:density=0.05,chunk=128,bits=2";
  const std::vector<float> ref = sparseloco_reference(kReplicas, kSteps, o, 0.9, wire, kN);
  const std::size_t msg = comm::make_codec_from_spec(wire)->encoded_bytes(kN);
  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = start_weights(kN);
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    EXPECT_EQ(sync.codec_spec(), wire + ",beta=0.9");
    EXPECT_TRUE(sync.local_momentum());
    for (int step = 0; step < kSteps; ++step) {
      pull(w, r, step);
      const OuterStepStats st = sync.end_step(step, w, step + 1 == kSteps);
      EXPECT_EQ(st.data_bytes, st.round_ended ? (kReplicas - 1) * msg : 0U) << "step " << step;
    }
    EXPECT_EQ(w, sync.global());
    out[static_cast<std::size_t>(r)] = w;
  });
  double moved = 0;
  for (std::size_t i = 0; i < kN; ++i) {
    moved = std::max(moved, std::abs(double(ref[i]) - 0.3 * std::sin(0.5 * double(i))));
    for (int r = 0; r < kReplicas; ++r) {
      const auto& w = out[static_cast<std::size_t>(r)];
      ASSERT_EQ(std::bit_cast<std::uint32_t>(w[i]), std::bit_cast<std::uint32_t>(out[0][i]))
          << "rank " << r << " parameter " << i;
      ASSERT_NEAR(w[i], ref[i], 1e-5) << "parameter " << i;
    }
  }
  EXPECT_GT(moved, 0.1);  // the outer steps did move the weights
}

// Export after round 2, import into a fresh OuterSync (as a checkpoint or a rebuilt group does),
// and go on: the same bits as the run that never stopped, the error feedback included.
TEST(OuterSyncSparseLoCo, StateRoundTripKeepsTheErrorFeedbackBitForBit) {
  constexpr int kReplicas = 2, kSteps = 12, kCut = 6;
  constexpr std::size_t kN = 500;
  const OuterOptions o = sparse_options("sparseloco:density=0.02,chunk=100");
  std::vector<std::vector<float>> whole(kReplicas), resumed(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = start_weights(kN);
    OuterSync a(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    OuterSync::State saved;
    std::vector<float> w_cut;
    for (int step = 0; step < kSteps; ++step) {
      pull(w, r, step);
      a.end_step(step, w, step + 1 == kSteps);
      if (step + 1 == kCut) {
        saved = a.export_state();
        w_cut = w;
      }
    }
    whole[static_cast<std::size_t>(r)] = w;
    // The error feedback is this replica's own and not zero.
    double ef = 0;
    for (const float x : saved.momentum) ef += std::abs(x);
    EXPECT_GT(ef, 0.0);
    OuterSync b(PipelineComms{nullptr, &world, nullptr}, 0, start_weights(kN), std::nullopt, o);
    b.import_state(saved, kCut, false);
    EXPECT_EQ(b.momentum(), saved.momentum);
    for (int step = kCut; step < kSteps; ++step) {
      pull(w_cut, r, step);
      b.end_step(step, w_cut, step + 1 == kSteps);
    }
    resumed[static_cast<std::size_t>(r)] = w_cut;
    b.clear_error_feedback();  // what a joining replica does
    EXPECT_EQ(b.momentum(), std::vector<float>(kN, 0.0f));
  });
  EXPECT_EQ(whole, resumed);
  EXPECT_NE(whole[0], start_weights(kN));
}

TEST(OuterSyncSparseLoCo, BadOptionsAreErrorsNamingTheFix) {
  OuterOptions o = sparse_options("sparseloco");
  o.momentum = 0.9;
  try {
    validate(o);
    ADD_FAILURE() << "momentum 0.9 with sparseloco was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--outer-momentum 0"), std::string::npos) << e.what();
  }
  for (const char* bad : {"sparseloco:beta=2", "sparseloco:beta=x", "sparseloco:density=0"}) {
    EXPECT_THROW(validate(sparse_options(bad)), Error) << bad;
  }
  EXPECT_NO_THROW(validate(sparse_options("sparseloco:beta=0.5,density=0.01,bits=3")));
}

}  // namespace
}  // namespace strait::train
