// PowerSGD allreduce (comm/algorithms/powersgd_allreduce.h) over UCX, ranks as threads, against an
// independent double-precision reference of the same algorithm written here with naive loops (no
// BLAS): results within a tight bound of it and bit-identical on every rank, for 1, 2 and 3 ranks;
// a matrix of rank <= r is reproduced to fp32 precision; error feedback keeps the running sum of
// results on the running sum of inputs; uncompressed elements are a plain fp32 allreduce; a layout
// change resets a key; count 0; refused input; disagreeing layouts; the exact bytes on the wire.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/compress/codec_factory.h"
#include "comm/compress/powersgd.h"
#include "core/error.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using kernels::ReduceOp;
using strait::test::contains;
using testing::error_of;
using testing::run_ranks;

std::vector<float> gaussian(std::uint32_t seed, std::size_t count, float sigma = 1.0F) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0F, sigma);
  std::vector<float> x(count);
  for (auto& v : x) v = dist(gen);
  return x;
}

std::uint64_t bits_hash(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

// ---- The reference: PowerSGD in double, naive loops --------------------------------------------

using Mat = std::vector<double>;  // row-major

// Gram-Schmidt, each column projected out twice, then normalized; a vanishing column becomes zero.
// Returns how many did.
std::size_t ref_orthogonalize(Mat& a, std::size_t rows, std::size_t cols) {
  std::size_t zeroed = 0;
  for (std::size_t k = 0; k < cols; ++k) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t j = 0; j < k; ++j) {
        double dot = 0;
        for (std::size_t i = 0; i < rows; ++i) dot += a[i * cols + j] * a[i * cols + k];
        for (std::size_t i = 0; i < rows; ++i) a[i * cols + k] -= dot * a[i * cols + j];
      }
    }
    double norm = 0;
    for (std::size_t i = 0; i < rows; ++i) norm += a[i * cols + k] * a[i * cols + k];
    norm = std::sqrt(norm);
    const double inv = norm < 1e-30 ? 0.0 : 1.0 / norm;
    if (inv == 0.0) ++zeroed;
    for (std::size_t i = 0; i < rows; ++i) a[i * cols + k] *= inv;
  }
  return zeroed;
}

class Reference {
 public:
  // `compressed`: the matrices the reference compresses (the test decides, not the plan).
  Reference(int world, std::size_t count, std::vector<MatrixShape> compressed, std::size_t rank,
            bool average, bool keyed, bool warm_start = true, std::uint64_t seed = 0)
      : world_(world),
        count_(count),
        compressed_(std::move(compressed)),
        r_(rank),
        average_(average),
        keyed_(keyed),
        warm_(warm_start),
        seed_(seed),
        error_(static_cast<std::size_t>(world), Mat(count, 0.0)),
        q_(compressed_.size()) {}

  // The expected result of one call with these inputs (one vector per rank).
  std::vector<double> step(const std::vector<std::vector<float>>& x) {
    const auto w = static_cast<std::size_t>(world_);
    std::vector<double> out(count_, 0.0);
    for (std::size_t i = 0; i < count_; ++i) {
      for (std::size_t k = 0; k < w; ++k) out[i] += x[k][i];
      if (average_) out[i] /= world_;
    }
    const bool warm = keyed_ && warm_ && calls_ > 0;
    const std::uint64_t call = keyed_ ? calls_ : 0;
    for (std::size_t idx = 0; idx < compressed_.size(); ++idx) {
      const MatrixShape& s = compressed_[idx];
      const std::size_t n = s.rows;
      const std::size_t m = s.cols;
      std::vector<Mat> mats(w, Mat(n * m));
      for (std::size_t k = 0; k < w; ++k) {
        for (std::size_t i = 0; i < n * m; ++i) {
          mats[k][i] = double{x[k][s.offset + i]} + error_[k][s.offset + i];
        }
      }
      Mat q(m * r_);
      if (warm) q = q_[idx];
      if (!warm || ref_orthogonalize(q, m, r_) != 0) {
        std::vector<float> drawn(m * r_);
        powersgd_random_normal(seed_, call, idx, drawn);  // the documented draw
        for (std::size_t i = 0; i < m * r_; ++i) q[i] = drawn[i];
        ref_orthogonalize(q, m, r_);
      }
      Mat p(n * r_, 0.0);
      for (std::size_t k = 0; k < w; ++k) {
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t c = 0; c < r_; ++c) {
            for (std::size_t j = 0; j < m; ++j) p[i * r_ + c] += mats[k][i * m + j] * q[j * r_ + c];
          }
        }
      }
      ref_orthogonalize(p, n, r_);
      std::fill(q.begin(), q.end(), 0.0);
      for (std::size_t k = 0; k < w; ++k) {
        for (std::size_t j = 0; j < m; ++j) {
          for (std::size_t c = 0; c < r_; ++c) {
            for (std::size_t i = 0; i < n; ++i) q[j * r_ + c] += mats[k][i * m + j] * p[i * r_ + c];
          }
        }
      }
      if (average_) {
        for (auto& v : q) v /= world_;
      }
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < m; ++j) {
          double a = 0;
          for (std::size_t c = 0; c < r_; ++c) a += p[i * r_ + c] * q[j * r_ + c];
          out[s.offset + i * m + j] = a;
        }
      }
      if (keyed_) {
        const double share = average_ ? 1.0 : 1.0 / world_;
        for (std::size_t k = 0; k < w; ++k) {
          for (std::size_t i = 0; i < n * m; ++i) {
            error_[k][s.offset + i] = mats[k][i] - share * out[s.offset + i];
          }
        }
      }
      q_[idx] = q;
    }
    ++calls_;
    return out;
  }

 private:
  int world_;
  std::size_t count_;
  std::vector<MatrixShape> compressed_;
  std::size_t r_;
  bool average_;
  bool keyed_;
  bool warm_;
  std::uint64_t seed_;
  std::vector<Mat> error_;
  std::vector<Mat> q_;
  std::uint64_t calls_ = 0;
};

// ---- The layout most tests use -----------------------------------------------------------------

// Two matrices worth compressing at rank 4, a 4 x 6 one that is not ((4 + 6) * 4 * 2 >= 24), and
// loose elements before, between and after them; given out of order.
constexpr std::size_t kRank = 4;
std::vector<MatrixShape> layout() {
  return {
      {.offset = 3110, .rows = 40, .cols = 96},  // ends at 6950
      {.offset = 5, .rows = 64, .cols = 48},     // ends at 3077
      {.offset = 3080, .rows = 4, .cols = 6},    // ends at 3104: not compressed
  };
}
constexpr std::size_t kCount = 6961;
// What the reference compresses: (rows + cols) * 4 * 2 < rows * cols, sorted by offset.
std::vector<MatrixShape> compressed_part() {
  return {{.offset = 5, .rows = 64, .cols = 48}, {.offset = 3110, .rows = 40, .cols = 96}};
}

std::vector<float> input_of(int rank, int call, std::size_t count) {
  return gaussian(static_cast<std::uint32_t>(1000 * call + rank + 1), count);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (const double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class PowerSgd : public ::testing::TestWithParam<int> {};

TEST_P(PowerSgd, MatchesTheDoublePrecisionReferenceAndIsBitIdenticalOnEveryRank) {
  const int world = GetParam();
  constexpr int kCalls = 4;
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    for (const bool keyed : {true, false}) {
      // results[call][rank]
      std::vector<std::vector<std::vector<float>>> results(
          kCalls, std::vector<std::vector<float>>(static_cast<std::size_t>(world)));
      run_ranks(world, [&](Communicator& comm) {
        for (int c = 0; c < kCalls; ++c) {
          auto x = input_of(comm.rank(), c, kCount);
          auto& out = results[static_cast<std::size_t>(c)][static_cast<std::size_t>(comm.rank())];
          out.assign(kCount, -1.0F);
          Compression z{"powersgd:rank=4", keyed ? "bucket0" : "", layout()};
          if (c % 2 == 1) {  // in place on odd calls
            comm.allreduce_compressed(x.data(), x.data(), kCount, op, z);
            out = x;
          } else {
            comm.allreduce_compressed(x.data(), out.data(), kCount, op, z);
          }
        }
      });
      Reference ref(world, kCount, compressed_part(), kRank, op == ReduceOp::Avg, keyed);
      for (int c = 0; c < kCalls; ++c) {
        std::vector<std::vector<float>> inputs;
        inputs.reserve(static_cast<std::size_t>(world));
        for (int r = 0; r < world; ++r) inputs.push_back(input_of(r, c, kCount));
        const auto expected = ref.step(inputs);
        const auto& got = results[static_cast<std::size_t>(c)];
        for (int r = 1; r < world; ++r) {
          ASSERT_EQ(bits_hash(got[static_cast<std::size_t>(r)]), bits_hash(got[0]))
              << "call " << c << ": rank " << r << " differs from rank 0";
        }
        // fp32 against double through two GEMMs, two orthogonalizations and the rings' sums.
        const double bound = 1e-5 * max_abs(expected);
        double worst = 0;
        for (std::size_t i = 0; i < kCount; ++i) {
          worst = std::max(worst, std::fabs(got[0][i] - expected[i]));
          ASSERT_NEAR(got[0][i], expected[i], bound)
              << "world " << world << " call " << c << " element " << i << " keyed " << keyed;
        }
        // The approximation is not the exact sum: the test would notice a plain allreduce.
        double off_exact = 0;
        for (std::size_t i = 5; i < 5 + 64 * 48; ++i) {
          double exact = 0;
          for (int r = 0; r < world; ++r) exact += inputs[static_cast<std::size_t>(r)][i];
          if (op == ReduceOp::Avg) exact /= world;
          off_exact = std::max(off_exact, std::fabs(exact - expected[i]));
        }
        EXPECT_GT(off_exact, 100 * bound);
        std::printf("world %d %s keyed %d call %d: worst error %.3g of max %.3g\n", world,
                    op == ReduceOp::Avg ? "avg" : "sum", keyed ? 1 : 0, c, worst,
                    max_abs(expected));
      }
    }
  }
}

TEST_P(PowerSgd, ReproducesAMatrixOfRankAtMostRToFp32Precision) {
  const int world = GetParam();
  constexpr std::size_t kRows = 96;
  constexpr std::size_t kCols = 80;
  for (const std::size_t true_rank : {std::size_t{2}, kRank}) {
    // Rank w's call c sends u C v^T, u (rows x k) and v (cols x k) fixed, C (k x k) its own
    // (diagonal-dominant, so the sum is well-conditioned): the sum has rank <= k.
    const auto u = gaussian(7, kRows * true_rank);
    const auto v = gaussian(8, kCols * true_rank);
    const auto input = [&](int rank, int call) {
      auto mix = gaussian(static_cast<std::uint32_t>(100 + 10 * call + rank), true_rank * true_rank,
                          0.05F);
      for (std::size_t c = 0; c < true_rank; ++c) {
        mix[c * true_rank + c] += static_cast<float>(true_rank - c) * (1.0F + 0.25F * rank);
      }
      std::vector<float> x(kRows * kCols, 0.0F);
      for (std::size_t i = 0; i < kRows; ++i) {
        for (std::size_t j = 0; j < kCols; ++j) {
          double a = 0;
          for (std::size_t c = 0; c < true_rank; ++c) {
            for (std::size_t d = 0; d < true_rank; ++d) {
              a += double{u[i * true_rank + c]} * mix[c * true_rank + d] * v[j * true_rank + d];
            }
          }
          x[i * kCols + j] = static_cast<float>(a);
        }
      }
      return x;
    };
    constexpr int kCalls = 3;
    std::vector<std::vector<float>> results(kCalls);
    run_ranks(world, [&](Communicator& comm) {
      std::vector<float> out(kRows * kCols);
      for (int c = 0; c < kCalls; ++c) {
        const auto x = input(comm.rank(), c);
        comm.allreduce_compressed(x.data(), out.data(), x.size(), ReduceOp::Sum,
                                  Compression{"powersgd:rank=4", "lowrank", {{0, kRows, kCols}}});
        if (comm.rank() == 0) results[static_cast<std::size_t>(c)] = out;
      }
    });
    for (int c = 1; c < kCalls; ++c) {
      std::vector<double> exact(kRows * kCols, 0.0);
      for (int r = 0; r < world; ++r) {
        const auto x = input(r, c);
        for (std::size_t i = 0; i < x.size(); ++i) exact[i] += x[i];
      }
      const double bound = 2e-6 * max_abs(exact);  // a few ulps of the largest element
      double worst = 0;
      for (std::size_t i = 0; i < exact.size(); ++i) {
        worst = std::max(worst, std::fabs(results[static_cast<std::size_t>(c)][i] - exact[i]));
      }
      std::printf("rank %zu call %d: worst error %.3g of max %.3g\n", true_rank, c, worst,
                  max_abs(exact));
      for (std::size_t i = 0; i < exact.size(); ++i) {
        ASSERT_NEAR(results[static_cast<std::size_t>(c)][i], exact[i], bound)
            << "rank " << true_rank << " call " << c << " element " << i;
      }
    }
  }
}

TEST_P(PowerSgd, CountZeroCompletesAndSendsNothing) {
  run_ranks(GetParam(), [&](Communicator& comm) {
    const auto before = comm.stats().allreduce_bytes;
    comm.allreduce_compressed(nullptr, nullptr, 0, ReduceOp::Avg, Compression{"powersgd", "k"});
    comm.allreduce_compressed(nullptr, nullptr, 0, ReduceOp::Sum, Compression{"powersgd", ""});
    EXPECT_EQ(comm.stats().allreduce_bytes, before);
    // And the communicator is still in step: a plain allreduce after it.
    float one = 1.0F;
    comm.allreduce(&one, &one, 1, kernels::DType::F32, ReduceOp::Sum);
    EXPECT_EQ(one, static_cast<float>(comm.size()));
  });
}

INSTANTIATE_TEST_SUITE_P(World, PowerSgd, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return fmt::format("P{}", p.param);
                         });

// With error feedback the running sum of results tracks the running sum of inputs (within about
// one residual); without it (no key: no residual, no warm start) the gap grows with every call.
TEST(PowerSgdErrorFeedback, KeepsTheRunningSumOnTrackWhereWithoutItItDrifts) {
  constexpr int kWorld = 2;
  constexpr std::size_t kRows = 48;
  constexpr std::size_t kCols = 64;
  constexpr std::size_t kN = kRows * kCols;
  constexpr int kSteps = 60;
  // A persistent full-rank direction plus noise, like a gradient: what rank 4 drops keeps coming.
  const auto base = gaussian(5, kN, 0.05F);
  const auto input = [&](int rank, int s) {
    auto x = gaussian(static_cast<std::uint32_t>(500 + 7 * s + rank), kN, 0.3F);
    for (std::size_t i = 0; i < kN; ++i) x[i] += base[i];
    return x;
  };
  std::vector<double> drift(2, 0.0);  // [without, with]
  for (const bool feedback : {false, true}) {
    std::vector<double> sum_out(kN, 0.0);
    std::vector<double> sum_in(kN, 0.0);
    run_ranks(kWorld, [&](Communicator& comm) {
      std::vector<float> out(kN);
      for (int s = 0; s < kSteps; ++s) {
        const auto x = input(comm.rank(), s);
        comm.allreduce_compressed(x.data(), out.data(), kN, ReduceOp::Sum,
                                  Compression{"powersgd:rank=4", feedback ? "w" : "", {}});
        if (comm.rank() == 0) {
          for (std::size_t i = 0; i < kN; ++i) sum_out[i] += out[i];
        }
      }
    });
    for (int s = 0; s < kSteps; ++s) {
      for (int r = 0; r < kWorld; ++r) {
        const auto x = input(r, s);
        for (std::size_t i = 0; i < kN; ++i) sum_in[i] += x[i];
      }
    }
    double err = 0;
    for (std::size_t i = 0; i < kN; ++i) err = std::max(err, std::fabs(sum_out[i] - sum_in[i]));
    drift[feedback ? 1 : 0] = err;
  }
  std::printf("running-sum drift after %d calls: %.3g with error feedback, %.3g without\n", kSteps,
              drift[1], drift[0]);
  // One step's input is at most ~2 * (0.3 * 4.5 + 0.05 * 4.5) ~ 3; the residual stays of that size.
  EXPECT_LT(drift[1], 8.0) << "with error feedback the running sum is off by " << drift[1];
  EXPECT_LT(drift[1] * 3, drift[0]) << "with error feedback the running sum is off by " << drift[1]
                                    << ", without by " << drift[0];
}

// Elements outside the compressed matrices are a plain fp32 allreduce: with one or two ranks (where
// a sum of two has one order) the very bits of Communicator::allreduce.
TEST(PowerSgdPlain, UncompressedElementsEqualAPlainAllreduceExactly) {
  for (const int world : {1, 2}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      for (const std::size_t count : {kCount, std::size_t{10'007}}) {  // 10007 is prime
        std::vector<float> compressed_out(count);
        std::vector<float> plain_out(count);
        run_ranks(world, [&](Communicator& comm) {
          const auto x = input_of(comm.rank(), 0, count);
          std::vector<float> a(count);
          std::vector<float> b(count);
          comm.allreduce_compressed(
              x.data(), a.data(), count, op,
              Compression{"powersgd", "p",
                          count == kCount ? layout() : std::vector<MatrixShape>{}});
          comm.allreduce(x.data(), b.data(), count, kernels::DType::F32, op);
          if (comm.rank() == 0) {
            compressed_out = a;
            plain_out = b;
          }
        });
        std::vector<bool> in_compressed(count, false);
        if (count == kCount) {
          for (const auto& m : compressed_part()) {
            for (std::size_t i = 0; i < m.rows * m.cols; ++i) in_compressed[m.offset + i] = true;
          }
        }
        std::size_t checked = 0;
        for (std::size_t i = 0; i < count; ++i) {
          if (in_compressed[i]) continue;
          ++checked;
          ASSERT_EQ(std::bit_cast<std::uint32_t>(compressed_out[i]),
                    std::bit_cast<std::uint32_t>(plain_out[i]))
              << "world " << world << " count " << count << " element " << i << ": "
              << compressed_out[i] << " vs " << plain_out[i];
        }
        EXPECT_EQ(checked, count == kCount ? kCount - 64 * 48 - 40 * 96 : count);
      }
    }
  }
}

TEST(PowerSgdLayout, DefaultIsOneNearSquareMatrixAndPlansAreChecked) {
  const auto o = PowerSgdOptions::parse("powersgd:rank=4");
  auto plan = plan_powersgd(std::size_t{16} << 20, {}, o);
  ASSERT_EQ(plan.compressed.size(), 1U);
  EXPECT_EQ(plan.compressed[0], (MatrixShape{0, 4096, 4096}));
  EXPECT_EQ(plan.plain_count, 0U);
  EXPECT_EQ(plan.p_count + plan.q_count, 2U * 4096 * 4);
  plan = plan_powersgd(3072, {}, o);  // 48 x 64
  ASSERT_EQ(plan.compressed.size(), 1U);
  EXPECT_EQ(plan.compressed[0], (MatrixShape{0, 48, 64}));
  plan = plan_powersgd(10'007, {}, o);  // prime: 1 x 10007 does not gain
  EXPECT_TRUE(plan.compressed.empty());
  EXPECT_EQ(plan.plain_count, 10'007U);
  plan = plan_powersgd(kCount, layout(), o);
  EXPECT_EQ(plan.compressed, compressed_part());
  EXPECT_EQ(plan.plain_count, kCount - 64 * 48 - 40 * 96);
  EXPECT_EQ(plan.p_count, (64U + 40U) * 4);
  EXPECT_EQ(plan.q_count, (48U + 96U) * 4);
  // min_compression moves the line: at rank 4, 40 x 96 gains 7.06x, 64 x 48 6.86x.
  plan = plan_powersgd(kCount, layout(), PowerSgdOptions::parse("powersgd:min_compression=7"));
  ASSERT_EQ(plan.compressed.size(), 1U);
  EXPECT_EQ(plan.compressed[0], compressed_part()[1]);
  plan = plan_powersgd(kCount, layout(), o);
  // The plan's hash sees the layout and the spec.
  const std::vector<MatrixShape> moved = {{5, 48, 64}};
  const auto other = plan_powersgd(kCount, moved, o);
  EXPECT_NE(other.hash(o.spec()), plan.hash(o.spec()));
  EXPECT_NE(plan.hash("powersgd:rank=4,min_compression=2,warm_start=1,seed=1"),
            plan.hash(o.spec()));

  const auto refused = [&](std::vector<MatrixShape> m, const std::string& what) {
    const auto e = error_of([&] { (void)plan_powersgd(100, m, o); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e->what(), what)) << e->what();
  };
  refused({{0, 5, 10}, {40, 2, 5}},
          "matrices[0] (offset 0, 5 x 10) and matrices[1] (offset 40, "
          "2 x 5) overlap");
  refused({{95, 2, 3}}, "matrices[0] (offset 95, 2 x 3) reaches past the buffer of 100");
  refused({{0, 1, 1}, {200, 0, 5}}, "matrices[1] (offset 200, 0 x 5) reaches past");
  refused({{0, std::size_t{1} << 62, 8}}, "reaches past");
}

TEST(PowerSgdLayout, DefaultLayoutEqualsTheExplicitNearSquareMatrix) {
  constexpr std::size_t kN = 48 * 64;
  std::vector<std::vector<float>> out(2, std::vector<float>(kN));
  run_ranks(2, [&](Communicator& comm) {
    const auto x = input_of(comm.rank(), 3, kN);
    std::vector<float> a(kN);
    std::vector<float> b(kN);
    comm.allreduce_compressed(x.data(), a.data(), kN, ReduceOp::Sum, Compression{"powersgd"});
    comm.allreduce_compressed(x.data(), b.data(), kN, ReduceOp::Sum,
                              Compression{"powersgd", "", {{0, 48, 64}}});
    if (comm.rank() == 0) out = {a, b};
  });
  EXPECT_EQ(bits_hash(out[0]), bits_hash(out[1]));
}

// A key whose layout changes starts again: its result then equals a first call on a fresh key,
// where keeping the old state would not.
TEST(PowerSgdKeyState, ALayoutChangeResetsTheKeysErrorAndWarmStart) {
  constexpr std::size_t kN = kCount;
  const std::vector<MatrixShape> other = {{.offset = 100, .rows = 64, .cols = 80}};
  // [0]: A, A, B on one key; [1]: B on a fresh key; [2]: A, A, A; [3]: A on a fresh key.
  std::vector<std::vector<float>> last(4);
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> out(kN);
    const auto call = [&](const std::vector<MatrixShape>& layout, const std::string& key, int c) {
      const auto x = input_of(comm.rank(), c, kN);
      comm.allreduce_compressed(x.data(), out.data(), kN, ReduceOp::Avg,
                                Compression{"powersgd", key, layout});
    };
    call(layout(), "k", 0);
    call(layout(), "k", 1);
    call(other, "k", 2);
    if (comm.rank() == 0) last[0] = out;
    call(other, "fresh", 2);
    if (comm.rank() == 0) last[1] = out;
    call(layout(), "k2", 0);
    call(layout(), "k2", 1);
    call(layout(), "k2", 2);
    if (comm.rank() == 0) last[2] = out;
    call(layout(), "fresh2", 2);
    if (comm.rank() == 0) last[3] = out;
  });
  EXPECT_EQ(bits_hash(last[0]), bits_hash(last[1])) << "the layout change did not reset the key";
  EXPECT_NE(bits_hash(last[2]), bits_hash(last[3])) << "the key's state had no effect";
}

TEST(PowerSgdWire, SendsTheFactorsAndTheUncompressedElementsOnly) {
  for (const int world : {1, 2}) {
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(world));
    run_ranks(world, [&](Communicator& comm) {
      const auto x = input_of(comm.rank(), 0, kCount);
      std::vector<float> out(kCount);
      const auto before = comm.stats().allreduce_bytes;
      comm.allreduce_compressed(x.data(), out.data(), kCount, ReduceOp::Avg,
                                Compression{"powersgd:rank=4", "wire", layout()});
      sent[static_cast<std::size_t>(comm.rank())] = comm.stats().allreduce_bytes - before;
    });
    // A 2-rank ring sends each vector once: 4 bytes per uncompressed element, (n + m) r 4 bytes
    // per compressed matrix.
    const std::uint64_t plain = kCount - 64 * 48 - 40 * 96;
    const std::uint64_t expected =
        world == 1 ? 0 : 4 * (plain + (64 + 48) * kRank + (40 + 96) * kRank);
    for (const auto s : sent) EXPECT_EQ(s, expected) << "world " << world;
  }
  // 64 MiB as 4096 x 4096 at rank 4: 128 KiB.
  std::uint64_t sent_big = 0;
  run_ranks(2, [&](Communicator& comm) {
    const std::size_t n = std::size_t{16} << 20;
    std::vector<float> x(n, 0.5F);
    const auto before = comm.stats().allreduce_bytes;
    comm.allreduce_compressed(x.data(), x.data(), n, ReduceOp::Sum, Compression{"powersgd:rank=4"});
    if (comm.rank() == 0) sent_big = comm.stats().allreduce_bytes - before;
    EXPECT_NEAR(x[12345], 1.0F, 1e-5);  // a rank-1 matrix: reproduced
  });
  EXPECT_EQ(sent_big, 2U * 4096 * 4 * 4);
}

TEST(PowerSgdFailure, DifferentLayoutsAreAMismatchOnBothRanks) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> x(kCount, 1.0F);
    const auto e = error_of([&] {
      comm.allreduce_compressed(
          x.data(), x.data(), x.size(), ReduceOp::Sum,
          Compression{"powersgd", "k",
                      comm.rank() == 0 ? layout() : std::vector<MatrixShape>{{0, 64, 48}}});
    });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
    errors[static_cast<std::size_t>(comm.rank())] = e->what();
  });
  for (const auto& e : errors) EXPECT_TRUE(contains(e, "allreduce_compressed #0")) << e;
}

TEST(PowerSgdFailure, NonFiniteInputBadArgumentsAndBadLayoutsAreRefusedBeforeSending) {
  run_ranks(1, [&](Communicator& comm) {
    std::vector<float> x(kCount, 1.0F);
    x[4000] = std::numeric_limits<float>::infinity();
    const auto refused = [&](const Compression& z, std::size_t count, const std::string& what) {
      const auto e =
          error_of([&] { comm.allreduce_compressed(x.data(), x.data(), count, ReduceOp::Sum, z); });
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
      EXPECT_TRUE(contains(e->what(), what)) << e->what();
    };
    refused(Compression{"powersgd", "k", layout()}, kCount, "element 4000");
    refused(Compression{"powersgd:rank=0"}, 10, "rank=0");
    refused(Compression{"powersgd:rnak=2"}, 10,
            "unknown argument 'rnak'; valid keys: rank, min_compression, warm_start, seed");
    refused(Compression{"powersgd:min_compression=0.5"}, 10, "min_compression=0.5");
    refused(Compression{"powersgd:warm_start=2"}, 10, "warm_start=2");
    refused(Compression{"powersgd", "", {{0, 10, 10}, {90, 5, 5}}}, 200,
            "matrices[0] (offset 0, 10 x 10) and matrices[1] (offset 90, 5 x 5) overlap");
    refused(Compression{"powersgd", "", {{150, 10, 10}}}, 200, "reaches past the buffer of 200");
    // Nothing was sent: the communicator still works.
    std::vector<float> y(kCount, 2.0F);
    comm.allreduce_compressed(y.data(), y.data(), kCount, ReduceOp::Sum,
                              Compression{"powersgd", "k", layout()});
    EXPECT_EQ(y[3], 2.0F);           // uncompressed
    EXPECT_NEAR(y[10], 2.0F, 1e-5);  // a constant matrix has rank 1
  });
}

TEST(PowerSgdSpec, IsCanonicalAndNotAnElementwiseCodec) {
  EXPECT_EQ(PowerSgdOptions::parse("powersgd").spec(),
            "powersgd:rank=4,min_compression=2,warm_start=1,seed=0");
  EXPECT_EQ(PowerSgdOptions::parse("powersgd: seed=9 ,rank=8,warm_start=false").spec(),
            "powersgd:rank=8,min_compression=2,warm_start=0,seed=9");
  EXPECT_EQ(PowerSgdOptions::parse("powersgd:min_compression=2.5").spec(),
            "powersgd:rank=4,min_compression=2.5,warm_start=1,seed=0");
  EXPECT_TRUE(PowerSgdOptions::names_powersgd("powersgd:rank=2"));
  EXPECT_FALSE(PowerSgdOptions::names_powersgd("powersgdx"));
  const auto e = error_of([] { (void)make_codec("powersgd"); });
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(contains(e->what(), "allreduce_compressed")) << e->what();
}

// The numerics on their own: orthonormal columns (also from dependent or zero columns), and the
// fixed-order product against double.
TEST(PowerSgdNumerics, OrthogonalizeAndLowRankProduct) {
  constexpr std::size_t kRows = 200;
  constexpr std::size_t kCols = 5;
  auto a = gaussian(11, kRows * kCols);
  for (std::size_t i = 0; i < kRows; ++i) {
    a[i * kCols + 2] = a[i * kCols + 0] + 2.0F * a[i * kCols + 1];  // dependent
    a[i * kCols + 4] = 0.0F;                                        // zero
  }
  EXPECT_EQ(orthogonalize_columns(a.data(), kRows, kCols), 1U);
  for (std::size_t j = 0; j < kCols; ++j) {
    for (std::size_t k = 0; k <= j; ++k) {
      double dot = 0;
      for (std::size_t i = 0; i < kRows; ++i) dot += double{a[i * kCols + j]} * a[i * kCols + k];
      const double want = (j == k && j != 4) ? 1.0 : 0.0;
      EXPECT_NEAR(dot, want, 1e-5) << "columns " << j << ", " << k;
    }
  }
  const auto p = gaussian(12, 30 * 3);
  const auto q = gaussian(13, 20 * 3);
  std::vector<float> out(30 * 25, -1.0F);  // leading dimension 25 > 20
  std::vector<float> scratch;
  low_rank_product(p.data(), q.data(), 30, 20, 3, out.data(), 25, scratch);
  for (std::size_t i = 0; i < 30; ++i) {
    for (std::size_t j = 0; j < 25; ++j) {
      if (j >= 20) {
        EXPECT_EQ(out[i * 25 + j], -1.0F);
        continue;
      }
      double want = 0;
      for (std::size_t k = 0; k < 3; ++k) want += double{p[i * 3 + k]} * q[j * 3 + k];
      EXPECT_NEAR(out[i * 25 + j], want, 1e-5);
    }
  }
}

}  // namespace
}  // namespace strait::comm
