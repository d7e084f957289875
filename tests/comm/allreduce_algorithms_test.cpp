// Every allreduce algorithm (comm/algorithms/: ring, pipelined ring, recursive doubling,
// Rabenseifner), forced through CommOptions::algorithms, against a double-precision reference and
// bit-identical on every rank, for world sizes 1..5, all dtypes and ops, counts 0, 1, 7, 4096 and
// 1000003 (a few dtypes), in place and not. Then what selection changes: the bytes each algorithm
// sends, STRAIT_TUNE, the description of the work, and ranks whose tables differ (Mismatch).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::comm {
namespace {

using kernels::DType;
using kernels::ReduceOp;
using testing::check_allreduce;
using testing::kTestTimeout;
using testing::make_input;
using testing::run_ranks_with;
using Buffer = std::vector<std::byte>;

constexpr std::array kAllDTypes = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                   DType::I8,  DType::U8,  DType::I32, DType::I64};

// Options that run every allreduce with `spec` ("ring@seg=1K").
CommOptions only(const std::string& spec) {
  CommOptions o = testing::options_with_timeout(kTestTimeout);
  o.algorithms = std::make_shared<const AlgorithmTable>(AlgorithmTable::parse("allreduce:" + spec));
  return o;
}

struct Case {
  DType dtype;
  ReduceOp op;
  std::size_t count;
  bool in_place;
  std::uint64_t seed;
};

std::vector<Case> cases(bool large) {
  std::vector<Case> out;
  for (const DType t : kAllDTypes) {
    std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
    if (kernels::dtype_is_float(t)) ops.push_back(ReduceOp::Avg);
    const std::array<std::size_t, 4> counts = {0, 1, 7, 4096};
    for (std::size_t o = 0; o < ops.size(); ++o) {
      for (std::size_t c = 0; c < counts.size(); ++c) {
        out.push_back({t, ops[o], counts[c], (o + c) % 2 == 1, 5000 + out.size()});
      }
    }
  }
  if (large) {
    // Uneven over every world size, rendezvous-sized, many segments.
    out.push_back({DType::F32, ReduceOp::Sum, 1'000'003, false, 90});
    out.push_back({DType::BF16, ReduceOp::Avg, 1'000'003, true, 91});
    out.push_back({DType::I32, ReduceOp::Max, 1'000'003, false, 92});
  }
  return out;
}

struct MatrixParam {
  std::string spec;
  int world;
  bool large;
};

// gtest prints parameters through this, not as bytes.
void PrintTo(const MatrixParam& p, std::ostream* os) {
  *os << p.spec << " over " << p.world << " ranks" << (p.large ? " with large counts" : "");
}

class AlgorithmMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(AlgorithmMatrix, MatchesTheDoubleReferenceAndIsBitIdenticalOnEveryRank) {
  const int world = GetParam().world;
  const auto all = cases(GetParam().large);
  const CommOptions options = only(GetParam().spec);
  std::vector<std::vector<Buffer>> results(static_cast<std::size_t>(world));
  std::vector<std::vector<bool>> send_intact(static_cast<std::size_t>(world));
  run_ranks_with(
      world, [&](int) { return options; },
      [&](Communicator& comm) {
        auto& mine = results[static_cast<std::size_t>(comm.rank())];
        auto& intact = send_intact[static_cast<std::size_t>(comm.rank())];
        for (const auto& c : all) {
          const Buffer input = make_input(c.dtype, c.op, c.seed, comm.rank(), c.count);
          if (c.in_place) {
            Buffer buf = input;
            comm.allreduce(buf.data(), buf.data(), c.count, c.dtype, c.op);
            mine.push_back(std::move(buf));
            intact.push_back(true);
          } else {
            // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): detects writes to it
            const Buffer send = input;
            Buffer recv(input.size(), std::byte{0xa5});
            comm.allreduce(send.data(), recv.data(), c.count, c.dtype, c.op);
            mine.push_back(std::move(recv));
            intact.push_back(send == input);
          }
        }
      });
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& c = all[i];
    SCOPED_TRACE(fmt::format("{} {} {} count {} {}", GetParam().spec, kernels::dtype_name(c.dtype),
                             kernels::reduce_op_name(c.op), c.count,
                             c.in_place ? "in place" : "out of place"));
    ASSERT_EQ(results[0].size(), all.size());
    const Buffer& first = results[0][i];
    ASSERT_EQ(first.size(), c.count * kernels::dtype_size(c.dtype));
    const auto wrong = check_allreduce(c.dtype, c.op, c.seed, world, first.data(), c.count);
    EXPECT_FALSE(wrong.has_value()) << *wrong;
    for (std::size_t r = 1; r < results.size(); ++r) {
      ASSERT_EQ(results[r].size(), all.size()) << "rank " << r;
      EXPECT_TRUE(results[r][i] == first) << "rank " << r << " differs from rank 0";
    }
    for (std::size_t r = 0; r < results.size(); ++r) {
      EXPECT_TRUE(send_intact[r][i]) << "rank " << r << " had its send buffer modified";
    }
  }
}

std::vector<MatrixParam> matrix() {
  std::vector<MatrixParam> out;
  // ring@seg=100: segments that are no multiple of 8-byte elements, and hundreds of them per
  // chunk even at count 4096; the large counts only where segments stay few enough to be quick.
  for (const std::string spec : {"ring", "ring@seg=100", "ring@seg=64K", "recursive_doubling",
                                 "rabenseifner", "direct", "mailbox"}) {
    for (int world = 1; world <= 5; ++world) out.push_back({spec, world, spec != "ring@seg=100"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Worlds1To5, AlgorithmMatrix, ::testing::ValuesIn(matrix()),
                         [](const ::testing::TestParamInfo<MatrixParam>& p) {
                           std::string name = p.param.spec;
                           for (char& ch : name) {
                             if (ch == '@' || ch == '=') ch = '_';
                           }
                           return fmt::format("{}_world{}", name, p.param.world);
                         });

// Bytes each rank sends for a 1000-element f32 allreduce, by algorithm, from each algorithm's
// schedule (its header comment): they tell the algorithms apart from the outside.
std::vector<std::uint64_t> bytes_sent(int world, const std::string& spec) {
  constexpr std::size_t kCount = 1000;
  std::vector<std::uint64_t> sent(static_cast<std::size_t>(world));
  run_ranks_with(
      world, [&](int) { return only(spec); },
      [&](Communicator& comm) {
        const Buffer in = make_input(DType::F32, ReduceOp::Sum, 7, comm.rank(), kCount);
        Buffer out(in.size());
        comm.allreduce(in.data(), out.data(), kCount, DType::F32, ReduceOp::Sum);
        const auto wrong = check_allreduce(DType::F32, ReduceOp::Sum, 7, world, out.data(), kCount);
        EXPECT_FALSE(wrong.has_value()) << *wrong;
        sent[static_cast<std::size_t>(comm.rank())] = comm.stats().allreduce_bytes / sizeof(float);
      });
  return sent;
}

TEST(AllreduceBytes, EachAlgorithmSendsWhatItsScheduleSays) {
  // Ring over 3 ranks: chunks 334, 333, 333; rank r sends every chunk but r+1 in the
  // reduce-scatter and every chunk but r+2 in the allgather. Segmenting changes nothing.
  const std::array<std::uint64_t, 3> chunk = {334, 333, 333};
  std::vector<std::uint64_t> ring(3);
  for (std::size_t r = 0; r < 3; ++r) ring[r] = 2000 - chunk[(r + 1) % 3] - chunk[(r + 2) % 3];
  EXPECT_EQ(bytes_sent(3, "ring"), ring);
  EXPECT_EQ(bytes_sent(3, "ring@seg=256"), ring);
  // Over 3 ranks the power-of-two algorithms fold rank 0 into rank 1: rank 0 sends its vector,
  // rank 1 returns the result. Recursive doubling then swaps whole vectors between ranks 1 and 2;
  // Rabenseifner swaps halves (blocks of 500) twice.
  EXPECT_EQ(bytes_sent(3, "recursive_doubling"), (std::vector<std::uint64_t>{1000, 2000, 1000}));
  EXPECT_EQ(bytes_sent(3, "rabenseifner"), (std::vector<std::uint64_t>{1000, 2000, 1000}));
  // Over 4 ranks: recursive doubling sends the vector log2 4 = 2 times; Rabenseifner and the
  // ring 2 (P-1)/P of it (Rabenseifner: blocks of 250, 2 + 1 in each half).
  EXPECT_EQ(bytes_sent(4, "recursive_doubling"), (std::vector<std::uint64_t>(4, 2000)));
  EXPECT_EQ(bytes_sent(4, "rabenseifner"), (std::vector<std::uint64_t>(4, 1500)));
  EXPECT_EQ(bytes_sent(4, "ring"), (std::vector<std::uint64_t>(4, 1500)));
  // Direct: rank r sends every chunk but its own once (reduce-scatter), then its own chunk to each
  // of the P-1 others (allgather): 2 (P-1)/P of the vector over even chunks, as the ring.
  EXPECT_EQ(bytes_sent(3, "direct"),
            (std::vector<std::uint64_t>{666 + 2 * 334, 667 + 2 * 333, 667 + 2 * 333}));
  EXPECT_EQ(bytes_sent(4, "direct"), (std::vector<std::uint64_t>(4, 1500)));
  // Mailbox: every rank writes its vector into its shared-memory slot once, whatever P.
  EXPECT_EQ(bytes_sent(3, "mailbox"), (std::vector<std::uint64_t>(3, 1000)));
  EXPECT_EQ(bytes_sent(5, "mailbox"), (std::vector<std::uint64_t>(5, 1000)));
  // Over 5 ranks: ranks 0 and 1 fold, then Rabenseifner runs over 4.
  EXPECT_EQ(bytes_sent(5, "rabenseifner"),
            (std::vector<std::uint64_t>{1000, 2500, 1500, 1500, 1500}));
}

TEST(AllreduceBytes, PipelinedRingWithMoreUnitsThanATagHasSteps) {
  // 70000 f32 over 2 ranks with 4-byte segments: 35000 one-element segments per chunk, 70000
  // units, so the tags' step numbers wrap around (comm/transport/tag.h).
  constexpr std::size_t kCount = 70'000;
  run_ranks_with(
      2, [](int) { return only("ring@seg=4"); },
      [&](Communicator& comm) {
        const Buffer in = make_input(DType::F32, ReduceOp::Sum, 8, comm.rank(), kCount);
        Buffer out(in.size());
        comm.allreduce(in.data(), out.data(), kCount, DType::F32, ReduceOp::Sum);
        const auto wrong = check_allreduce(DType::F32, ReduceOp::Sum, 8, 2, out.data(), kCount);
        EXPECT_FALSE(wrong.has_value()) << *wrong;
        EXPECT_EQ(comm.stats().allreduce_bytes, kCount * sizeof(float));
      });
}

// Sets an environment variable for one scope (each test runs in its own process).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(AllreduceSelection, TheDefaultTableChoosesBySizeAndSaysSoInTheWorksDescription) {
  testing::run_ranks(2, [](Communicator& comm) {
    for (const auto& [count, algorithm] : {std::pair<std::size_t, std::string>{2, "mailbox"},
                                           {64 * 1024, "mailbox"},
                                           {256 * 1024, "mailbox"},       // 1 MiB: a full slot
                                           {256 * 1024 + 1, "mailbox"},   // a slot at a time
                                           {8 * 1024 * 1024, "mailbox"},  // 32 MiB
                                           {8 * 1024 * 1024 + 1, "ring@seg=1M"}}) {
      std::vector<float> buf(count, 1.0F);
      const Work w = comm.iallreduce(buf.data(), buf.data(), count, DType::F32, ReduceOp::Sum);
      EXPECT_TRUE(w.description().find(algorithm) != std::string::npos) << w.description();
      w.wait();
      EXPECT_EQ(buf.front(), 2.0F);
      EXPECT_EQ(buf.back(), 2.0F);
    }
  });
}

TEST(AllreduceSelection, StraitTuneChangesTheAlgorithmThatRuns) {
  // 4000 bytes over 4 ranks on this host: the built-in table runs the mailbox, which writes the
  // vector once; recursive doubling sends it twice, Rabenseifner 1.5 times. A rule for other
  // sizes changes nothing.
  const auto sent_with = [](const char* tune) {
    const ScopedEnv env("STRAIT_TUNE", tune);
    std::vector<std::uint64_t> sent(4);
    testing::run_ranks(4, [&](Communicator& comm) {
      std::vector<float> buf(1000, 1.0F);
      comm.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
      EXPECT_EQ(buf[999], 4.0F);
      sent[static_cast<std::size_t>(comm.rank())] = comm.stats().allreduce_bytes;
    });
    return sent;
  };
  EXPECT_EQ(sent_with(""), std::vector<std::uint64_t>(4, 1000 * sizeof(float)));
  EXPECT_EQ(sent_with("allreduce:recursive_doubling"),
            std::vector<std::uint64_t>(4, 2000 * sizeof(float)));
  EXPECT_EQ(sent_with("allreduce:rabenseifner"),
            std::vector<std::uint64_t>(4, 1500 * sizeof(float)));
  EXPECT_EQ(sent_with("allreduce:1M-inf:rabenseifner"),
            std::vector<std::uint64_t>(4, 1000 * sizeof(float)));
}

TEST(AllreduceSelection, AMalformedStraitTuneFailsCreationWithInvalidArgument) {
  const ScopedEnv tune("STRAIT_TUNE", "allreduce:0-4K:quantum");
  auto store = std::make_shared<HashStore>();
  try {
    (void)Communicator::create(store, 0, 1, testing::options_with_timeout(kTestTimeout));
    ADD_FAILURE() << "created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(std::string(e.what()).find("'quantum'") != std::string::npos) << e.what();
  }
}

// Two ranks whose tables pick different algorithms (or parameters) for the same call.
void expect_mismatch(const std::string& rank0, const std::string& rank1, std::size_t count) {
  std::array<std::string, 2> errors;
  std::array<ErrorCode, 2> codes = {ErrorCode::Internal, ErrorCode::Internal};
  run_ranks_with(
      2, [&](int r) { return only(r == 0 ? rank0 : rank1); },
      [&](Communicator& comm) {
        std::vector<float> buf(count, 1.0F);
        try {
          comm.allreduce(buf.data(), buf.data(), count, DType::F32, ReduceOp::Sum);
        } catch (const Error& e) {
          errors[static_cast<std::size_t>(comm.rank())] = e.what();
          codes[static_cast<std::size_t>(comm.rank())] = e.code();
        }
      });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], ErrorCode::Mismatch) << "rank " << r << ": " << errors[r];
    // Both sides' choices are named.
    EXPECT_TRUE(errors[r].find(", " + rank0 + ")") != std::string::npos) << errors[r];
    EXPECT_TRUE(errors[r].find(", " + rank1 + ")") != std::string::npos) << errors[r];
  }
}

TEST(AllreduceSelection, RanksWithDifferentTablesFailWithMismatchOnBothSides) {
  expect_mismatch("ring", "rabenseifner", 1000);
  expect_mismatch("recursive_doubling", "ring", 10);
  expect_mismatch("recursive_doubling", "rabenseifner", 100'000);
  expect_mismatch("ring@seg=1K", "ring@seg=2K", 100'000);
}

TEST(AllreduceSelection, WithMoreRanksADisagreementIsAMismatchNotAHang) {
  // Rank `odd` chose another algorithm than the others; it may never exchange a message with some
  // of them, but its ring neighbours compare fingerprints with it. Every rank fails, within the
  // (short) timeout, and the neighbours say why.
  for (const auto& [world, odd, algorithm, others] :
       {std::tuple<int, int, std::string, std::string>{3, 0, "ring", "recursive_doubling"},
        {4, 2, "rabenseifner", "recursive_doubling"},
        {5, 4, "recursive_doubling", "ring@seg=1K"}}) {
    std::vector<std::string> errors(static_cast<std::size_t>(world));
    std::vector<bool> failed(static_cast<std::size_t>(world), false);
    run_ranks_with(
        world,
        [&, odd = odd, algorithm = algorithm, others = others](int r) {
          CommOptions o = only(r == odd ? algorithm : others);
          o.timeout = std::chrono::milliseconds(3000);
          return o;
        },
        [&](Communicator& comm) {
          std::vector<float> buf(1000, 1.0F);
          try {
            comm.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
          } catch (const Error& e) {
            failed[static_cast<std::size_t>(comm.rank())] = true;
            if (e.code() == ErrorCode::Mismatch)
              errors[static_cast<std::size_t>(comm.rank())] = e.what();
          }
        });
    const auto right = static_cast<std::size_t>((odd + 1) % world);
    for (std::size_t r = 0; r < failed.size(); ++r) {
      EXPECT_TRUE(failed[r]) << "rank " << r << " of " << world << " finished the allreduce";
    }
    // The right neighbour receives the odd rank's fingerprint.
    EXPECT_TRUE(errors[right].find(", " + algorithm + ")") != std::string::npos &&
                errors[right].find(", " + others + ")") != std::string::npos)
        << "rank " << right << " of " << world << ": " << errors[right];
  }
}

}  // namespace
}  // namespace strait::comm
