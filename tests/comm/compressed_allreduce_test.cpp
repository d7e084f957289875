// Compressed allreduce (comm/algorithms/compressed_*_allreduce.h) over UCX, ranks as threads:
// every codec x world size 1..3 x count: all ranks bit-identical, within the codec's error bound
// of the double-precision sum; error feedback keeps the running sum of results on the running sum
// of inputs where without it the error grows; the bytes on the wire are the encoded sizes;
// disagreeing codecs are a Mismatch on both ranks; NaN input is refused before anything is sent.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/algorithms/compressed_ring_allreduce.h"
#include "comm/communicator.h"
#include "comm/compress/codec_factory.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::ReduceOp;
using strait::test::contains;
using testing::error_of;
using testing::run_ranks;
using testing::run_ranks_with;

using testing::input_of;

struct Case {
  std::string codec;
  // Bound on |result - exact sum| per element, as a multiple of P * max over ranks and elements
  // of |x| (the largest a partial sum can be), per encode along the chain (P of them).
  double relative_bound;
};

// Every encode of a value v errs by at most: bf16 |v| 2^-9, fp16 |v| 2^-12 (+ subnormal steps),
// int8 absmax/254, int4 absmax/14 (absmax of the block, at most the partial sum's max).
const std::vector<Case> kBounded = {{"bf16", 1.0 / 256},
                                    {"fp16", 1.0 / 2048},
                                    {"int8", 1.0 / 254},
                                    {"int4", 1.0 / 14},
                                    {"int8:block=32", 1.0 / 254}};

class CompressedAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(CompressedAllreduce, BitIdenticalOnEveryRankAndWithinTheCodecsBound) {
  const int world = GetParam();
  for (const auto& c : kBounded) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7},
                                    std::size_t{1000}, std::size_t{100'003}}) {
      for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
        run_ranks(world, [&](Communicator& comm) {
          const auto x = input_of(comm.rank(), count, 1);
          auto& out = results[static_cast<std::size_t>(comm.rank())];
          out.assign(count, -1.0F);
          comm.allreduce_compressed(x.data(), out.data(), count, op, Compression{c.codec, ""});
        });
        double max_abs = 0;
        std::vector<double> exact(count, 0.0);
        for (int r = 0; r < world; ++r) {
          const auto x = input_of(r, count, 1);
          for (std::size_t i = 0; i < count; ++i) {
            exact[i] += x[i];
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
          }
        }
        const double scale = op == ReduceOp::Avg ? 1.0 / world : 1.0;
        const double bound = world * c.relative_bound * world * max_abs * scale + 1e-6;
        for (int r = 1; r < world; ++r) {
          ASSERT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                                count * sizeof(float)),
                    0)
              << c.codec << " count " << count << ": rank " << r << " differs from rank 0";
        }
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(results[0][i], exact[i] * scale, bound)
              << c.codec << " world " << world << " count " << count << " element " << i;
        }
      }
    }
  }
}

TEST_P(CompressedAllreduce, TopkAndOnebitAreBitIdenticalAndKeepTheLargestValues) {
  const int world = GetParam();
  const std::size_t count = 10'000;
  for (const std::string codec : {"topk:fraction=0.05", "onebit"}) {
    std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
    run_ranks(world, [&](Communicator& comm) {
      const auto x = input_of(comm.rank(), count, 2);
      auto& out = results[static_cast<std::size_t>(comm.rank())];
      out.assign(count, -1.0F);
      comm.allreduce_compressed(x.data(), out.data(), count, ReduceOp::Sum, Compression{codec, ""});
    });
    for (int r = 1; r < world; ++r) {
      ASSERT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                            count * sizeof(float)),
                0)
          << codec << ": rank " << r << " differs from rank 0";
    }
    if (codec.starts_with("topk")) {
      // The sum of every rank's 500 largest magnitudes, exactly (top-k keeps values as they are).
      std::vector<double> expected(count, 0.0);
      for (int r = 0; r < world; ++r) {
        const auto x = input_of(r, count, 2);
        std::vector<std::size_t> idx(count);
        for (std::size_t i = 0; i < count; ++i) idx[i] = i;
        std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
          return std::fabs(x[a]) > std::fabs(x[b]);
        });
        for (std::size_t j = 0; j < 500; ++j) expected[idx[j]] += x[idx[j]];
      }
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_NEAR(results[0][i], expected[i], 1e-5) << "element " << i;
      }
    }
  }
}

// Chunks longer than the pipeline's segment are sent in segments cut at multiples of the codec's
// block: the result must be bit for bit that of a naive, unsegmented simulation of the ring in
// one process (chunk c starts at rank c, each hop decodes, adds its own values and re-encodes the
// whole chunk, its owner c-1 encodes the sum once and everybody decodes those bytes).
TEST_P(CompressedAllreduce, LongVectorsArePipelinedAndMatchTheUnsegmentedRingBitForBit) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank has no ring to pipeline";
  const auto p = static_cast<std::size_t>(world);
  // Chunks of 2.5 segments, and a count no block divides.
  const std::size_t count = p * (CompressedRingAllreduce::kSegmentElements * 5 / 2) + 777;
  for (const std::string codec : {"int8", "int4", "int8:block=100", "onebit", "bf16"}) {
    std::vector<std::vector<float>> results(p);
    run_ranks(world, [&](Communicator& comm) {
      const auto x = input_of(comm.rank(), count, 4);
      auto& out = results[static_cast<std::size_t>(comm.rank())];
      out.assign(count, -1.0F);
      comm.allreduce_compressed(x.data(), out.data(), count, ReduceOp::Sum, Compression{codec});
    });
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(input_of(r, count, 4));
    const auto c = make_codec_from_spec(codec);
    std::vector<float> expected(count);
    for (std::size_t chunk = 0; chunk < p; ++chunk) {
      const std::size_t n = count / p + (chunk < count % p ? 1 : 0);
      const std::size_t offset = chunk * (count / p) + std::min(chunk, count % p);
      std::vector<float> acc(inputs[chunk].begin() + static_cast<std::ptrdiff_t>(offset),
                             inputs[chunk].begin() + static_cast<std::ptrdiff_t>(offset + n));
      std::vector<std::byte> bytes(c->encoded_bytes(n));
      std::vector<float> decoded(n);
      for (std::size_t hop = 1; hop < p; ++hop) {
        c->encode(acc, bytes);
        c->decode(bytes, decoded);
        const auto& own = inputs[(chunk + hop) % p];
        for (std::size_t i = 0; i < n; ++i) acc[i] = own[offset + i] + decoded[i];
      }
      c->encode(acc, bytes);
      c->decode(bytes, std::span<float>(expected.data() + offset, n));
    }
    for (std::size_t r = 0; r < p; ++r) {
      ASSERT_EQ(std::memcmp(results[r].data(), expected.data(), count * sizeof(float)), 0)
          << codec << ": rank " << r << " differs from the unsegmented ring (first at element "
          << std::distance(
                 expected.begin(),
                 std::mismatch(expected.begin(), expected.end(), results[r].begin()).first)
          << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(World, CompressedAllreduce, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return fmt::format("P{}", p.param);
                         });

// Error feedback: over many calls with one key, the sum of the results stays within a residual of
// the sum of the exact sums; without it (no key) the biased codecs drift further with every call.
TEST(CompressedAllreduceErrorFeedback, KeepsTheRunningSumOnTrackWhereWithoutItItDrifts) {
  constexpr int kWorld = 2;
  constexpr std::size_t kCount = 4096;
  constexpr int kSteps = 120;
  for (const std::string codec : {"topk:fraction=0.05", "onebit", "int4"}) {
    std::vector<double> drift(2, 0.0);  // [without, with] error feedback
    for (const bool feedback : {false, true}) {
      std::vector<std::vector<double>> sum_results(kWorld, std::vector<double>(kCount, 0.0));
      std::vector<double> sum_exact(kCount, 0.0);
      run_ranks(kWorld, [&](Communicator& comm) {
        std::vector<float> out(kCount);
        for (int s = 0; s < kSteps; ++s) {
          // A persistent direction plus noise, like a gradient: what a codec drops keeps coming.
          auto x = input_of(comm.rank(), kCount, 100 + static_cast<std::uint32_t>(s));
          for (std::size_t i = 0; i < kCount; ++i) x[i] = 0.3F * x[i] + 0.01F * (i % 7);
          comm.allreduce_compressed(x.data(), out.data(), kCount, ReduceOp::Sum,
                                    Compression{codec, feedback ? "grad" : ""});
          auto& acc = sum_results[static_cast<std::size_t>(comm.rank())];
          for (std::size_t i = 0; i < kCount; ++i) acc[i] += out[i];
        }
      });
      for (int s = 0; s < kSteps; ++s) {
        for (int r = 0; r < kWorld; ++r) {
          auto x = input_of(r, kCount, 100 + static_cast<std::uint32_t>(s));
          for (std::size_t i = 0; i < kCount; ++i) sum_exact[i] += 0.3F * x[i] + 0.01F * (i % 7);
        }
      }
      double err = 0;
      for (std::size_t i = 0; i < kCount; ++i) {
        err = std::max(err, std::fabs(sum_results[0][i] - sum_exact[i]));
      }
      drift[feedback ? 1 : 0] = err;
    }
    EXPECT_LT(drift[1] * 3, drift[0]) << codec << ": with error feedback the running sum is off by "
                                      << drift[1] << ", without by " << drift[0];
  }
}

TEST(CompressedAllreduceWire, SendsTheEncodedBytesOnly) {
  constexpr std::size_t kCount = 1'000'000;
  for (const std::string codec : {"int8", "int4", "topk:fraction=0.01"}) {
    std::vector<std::uint64_t> sent(2);
    run_ranks(2, [&](Communicator& comm) {
      const auto x = input_of(comm.rank(), kCount, 3);
      std::vector<float> out(kCount);
      const auto before = comm.stats().allreduce_bytes;
      comm.allreduce_compressed(x.data(), out.data(), kCount, ReduceOp::Sum, Compression{codec});
      sent[static_cast<std::size_t>(comm.rank())] = comm.stats().allreduce_bytes - before;
    });
    const auto c = make_codec_from_spec(codec);
    // The ring sends chunk r then the owned chunk (half each); top-k sends its encoding once.
    const std::uint64_t expected =
        codec.starts_with("topk") ? c->encoded_bytes(kCount) : 2 * c->encoded_bytes(kCount / 2);
    EXPECT_EQ(sent[0], expected) << codec;
    EXPECT_EQ(sent[1], expected) << codec;
    EXPECT_LT(sent[0] * 3, kCount * sizeof(float)) << codec << " is not compressing";
  }
}

TEST(CompressedAllreduceFailure, DifferentCodecsAreAMismatchOnBothRanks) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> x(1000, 1.0F);
    const auto e = error_of([&] {
      comm.allreduce_compressed(x.data(), x.data(), x.size(), ReduceOp::Sum,
                                Compression{comm.rank() == 0 ? "int8" : "int4"});
    });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
    errors[static_cast<std::size_t>(comm.rank())] = e->what();
  });
  for (const auto& e : errors) EXPECT_TRUE(contains(e, "allreduce_compressed #0")) << e;
}

TEST(CompressedAllreduceFailure, NonFiniteInputAndBadArgumentsAreRefusedBeforeSending) {
  testing::Gate done;
  run_ranks_with(
      2, [](int) { return testing::options_with_timeout(1000ms); },
      [&](Communicator& comm) {
        std::vector<float> x(100, 1.0F);
        if (comm.rank() == 1) {
          const testing::OpenOnExit open(done);
          x[42] = std::numeric_limits<float>::quiet_NaN();
          auto e = error_of([&] {
            comm.allreduce_compressed(x.data(), x.data(), x.size(), ReduceOp::Sum,
                                      Compression{"int8"});
          });
          ASSERT_TRUE(e.has_value());
          EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
          EXPECT_TRUE(contains(e->what(), "element 42")) << e->what();
          e = error_of([&] {
            comm.allreduce_compressed(x.data(), x.data(), 1, ReduceOp::Max, Compression{"int8"});
          });
          ASSERT_TRUE(e.has_value());
          EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
          e = error_of([&] {
            comm.allreduce_compressed(x.data(), x.data(), 1, ReduceOp::Sum, Compression{"int9"});
          });
          ASSERT_TRUE(e.has_value());
          EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
          return;
        }
        // Rank 0 is left waiting for rank 1, which never sent anything: a Timeout naming it.
        const auto e = error_of([&] {
          comm.allreduce_compressed(x.data(), x.data(), x.size(), ReduceOp::Sum,
                                    Compression{"int8"});
        });
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 1")) << e->what();
        done.wait();
      });
}

}  // namespace
}  // namespace strait::comm
