// The single-copy collectives between ranks on one host (comm/algorithms/local_copy.h): broadcast,
// allgather, reduce_scatter and alltoall taken by the built-in rules from 64 KiB (broadcast by a
// rule from 256 KiB), checked against naive references: reductions in double over every rank's
// inputs (tests/comm/comm_test_data.h), copies byte for byte; out of place and in place, counts not
// divisible by anything, 2 to 4 ranks, mixed with mailbox allreduces and transport collectives on
// one communicator. Failures across processes (killed, stopped, mismatching peers):
// communicator_multiprocess_test.cpp, LocalCopyFailures.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/selection.h"
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
using testing::patterned;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Elements per block: below the rules' 64 KiB (the transport), above (single copy, 70001 f32 is
// 280 KB), and 0.
constexpr std::size_t kCounts[] = {0, 3, 70'001};

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
  // Broadcast takes the single-copy path by rule only.
  const auto options = [](int) {
    CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
    auto t = std::make_shared<AlgorithmTable>(AlgorithmTable::defaults());
    t->append(AlgorithmTable::parse("broadcast:256K-inf:single_copy", "test"));
    o.algorithms = std::move(t);
    return o;
  };
  testing::run_ranks_with(p, options, [p](Communicator& comm) {
    const int r = comm.rank();
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{5}, std::size_t{300'007}}) {
      for (int root = 0; root < p; ++root) {
        Buffer buf = r == root ? patterned(root, bytes) : Buffer(bytes, std::byte{0xee});
        Work w = comm.ibroadcast(buf.data(), bytes, DType::U8, root);
        if (bytes >= 256 * 1024) {
          EXPECT_TRUE(contains(w.description(), "single_copy")) << w.description();
        }
        w.wait();
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
// ---------------------------------------------------------------------------------------------
// Symmetric memory (comm/symmetric_memory.h): buffers from Communicator::alloc are read in place
// from every peer's mapping; the allreduce by single copy (by rule) on them matches the double
// reference, ordinary and symmetric buffers mix per rank, and a freed buffer leaves no mapping.

std::shared_ptr<const AlgorithmTable> single_copy_allreduce() {
  auto t = std::make_shared<AlgorithmTable>(AlgorithmTable::defaults());
  t->append(AlgorithmTable::parse("allreduce:1M-inf:single_copy", "test"));
  return t;
}

// Lines of /proc/self/maps naming this job's symmetric memfds.
int symmetric_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += contains(line, "strait-symmetric") ? 1 : 0;
  return n;
}

class Symmetric : public ::testing::TestWithParam<int> {};

TEST_P(Symmetric, AllreduceReadsPeersInPlaceAndMatchesTheDoubleReference) {
  const int p = GetParam();
  testing::run_ranks_with(
      p,
      [](int) {
        CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
        o.algorithms = single_copy_allreduce();
        return o;
      },
      [p](Communicator& comm) {
        const int r = comm.rank();
        const std::size_t n = 1'000'003;  // not divisible by any world size
        SymmetricBuffer x = comm.alloc(n * sizeof(float));
        SymmetricBuffer y = comm.alloc(n * sizeof(float));
        ASSERT_TRUE(x.symmetric());
        EXPECT_EQ(static_cast<const float*>(x.data())[n - 1], 0.0F);  // zero-filled
        std::uint64_t seed = 900;
        for (const bool in_place : {false, true}) {
          const Buffer in = make_input(DType::F32, ReduceOp::Sum, ++seed, r, n);
          std::memcpy(x.data(), in.data(), in.size());
          const std::uint64_t before = comm.stats().symmetric_bytes;
          Work w = comm.iallreduce(x.data(), in_place ? x.data() : y.data(), n, DType::F32,
                                   ReduceOp::Sum);
          EXPECT_TRUE(contains(w.description(), "single_copy")) << w.description();
          w.wait();
          // Chunk r of every peer's input, then every peer's reduced chunk: all in place.
          EXPECT_GE(comm.stats().symmetric_bytes - before, 2 * (n / static_cast<std::size_t>(p)) *
                                                               sizeof(float) *
                                                               static_cast<std::size_t>(p - 1));
          const auto* got = static_cast<const std::byte*>(in_place ? x.data() : y.data());
          const auto wrong =
              check_reduced("allreduce", DType::F32, ReduceOp::Sum, seed, p, got, 0, n);
          EXPECT_FALSE(wrong) << *wrong << (in_place ? " in place" : "");
        }
        // The same collectives with an ordinary buffer on odd ranks: read with process_vm_readv
        // from those, in place from the others.
        Buffer plain = make_input(DType::F32, ReduceOp::Sum, ++seed, r, n);
        if (r % 2 == 0) std::memcpy(x.data(), plain.data(), plain.size());
        const void* send = r % 2 == 0 ? x.data() : static_cast<const void*>(plain.data());
        comm.allreduce(send, y.data(), n, DType::F32, ReduceOp::Sum);
        const auto wrong = check_reduced("allreduce (mixed)", DType::F32, ReduceOp::Sum, seed, p,
                                         static_cast<const std::byte*>(y.data()), 0, n);
        EXPECT_FALSE(wrong) << *wrong;
        comm.barrier();
      });
}

TEST_P(Symmetric, EveryCollectiveReadsSymmetricBuffersInPlace) {
  const int p = GetParam();
  run_ranks(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    const std::size_t n = 70'001;
    const std::size_t block = n * sizeof(float);
    SymmetricBuffer send = comm.alloc(block * np);
    SymmetricBuffer out = comm.alloc(block * np);
    const Buffer mine = patterned(r, block * np);
    std::memcpy(send.data(), mine.data(), mine.size());
    const std::uint64_t before = comm.stats().symmetric_bytes;
    comm.allgather(send.data(), out.data(), n, DType::F32);
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(std::memcmp(static_cast<std::byte*>(out.data()) + q * block,
                            patterned(q, block).data(), block),
                0)
          << "allgather block " << q;
    }
    comm.alltoall(send.data(), out.data(), n, DType::F32);
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(std::memcmp(static_cast<std::byte*>(out.data()) + q * block,
                            patterned(q, block, static_cast<std::size_t>(r) * block).data(), block),
                0)
          << "alltoall block from " << q;
    }
    EXPECT_EQ(comm.stats().symmetric_bytes - before, 2 * (np - 1) * block);
  });
}

// Algorithms that go through the transport (here the ring) read a peer's large messages from
// their mapping too when they lie in a symmetric buffer (comm/transport/peer_memory.h). Ranks are
// threads of one process here, whose one table of mappings may count a read to any rank's
// communicator: the test sums over ranks.
TEST(SymmetricTransport, TheRingReadsSymmetricBuffersInPlaceAndMatchesTheDoubleReference) {
  constexpr int kRanks = 2;
  constexpr std::size_t n = 1'000'003;  // 2 chunks of ~2 MB, 1 MiB segments: single-copy messages
  std::atomic<std::uint64_t> in_place{0};
  std::atomic<std::uint64_t> mixed_in_place{0};
  testing::run_ranks_with(
      kRanks,
      [](int) {
        CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
        o.algorithms = std::make_shared<const AlgorithmTable>(
            AlgorithmTable::parse("allreduce:ring@seg=1M", "test"));
        return o;
      },
      [&](Communicator& comm) {
        const int r = comm.rank();
        SymmetricBuffer x = comm.alloc(n * sizeof(float));
        SymmetricBuffer y = comm.alloc(n * sizeof(float));
        const Buffer in = make_input(DType::F32, ReduceOp::Sum, 950, r, n);
        std::memcpy(x.data(), in.data(), in.size());
        comm.barrier();
        const std::uint64_t before = comm.stats().symmetric_bytes;
        Work w = comm.iallreduce(x.data(), y.data(), n, DType::F32, ReduceOp::Sum);
        EXPECT_TRUE(contains(w.description(), "ring")) << w.description();
        w.wait();
        comm.barrier();
        in_place += comm.stats().symmetric_bytes - before;
        const auto wrong = check_reduced("allreduce (ring)", DType::F32, ReduceOp::Sum, 950, kRanks,
                                         static_cast<const std::byte*>(y.data()), 0, n);
        EXPECT_FALSE(wrong) << *wrong;
        // Rank 1 sends from ordinary memory: what it sends is read with process_vm_readv.
        const Buffer plain = make_input(DType::F32, ReduceOp::Sum, 951, r, n);
        if (r == 0) std::memcpy(x.data(), plain.data(), plain.size());
        Buffer out(plain.size());
        comm.barrier();
        const std::uint64_t before_mixed = comm.stats().symmetric_bytes;
        comm.allreduce(r == 0 ? x.data() : static_cast<const void*>(plain.data()),
                       r == 0 ? y.data() : static_cast<void*>(out.data()), n, DType::F32,
                       ReduceOp::Sum);
        comm.barrier();
        mixed_in_place += comm.stats().symmetric_bytes - before_mixed;
        const auto wrong_mixed =
            check_reduced("allreduce (ring, mixed)", DType::F32, ReduceOp::Sum, 951, kRanks,
                          r == 0 ? static_cast<const std::byte*>(y.data()) : out.data(), 0, n);
        EXPECT_FALSE(wrong_mixed) << *wrong_mixed;
        comm.barrier();
      });
  // Each rank receives the other's chunk (reduce-scatter) and then its reduced chunk (allgather):
  // every element once, all of it from symmetric buffers.
  EXPECT_EQ(in_place.load(), kRanks * n * sizeof(float));
  // Only what rank 0 sends: rank 1's chunk of its input, and its own reduced chunk.
  EXPECT_EQ(mixed_in_place.load(), n * sizeof(float));
}

TEST(SymmetricLifetime, AFreedBufferLeavesNoMappingAndSizesMustAgree) {
  const int before = symmetric_mappings();
  run_ranks(2, [](Communicator& comm) {
    {
      SymmetricBuffer a = comm.alloc(1 << 20);
      comm.barrier();
    }
    comm.barrier();
    // Each rank maps its own and its peer's: none is left once both have freed theirs.
    EXPECT_EQ(symmetric_mappings(), 0);
    comm.barrier();  // before either maps the next one
    const auto e = testing::error_of([&] { (void)comm.alloc(comm.rank() == 0 ? 4096 : 8192); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
    EXPECT_TRUE(contains(e->what(), "must ask for the same size")) << e->what();
  });
  EXPECT_EQ(symmetric_mappings(), before);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Symmetric, ::testing::Values(2, 3));

}  // namespace
}  // namespace strait::comm
