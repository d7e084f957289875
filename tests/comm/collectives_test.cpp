// The collectives beyond allreduce, broadcast and allgather (reduce_scatter(_v), allgather_v,
// reduce, gather, scatter, alltoall(_v)) over UCX, ranks as threads (tests/comm/comm_test_ranks.h):
// every collective x world size 1..5 x dtype is one ctest entry, and checks every op (where it
// reduces), counts 0, 1, 7 and 4096 (uneven across ranks for the v-forms, zero for some ranks),
// in place and out of place, blocking and non-blocking, against a double-precision reference
// (reductions) or the exact bytes each rank sent (data movement). Then: bit-identical results of
// reduce-scatter + allgather, the bytes each algorithm sends, and the failure modes (Mismatch on
// both ranks when ranks disagree about counts or roots; InvalidArgument for bad arguments).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DType;
using kernels::ReduceOp;
using testing::check_reduced;
using testing::error_of;
using testing::kAllDTypes;
using testing::make_input;
using testing::run_ranks;
using testing::sentinel;
using Buffer = std::vector<std::byte>;
using Counts = std::vector<std::size_t>;
using strait::test::contains;

std::vector<ReduceOp> ops_of(DType t) {
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  if (kernels::dtype_is_float(t)) ops.push_back(ReduceOp::Avg);
  return ops;
}

// Counts below, at and above the world size and one not divisible by any world size > 1 here;
// with `large`, for f32 sum at world 3, also one large enough for UCX's rendezvous protocol (only
// for the ring collectives, to keep the run short).
Counts counts_of(DType t, ReduceOp op, int world, bool large = false) {
  Counts counts = {0, 1, 7, 4096};
  if (large && t == DType::F32 && op == ReduceOp::Sum && world == 3) counts.push_back(1'000'003);
  return counts;
}

// Per-rank counts of a v-collective around `c`: uneven, and 0 for some ranks.
Counts v_counts(std::size_t c, int world) {
  Counts out(static_cast<std::size_t>(world), 0);
  if (c == 0) return out;
  for (std::size_t r = 0; r < out.size(); ++r) out[r] = r % 3 == 1 ? 0 : c + r;
  return out;
}

// Elements rank i sends rank j in the alltoall_v tests: uneven, some pairs 0.
std::size_t pair_count(std::size_t c, int i, int j) {
  const std::size_t k = static_cast<std::size_t>(i) + 2 * static_cast<std::size_t>(j);
  return c == 0 || k % 4 == 3 ? 0 : c + k;
}

std::size_t prefix(const Counts& counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
}

std::size_t total(const Counts& counts) {
  return prefix(counts, static_cast<int>(counts.size()));
}

// What rank `from` contributes in a data-movement test (the full value range of the dtype).
Buffer data_of(DType t, std::uint64_t seed, int from, std::size_t count) {
  return make_input(t, ReduceOp::Max, seed, from, count);
}

Buffer concat(const std::vector<Buffer>& parts) {
  Buffer out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// One recorded outcome: a failure description, or nothing.
using Failures = std::vector<std::string>;

void expect_none(const std::vector<Failures>& per_rank) {
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& f : per_rank[r]) ADD_FAILURE() << "rank " << r << ": " << f;
  }
}

// Runs `body(comm, failures)` on every rank; each rank records what it found wrong.
void run_checked(int world, const std::function<void(Communicator&, Failures&)>& body) {
  std::vector<Failures> failures(static_cast<std::size_t>(world));
  run_ranks(world, [&](Communicator& comm) {
    body(comm, failures[static_cast<std::size_t>(comm.rank())]);
  });
  expect_none(failures);
}

void check_bytes(Failures& out, const std::string& what, const Buffer& got, const Buffer& want) {
  if (got.size() != want.size()) {
    out.push_back(fmt::format("{}: {} bytes, expected {}", what, got.size(), want.size()));
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      out.push_back(fmt::format("{}: byte {} of {} differs", what, i, got.size()));
      return;
    }
  }
}

void check_reduction(Failures& out, const std::string& what, DType t, ReduceOp op,
                     std::uint64_t seed, int world, const Buffer& got, std::size_t first,
                     std::size_t count) {
  if (got.size() < count * kernels::dtype_size(t)) {
    out.push_back(fmt::format("{}: result too short", what));
    return;
  }
  if (auto wrong = check_reduced(what.c_str(), t, op, seed, world, got.data(), first, count)) {
    out.push_back(*wrong);
  }
}

// Waits for the non-blocking operations of a test, then runs their checks. The buffers an
// operation uses stay valid until then: `send` holds the send buffer, the check the others.
struct Pending {
  Work work;
  std::function<void()> check;
  std::shared_ptr<const Buffer> send;
};

void finish(std::vector<Pending>& pending) {
  for (auto& p : pending) p.work.wait();
  for (auto& p : pending) p.check();
  pending.clear();
}

// One call of a collective in a matrix test.
struct Case {
  std::uint64_t seed = 0;
  ReduceOp op = ReduceOp::Sum;  // reductions only
  std::size_t count = 0;        // per rank, or what the v-forms' counts are built around
  int root = -1;                // rooted collectives only
  bool in_place = false;
  [[nodiscard]] std::string describe(const char* what, DType t) const {
    return fmt::format("{} {} {} count {} {}{}", what, kernels::dtype_name(t),
                       kernels::reduce_op_name(op), count, in_place ? "in place" : "out of place",
                       root < 0 ? std::string() : fmt::format(" root {}", root));
  }
};

struct Shape {
  bool reduces = false;  // every op of the dtype, else sum only (the data ignore it)
  bool rooted = false;   // every root
  bool large = false;    // counts_of(..., large)
};

std::vector<Case> cases_of(DType t, int world, Shape shape) {
  const std::vector<ReduceOp> ops = shape.reduces ? ops_of(t) : std::vector{ReduceOp::Sum};
  std::vector<Case> out;
  for (const ReduceOp op : ops) {
    for (const std::size_t count : counts_of(t, op, world, shape.large)) {
      for (int root = shape.rooted ? 0 : -1; root < (shape.rooted ? world : 0); ++root) {
        for (const bool in_place : {false, true}) {
          out.push_back({1000 + out.size(), op, count, root, in_place});
        }
      }
    }
  }
  return out;
}

// Runs `one` for every case on every rank: in-place cases block, the others push a Pending (so
// many are in flight at once); then waits for those and runs their checks.
using One = std::function<void(Communicator&, Failures&, std::vector<Pending>&, const Case&)>;
void run_cases(int world, DType t, Shape shape, const One& one) {
  const std::vector<Case> cases = cases_of(t, world, shape);
  run_checked(world, [&](Communicator& comm, Failures& fail) {
    std::vector<Pending> pending;
    for (const Case& c : cases) one(comm, fail, pending, c);
    finish(pending);
  });
}

Buffer slice(const Buffer& b, std::size_t offset, std::size_t bytes) {
  const auto at = b.begin() + static_cast<std::ptrdiff_t>(offset);
  return Buffer(at, at + static_cast<std::ptrdiff_t>(bytes));
}

// The blocks of data_of(seed, i, counts[i]) for every rank i.
std::vector<Buffer> blocks_of(DType t, std::uint64_t seed, const Counts& counts) {
  std::vector<Buffer> out;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out.push_back(data_of(t, seed, static_cast<int>(i), counts[i]));
  }
  return out;
}

class Matrix : public ::testing::TestWithParam<std::tuple<int, DType>> {
 protected:
  [[nodiscard]] int world() const { return std::get<0>(GetParam()); }
  [[nodiscard]] DType dtype() const { return std::get<1>(GetParam()); }
};

// reduce_scatter is reduce_scatter_v with equal counts: one body checks both.
void reduce_scatter_case(Communicator& comm, Failures& fail, std::vector<Pending>& pending,
                         const Case& c, DType t, bool v) {
  const int p = comm.size();
  const int r = comm.rank();
  const std::size_t e = kernels::dtype_size(t);
  const Counts counts = v ? v_counts(c.count, p) : Counts(static_cast<std::size_t>(p), c.count);
  const std::size_t n = counts[static_cast<std::size_t>(r)];
  const std::size_t first = prefix(counts, r);
  const std::string what = c.describe(v ? "reduce_scatter_v" : "reduce_scatter", t);
  auto send = std::make_shared<Buffer>(make_input(t, c.op, c.seed, r, total(counts)));
  if (c.in_place) {
    std::byte* own = send->data() + first * e;
    if (v) {
      comm.reduce_scatter_v(send->data(), own, counts, t, c.op);
    } else {
      comm.reduce_scatter(send->data(), own, n, t, c.op);
    }
    check_reduction(fail, what, t, c.op, c.seed, p, slice(*send, first * e, n * e), first, n);
    return;
  }
  auto recv = std::make_shared<Buffer>(sentinel(n * e));
  const Buffer input = *send;
  Work w = v ? comm.ireduce_scatter_v(send->data(), recv->data(), counts, t, c.op)
             : comm.ireduce_scatter(send->data(), recv->data(), n, t, c.op);
  pending.push_back({std::move(w),
                     [=, &fail] {
                       check_reduction(fail, what, t, c.op, c.seed, p, *recv, first, n);
                       if (*send != input) fail.push_back(what + ": the send buffer was modified");
                     },
                     send});
}

TEST_P(Matrix, ReduceScatter) {
  const DType t = dtype();
  run_cases(world(), t, {.reduces = true, .large = true},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              reduce_scatter_case(comm, fail, pending, c, t, false);
            });
}

TEST_P(Matrix, ReduceScatterV) {
  const DType t = dtype();
  run_cases(world(), t, {.reduces = true, .large = true},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              reduce_scatter_case(comm, fail, pending, c, t, true);
            });
}

TEST_P(Matrix, AllgatherV) {
  const DType t = dtype();
  const std::size_t e = kernels::dtype_size(t);
  run_cases(world(), t, {.large = true},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              const int r = comm.rank();
              const Counts counts = v_counts(c.count, comm.size());
              const std::vector<Buffer> blocks = blocks_of(t, c.seed, counts);
              const Buffer want = concat(blocks);
              const Buffer& mine = blocks[static_cast<std::size_t>(r)];
              const std::string what = c.describe("allgather_v", t);
              if (c.in_place) {
                Buffer buf = sentinel(want.size());
                std::byte* own = buf.data() + prefix(counts, r) * e;
                std::copy(mine.begin(), mine.end(), own);
                comm.allgather_v(own, buf.data(), counts, t);
                check_bytes(fail, what, buf, want);
                return;
              }
              auto send = std::make_shared<Buffer>(mine);
              auto recv = std::make_shared<Buffer>(sentinel(want.size()));
              pending.push_back({comm.iallgather_v(send->data(), recv->data(), counts, t),
                                 [=, &fail] { check_bytes(fail, what, *recv, want); }, send});
            });
}

TEST_P(Matrix, Reduce) {
  const DType t = dtype();
  const std::size_t e = kernels::dtype_size(t);
  run_cases(
      world(), t, {.reduces = true, .rooted = true},
      [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
        const int p = comm.size();
        const int r = comm.rank();
        const std::string what = c.describe("reduce", t);
        auto send = std::make_shared<Buffer>(make_input(t, c.op, c.seed, r, c.count));
        if (c.in_place) {
          // In place on the root; elsewhere recv may be null.
          comm.reduce(send->data(), r == c.root ? send->data() : nullptr, c.count, t, c.op, c.root);
          if (r == c.root) check_reduction(fail, what, t, c.op, c.seed, p, *send, 0, c.count);
          return;
        }
        auto recv = std::make_shared<Buffer>(sentinel(c.count * e));
        const Buffer input = *send;
        pending.push_back({comm.ireduce(send->data(), recv->data(), c.count, t, c.op, c.root),
                           [=, &fail] {
                             if (r == c.root) {
                               check_reduction(fail, what, t, c.op, c.seed, p, *recv, 0, c.count);
                             } else {
                               check_bytes(fail, what + " (a non-root's recv, untouched)", *recv,
                                           sentinel(c.count * e));
                             }
                             if (*send != input)
                               fail.push_back(what + ": the send buffer was modified");
                           },
                           send});
      });
}

TEST_P(Matrix, Gather) {
  const DType t = dtype();
  const std::size_t e = kernels::dtype_size(t);
  run_cases(world(), t, {.rooted = true},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              const int r = comm.rank();
              const std::size_t bytes = c.count * e;
              const Counts counts(static_cast<std::size_t>(comm.size()), c.count);
              const std::vector<Buffer> blocks = blocks_of(t, c.seed, counts);
              const Buffer want = concat(blocks);
              const Buffer& mine = blocks[static_cast<std::size_t>(r)];
              const std::string what = c.describe("gather", t);
              if (c.in_place && r == c.root) {
                Buffer buf = sentinel(want.size());
                std::copy(mine.begin(), mine.end(),
                          buf.data() + static_cast<std::size_t>(r) * bytes);
                comm.gather(buf.data() + static_cast<std::size_t>(r) * bytes, buf.data(), c.count,
                            t, c.root);
                check_bytes(fail, what, buf, want);
                return;
              }
              if (c.in_place) {  // a non-root's recv may be null
                comm.gather(mine.data(), nullptr, c.count, t, c.root);
                return;
              }
              auto send = std::make_shared<Buffer>(mine);
              auto recv = std::make_shared<Buffer>(sentinel(want.size()));
              const Buffer expected = r == c.root ? want : sentinel(want.size());
              pending.push_back({comm.igather(send->data(), recv->data(), c.count, t, c.root),
                                 [=, &fail] { check_bytes(fail, what, *recv, expected); }, send});
            });
}

TEST_P(Matrix, Scatter) {
  const DType t = dtype();
  const std::size_t e = kernels::dtype_size(t);
  run_cases(world(), t, {.rooted = true},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              const int r = comm.rank();
              const std::size_t bytes = c.count * e;
              const Counts counts(static_cast<std::size_t>(comm.size()), c.count);
              const std::vector<Buffer> blocks = blocks_of(t, c.seed, counts);
              const Buffer all = concat(blocks);
              const Buffer& want = blocks[static_cast<std::size_t>(r)];
              const std::string what = c.describe("scatter", t);
              if (c.in_place && r == c.root) {
                Buffer buf = all;
                comm.scatter(buf.data(), buf.data() + static_cast<std::size_t>(r) * bytes, c.count,
                             t, c.root);
                check_bytes(fail, what, buf, all);
                return;
              }
              if (c.in_place) {  // a non-root's send may be null
                Buffer recv = sentinel(bytes);
                comm.scatter(nullptr, recv.data(), c.count, t, c.root);
                check_bytes(fail, what, recv, want);
                return;
              }
              // Only the root's send is read: the others pass garbage.
              auto send = std::make_shared<Buffer>(r == c.root ? all : sentinel(all.size()));
              auto recv = std::make_shared<Buffer>(sentinel(bytes));
              pending.push_back({comm.iscatter(send->data(), recv->data(), c.count, t, c.root),
                                 [=, &fail] { check_bytes(fail, what, *recv, want); }, send});
            });
}

// Block j of rank i's send: data_of(seed + j, from = i). The v-form's counts are pair_count(),
// except in place, which needs one layout both ways.
void alltoall_case(Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c,
                   DType t, bool v) {
  const int p = comm.size();
  const int r = comm.rank();
  Counts send_counts(static_cast<std::size_t>(p), v && c.in_place ? c.count + 1 : c.count);
  Counts recv_counts = send_counts;
  if (v && !c.in_place) {
    for (int j = 0; j < p; ++j) {
      send_counts[static_cast<std::size_t>(j)] = pair_count(c.count, r, j);
      recv_counts[static_cast<std::size_t>(j)] = pair_count(c.count, j, r);
    }
  }
  std::vector<Buffer> outgoing;
  std::vector<Buffer> incoming;
  for (int j = 0; j < p; ++j) {
    const auto uj = static_cast<std::size_t>(j);
    outgoing.push_back(data_of(t, c.seed + uj, r, send_counts[uj]));
    incoming.push_back(data_of(t, c.seed + static_cast<std::size_t>(r), j, recv_counts[uj]));
  }
  const Buffer want = concat(incoming);
  const std::string what = c.describe(v ? "alltoall_v" : "alltoall", t);
  if (c.in_place) {
    Buffer buf = concat(outgoing);
    if (v) {
      comm.alltoall_v(buf.data(), send_counts, buf.data(), recv_counts, t);
    } else {
      comm.alltoall(buf.data(), buf.data(), c.count, t);
    }
    check_bytes(fail, what, buf, want);
    return;
  }
  auto send = std::make_shared<Buffer>(concat(outgoing));
  auto recv = std::make_shared<Buffer>(sentinel(want.size()));
  Work w = v ? comm.ialltoall_v(send->data(), send_counts, recv->data(), recv_counts, t)
             : comm.ialltoall(send->data(), recv->data(), c.count, t);
  pending.push_back({std::move(w), [=, &fail] { check_bytes(fail, what, *recv, want); }, send});
}

TEST_P(Matrix, Alltoall) {
  const DType t = dtype();
  run_cases(world(), t, {},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              alltoall_case(comm, fail, pending, c, t, false);
            });
}

TEST_P(Matrix, AlltoallV) {
  const DType t = dtype();
  run_cases(world(), t, {},
            [&](Communicator& comm, Failures& fail, std::vector<Pending>& pending, const Case& c) {
              alltoall_case(comm, fail, pending, c, t, true);
            });
}

INSTANTIATE_TEST_SUITE_P(Worlds1To5, Matrix,
                         ::testing::Combine(::testing::Range(1, 6),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& p) {
                           return fmt::format("world{}_{}", std::get<0>(p.param),
                                              kernels::dtype_name(std::get<1>(p.param)));
                         });

// ---------------------------------------------------------------------------------------------
// Reduce-scatter then allgather: an allreduce whose result is bit-identical on every rank.

class PerWorld : public ::testing::TestWithParam<int> {};

TEST_P(PerWorld, ReduceScatterThenAllgatherIsBitIdenticalOnEveryRank) {
  const int p = GetParam();
  const DType t = DType::BF16;  // the coarsest rounding: differences would show
  const ReduceOp op = ReduceOp::Avg;
  const std::size_t e = kernels::dtype_size(t);
  const Counts counts = v_counts(1000, p);
  const std::uint64_t seed = 900;
  std::vector<Buffer> results(static_cast<std::size_t>(p));
  run_ranks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    Buffer buf = make_input(t, op, seed, r, total(counts));
    std::byte* own = buf.data() + prefix(counts, r) * e;
    comm.reduce_scatter_v(buf.data(), own, counts, t, op);
    comm.allgather_v(own, buf.data(), counts, t);
    results[static_cast<std::size_t>(r)] = std::move(buf);
  });
  ASSERT_EQ(results[0].size(), total(counts) * e);
  const auto wrong = check_reduced("reduce_scatter_v + allgather_v", t, op, seed, p,
                                   results[0].data(), 0, total(counts));
  EXPECT_FALSE(wrong.has_value()) << *wrong;
  for (int r = 1; r < p; ++r) {
    EXPECT_TRUE(results[static_cast<std::size_t>(r)] == results[0]) << "rank " << r << " differs";
  }
}

TEST_P(PerWorld, ReduceGivesTheSameBitsEveryTime) {
  // The tree fixes the order of the reduction, whatever order the children's data arrive in.
  const int p = GetParam();
  const DType t = DType::F16;
  const std::size_t n = 4096;
  std::vector<Buffer> results;
  run_ranks(p, [&](Communicator& comm) {
    const Buffer in = make_input(t, ReduceOp::Sum, 77, comm.rank(), n);
    const int root = p - 1;
    for (int i = 0; i < 4; ++i) {
      Buffer out = sentinel(in.size());
      comm.reduce(in.data(), out.data(), n, t, ReduceOp::Sum, root);
      if (comm.rank() == root) results.push_back(std::move(out));
    }
  });
  ASSERT_EQ(results.size(), 4U);
  const auto wrong = check_reduced("reduce", t, ReduceOp::Sum, 77, p, results[0].data(), 0, n);
  EXPECT_FALSE(wrong.has_value()) << *wrong;
  for (std::size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(results[i] == results[0]) << i;
}

INSTANTIATE_TEST_SUITE_P(Worlds1To5, PerWorld, ::testing::Range(1, 6),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return fmt::format("world{}", p.param);
                         });

// ---------------------------------------------------------------------------------------------
// Bytes sent, as each algorithm's header comment says.

TEST(Stats, EachCollectiveCountsThePayloadItsAlgorithmSends) {
  constexpr int kWorld = 3;
  constexpr std::size_t kCount = 10;
  constexpr std::size_t kElem = 4;
  const Counts counts = {1, 2, 3};  // allgather_v, 6 in all
  std::vector<CommStats> stats(kWorld);
  run_ranks(kWorld, [&](Communicator& comm) {
    const auto n = static_cast<std::size_t>(kWorld) * kCount;
    std::vector<float> a(n, 1.0F);
    std::vector<float> b(n, 0.0F);
    comm.reduce_scatter(a.data(), b.data(), kCount, DType::F32, ReduceOp::Sum);
    comm.allgather_v(a.data(), b.data(), counts, DType::F32);
    comm.reduce(a.data(), b.data(), kCount, DType::F32, ReduceOp::Sum, 0);
    comm.gather(a.data(), b.data(), kCount, DType::F32, 0);
    comm.scatter(a.data(), b.data(), kCount, DType::F32, 0);
    comm.alltoall(a.data(), b.data(), kCount, DType::F32);
    stats[static_cast<std::size_t>(comm.rank())] = comm.stats();
  });
  for (std::size_t r = 0; r < kWorld; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const CommStats& s = stats[r];
    // Ring: every block but its own.
    EXPECT_EQ(s.reduce_scatter_bytes, (kWorld - 1) * kCount * kElem);
    // Ring allgather: every block but the next rank's (counts 1, 2, 3 in all 6).
    EXPECT_EQ(s.allgather_bytes, (6 - counts[(r + 1) % kWorld]) * kElem);
    // Binomial trees rooted at 0 over 3 ranks: ranks 1 and 2 are leaves under rank 0.
    EXPECT_EQ(s.reduce_bytes, r == 0 ? 0 : kCount * kElem);
    EXPECT_EQ(s.gather_bytes, r == 0 ? 0 : kCount * kElem);
    EXPECT_EQ(s.scatter_bytes, r == 0 ? 2 * kCount * kElem : 0);
    EXPECT_EQ(s.alltoall_bytes, (kWorld - 1) * kCount * kElem);
    EXPECT_EQ(s.allreduce_bytes, 0U);
  }
}

// ---------------------------------------------------------------------------------------------
// Ranks that disagree fail with Mismatch on both sides, naming the operation and the other rank.

void expect_mismatch_on_both_ranks(const char* op_name,
                                   const std::function<void(Communicator&)>& call) {
  std::array<std::string, 2> errors;
  std::array<ErrorCode, 2> codes = {ErrorCode::Internal, ErrorCode::Internal};
  const auto start = std::chrono::steady_clock::now();
  run_ranks(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    if (const auto e = error_of([&] { call(comm); })) {
      errors[r] = e->what();
      codes[r] = e->code();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);  // the timeout is 30 s
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], ErrorCode::Mismatch) << "rank " << r << ": " << errors[r];
    EXPECT_TRUE(contains(errors[r], fmt::format("{} #0", op_name))) << errors[r];
    EXPECT_TRUE(contains(errors[r], fmt::format("rank {}", 1 - r))) << errors[r];
  }
}

TEST(Mismatch, ReduceScatterVCountsThatDifferWithTheSameTotal) {
  expect_mismatch_on_both_ranks("reduce_scatter_v", [](Communicator& comm) {
    const Counts counts = comm.rank() == 0 ? Counts{3, 5} : Counts{4, 4};
    std::vector<float> send(8, 1.0F);
    std::vector<float> recv(5);
    comm.reduce_scatter_v(send.data(), recv.data(), counts, DType::F32, ReduceOp::Sum);
  });
}

TEST(Mismatch, AllgatherVCountsThatDifferWithTheSameTotal) {
  expect_mismatch_on_both_ranks("allgather_v", [](Communicator& comm) {
    const Counts counts = comm.rank() == 0 ? Counts{2, 6} : Counts{6, 2};
    std::vector<std::int32_t> send(6, 7);
    std::vector<std::int32_t> recv(8);
    comm.allgather_v(send.data(), recv.data(), counts, DType::I32);
  });
}

TEST(Mismatch, AlltoallVSendCountsThatAreNotThePeersRecvCounts) {
  expect_mismatch_on_both_ranks("alltoall_v", [](Communicator& comm) {
    // Rank 0 sends rank 1 three elements; rank 1 expects four. The other direction agrees.
    const Counts send = comm.rank() == 0 ? Counts{2, 3} : Counts{5, 1};
    const Counts recv = comm.rank() == 0 ? Counts{2, 5} : Counts{4, 1};
    std::vector<double> s(8, 1.0);
    std::vector<double> d(8);
    comm.alltoall_v(s.data(), send, d.data(), recv, DType::F64);
  });
}

TEST(Mismatch, AlltoallVInconsistentCountsAreNamed) {
  std::array<std::string, 2> errors;
  run_ranks(2, [&](Communicator& comm) {
    const Counts send = comm.rank() == 0 ? Counts{1, 3} : Counts{2, 1};
    const Counts recv = comm.rank() == 0 ? Counts{1, 2} : Counts{4, 1};
    std::vector<float> s(8);
    std::vector<float> d(8);
    if (const auto e =
            error_of([&] { comm.alltoall_v(s.data(), send, d.data(), recv, DType::F32); })) {
      errors[static_cast<std::size_t>(comm.rank())] = e->what();
    }
  });
  // Rank 1 is told rank 0 sends 3 where its recv_counts[0] is 4, and the reverse.
  EXPECT_TRUE(contains(errors[1], "recv_counts[0] is 4")) << errors[1];
  EXPECT_TRUE(contains(errors[0], "would send this rank 2 elements and receive 4")) << errors[0];
}

TEST(Mismatch, ReduceWithDifferentRoots) {
  expect_mismatch_on_both_ranks("reduce", [](Communicator& comm) {
    std::vector<float> send(4, 1.0F);
    std::vector<float> recv(4);
    comm.reduce(send.data(), recv.data(), 4, DType::F32, ReduceOp::Sum, comm.rank());
  });
}

TEST(Mismatch, BroadcastWithDifferentRoots) {
  // Each rank thinks it is the root: without a check both would send and finish with their own
  // values.
  expect_mismatch_on_both_ranks("broadcast", [](Communicator& comm) {
    std::vector<float> buf(4, static_cast<float>(comm.rank()));
    comm.broadcast(buf.data(), 4, DType::F32, comm.rank());
  });
}

TEST(Mismatch, GatherWithDifferentCounts) {
  expect_mismatch_on_both_ranks("gather", [](Communicator& comm) {
    const std::size_t n = comm.rank() == 0 ? 4 : 5;
    std::vector<float> send(n, 1.0F);
    std::vector<float> recv(10);
    comm.gather(send.data(), recv.data(), n, DType::F32, 0);
  });
}

// ---------------------------------------------------------------------------------------------
// Bad arguments: InvalidArgument on the calling rank before anything is sent, so the communicator
// stays usable.

TEST(InvalidArgument, BadArgumentsAreRejectedAndTheCommunicatorStaysUsable) {
  run_ranks(2, [&](Communicator& comm) {
    std::vector<std::int32_t> a(16, 1);
    std::vector<std::int32_t> b(16, 0);
    std::vector<float> f(16, 1.0F);
    const Counts one = {4};
    const Counts two = {4, 4};
    const std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"avg of i32",
         [&] { comm.reduce_scatter(a.data(), b.data(), 4, DType::I32, ReduceOp::Avg); }},
        {"avg of i32", [&] { comm.reduce(a.data(), b.data(), 4, DType::I32, ReduceOp::Avg, 0); }},
        {"needs one per rank",
         [&] { comm.reduce_scatter_v(a.data(), b.data(), one, DType::I32, ReduceOp::Sum); }},
        {"needs one per rank", [&] { comm.allgather_v(a.data(), b.data(), one, DType::I32); }},
        {"needs one per rank", [&] { comm.alltoall_v(a.data(), two, b.data(), one, DType::I32); }},
        {"not in this communicator", [&] { comm.gather(a.data(), b.data(), 4, DType::I32, 2); }},
        {"not in this communicator", [&] { comm.scatter(a.data(), b.data(), 4, DType::I32, -1); }},
        {"null", [&] { comm.alltoall(nullptr, b.data(), 4, DType::I32); }},
        {"null",
         [&] { comm.reduce(a.data(), nullptr, 4, DType::I32, ReduceOp::Sum, comm.rank()); }},
        {"overlap",  // recv at the other rank's block
         [&] {
           comm.reduce_scatter(a.data(), a.data() + 4 * (1 - comm.rank()), 4, DType::I32,
                               ReduceOp::Sum);
         }},
        {"overlap", [&] { comm.alltoall(a.data(), a.data() + 1, 4, DType::I32); }},
        {"overlap",  // the same own count, another layout
         [&] {
           const Counts other = comm.rank() == 0 ? Counts{4, 3} : Counts{3, 4};
           comm.alltoall_v(a.data(), two, a.data(), other, DType::I32);
         }},
        {"send_counts",
         [&] {
           comm.alltoall_v(a.data(), two, b.data(), Counts{3, 3}, DType::I32);
         }},
    };
    for (const auto& [needle, call] : calls) {
      const auto e = error_of(call);
      ASSERT_TRUE(e.has_value()) << needle;
      EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
      EXPECT_TRUE(contains(e->what(), needle)) << e->what();
    }
    // Nothing was submitted: the next operations are #0 on both ranks and succeed.
    comm.allreduce(f.data(), f.data(), 16, DType::F32, ReduceOp::Sum);
    EXPECT_EQ(f[0], 2.0F);
  });
}

}  // namespace
}  // namespace strait::comm
