// DiLoCo's outer step (train/outer_sync.h) over real communicators, ranks as threads
// (tests/comm/comm_test_ranks.h), against references computed here in double precision:
// - H = 1, outer lr 1, momentum 0, no codec is model averaging: each replica takes one AdamW step
// on
//   its own gradient from the common weights, keeping its own moments, and the weights are averaged
//   (local SGD / FedAvg with one local step). It is NOT AdamW on the averaged gradient (AdamW is
//   not linear in the gradient); the test checks that this reference is really a different one.
// - H > 1 with the outer Nesterov step matches DiLoCo's Algorithm 1 computed naively.
// - every codec leaves the averaged pseudo-gradient, the global weights and the tied embedding's
//   two copies bit-identical on every rank.
// - with overlap, each round's average is applied exactly one round late, as documented, or with
//   a delay, that many steps after its round, replacing the naive or eager estimate.
#include "train/outer_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/adamw.h"
#include "offload/swap_store.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/temp_dir.h"

namespace strait::train {
namespace {

using comm::testing::run_ranks;
using sched::PipelineComms;

// Replica r's local objective: f_r(w) = 1/2 sum_i a_ri (w_i - c_ri)^2, different per replica.
double curvature(int r, std::size_t i) {
  return 0.5 + 0.25 * r + 0.01 * static_cast<double>(i % 7);
}
double target(int r, std::size_t i) {
  return std::sin(0.3 * static_cast<double>(i) + r) + 0.1 * static_cast<double>(r);
}
double initial(std::size_t i) {
  return 0.5 * std::cos(0.7 * static_cast<double>(i));
}

// One inner step of replica r that is not AdamW: a gradient step with a step-dependent rate, in
// float for the ranks and double for the references.
template <class T>
void inner_sgd(std::vector<T>& w, int r, std::int64_t step) {
  const T eta = static_cast<T>(0.05 + 0.01 * static_cast<double>(step % 3));
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] -= eta * static_cast<T>(curvature(r, i)) * (w[i] - static_cast<T>(target(r, i)));
  }
}

// Naive AdamW in double (torch.optim.AdamW's formula), step t >= 1.
void adamw_double(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                  std::vector<double>& v, const kernels::AdamWHyper& h, std::int64_t t) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] -= h.lr * h.weight_decay * p[i];
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
    const double mh = m[i] / (1 - std::pow(h.beta1, static_cast<double>(t)));
    const double vh = v[i] / (1 - std::pow(h.beta2, static_cast<double>(t)));
    p[i] -= h.lr * mh / (std::sqrt(vh) + h.eps);
  }
}

template <class T>
std::vector<T> gradient(const std::vector<T>& w, int r) {
  std::vector<T> g(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    g[i] = static_cast<T>(curvature(r, i)) * (w[i] - static_cast<T>(target(r, i)));
  }
  return g;
}

std::vector<float> initial_weights(std::size_t n) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(initial(i));
  return w;
}

kernels::AdamWHyper inner_hyper() {
  kernels::AdamWHyper h;
  h.lr = 0.02;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  return h;
}

std::uint32_t bits(float x) {
  return std::bit_cast<std::uint32_t>(x);
}

TEST(OuterSync, OneInnerStepWithOuterLrOneAndNoMomentumIsModelAveragingOfLocalAdamWSteps) {
  constexpr int kReplicas = 3, kSteps = 6;
  constexpr std::size_t kN = 300;
  const kernels::AdamWHyper h = inner_hyper();
  // Reference: every replica steps AdamW on its own gradient from the common weights with its
  // own moments; the new common weights are the replicas' mean.
  std::vector<double> ref(kN), ref_avg_grad(kN);
  for (std::size_t i = 0; i < kN; ++i) ref[i] = ref_avg_grad[i] = initial(i);
  std::vector<std::vector<double>> m(kReplicas, std::vector<double>(kN)), v = m;
  std::vector<double> m1(kN), v1(kN);  // AdamW on the averaged gradient, for contrast
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<double> sum(kN, 0.0), avg_grad(kN, 0.0);
    for (int r = 0; r < kReplicas; ++r) {
      std::vector<double> w = ref;
      adamw_double(w, gradient(w, r), m[static_cast<std::size_t>(r)],
                   v[static_cast<std::size_t>(r)], h, t);
      for (std::size_t i = 0; i < kN; ++i) sum[i] += w[i];
      const std::vector<double> g = gradient(ref_avg_grad, r);
      for (std::size_t i = 0; i < kN; ++i) avg_grad[i] += g[i] / kReplicas;
    }
    for (std::size_t i = 0; i < kN; ++i) ref[i] = sum[i] / kReplicas;
    adamw_double(ref_avg_grad, avg_grad, m1, v1, h, t);
  }
  double apart = 0;  // the two references really differ
  for (std::size_t i = 0; i < kN; ++i) apart = std::max(apart, std::abs(ref[i] - ref_avg_grad[i]));
  EXPECT_GT(apart, 1e-3);

  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = initial_weights(kN), mm(kN), vv(kN);
    OuterOptions o;
    o.outer_steps = 1;
    o.lr = 1.0;
    o.momentum = 0.0;
    o.codec = "none";
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    for (int t = 1; t <= kSteps; ++t) {
      kernels::adamw_step(w, gradient(w, r), mm, vv, h, t);
      const OuterStepStats st = sync.end_step(t - 1, w, t == kSteps);
      EXPECT_TRUE(st.round_ended && st.applied);
      EXPECT_EQ(st.applied_rounds, t);
    }
    out[static_cast<std::size_t>(r)] = w;
  });
  for (int r = 0; r < kReplicas; ++r) {
    const auto& w = out[static_cast<std::size_t>(r)];
    ASSERT_EQ(w.size(), kN);
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(w[i], ref[i], 1e-6) << "replica " << r << " parameter " << i;
      ASSERT_EQ(bits(w[i]), bits(out[0][i])) << "replica " << r << " parameter " << i;
    }
  }
}

// DiLoCo, Algorithm 1, in double: H inner steps per round from the global weights, then the outer
// Nesterov step on the replicas' mean pseudo-gradient (a shorter round at the end).
std::vector<double> diloco_reference(int replicas, int steps, const OuterOptions& o,
                                     std::size_t n) {
  std::vector<double> g(n), mom(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) g[i] = initial(i);
  std::vector<std::vector<double>> w(static_cast<std::size_t>(replicas), g);
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < replicas; ++r) inner_sgd(w[static_cast<std::size_t>(r)], r, step);
    if ((step + 1) % o.outer_steps != 0 && step + 1 != steps) continue;
    for (std::size_t i = 0; i < n; ++i) {
      double d = 0;
      for (int r = 0; r < replicas; ++r) d += (g[i] - w[static_cast<std::size_t>(r)][i]) / replicas;
      mom[i] = o.momentum * mom[i] + d;
      g[i] -= o.lr * (d + o.momentum * mom[i]);
    }
    for (auto& wr : w) wr = g;
  }
  return g;
}

// DiLoCo's outer step (lr 0.7, Nesterov 0.9, uncompressed) every H inner steps, overlapped or not.
OuterOptions nesterov_options(int outer_steps, bool overlap) {
  OuterOptions o;
  o.outer_steps = outer_steps;
  o.lr = 0.7;
  o.momentum = 0.9;
  o.codec = "none";
  o.overlap = overlap;
  return o;
}

TEST(OuterSync, NesterovOuterStepMatchesDiLoCoComputedInDouble) {
  constexpr int kReplicas = 3, kSteps = 14;  // rounds end after steps 3, 6, 9, 12 and 14
  constexpr std::size_t kN = 257;
  OuterOptions o = nesterov_options(3, false);
  const std::vector<double> ref = diloco_reference(kReplicas, kSteps, o, kN);
  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = initial_weights(kN);
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    std::int64_t rounds = 0;
    for (int step = 0; step < kSteps; ++step) {
      inner_sgd(w, r, step);
      const OuterStepStats st = sync.end_step(step, w, step + 1 == kSteps);
      const bool ends = (step + 1) % 3 == 0 || step + 1 == kSteps;
      EXPECT_EQ(st.round_ended, ends) << "step " << step;
      if (ends) {
        EXPECT_EQ(st.round, rounds++);
        EXPECT_GT(st.data_bytes, 0u);
      } else {
        EXPECT_EQ(st.data_bytes, 0u);
      }
    }
    out[static_cast<std::size_t>(r)] = w;
  });
  for (int r = 0; r < kReplicas; ++r) {
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(out[static_cast<std::size_t>(r)][i], ref[i], 1e-5)
          << "replica " << r << " parameter " << i;
    }
  }
}

// Streaming DiLoCo's fragments in double: fragment k (the k-th third of the parameters) ends
// its rounds when step + 1 + k * H / F is a multiple of H (and at the last step), each with its
// own outer momentum.
TEST(OuterSync, FragmentsSyncInTurnAsStreamingDiLoCoComputedInDouble) {
  constexpr int kReplicas = 2, kSteps = 13, kH = 6, kF = 3;
  constexpr std::size_t kN = 300;
  OuterOptions o;
  o.outer_steps = kH;
  o.fragments = kF;
  o.codec = "none";
  // Reference.
  std::vector<double> g(kN), mom(kN, 0.0);
  for (std::size_t i = 0; i < kN; ++i) g[i] = initial(i);
  std::vector<std::vector<double>> w(kReplicas, g);
  std::vector<int> synced_ref(kSteps, 0);
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kReplicas; ++r) inner_sgd(w[static_cast<std::size_t>(r)], r, step);
    for (int k = 0; k < kF; ++k) {
      if ((step + 1 + k * kH / kF) % kH != 0 && step + 1 != kSteps) continue;
      ++synced_ref[static_cast<std::size_t>(step)];
      for (std::size_t i = kN * k / kF; i < kN * (k + 1) / kF; ++i) {
        double d = 0;
        for (const auto& wr : w) d += (g[i] - wr[i]) / kReplicas;
        mom[i] = o.momentum * mom[i] + d;
        g[i] -= o.lr * (d + o.momentum * mom[i]);
        for (auto& wr : w) wr[i] = g[i];
      }
    }
  }
  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> p = initial_weights(kN);
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, p, std::nullopt, o);
    ASSERT_EQ(sync.parts().size(), 3U);
    std::uint64_t one = 0, all = 0;
    EXPECT_EQ(sync.parts()[1].first, 100U);
    for (int step = 0; step < kSteps; ++step) {
      inner_sgd(p, r, step);
      const OuterStepStats st = sync.end_step(step, p, step + 1 == kSteps);
      EXPECT_EQ(st.fragments_synced, synced_ref[static_cast<std::size_t>(step)]) << step;
      if (st.fragments_synced == 1) one = st.data_bytes;
      if (st.fragments_synced == kF) all = st.data_bytes;
    }
    // A sync of one fragment sends a third of what the last step's sync of all three does.
    EXPECT_GT(one, 0u);
    EXPECT_EQ(all, kF * one);
    out[static_cast<std::size_t>(r)] = p;
  });
  for (int r = 0; r < kReplicas; ++r) {
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(out[static_cast<std::size_t>(r)][i], g[i], 1e-5) << "replica " << r << " " << i;
    }
  }
}

// 2 stages x 3 replicas (world rank = replica * 2 + stage), as strait train lays them out. Stage 0
// holds the tied embedding first, stage 1 last, so each data-parallel group encodes it at a
// different offset (int8 and int4 blocks cut it differently).
struct TiedRun {
  std::vector<std::vector<float>> params, global;     // per world rank
  std::vector<std::vector<std::vector<float>>> tied;  // per world rank and step: the tied range
};

TiedRun run_tied(const std::string& codec, int fragments = 1) {
  constexpr int kStages = 2, kReplicas = 3, kSteps = 6;
  constexpr std::size_t kTied = 300, kOwn[kStages] = {1000, 700};
  TiedRun run;
  run.params.resize(kStages * kReplicas);
  run.global.resize(kStages * kReplicas);
  run.tied.resize(kStages * kReplicas);
  run_ranks(kStages * kReplicas, [&](comm::Communicator& world) {
    const int rank = world.rank(), stage = rank % kStages, replica = rank / kStages;
    auto data = world.split(stage, replica);
    auto tied = world.split(replica, stage);
    const std::size_t n = kTied + kOwn[stage];
    const std::size_t tied_at = stage == 0 ? 0 : kOwn[stage];
    // Position j of the tied range starts and moves the same on both stages.
    const auto global_index = [&](std::size_t i) {
      if (i >= tied_at && i < tied_at + kTied) return i - tied_at;
      return kTied + static_cast<std::size_t>(stage) * 5000 + i;
    };
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(initial(global_index(i)));
    OuterOptions o;
    o.outer_steps = 2;
    o.codec = codec;
    o.fragments = fragments;
    {
      OuterSync sync(PipelineComms{nullptr, data.get(), tied.get()}, stage, w,
                     GradientLayout::Range{tied_at, kTied}, o);
      for (int step = 0; step < kSteps; ++step) {
        const auto eta = static_cast<float>(0.05 + 0.01 * step);
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t j = global_index(i);
          w[i] -= eta * static_cast<float>(curvature(replica, j)) *
                  (w[i] - static_cast<float>(target(replica, j)));
        }
        (void)sync.end_step(step, w, step + 1 == kSteps);
        run.tied[static_cast<std::size_t>(rank)].emplace_back(
            w.begin() + static_cast<std::ptrdiff_t>(tied_at),
            w.begin() + static_cast<std::ptrdiff_t>(tied_at + kTied));
      }
      run.params[static_cast<std::size_t>(rank)] = w;
      run.global[static_cast<std::size_t>(rank)] = sync.global();
    }
    world.barrier();  // nobody tears down its endpoints while others still send
  });
  return run;
}

// Every rank of a stage ends with the same bits, equal to the global weights, and the tied
// embedding's two copies (stage 0's first 300 values, stage 1's last 300) are one after every step.
void expect_consistent(const TiedRun& run) {
  for (int rank = 0; rank < 6; ++rank) {
    const auto& w = run.params[static_cast<std::size_t>(rank)];
    const auto& g = run.global[static_cast<std::size_t>(rank)];
    const auto& w0 = run.params[static_cast<std::size_t>(rank % 2)];  // replica 0, same stage
    ASSERT_EQ(w.size(), w0.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(bits(w[i]), bits(w0[i])) << "rank " << rank << " parameter " << i;
      ASSERT_EQ(bits(w[i]), bits(g[i])) << "rank " << rank << " parameter " << i;
    }
    if (rank % 2 == 0) {
      const auto& first = run.tied[static_cast<std::size_t>(rank)];
      const auto& last = run.tied[static_cast<std::size_t>(rank + 1)];
      ASSERT_EQ(first.size(), last.size());
      for (std::size_t step = 0; step < first.size(); ++step) {
        for (std::size_t j = 0; j < first[step].size(); ++j) {
          ASSERT_EQ(bits(first[step][j]), bits(last[step][j]))
              << "rank " << rank << " step " << step << " tied value " << j;
        }
      }
    }
  }
}

TEST(OuterSync, EveryCodecLeavesTheGlobalWeightsAndTheTiedCopiesBitIdenticalOnEveryRank) {
  const TiedRun exact = run_tied("none");
  for (const std::string codec : {"none", "bf16", "int8", "int4"}) {
    SCOPED_TRACE(codec);
    const TiedRun run = codec == "none" ? exact : run_tied(codec);
    expect_consistent(run);
    // Lossy, but close to the uncompressed run (int4's 4 bits per value the loosest).
    for (int rank = 0; rank < 6; ++rank) {
      const auto& w = run.params[static_cast<std::size_t>(rank)];
      const auto& e = exact.params[static_cast<std::size_t>(rank)];
      for (std::size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(w[i], e[i], 0.05) << "rank " << rank << " parameter " << i;
      }
    }
  }
}

// With fragments the tied range syncs on fragment 0's schedule on both stages, while the rest of
// each stage syncs in turn: the copies still never part.
TEST(OuterSync, FragmentsKeepTheTiedCopiesOneAndEveryRankBitIdentical) {
  for (const std::string codec : {"none", "int8"}) {
    SCOPED_TRACE(codec);
    const TiedRun run = run_tied(codec, 2);
    expect_consistent(run);
    // Not the unfragmented run.
    const TiedRun whole = run_tied(codec, 1);
    EXPECT_NE(run.params[0], whole.params[0]);
  }
}

// The overlapped schedule in double, as outer_sync.h documents it, per step and replica: round
// t's mean pseudo-gradient arrives `delay` steps after the round's last (0: H, at the next round's
// end) and replaces the estimate each replica computed from (naive: its own weights; eager: the
// outer step with the last mean whose own part is fresh), the steps since kept on top; the last
// round's mean is applied at once.
std::vector<std::vector<std::vector<double>>> overlap_reference(int replicas, int steps,
                                                                const OuterOptions& o,
                                                                std::size_t n) {
  std::vector<double> g(n), mom(n, 0.0), avg, last_avg(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) g[i] = initial(i);
  const auto rs = static_cast<std::size_t>(replicas);
  std::vector<std::vector<double>> w(rs, g), start(rs, g), prev(rs, std::vector<double>(n, 0.0));
  const int delay = o.delay > 0 ? o.delay : o.outer_steps;
  int arrive = -1;
  const auto apply = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      mom[i] = o.momentum * mom[i] + avg[i];
      g[i] -= o.lr * (avg[i] + o.momentum * mom[i]);
    }
  };
  std::vector<std::vector<std::vector<double>>> trace;
  for (int step = 0; step < steps; ++step) {
    for (std::size_t r = 0; r < rs; ++r) inner_sgd(w[r], static_cast<int>(r), step);
    const bool last = step + 1 == steps;
    if (arrive >= 0 && (step >= arrive || last)) {
      apply();
      for (std::size_t r = 0; r < rs; ++r) {
        for (std::size_t i = 0; i < n; ++i) w[r][i] += g[i] - start[r][i];
        start[r] = g;
      }
      last_avg = avg;
      arrive = -1;
    }
    if ((step + 1) % o.outer_steps == 0 || last) {
      avg.assign(n, 0.0);
      std::vector<std::vector<double>> p(rs, std::vector<double>(n));
      for (std::size_t r = 0; r < rs; ++r) {
        for (std::size_t i = 0; i < n; ++i) {
          p[r][i] = start[r][i] - w[r][i];
          avg[i] += p[r][i] / replicas;
        }
      }
      for (std::size_t r = 0; r < rs && o.eager; ++r) {
        for (std::size_t i = 0; i < n; ++i) {
          const double estimate = last_avg[i] + (p[r][i] - prev[r][i]) / replicas;
          const double m = o.momentum * mom[i] + estimate;
          w[r][i] = g[i] - o.lr * (estimate + o.momentum * m);
        }
        prev[r] = p[r];
      }
      if (last) {
        apply();
        for (auto& wr : w) wr = g;
      } else {
        start = w;
        arrive = step + delay;
      }
    }
    trace.push_back(w);
  }
  return trace;
}

// Runs OuterSync with `o` on two replicas; every replica's weights after every step.
std::vector<std::vector<std::vector<float>>> overlap_run(int replicas, int steps,
                                                         const OuterOptions& o, std::size_t n) {
  std::vector<std::vector<std::vector<float>>> out(static_cast<std::size_t>(steps),
                                                   std::vector<std::vector<float>>(replicas));
  run_ranks(replicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = initial_weights(n);
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    for (int step = 0; step < steps; ++step) {
      inner_sgd(w, r, step);
      sync.end_step(step, w, step + 1 == steps);
      out[static_cast<std::size_t>(step)][static_cast<std::size_t>(r)] = w;
    }
  });
  return out;
}

TEST(OuterSync, OverlapAppliesEachRoundsAverageExactlyOneRoundLate) {
  constexpr int kReplicas = 2, kSteps = 9;  // rounds end after steps 2, 4, 6, 8 and 9
  constexpr std::size_t kN = 129;
  OuterOptions o = nesterov_options(2, true);
  o.eager = false;  // the naive overlap (the delay test below checks the eager one too)
  o.delay = 0;      // a whole round
  const auto ref = overlap_reference(kReplicas, kSteps, o, kN).back();
  // The same run without the delay ends elsewhere: the test can tell them apart.
  OuterOptions sync_o = o;
  sync_o.overlap = false;
  const std::vector<double> undelayed = diloco_reference(kReplicas, kSteps, sync_o, kN);
  double apart = 0;
  for (std::size_t i = 0; i < kN; ++i) apart = std::max(apart, std::abs(ref[0][i] - undelayed[i]));
  EXPECT_GT(apart, 1e-3);

  std::vector<std::vector<float>> out(kReplicas);
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::vector<float> w = initial_weights(kN);
    const std::vector<float> w0 = w;
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    for (int step = 0; step < kSteps; ++step) {
      inner_sgd(w, r, step);
      const std::vector<float> before = w;
      const OuterStepStats st = sync.end_step(step, w, step + 1 == kSteps);
      if (step == 1) {
        // Round 0 ended: its average is in flight, nothing applied, the weights untouched.
        EXPECT_TRUE(st.round_ended);
        EXPECT_FALSE(st.applied);
        EXPECT_EQ(st.applied_rounds, 0);
        EXPECT_EQ(w, before);
        EXPECT_EQ(sync.global(), w0);
        // It completes in the background, on the progress engine, while nobody waits for it.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (world.stats().allreduce_bytes == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_GT(world.stats().allreduce_bytes, 0u);
      }
      // Round 0's average at the end of round 1; at the last step round 3's late, round 4's at
      // once.
      const std::int64_t applied[kSteps] = {0, 0, 0, 1, 1, 2, 2, 3, 5};
      EXPECT_EQ(st.applied_rounds, applied[step]) << "step " << step;
    }
    out[static_cast<std::size_t>(r)] = w;
  });
  for (int r = 0; r < kReplicas; ++r) {
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(out[static_cast<std::size_t>(r)][i], ref[static_cast<std::size_t>(r)][i], 1e-5)
          << "replica " << r << " parameter " << i;
      ASSERT_EQ(bits(out[static_cast<std::size_t>(r)][i]), bits(out[0][i]));
    }
  }
}

// --outer-delay: the average arrives that many steps after its round's last and replaces the
// estimate there, for the naive and the eager estimate, every replica at every step as the double
// reference; the four schedules are told apart; applied rounds count the arrivals.
TEST(OuterSync, OverlapWithADelayReplacesTheEstimateWhenTheAverageArrives) {
  constexpr int kReplicas = 2, kSteps = 10;  // rounds end after steps 2, 5, 8 and 9
  constexpr std::size_t kN = 97;
  OuterOptions o = nesterov_options(3, true);
  struct Case {
    bool eager;
    int delay;
  };
  std::vector<std::vector<std::vector<std::vector<double>>>> refs;
  for (const Case c : {Case{false, 1}, Case{true, 1}, Case{true, 0}, Case{false, 2}}) {
    SCOPED_TRACE(::testing::Message() << (c.eager ? "eager" : "naive") << " delay " << c.delay);
    o.eager = c.eager;
    o.delay = c.delay;
    refs.push_back(overlap_reference(kReplicas, kSteps, o, kN));
    const auto& ref = refs.back();
    const auto run = overlap_run(kReplicas, kSteps, o, kN);
    for (int step = 0; step < kSteps; ++step) {
      for (std::size_t r = 0; r < kReplicas; ++r) {
        for (std::size_t i = 0; i < kN; ++i) {
          const auto st = static_cast<std::size_t>(step);
          ASSERT_NEAR(run[st][r][i], ref[st][r][i], 1e-5)
              << "step " << step << " replica " << r << " parameter " << i;
        }
      }
    }
    EXPECT_EQ(run.back()[0], run.back()[1]);  // every replica ends on the global weights
  }
  for (std::size_t a = 0; a < refs.size(); ++a) {
    for (std::size_t b = a + 1; b < refs.size(); ++b) {
      double apart = 0;
      for (std::size_t i = 0; i < kN; ++i)
        apart = std::max(apart, std::abs(refs[a][6][0][i] - refs[b][6][0][i]));
      EXPECT_GT(apart, 1e-4) << "cases " << a << " and " << b;
    }
  }
  // Delay 2: round 0 (ends at step 2) arrives at step 4, round 1 at 7, round 2 at the last.
  o.eager = false;
  o.delay = 2;
  run_ranks(kReplicas, [&](comm::Communicator& world) {
    std::vector<float> w = initial_weights(kN);
    OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
    const std::int64_t applied[kSteps] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 4};
    for (int step = 0; step < kSteps; ++step) {
      inner_sgd(w, world.rank(), step);
      EXPECT_EQ(sync.end_step(step, w, step + 1 == kSteps).applied_rounds, applied[step])
          << "step " << step;
    }
  });
}

// Saved while an average is in flight (between a round's last step and its arrival) or not, and
// imported into a fresh OuterSync: the run goes on bit for bit as the one that never stopped.
TEST(OuterSync, OverlapStateRoundTripBetweenARoundAndItsArrivalIsBitExact) {
  constexpr int kReplicas = 2, kSteps = 11;
  constexpr std::size_t kN = 61;
  OuterOptions o = nesterov_options(3, true);
  for (const bool eager : {false, true}) {
    for (const int delay : {2, 0}) {
      for (const int cut : {4, 6, 7}) {  // rounds end after steps 2, 5, 8
        SCOPED_TRACE(::testing::Message() << (eager ? "eager" : "naive") << " delay " << delay
                                          << " cut after " << cut << " steps");
        o.eager = eager;
        o.delay = delay;
        const auto whole = overlap_run(kReplicas, kSteps, o, kN).back();
        std::vector<std::vector<float>> resumed(kReplicas);
        run_ranks(kReplicas, [&](comm::Communicator& world) {
          const int r = world.rank();
          std::vector<float> w = initial_weights(kN);
          OuterSync::State saved;
          {
            OuterSync a(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o);
            for (int step = 0; step < cut; ++step) {
              inner_sgd(w, r, step);
              a.end_step(step, w, false);
            }
            saved = a.export_state();
          }
          OuterSync b(PipelineComms{nullptr, &world, nullptr}, 0, initial_weights(kN), std::nullopt,
                      o);
          b.import_state(saved, cut, false);
          for (int step = cut; step < kSteps; ++step) {
            inner_sgd(w, r, step);
            b.end_step(step, w, step + 1 == kSteps);
          }
          resumed[static_cast<std::size_t>(r)] = w;
        });
        EXPECT_EQ(resumed, whole);
      }
    }
  }
}

// The outer state on a SwapStore (NVMe) between rounds: the same bits as in RAM, with and without
// overlap, and the momentum really kept across rounds (it is not zero at the end).
TEST(OuterSync, OuterStateOnASwapStoreGivesTheBitsOfTheStateInRam) {
  constexpr int kReplicas = 2, kSteps = 7;
  constexpr std::size_t kN = 1000;
  const strait::test::TempDir dir;
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "blocking");
    std::vector<float> params[2][kReplicas], global[2][kReplicas], momentum[2][kReplicas];
    for (const bool on_store : {false, true}) {
      run_ranks(kReplicas, [&](comm::Communicator& world) {
        const int r = world.rank();
        std::shared_ptr<offload::SwapStore> store;
        if (on_store) {
          offload::SwapStoreOptions so;
          so.dir = dir.path();
          so.tag = "outer-rank" + std::to_string(r);
          store = std::make_shared<offload::SwapStore>(so);
        }
        std::vector<float> w = initial_weights(kN);
        OuterOptions o;
        o.outer_steps = 2;
        o.codec = "int8";
        o.overlap = overlap;
        OuterSync sync(PipelineComms{nullptr, &world, nullptr}, 0, w, std::nullopt, o, nullptr,
                       store);
        EXPECT_EQ(sync.on_store(), on_store);
        for (int step = 0; step < kSteps; ++step) {
          inner_sgd(w, r, step);
          (void)sync.end_step(step, w, step + 1 == kSteps);
        }
        const auto k = static_cast<std::size_t>(on_store);
        const auto rr = static_cast<std::size_t>(r);
        params[k][rr] = w;
        global[k][rr] = sync.global();
        momentum[k][rr] = sync.momentum();
      });
    }
    for (std::size_t r = 0; r < kReplicas; ++r) {
      ASSERT_EQ(params[1][r].size(), kN);
      ASSERT_EQ(momentum[1][r].size(), kN);
      for (std::size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(bits(params[1][r][i]), bits(params[0][r][i])) << "replica " << r << " " << i;
        ASSERT_EQ(bits(global[1][r][i]), bits(global[0][r][i])) << "replica " << r << " " << i;
        ASSERT_EQ(bits(momentum[1][r][i]), bits(momentum[0][r][i])) << "replica " << r << " " << i;
      }
    }
    EXPECT_NE(momentum[1][0][0], 0.0f);
  }
}

TEST(OuterSync, BadOptionsAreErrorsNamingTheOption) {
  const auto message = [](OuterOptions o) -> std::string {
    try {
      validate(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      return e.what();
    }
    return "";
  };
  OuterOptions o;
  o.outer_steps = 0;
  EXPECT_NE(message(o).find("--outer-steps 0"), std::string::npos);
  o = {};
  o.lr = 0;
  EXPECT_NE(message(o).find("--outer-lr"), std::string::npos);
  o = {};
  o.momentum = 1;
  EXPECT_NE(message(o).find("--outer-momentum"), std::string::npos);
  o = {};
  o.codec = "topk";
  EXPECT_NE(message(o).find("none, bf16, int8, int4"), std::string::npos);
  o = {};
  o.codec = "int8:bogus=1";
  EXPECT_FALSE(message(o).empty());
  o = {};
  o.outer_steps = 4;
  o.fragments = 5;
  EXPECT_NE(message(o).find("--outer-fragments 5"), std::string::npos);
  o = {};
  o.outer_steps = 4;
  o.delay = 5;
  EXPECT_NE(message(o).find("--outer-delay 5 must be between 1 and --outer-steps 4"),
            std::string::npos);
  o = {};
  o.codec = "int4:block=32";
  EXPECT_EQ(message(o), "");
}

}  // namespace
}  // namespace strait::train
