// The single-copy reduce, gather, scatter and v forms (comm/algorithms/local_copy.h), taken by
// rule (the rules below, so that these tests do not depend on the built-in ones) and checked
// against naive references: reductions in double over every rank's inputs
// (tests/comm/comm_test_data.h), copies byte for byte; 2 to 4 ranks, sizes on both sides of the
// rules' 64 KiB with odd counts, in place and out of place, root 0 and root P-1, f32, f64, bf16
// and int32; symmetric buffers (Communicator::alloc) read in place. Failures across processes
// (killed, stopped, mismatching peers): communicator_multiprocess_test.cpp, LocalCopyFailures.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
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
using Buffer = std::vector<std::byte>;
using testing::patterned;
using Counts = std::vector<std::size_t>;

constexpr std::size_t kRule = 64 * 1024;
constexpr const char* kRules =
    "reduce:64K-inf:single_copy;gather:64K-inf:single_copy;scatter:64K-inf:single_copy;"
    "allgather_v:64K-inf:single_copy;reduce_scatter_v:64K-inf:single_copy;"
    "alltoall_v:0-inf:single_copy";

template <class Body>
void run(int p, Body body) {
  testing::run_ranks_with(
      p,
      [](int) {
        CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
        auto t = std::make_shared<AlgorithmTable>(AlgorithmTable::defaults());
        t->append(AlgorithmTable::parse(kRules, "test"));
        o.algorithms = std::move(t);
        return o;
      },
      std::move(body));
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Element counts on both sides of the rules' 64 KiB (odd), a short one, and a larger one.
Counts counts_for(DType t) {
  const std::size_t at_rule = kRule / kernels::dtype_size(t);
  return {3, at_rule - 1, at_rule + 1, 200'003};
}

// The roots every test runs: 0 and P-1.
std::vector<int> roots(int p) {
  return {0, p - 1};
}

void expect_algorithm(const Work& w, std::size_t bytes, std::size_t from = kRule) {
  if (bytes >= from) {
    EXPECT_TRUE(contains(w.description(), "single_copy")) << w.description();
  } else {
    EXPECT_FALSE(contains(w.description(), "single_copy")) << w.description();
  }
}

class LocalCopyRooted : public ::testing::TestWithParam<int> {};

TEST_P(LocalCopyRooted, ReduceMatchesTheDoubleReference) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    std::uint64_t seed = 40;
    for (const auto& [dtype, op] : {std::pair{DType::F32, ReduceOp::Sum},
                                    {DType::F32, ReduceOp::Avg},
                                    {DType::F32, ReduceOp::Max},
                                    {DType::F64, ReduceOp::Avg},
                                    {DType::BF16, ReduceOp::Sum},
                                    {DType::I32, ReduceOp::Sum},
                                    {DType::I32, ReduceOp::Max}}) {
      const std::size_t e = kernels::dtype_size(dtype);
      for (const std::size_t n : counts_for(dtype)) {
        for (const int root : roots(p)) {
          for (const bool in_place : {false, true}) {
            Buffer send = make_input(dtype, op, ++seed, r, n);
            Buffer out(n * e, std::byte{0xee});
            void* recv = r != root ? nullptr : in_place ? send.data() : out.data();
            Work w = comm.ireduce(send.data(), recv, n, dtype, op, root);
            expect_algorithm(w, n * e);
            w.wait();
            if (r != root) continue;
            const auto wrong = check_reduced("reduce", dtype, op, seed, p,
                                             static_cast<const std::byte*>(recv), 0, n);
            EXPECT_FALSE(wrong) << *wrong << (in_place ? " in place" : "") << ", root " << root;
          }
        }
      }
    }
  });
}

TEST_P(LocalCopyRooted, GatherIsByteExact) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    for (const DType dtype : {DType::F32, DType::F64, DType::BF16, DType::I32}) {
      for (const std::size_t n : counts_for(dtype)) {
        for (const int root : roots(p)) {
          for (const bool in_place : {false, true}) {
            const std::size_t block = n * kernels::dtype_size(dtype);
            const Buffer mine = patterned(r, block);
            Buffer out(r == root ? block * np : 0, std::byte{0xee});
            const void* send = mine.data();
            if (r == root && in_place) {
              std::memcpy(out.data() + static_cast<std::size_t>(r) * block, mine.data(), block);
              send = out.data() + static_cast<std::size_t>(r) * block;
            }
            Work w = comm.igather(send, r == root ? out.data() : nullptr, n, dtype, root);
            expect_algorithm(w, block);
            w.wait();
            if (r != root) continue;
            for (int q = 0; q < p; ++q) {
              EXPECT_EQ(std::memcmp(out.data() + static_cast<std::size_t>(q) * block,
                                    patterned(q, block).data(), block),
                        0)
                  << "block " << q << ", " << n << " x " << kernels::dtype_name(dtype) << ", root "
                  << root << (in_place ? " in place" : "");
            }
          }
        }
      }
    }
  });
}

TEST_P(LocalCopyRooted, ScatterIsByteExact) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    const auto me = static_cast<std::size_t>(r);
    for (const DType dtype : {DType::F32, DType::F64, DType::BF16, DType::I32}) {
      for (const std::size_t n : counts_for(dtype)) {
        for (const int root : roots(p)) {
          for (const bool in_place : {false, true}) {
            const std::size_t block = n * kernels::dtype_size(dtype);
            Buffer send = r == root ? patterned(root, block * np) : Buffer{};
            Buffer out(block, std::byte{0xee});
            void* recv = r == root && in_place ? send.data() + me * block : out.data();
            Work w = comm.iscatter(r == root ? send.data() : nullptr, recv, n, dtype, root);
            expect_algorithm(w, block);
            w.wait();
            EXPECT_EQ(std::memcmp(recv, patterned(root, block, me * block).data(), block), 0)
                << "rank " << r << ", " << n << " x " << kernels::dtype_name(dtype) << ", root "
                << root << (in_place ? " in place" : "");
          }
        }
      }
    }
  });
}

// Per-rank counts around `base`, rank 1's 0 when `with_empty` (a rank with nothing to give).
Counts uneven(int p, std::size_t base, bool with_empty) {
  Counts c(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q)
    c[static_cast<std::size_t>(q)] = base + static_cast<std::size_t>(q) * 7;
  if (with_empty) c[1] = 0;
  return c;
}

Counts prefix(const Counts& c) {
  Counts at(c.size() + 1, 0);
  std::partial_sum(c.begin(), c.end(), at.begin() + 1);
  return at;
}

std::size_t mean_bytes(const Counts& c, std::size_t elem) {
  return std::accumulate(c.begin(), c.end(), std::size_t{0}) / c.size() * elem;
}

TEST_P(LocalCopyRooted, AllgatherVIsByteExact) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    for (const DType dtype : {DType::F32, DType::BF16, DType::I32}) {
      const std::size_t e = kernels::dtype_size(dtype);
      for (const std::size_t base : counts_for(dtype)) {
        for (const bool with_empty : {false, true}) {
          for (const bool in_place : {false, true}) {
            const Counts counts = uneven(p, base, with_empty);
            const Counts at = prefix(counts);
            const auto me = static_cast<std::size_t>(r);
            Buffer out(at.back() * e, std::byte{0xee});
            const Buffer mine = patterned(r, counts[me] * e);
            const void* send = mine.data();
            if (in_place) {
              std::memcpy(out.data() + at[me] * e, mine.data(), mine.size());
              send = out.data() + at[me] * e;
            }
            Work w = comm.iallgather_v(send, out.data(), counts, dtype);
            expect_algorithm(w, mean_bytes(counts, e));
            w.wait();
            for (int q = 0; q < p; ++q) {
              const auto i = static_cast<std::size_t>(q);
              EXPECT_EQ(std::memcmp(out.data() + at[i] * e, patterned(q, counts[i] * e).data(),
                                    counts[i] * e),
                        0)
                  << "block " << q << " on rank " << r << ", base " << base
                  << (in_place ? " in place" : "");
            }
          }
        }
      }
    }
  });
}

TEST_P(LocalCopyRooted, ReduceScatterVMatchesTheDoubleReference) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto me = static_cast<std::size_t>(r);
    std::uint64_t seed = 70;
    for (const auto& [dtype, op] : {std::pair{DType::F32, ReduceOp::Sum},
                                    {DType::F32, ReduceOp::Avg},
                                    {DType::BF16, ReduceOp::Max},
                                    {DType::F64, ReduceOp::Sum},
                                    {DType::I32, ReduceOp::Sum}}) {
      const std::size_t e = kernels::dtype_size(dtype);
      for (const std::size_t base : counts_for(dtype)) {
        for (const bool in_place : {false, true}) {
          const Counts counts = uneven(p, base, base == 3);
          const Counts at = prefix(counts);
          Buffer send = make_input(dtype, op, ++seed, r, at.back());
          Buffer out(counts[me] * e, std::byte{0xee});
          std::byte* recv = in_place ? send.data() + at[me] * e : out.data();
          Work w = comm.ireduce_scatter_v(send.data(), recv, counts, dtype, op);
          expect_algorithm(w, mean_bytes(counts, e));
          w.wait();
          const auto wrong =
              check_reduced("reduce_scatter_v", dtype, op, seed, p, recv, at[me], counts[me]);
          EXPECT_FALSE(wrong) << *wrong << (in_place ? " in place" : "") << " rank " << r;
        }
      }
    }
  });
}

// Elements rank i sends rank j: symmetric (in place needs send_counts = recv_counts), around
// base, and none between ranks 0 and 1 when `with_empty`.
std::size_t pair_count(int i, int j, std::size_t base, bool with_empty) {
  if (with_empty && i + j == 1) return 0;
  return base + static_cast<std::size_t>((i + j) % 3) * 5;
}

TEST_P(LocalCopyRooted, AlltoallVIsByteExact) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    for (const DType dtype : {DType::F32, DType::F64, DType::I32}) {
      const std::size_t e = kernels::dtype_size(dtype);
      for (const std::size_t base : counts_for(dtype)) {
        for (const bool with_empty : {false, true}) {
          for (const bool in_place : {false, true}) {
            // Rank i's send counts; rank r's receive counts are column r.
            std::vector<Counts> sends(np, Counts(np));
            for (int i = 0; i < p; ++i) {
              for (int j = 0; j < p; ++j) {
                sends[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] =
                    pair_count(i, j, base, with_empty);
              }
            }
            const auto me = static_cast<std::size_t>(r);
            Counts recv_counts(np);
            for (std::size_t i = 0; i < np; ++i) recv_counts[i] = sends[i][me];
            const Counts rat = prefix(recv_counts);
            Buffer send = patterned(r, prefix(sends[me]).back() * e);
            Buffer out(rat.back() * e, std::byte{0xee});
            if (in_place) out = send;
            Work w = comm.ialltoall_v(in_place ? out.data() : send.data(), sends[me], out.data(),
                                      recv_counts, dtype);
            expect_algorithm(w, 0, 0);
            w.wait();
            for (int q = 0; q < p; ++q) {
              const auto i = static_cast<std::size_t>(q);
              const std::size_t from = prefix(sends[i])[me] * e;  // this rank's block in q's send
              const Buffer want = patterned(q, recv_counts[i] * e, from);
              EXPECT_EQ(std::memcmp(out.data() + rat[i] * e, want.data(), want.size()), 0)
                  << "block from rank " << q << " on rank " << r << ", base " << base
                  << (in_place ? " in place" : "");
            }
          }
        }
      }
    }
  });
}

// Each new collective once on buffers from Communicator::alloc: peers read them in place.
TEST_P(LocalCopyRooted, SymmetricBuffersAreReadInPlace) {
  const int p = GetParam();
  run(p, [p](Communicator& comm) {
    const int r = comm.rank();
    const auto np = static_cast<std::size_t>(p);
    const auto me = static_cast<std::size_t>(r);
    const std::size_t n = 70'001;
    const std::size_t block = n * sizeof(float);
    SymmetricBuffer send = comm.alloc(block * np);
    SymmetricBuffer out = comm.alloc(block * np);
    ASSERT_TRUE(send.symmetric());
    auto* s = static_cast<std::byte*>(send.data());
    auto* o = static_cast<std::byte*>(out.data());
    const auto in_place_since = [&comm, before = comm.stats().symmetric_bytes]() {
      return comm.stats().symmetric_bytes - before;
    };
    const int root = p - 1;
    std::uint64_t expected = 0;  // bytes this rank reads in place, summed over the calls

    const std::uint64_t seed = 123;
    const Buffer in = make_input(DType::F32, ReduceOp::Sum, seed, r, n);
    std::memcpy(s, in.data(), in.size());
    comm.reduce(s, r == root ? o : nullptr, n, DType::F32, ReduceOp::Sum, root);
    if (r == root) {
      EXPECT_FALSE(check_reduced("reduce", DType::F32, ReduceOp::Sum, seed, p, o, 0, n));
    }
    // Chunk r of each peer's input (the reduced chunks are in scratch: read by system call).
    expected += (np - 1) * (n / np) * sizeof(float);

    const Buffer mine = patterned(r, block * np);
    std::memcpy(s, mine.data(), mine.size());
    comm.gather(s, r == root ? o : nullptr, n, DType::F32, root);
    for (int q = 0; q < p && r == root; ++q) {
      EXPECT_EQ(
          std::memcmp(o + static_cast<std::size_t>(q) * block, patterned(q, block).data(), block),
          0)
          << "gather block " << q;
    }
    if (r == root) expected += (np - 1) * block;

    comm.scatter(r == root ? s : nullptr, o, n, DType::F32, root);
    EXPECT_EQ(std::memcmp(o, patterned(root, block, me * block).data(), block), 0) << "scatter";
    if (r != root) expected += block;

    const Counts counts(np, n);
    comm.allgather_v(s, o, counts, DType::F32);
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(
          std::memcmp(o + static_cast<std::size_t>(q) * block, patterned(q, block).data(), block),
          0)
          << "allgather_v block " << q;
    }
    comm.alltoall_v(s, counts, o, counts, DType::F32);
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(std::memcmp(o + static_cast<std::size_t>(q) * block,
                            patterned(q, block, me * block).data(), block),
                0)
          << "alltoall_v block from " << q;
    }
    expected += 2 * (np - 1) * block;
    // Reduce's chunks are counted at their lower bound (n / P elements).
    EXPECT_GE(in_place_since(), expected);
    comm.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCopyRooted, ::testing::Values(2, 3, 4));

// The built-in rules (selection.cpp): gather and scatter from 64 KiB of a block, reduce from 64
// KiB to 16 MiB of the vector, allgather_v and reduce_scatter_v from 3 ranks, alltoall_v by rule
// only.
TEST(LocalCopyRootedDefaults, BuiltInRulesChooseAsDocumented) {
  for (const int p : {2, 3}) {
    testing::run_ranks(p, [p](Communicator& comm) {
      const int r = comm.rank();
      const auto np = static_cast<std::size_t>(p);
      const std::size_t n = 70'001;  // 280 KB of f32
      std::vector<float> in(n * np, 1.0F), out(n * np);
      const auto algorithm = [](Work w) {
        const std::string d = w.description();
        w.wait();
        return d;
      };
      EXPECT_TRUE(contains(algorithm(comm.igather(in.data(), out.data(), n, DType::F32, 0)),
                           "single_copy"));
      EXPECT_TRUE(contains(algorithm(comm.iscatter(in.data(), out.data(), n, DType::F32, 0)),
                           "single_copy"));
      EXPECT_TRUE(
          contains(algorithm(comm.ireduce(in.data(), out.data(), n, DType::F32, ReduceOp::Sum, 0)),
                   "single_copy"));
      // 16 MiB of f32 and more: the binomial tree.
      const std::size_t big = (16U << 20U) / sizeof(float);
      std::vector<float> large(big, 1.0F), reduced(r == 0 ? big : 0);
      EXPECT_TRUE(contains(algorithm(comm.ireduce(large.data(), r == 0 ? reduced.data() : nullptr,
                                                  big, DType::F32, ReduceOp::Sum, 0)),
                           "binomial"));
      const Counts counts(np, n);
      const std::string v = algorithm(comm.iallgather_v(in.data(), out.data(), counts, DType::F32));
      EXPECT_EQ(contains(v, "single_copy"), p >= 3) << v;
      const std::string rs = algorithm(
          comm.ireduce_scatter_v(in.data(), out.data(), counts, DType::F32, ReduceOp::Sum));
      EXPECT_EQ(contains(rs, "single_copy"), p >= 3) << rs;
      EXPECT_TRUE(
          contains(algorithm(comm.ialltoall_v(in.data(), counts, out.data(), counts, DType::F32)),
                   "pairwise"));
    });
  }
}

}  // namespace
}  // namespace strait::comm
