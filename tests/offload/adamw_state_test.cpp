// The optimizer state behind one interface (offload/adamw_state.h): the RAM state and the NVMe
// state (both I/O engines), at several thread counts, give the same bits as a plain
// kernels::adamw_step loop over every group, step after step, and stay within float rounding of a
// double-precision AdamW; the factory builds what --offload-optimizer names and rejects the rest;
// the step statistics account for the file's traffic.
#include "offload/adamw_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/adamw_state_file.h"
#include "offload/host_adamw_state.h"
#include "offload/optimizer_offload.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/offload/adamw_reference.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using kernels::AdamWHyper;
using strait::test::contains;
using strait::test::TempDir;

using namespace strait::offload::testing;  // tests/offload/adamw_reference.h, test_util.h

// Naive AdamW in double precision (torch.optim.AdamW's formula), as an independent check that the
// groups' decay and the bias correction are applied at all.
struct DoubleAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, const std::vector<DecayGroup>& groups, const AdamWHyper& h,
            std::int64_t t) {
    const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
    for (const DecayGroup& grp : groups) {
      for (std::size_t i = grp.offset; i < grp.offset + grp.count; ++i) {
        p[i] -= h.lr * grp.weight_decay * p[i];
        m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
        v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g[i] * g[i];
        p[i] -= h.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps);
      }
    }
  }
};

struct Placement {
  std::string name;
  OptimizerOffload where;
  IoEngineKind engine;  // nvme only
};

class AdamWStateTest : public ::testing::TestWithParam<Placement> {
 protected:
  void SetUp() override {
    if (GetParam().where == OptimizerOffload::Nvme && GetParam().engine == IoEngineKind::Uring) {
      if (auto why = testing::uring_unavailable(dir_.path())) GTEST_SKIP() << *why;
    }
  }

  std::unique_ptr<AdamWState> make(std::size_t n, unsigned threads, std::size_t chunk = 4096) {
    OptimizerOffloadOptions o;
    o.where = GetParam().where;
    o.threads = threads;
    o.file.dir = dir_.path();
    o.file.tag = "rank0";
    o.file.chunk_params = chunk;
    o.file.io.force = GetParam().engine;
    return make_adamw_state(n, o);
  }

  TempDir dir_;
};

TEST_P(AdamWStateTest, MatchesThePlainKernelLoopBitForBitAtAnyThreadCount) {
  // Several tiles of ParallelAdamW (16 Ki parameters) and several file chunks, with a ragged end.
  const std::size_t n = 3 * kernels::ParallelAdamW::kTileParams + 4 * 4096 + 77;
  const std::vector<DecayGroup> groups = three_groups(n);
  const AdamWHyper hyper{3e-3, 0.9, 0.95, 1e-8, 123.0 /* replaced by each group's */};
  for (const unsigned threads : {1U, 2U, 3U}) {
    SCOPED_TRACE(::testing::Message() << "threads=" << threads);
    std::mt19937 rng(11);
    const std::unique_ptr<AdamWState> state = make(n, threads);
    ASSERT_EQ(state->count(), n);
    EXPECT_EQ(state->threads(), threads);
    std::vector<float> params = random_vector(n, rng, 1.0F);
    InMemory plain{params, std::vector<float>(n, 0.0F), std::vector<float>(n, 0.0F)};
    DoubleAdamW exact{std::vector<double>(params.begin(), params.end()), std::vector<double>(n, 0),
                      std::vector<double>(n, 0)};
    for (int t = 1; t <= 4; ++t) {
      const std::vector<float> grads = random_vector(n, rng, t == 2 ? 1e-4F : 1.0F);
      state->step(params, grads, groups, hyper, t);
      plain.step(grads, groups, hyper, t);
      exact.step(grads, groups, hyper, t);
      ASSERT_TRUE(same_bits(params, plain.p)) << "params differ after step " << t;
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(params[i], exact.p[i], 1e-5 * std::max(1.0, std::abs(exact.p[i]))) << i;
    }
    std::vector<float> m(n, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> v(n, std::numeric_limits<float>::quiet_NaN());
    state->read_moments(m, v);
    EXPECT_TRUE(same_bits(m, plain.m));
    EXPECT_TRUE(same_bits(v, plain.v));
  }
}

TEST_P(AdamWStateTest, RestoredMomentsContinueLikeThePlainLoop) {
  const std::size_t n = 5000;
  std::mt19937 rng(3);
  const std::unique_ptr<AdamWState> state = make(n, 2, 1024);
  InMemory plain{random_vector(n, rng, 1.0F), random_vector(n, rng, 0.1F),
                 random_vector(n, rng, 0.1F)};
  for (float& x : plain.v) x = x * x;  // v >= 0
  state->write_moments(plain.m, plain.v);
  std::vector<float> params = plain.p;
  const AdamWHyper hyper{3e-3, 0.9, 0.95, 1e-8, 0.05};
  const std::vector<float> grads = random_vector(n, rng, 1.0F);
  state->step(params, grads, hyper, 41);  // resuming at step 41, one group
  plain.step(grads, {{0, n, hyper.weight_decay}}, hyper, 41);
  EXPECT_TRUE(same_bits(params, plain.p));
  std::vector<float> m(n), v(n);
  state->read_moments(m, v);
  EXPECT_TRUE(same_bits(m, plain.m));
  EXPECT_TRUE(same_bits(v, plain.v));
}

TEST_P(AdamWStateTest, BadArgumentsChangeNothing) {
  const std::size_t n = 100;
  const std::unique_ptr<AdamWState> state = make(n, 2);
  std::vector<float> p(n, 1.0F), g(n, 0.5F), shorter(n - 1);
  const auto code_of = [](const auto& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  EXPECT_EQ(code_of([&] { state->step(shorter, g, AdamWHyper{}, 1); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { state->step(p, g, AdamWHyper{}, 0); }), ErrorCode::InvalidArgument);
  const std::vector<DecayGroup> gap = {{0, 40, 0.1}, {50, 50, 0.0}};
  EXPECT_EQ(code_of([&] { state->step(p, g, gap, AdamWHyper{}, 1); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { state->read_moments(shorter, p); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(p, std::vector<float>(n, 1.0F));
  std::vector<float> m(n, 1.0F), v(n, 1.0F);
  state->read_moments(m, v);
  EXPECT_EQ(m, std::vector<float>(n, 0.0F));
  EXPECT_EQ(v, std::vector<float>(n, 0.0F));
}

TEST_P(AdamWStateTest, StepStatisticsAccountForTheTimeAndTheTraffic) {
  const std::size_t n = 10 * 4096 + 5;
  const std::unique_ptr<AdamWState> state = make(n, 2);
  EXPECT_EQ(state->last_step_stats().total_s, 0.0);
  std::vector<float> p(n, 1.0F), g(n, 0.5F);
  state->step(p, g, AdamWHyper{}, 1);
  const AdamWStepStats s = state->last_step_stats();
  EXPECT_GT(s.total_s, 0.0);
  EXPECT_GT(s.compute_s, 0.0);
  EXPECT_LE(s.compute_s + s.io_wait_s, s.total_s * 1.0001 + 1e-6);
  if (GetParam().where == OptimizerOffload::Cpu) {
    EXPECT_EQ(s.io_wait_s, 0.0);
    EXPECT_EQ(s.bytes_read, 0U);
    EXPECT_EQ(s.bytes_written, 0U);
  } else {
    // Every chunk is read once and written once: the whole file each way.
    const auto& file = dynamic_cast<const AdamWStateFile&>(*state);
    EXPECT_EQ(s.bytes_read, file.file_bytes());
    EXPECT_EQ(s.bytes_written, file.file_bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, AdamWStateTest,
    ::testing::Values(Placement{"cpu", OptimizerOffload::Cpu, IoEngineKind::Posix},
                      Placement{"nvme_posix", OptimizerOffload::Nvme, IoEngineKind::Posix},
                      Placement{"nvme_uring", OptimizerOffload::Nvme, IoEngineKind::Uring}),
    [](const auto& param_info) { return param_info.param.name; });

// The RAM state and the file state side by side on the same inputs: the same bits every step.
TEST(OptimizerOffload, CpuAndNvmeGiveIdenticalParameters) {
  TempDir dir;
  const std::size_t n = 2 * kernels::ParallelAdamW::kTileParams + 999;
  OptimizerOffloadOptions cpu_options;
  cpu_options.threads = 2;
  OptimizerOffloadOptions nvme_options = cpu_options;
  nvme_options.where = OptimizerOffload::Nvme;
  nvme_options.file.dir = dir.path();
  nvme_options.file.chunk_params = 8192;
  nvme_options.threads = 3;
  const auto cpu = make_adamw_state(n, cpu_options);
  const auto nvme = make_adamw_state(n, nvme_options);
  EXPECT_NE(dynamic_cast<HostAdamWState*>(cpu.get()), nullptr);
  EXPECT_NE(dynamic_cast<AdamWStateFile*>(nvme.get()), nullptr);
  std::mt19937 rng(5);
  std::vector<float> a = random_vector(n, rng, 1.0F);
  std::vector<float> b = a;
  const std::vector<DecayGroup> groups = three_groups(n);
  const AdamWHyper hyper{1e-2, 0.9, 0.999, 1e-8, 0.0};
  for (int t = 1; t <= 5; ++t) {
    const std::vector<float> grads = random_vector(n, rng, 1.0F);
    cpu->step(a, grads, groups, hyper, t);
    nvme->step(b, grads, groups, hyper, t);
    ASSERT_TRUE(same_bits(a, b)) << "step " << t;
  }
}

TEST(OptimizerOffload, NamesParseAndUnknownOnesAreRejectedWithTheChoices) {
  EXPECT_EQ(parse_optimizer_offload("cpu"), OptimizerOffload::Cpu);
  EXPECT_EQ(parse_optimizer_offload("nvme"), OptimizerOffload::Nvme);
  EXPECT_EQ(to_string(OptimizerOffload::Cpu), "cpu");
  EXPECT_EQ(to_string(OptimizerOffload::Nvme), "nvme");
  try {
    (void)parse_optimizer_offload("gpu");
    FAIL() << "gpu must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e.what(), "--offload-optimizer gpu")) << e.what();
    EXPECT_TRUE(contains(e.what(), "cpu")) << e.what();
    EXPECT_TRUE(contains(e.what(), "nvme")) << e.what();
  }
}

TEST(OptimizerOffload, NvmeWithAMissingDirectoryNamesIt) {
  TempDir dir;
  OptimizerOffloadOptions o;
  o.where = OptimizerOffload::Nvme;
  o.file.dir = dir.path() / "nope";
  try {
    (void)make_adamw_state(10, o);
    FAIL() << "a missing directory must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e.what(), (dir.path() / "nope").string() + " does not exist")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--offload-dir")) << e.what();
  }
}

TEST(HostAdamWState, MomentsStartAtZeroAndAnEmptyStateWorks) {
  HostAdamWState state(3000, HostAdamWStateOptions{1});
  if (!state.locked()) std::cerr << "note: the moments are not locked (RLIMIT_MEMLOCK)\n";
  std::vector<float> m(3000, 1.0F), v(3000, 1.0F);
  state.read_moments(m, v);
  EXPECT_EQ(m, std::vector<float>(3000, 0.0F));
  EXPECT_EQ(v, std::vector<float>(3000, 0.0F));
  // Zero parameters: a valid, empty state.
  HostAdamWState empty(0, {});
  std::vector<float> none;
  empty.step(none, none, AdamWHyper{}, 1);
}

}  // namespace
}  // namespace strait::offload
