// The mailbox allreduce (comm/algorithms/mailbox_allreduce.h) beyond the algorithm matrix of
// allreduce_algorithms_test.cpp: that communicators of ranks on one host get a mailbox and short
// vectors take it, blocking and non-blocking calls mixed on one communicator (the two ways a call
// runs), many calls in flight at once (the two slots), sub-communicators, and failures: a rank that
// never calls (Timeout naming it, and the communicator unusable afterwards), different counts
// (Mismatch on both ranks); the split protocol (3 or more ranks) and vectors longer than a slot
// (pieces) against the double-precision reference; a repeated call's reused preparation
// (Communicator::run_in_mailbox) against calls that change the count, dtype or op in between.
#include "comm/algorithms/mailbox_allreduce.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithms/local_mailbox.h"
#include "comm/algorithms/selection.h"
#include "comm/communicator.h"
#include "comm/symmetric_memory.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::comm {
namespace {

using kernels::DType;
using kernels::ReduceOp;
using testing::check_allreduce;
using testing::make_input;
using testing::run_ranks;
using testing::run_ranks_with;
using Buffer = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Mailbox, RanksOnOneHostGetOneAndVectorsTakeIt) {
  run_ranks(3, [](Communicator& comm) {
    EXPECT_TRUE(comm.shares_memory());
    std::vector<float> buf(100, 1.0F);
    const Work w = comm.iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
    EXPECT_TRUE(contains(w.description(), "mailbox")) << w.description();
    w.wait();
    EXPECT_EQ(buf[0], 3.0F);
    // Each rank writes its vector once, whatever the number of ranks.
    EXPECT_EQ(comm.stats().allreduce_bytes, 100 * sizeof(float));
    // Up to a slot (1 MiB) too, and from 3 ranks longer vectors too, a slot at a time.
    std::vector<double> mid(32'000, 1.0);
    comm.allreduce(mid.data(), mid.data(), mid.size(), DType::F64, ReduceOp::Sum);
    EXPECT_EQ(mid[31'999], 3.0);
    EXPECT_EQ(comm.stats().allreduce_bytes, 100 * sizeof(float) + 32'000 * sizeof(double));
    std::vector<double> big(200'000, 1.0);
    const Work b = comm.iallreduce(big.data(), big.data(), big.size(), DType::F64, ReduceOp::Sum);
    EXPECT_TRUE(contains(b.description(), "mailbox")) << b.description();
    b.wait();
    EXPECT_EQ(big[199'999], 3.0);
  });
}

// Blocking calls run on the caller's thread, non-blocking ones in the progress engine: the same
// protocol, so ranks may mix them, and calls keep their order with transport collectives between.
TEST(Mailbox, BlockingAndNonBlockingCallsMixAcrossRanksAndInFlight) {
  constexpr int kWorld = 4;
  constexpr int kCalls = 40;
  std::vector<std::vector<Buffer>> results(kWorld);
  run_ranks(kWorld, [&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<Buffer> bufs;
    std::vector<Work> works;
    for (int i = 0; i < kCalls; ++i) {
      // Up to 64 KiB of f32: one cache line, several, many.
      const std::size_t count = 1 + static_cast<std::size_t>(i) * 397 % 16'000;
      bufs.push_back(make_input(DType::F32, ReduceOp::Sum, 100 + i, me, count));
    }
    for (int i = 0; i < kCalls; ++i) {
      auto& b = bufs[static_cast<std::size_t>(i)];
      const std::size_t count = b.size() / sizeof(float);
      // Rank r runs call i blocking when (i + r) % 3 == 0, else non-blocking and waits later (up
      // to 5 in flight); every 10th call a long vector through the transport comes between.
      if ((i + me) % 3 == 0) {
        comm.allreduce(b.data(), b.data(), count, DType::F32, ReduceOp::Sum);
      } else {
        works.push_back(comm.iallreduce(b.data(), b.data(), count, DType::F32, ReduceOp::Sum));
        if (works.size() == 5) {
          for (auto& w : works) w.wait();
          works.clear();
        }
      }
      if (i % 10 == 9) {
        std::vector<float> big(300'000, 1.0F);
        comm.allreduce(big.data(), big.data(), big.size(), DType::F32, ReduceOp::Sum);
        EXPECT_EQ(big[299'999], static_cast<float>(kWorld));
      }
    }
    for (auto& w : works) w.wait();
    results[static_cast<std::size_t>(me)] = bufs;
  });
  for (int i = 0; i < kCalls; ++i) {
    const Buffer& first = results[0].at(static_cast<std::size_t>(i));
    const auto wrong = check_allreduce(DType::F32, ReduceOp::Sum, 100 + i, kWorld, first.data(),
                                       first.size() / sizeof(float));
    EXPECT_FALSE(wrong.has_value()) << "call " << i << ": " << *wrong;
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(results[static_cast<std::size_t>(r)].at(static_cast<std::size_t>(i)), first)
          << "call " << i << ": rank " << r << " differs from rank 0";
    }
  }
}

// Options that send every allreduce to the mailbox, whatever its length.
CommOptions mailbox_only(std::chrono::milliseconds timeout = testing::kTestTimeout) {
  CommOptions o = testing::options_with_timeout(timeout);
  o.algorithms = std::make_shared<const AlgorithmTable>(AlgorithmTable::parse("allreduce:mailbox"));
  return o;
}

// Counts (of `t`) at the edges of the split protocol and of the slot: one element under and at the
// split's threshold for `world` ranks, a full slot, one element more (a second piece of one
// element, which takes the whole-vector protocol), and three slots and a bit.
std::vector<std::size_t> edge_counts(DType t, int world) {
  const std::size_t e = kernels::dtype_size(t);
  const std::size_t split = MailboxCall::kSplitMinWork / static_cast<std::size_t>(world);
  const std::size_t slot = LocalMailbox::kPayloadBytes / e;
  return {(split + e - 1) / e - 1, (split + e - 1) / e, slot, slot + 1, 3 * slot + 17};
}

TEST(Mailbox, SplitAndPiecedCallsMatchTheDoubleReferenceAndAgreeBitForBit) {
  struct Case {
    DType dtype;
    ReduceOp op;
    std::size_t count;
    bool in_place;
    std::uint64_t seed;
  };
  for (const int world : {3, 4, 8}) {
    std::vector<Case> cases;
    for (const auto& [dtype, op] : {std::pair{DType::F32, ReduceOp::Sum},
                                    {DType::BF16, ReduceOp::Avg},
                                    {DType::F64, ReduceOp::Sum},
                                    {DType::I32, ReduceOp::Max}}) {
      for (const std::size_t count : edge_counts(dtype, world)) {
        cases.push_back({dtype, op, count, cases.size() % 2 == 0, 300 + cases.size()});
      }
    }
    std::vector<std::vector<Buffer>> results(static_cast<std::size_t>(world));
    run_ranks_with(
        world, [](int) { return mailbox_only(); },
        [&](Communicator& comm) {
          for (const Case& c : cases) {
            const Buffer input = make_input(c.dtype, c.op, c.seed, comm.rank(), c.count);
            Buffer out = c.in_place ? input : Buffer(input.size(), std::byte{0xa5});
            comm.allreduce(c.in_place ? out.data() : input.data(), out.data(), c.count, c.dtype,
                           c.op);
            results[static_cast<std::size_t>(comm.rank())].push_back(std::move(out));
          }
        });
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SCOPED_TRACE(fmt::format("{} ranks, {} {} x {} {}", world, kernels::reduce_op_name(c.op),
                               kernels::dtype_name(c.dtype), c.count,
                               c.in_place ? "in place" : "out of place"));
      const Buffer& first = results[0].at(i);
      const auto wrong = check_allreduce(c.dtype, c.op, c.seed, world, first.data(), c.count);
      EXPECT_FALSE(wrong.has_value()) << *wrong;
      for (int r = 1; r < world; ++r) {
        EXPECT_TRUE(results[static_cast<std::size_t>(r)].at(i) == first)
            << "rank " << r << " differs from rank 0";
      }
    }
  }
}

// Split calls on symmetric buffers (Communicator::alloc) leave the vectors where they are and
// reduce them from the peers' mappings: the same results as ordinary memory, in place or not,
// with symmetric and ordinary buffers mixed across ranks. Threads of one process share one table
// of mappings, so the bytes read in place are summed over ranks.
TEST(Mailbox, SplitCallsReadSymmetricBuffersInPlace) {
  for (const int world : {3, 4}) {
    const std::size_t n = 3 * LocalMailbox::kPayloadBytes / sizeof(float) + 17;  // 4 pieces
    std::atomic<std::uint64_t> in_place{0};
    run_ranks_with(
        world, [](int) { return mailbox_only(); },
        [&](Communicator& comm) {
          const int r = comm.rank();
          SymmetricBuffer x = comm.alloc(n * sizeof(float));
          SymmetricBuffer y = comm.alloc(n * sizeof(float));
          std::uint64_t seed = 700;
          for (const bool in_place_call : {false, true}) {
            for (const bool mixed : {false, true}) {
              ++seed;
              const Buffer input = make_input(DType::F32, ReduceOp::Sum, seed, r, n);
              // Mixed: odd ranks send from ordinary memory (their vectors go through the slots).
              Buffer plain = input;
              const bool ordinary = mixed && r % 2 == 1;
              std::memcpy(x.data(), input.data(), input.size());
              void* send = ordinary ? static_cast<void*>(plain.data()) : x.data();
              void* recv = in_place_call ? send : y.data();
              const std::uint64_t before = comm.stats().symmetric_bytes;
              comm.allreduce(send, recv, n, DType::F32, ReduceOp::Sum);
              comm.barrier();
              in_place += comm.stats().symmetric_bytes - before;
              const auto wrong = check_allreduce(DType::F32, ReduceOp::Sum, seed, world,
                                                 static_cast<const std::byte*>(recv), n);
              EXPECT_FALSE(wrong.has_value())
                  << *wrong << " (" << world << " ranks, " << (in_place_call ? "in place" : "out")
                  << (mixed ? ", mixed" : "") << ")";
            }
          }
          comm.barrier();
        });
    // Every rank reads every other symmetric rank's share of each block it reduces.
    EXPECT_GT(in_place.load(), 0U) << world << " ranks";
  }
}

// A rank that never calls a call of several pieces taking the split protocol: a Timeout naming
// it, from every rank that called, within the timeout.
TEST(Mailbox, APiecedSplitCallWithARankMissingIsATimeoutNamingIt) {
  constexpr auto kTimeout = 1500ms;
  std::vector<std::string> errors(3);
  testing::Gate done;
  std::atomic<int> failed{0};
  run_ranks_with(
      3, [&](int) { return mailbox_only(kTimeout); },
      [&](Communicator& comm) {
        if (comm.rank() == 2) {
          done.wait();
          return;
        }
        std::vector<float> buf(3 * LocalMailbox::kPayloadBytes / sizeof(float), 1.0F);
        const auto start = Clock::now();
        try {
          comm.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
          errors[static_cast<std::size_t>(comm.rank())] = e.what();
        }
        EXPECT_LT(Clock::now() - start, kTimeout + 2s);
        if (++failed == 2) done.open();  // rank 2 keeps its communicator until both have failed
      });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(errors[r], "from rank 2")) << errors[r];
  }
}

TEST(Mailbox, SubCommunicatorsHaveTheirOwn) {
  run_ranks(4, [](Communicator& comm) {
    auto half = comm.split(comm.rank() % 2, comm.rank());
    ASSERT_TRUE(half);
    EXPECT_TRUE(half->shares_memory());
    for (int i = 0; i < 20; ++i) {
      std::int64_t v = comm.rank() + i;
      half->allreduce(&v, &v, 1, DType::I64, ReduceOp::Sum);
      // Ranks {0, 2} and {1, 3}.
      EXPECT_EQ(v, comm.rank() % 2 == 0 ? 2 + 2 * i : 4 + 2 * i);
      std::int64_t w = i;
      comm.allreduce(&w, &w, 1, DType::I64, ReduceOp::Max);
      EXPECT_EQ(w, i);
    }
  });
}

TEST(Mailbox, ARankThatNeverCallsIsATimeoutNamingItAndLaterCallsFailAtOnce) {
  constexpr auto kTimeout = 1500ms;
  std::string error;
  ErrorCode code = ErrorCode::Internal;
  std::string later;
  testing::Gate done;
  run_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          done.wait();  // keeps its communicator, never calls
          return;
        }
        float x = 1.0F;
        const auto start = Clock::now();
        try {
          comm.allreduce(&x, &x, 1, DType::F32, ReduceOp::Sum);
        } catch (const Error& e) {
          error = e.what();
          code = e.code();
        }
        EXPECT_LT(Clock::now() - start, kTimeout + 2s);
        try {
          comm.allreduce(&x, &x, 1, DType::F32, ReduceOp::Sum);
        } catch (const Error& e) {
          later = e.what();
        }
        done.open();
      },
      kTimeout);
  EXPECT_EQ(code, ErrorCode::Timeout) << error;
  EXPECT_TRUE(contains(error, "allreduce #0")) << error;
  EXPECT_TRUE(contains(error, "the vector from rank 1 in the shared-memory mailbox")) << error;
  EXPECT_TRUE(contains(later, "unusable after an earlier error")) << later;
}

TEST(Mailbox, NonBlockingCallsFailTheSameWay) {
  constexpr auto kTimeout = 1000ms;
  std::string error;
  testing::Gate done;
  run_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          done.wait();
          return;
        }
        float x = 1.0F;
        const Work w = comm.iallreduce(&x, &x, 1, DType::F32, ReduceOp::Sum);
        try {
          w.wait();
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
          error = e.what();
        }
        done.open();
      },
      kTimeout);
  EXPECT_TRUE(contains(error, "the vector from rank 1 in the shared-memory mailbox")) << error;
}

TEST(Mailbox, ANonBlockingCallOnOneRankAndABlockingOneOnTheOtherThatDisagreeAreAMismatch) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> buf(comm.rank() == 0 ? 10 : 11, 1.0F);
    try {
      if (comm.rank() == 0) {
        comm.iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum).wait();
      } else {
        comm.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_TRUE(contains(errors[0], "rank 1 called allreduce #0 (f32 x 11")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 called allreduce #0 (f32 x 10")) << errors[1];
}

// A short vector on one rank (the mailbox) and a long one on the other (the transport): neither
// would ever hear from the other; their announcements say what each called, and both fail with
// Mismatch at once, not with a Timeout.
TEST(Mailbox, AShortVectorAgainstALongOneIsAMismatchOnBothRanks) {
  for (const bool blocking : {true, false}) {
    std::vector<std::string> errors(2);
    const auto start = Clock::now();
    run_ranks(2, [&](Communicator& comm) {
      std::vector<float> buf(comm.rank() == 0 ? 10 : 300'000, 1.0F);
      try {
        if (blocking) {
          comm.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
        } else {
          comm.iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum).wait();
        }
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
        errors[static_cast<std::size_t>(comm.rank())] = e.what();
      }
    });
    EXPECT_LT(Clock::now() - start, 10s);  // the timeout is 30 s
    EXPECT_TRUE(contains(errors[0], "rank 1 called allreduce #0 (f32 x 300000")) << errors[0];
    EXPECT_TRUE(contains(errors[1], "rank 0 called allreduce #0 (f32 x 10, sum, mailbox)"))
        << errors[1];
  }
}

// A blocking call of the last one's count, dtype and op reuses its preparation: calls that change
// one of them in between must still get their own algorithm, sums and fingerprints; after a
// reuse, one rank changing only the op and the other only the count is a Mismatch in which each
// describes its own call as it is.
TEST(Mailbox, RepeatedAndChangedCallsGetTheirOwnPreparation) {
  run_ranks(2, [](Communicator& comm) {
    const float r = static_cast<float>(comm.rank());
    const auto f32 = [&](std::size_t n, ReduceOp op) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = r * 10.0F + static_cast<float>(i);
      comm.allreduce(v.data(), v.data(), n, DType::F32, op);
      return v;
    };
    for (int round = 0; round < 3; ++round) {
      // 0 + i and 10 + i: sum 10 + 2i, max 10 + i, avg 5 + i.
      EXPECT_EQ(f32(5, ReduceOp::Sum)[4], 18.0F);
      EXPECT_EQ(f32(5, ReduceOp::Sum)[4], 18.0F);  // reused
      EXPECT_EQ(f32(5, ReduceOp::Max)[4], 14.0F);  // another op
      EXPECT_EQ(f32(7, ReduceOp::Max)[6], 16.0F);  // another count
      std::vector<double> d(7, 1.0 + comm.rank());
      comm.allreduce(d.data(), d.data(), d.size(), DType::F64, ReduceOp::Avg);  // another dtype
      EXPECT_EQ(d[6], 1.5);
      // Past a slot (the mailbox a slot at a time), then short again.
      std::vector<float> big(300'000, 1.0F);
      comm.allreduce(big.data(), big.data(), big.size(), DType::F32, ReduceOp::Sum);
      EXPECT_EQ(big[299'999], 2.0F);
      EXPECT_EQ(f32(7, ReduceOp::Max)[0], 10.0F);
    }
  });
  std::vector<std::string> errors(2);
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> buf(12, 1.0F);
    comm.allreduce(buf.data(), buf.data(), 6, DType::F32, ReduceOp::Sum);
    comm.allreduce(buf.data(), buf.data(), 6, DType::F32, ReduceOp::Sum);
    try {
      // Rank 0 changes only the op, rank 1 only the count: each names its own call as it is.
      comm.allreduce(buf.data(), buf.data(), comm.rank() == 0 ? 6 : 12, DType::F32,
                     comm.rank() == 0 ? ReduceOp::Max : ReduceOp::Sum);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_TRUE(contains(errors[0], "rank 1 called allreduce #2 (f32 x 12")) << errors[0];
  // What the error says first is this rank's own call, as the preparation described it.
  EXPECT_TRUE(errors[0].starts_with("Mismatch: allreduce #2 (f32 x 6, max")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 called allreduce #2 (f32 x 6, max, mailbox)"))
      << errors[1];
  EXPECT_TRUE(errors[1].starts_with("Mismatch: allreduce #2 (f32 x 12, sum")) << errors[1];
}

}  // namespace
}  // namespace strait::comm
