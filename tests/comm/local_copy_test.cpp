// The single-copy collectives between ranks on one host (comm/algorithms/local_copy.h): broadcast,
// allgather, reduce_scatter and alltoall taken by the built-in rules from 64 KiB (256 KiB for
// broadcast), checked against naive references: reductions in double over every rank's inputs
// (tests/comm/comm_test_data.h), copies byte for byte; out of place and in place, counts not
// divisible by anything, 2 to 4 ranks, mixed with mailbox allreduces and transport collectives on
// one communicator. Failures across processes (killed, stopped, mismatching peers):
// communicator_multiprocess_test.cpp, LocalCopyFailures.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::comm {
namespace {

using kernels::DType;
using kernels::ReduceOp;
using testing::check_reduced;
using testing::make_input;
using testing::run_ranks;
using Buffer = std::vector<std::byte>;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Elements per block: below the rules' 64 KiB (the transport), above (single copy, 70001 f32 is
// 280 KB), and 0.
constexpr std::size_t kCounts[] = {0, 3, 70'001};

// The byte rank `r` sends at index i: distinct per rank and position.
std::byte pattern(int r, std::size_t i) {
  return static_cast<std::byte>((i * 131 + static_cast<std::size_t>(r) * 29 + 7) & 0xff);
}

Buffer patterned(int r, std::size_t bytes, std::size_t first = 0) {
  Buffer b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = pattern(r, first + i);
  return b;
}

class LocalCopy : public ::testing::TestWithParam<int> {};

TEST_P(LocalCopy, ReduceScatterMatchesTheDoubleReference) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    ASSERT_TRUE(comm.shares_memory());
    const int r = comm.rank();
    std::uint64_t seed = 10;
    for (const auto& [dtype, op] : {std::pair{DType::F32, ReduceOp::Sum},
                                    {DType::F32, ReduceOp::Avg},
                                    {DType::I32, ReduceOp::Max},
                                    {DType::BF16, ReduceOp::Sum}}) {
      for (const std::size_t n : kCounts) {
        for (const bool in_place : {false, true}) {
          const std::size_t e = kernels::dtype_size(dtype);
          Buffer send = make_input(dtype, op, ++seed, r, n * static_cast<std::size_t>(p));
          Buffer out(n * e);
          std::byte* own = send.data() + static_cast<std::size_t>(r) * n * e;
          Work w = comm.ireduce_scatter(send.data(), in_place ? own : out.data(), n, dtype, op);
          if (n * e >= 64 * 1024) {
            EXPECT_TRUE(contains(w.description(), "single_copy")) << w.description();
          }
          w.wait();
          const auto wrong =
              check_reduced("reduce_scatter", dtype, op, seed, p, in_place ? own : out.data(),
                            static_cast<std::size_t>(r) * n, n);
          EXPECT_FALSE(wrong) << *wrong << (in_place ? " in place" : "") << " rank " << r;
        }
      }
    }
  });
}

TEST_P(LocalCopy, AllgatherIsByteExact) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    const int r = comm.rank();
    for (const std::size_t n : kCounts) {
      for (const bool in_place : {false, true}) {
        const std::size_t block = n * sizeof(float);
        Buffer out(block * static_cast<std::size_t>(p), std::byte{0xee});
        const Buffer mine = patterned(r, block);
        std::byte* own = out.data() + static_cast<std::size_t>(r) * block;
        if (in_place) std::memcpy(own, mine.data(), block);
        comm.allgather(in_place ? own : mine.data(), out.data(), n, DType::F32);
        for (int q = 0; q < p; ++q) {
          EXPECT_EQ(std::memcmp(out.data() + static_cast<std::size_t>(q) * block,
                                patterned(q, block).data(), block),
                    0)
              << "block " << q << " of rank " << r << ", " << n << " f32"
              << (in_place ? " in place" : "");
        }
      }
    }
  });
}

TEST_P(LocalCopy, BroadcastIsByteExactFromEveryRoot) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    const int r = comm.rank();
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{5}, std::size_t{300'007}}) {
      for (int root = 0; root < p; ++root) {
        Buffer buf = r == root ? patterned(root, bytes) : Buffer(bytes, std::byte{0xee});
        comm.broadcast(buf.data(), bytes, DType::U8, root);
        EXPECT_EQ(buf, patterned(root, bytes)) << bytes << " bytes from root " << root;
      }
    }
  });
}

TEST_P(LocalCopy, AlltoallIsByteExact) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    for (const std::size_t n : kCounts) {
      for (const bool in_place : {false, true}) {
        const std::size_t block = n * sizeof(float);
        // Rank r's block q holds pattern(r) at offsets [q * block, (q + 1) * block).
        Buffer send = patterned(r, block * np);
        Buffer out(block * np, std::byte{0xee});
        if (in_place) out = send;
        comm.alltoall(in_place ? out.data() : send.data(), out.data(), n, DType::F32);
        for (int q = 0; q < p; ++q) {
          const Buffer want = patterned(q, block, static_cast<std::size_t>(r) * block);
          EXPECT_EQ(
              std::memcmp(out.data() + static_cast<std::size_t>(q) * block, want.data(), block), 0)
              << "block from rank " << q << " on rank " << r << ", " << n << " f32"
              << (in_place ? " in place" : "");
        }
      }
    }
  });
}

// Single-copy calls take the mailbox's tickets: they interleave with mailbox allreduces, and
// non-blocking ones may be in flight together.
TEST_P(LocalCopy, CallsInterleaveWithMailboxAllreducesAndOthersInFlight) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const std::size_t n = 70'001;
    const auto np = static_cast<std::size_t>(p);
    std::vector<float> a(n * np, 1.0F), b(n * np, 2.0F), ga(n * np), gb(n * np);
    std::vector<float> small(16, 1.0F);
    for (int round = 0; round < 5; ++round) {
      Work w1 = comm.iallgather(a.data() + r * n, ga.data(), n, DType::F32);
      Work w2 =
          comm.iallreduce(small.data(), small.data(), small.size(), DType::F32, ReduceOp::Sum);
      Work w3 = comm.ireduce_scatter(b.data(), gb.data(), n, DType::F32, ReduceOp::Sum);
      w3.wait();
      w2.wait();
      w1.wait();
      EXPECT_EQ(ga[n * np - 1], 1.0F);
      EXPECT_EQ(gb[n - 1], 2.0F * static_cast<float>(p));
    }
    EXPECT_EQ(small[0], static_cast<float>(p * p * p * p * p));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCopy, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace strait::comm
