// Communicator over UCX with ranks as threads of one process (tests/comm/comm_test_ranks.h):
// every collective's values against a double-precision reference, bit-identical results on all
// ranks, point-to-point matching, split, ordering of non-blocking work, and the failure modes
// (InvalidArgument, Timeout, Aborted, Mismatch). Process death (PeerLost) needs processes: see
// communicator_multiprocess_test.cpp.
#include "comm/communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/transport/tag.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DType;
using kernels::ReduceOp;
using testing::check_allreduce;
using testing::error_of;
using testing::kAllDTypes;
using testing::make_input;
using testing::run_ranks;
using testing::sentinel;
using Clock = std::chrono::steady_clock;
using Buffer = std::vector<std::byte>;
using strait::test::contains;

// ---------------------------------------------------------------------------------------------
// Allreduce: world sizes 1..5 x dtypes x ops x counts x in place / out of place.

struct AllreduceCase {
  ReduceOp op;
  std::size_t count;
  bool in_place;
  std::uint64_t seed;
};

std::vector<AllreduceCase> allreduce_cases(DType t) {
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  if (kernels::dtype_is_float(t)) ops.push_back(ReduceOp::Avg);
  std::vector<AllreduceCase> cases;
  for (const ReduceOp op : ops) {
    // Counts below, at and above the world size, one not divisible by any world size > 1 here,
    // and for f32 sum one large enough for UCX's rendezvous protocol and uneven ring chunks.
    std::vector<std::size_t> counts = {0, 1, 7, 4096};
    if (t == DType::F32 && op == ReduceOp::Sum) counts.push_back(1'000'003);
    for (const std::size_t count : counts) {
      for (const bool in_place : {false, true}) {
        cases.push_back({op, count, in_place, 1000 + cases.size()});
      }
    }
  }
  return cases;
}

class AllreduceMatrix : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(AllreduceMatrix, MatchesTheDoubleReferenceAndIsBitIdenticalOnEveryRank) {
  // Plain locals, not structured bindings: the rank lambda captures dtype (clang 14 cannot
  // capture bindings).
  const int world = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  const auto cases = allreduce_cases(dtype);
  const std::size_t elem = kernels::dtype_size(dtype);
  // results[rank][case]: what each rank ended with.
  std::vector<std::vector<Buffer>> results(static_cast<std::size_t>(world));
  std::vector<std::vector<bool>> send_intact(static_cast<std::size_t>(world));
  run_ranks(world, [&](Communicator& comm) {
    auto& mine = results[static_cast<std::size_t>(comm.rank())];
    auto& intact = send_intact[static_cast<std::size_t>(comm.rank())];
    for (const auto& c : cases) {
      const Buffer input = make_input(dtype, c.op, c.seed, comm.rank(), c.count);
      if (c.in_place) {
        Buffer buf = input;
        comm.allreduce(buf.data(), buf.data(), c.count, dtype, c.op);
        mine.push_back(std::move(buf));
        intact.push_back(true);
      } else {
        // A separate copy on purpose: comparing it with input afterwards detects writes to the
        // send buffer.
        // NOLINTNEXTLINE(performance-unnecessary-copy-initialization)
        const Buffer send = input;
        Buffer recv = sentinel(c.count * elem);
        comm.allreduce(send.data(), recv.data(), c.count, dtype, c.op);
        mine.push_back(std::move(recv));
        intact.push_back(send == input);
      }
    }
  });
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(fmt::format("{} {} count {} {}", kernels::dtype_name(dtype),
                             kernels::reduce_op_name(c.op), c.count,
                             c.in_place ? "in place" : "out of place"));
    ASSERT_EQ(results[0].size(), cases.size());
    const Buffer& first = results[0][i];
    ASSERT_EQ(first.size(), c.count * elem);
    const auto wrong = check_allreduce(dtype, c.op, c.seed, world, first.data(), c.count);
    EXPECT_FALSE(wrong.has_value()) << *wrong;
    for (int r = 0; r < world; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      ASSERT_EQ(results[ur].size(), cases.size()) << "rank " << r;
      EXPECT_TRUE(results[ur][i] == first) << "rank " << r << " differs from rank 0";
      EXPECT_TRUE(send_intact[ur][i]) << "rank " << r << " had its send buffer modified";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds1To5, AllreduceMatrix,
                         ::testing::Combine(::testing::Range(1, 6),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& p) {
                           return fmt::format("world{}_{}", std::get<0>(p.param),
                                              kernels::dtype_name(std::get<1>(p.param)));
                         });

// The bytes each allreduce algorithm sends: allreduce_algorithms_test.cpp.

TEST(Allreduce, AvgOfAnIntegerDtypeIsInvalidArgumentAndLeavesTheCommunicatorUsable) {
  run_ranks(2, [](Communicator& comm) {
    for (const DType t : {DType::I8, DType::U8, DType::I32, DType::I64}) {
      Buffer buf(4 * kernels::dtype_size(t));
      const auto e = error_of([&] { comm.allreduce(buf.data(), buf.data(), 4, t, ReduceOp::Avg); });
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
      EXPECT_TRUE(contains(e->what(), std::string(kernels::dtype_name(t)))) << e->what();
    }
    // Rejected before submission: the ranks are still in step and the communicator works.
    const Buffer in = make_input(DType::I32, ReduceOp::Sum, 11, comm.rank(), 5);
    Buffer out(in.size());
    comm.allreduce(in.data(), out.data(), 5, DType::I32, ReduceOp::Sum);
    const auto wrong = check_allreduce(DType::I32, ReduceOp::Sum, 11, 2, out.data(), 5);
    EXPECT_FALSE(wrong.has_value()) << *wrong;
  });
}

TEST(Allreduce, NullBuffersWithANonZeroCountAreInvalidArgument) {
  run_ranks(2, [](Communicator& comm) {
    float x = 1.0F;
    auto e = error_of([&] { comm.allreduce(nullptr, &x, 1, DType::F32, ReduceOp::Sum); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
    e = error_of([&] { comm.allreduce(&x, nullptr, 1, DType::F32, ReduceOp::Sum); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
    e = error_of([&] { comm.allgather(&x, nullptr, 1, DType::F32); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
    // Count 0: nothing to touch, so null buffers are fine (and the ranks still exchange headers).
    comm.allreduce(nullptr, nullptr, 0, DType::F32, ReduceOp::Sum);
    comm.allgather(nullptr, nullptr, 0, DType::F32);
    comm.broadcast(nullptr, 0, DType::F32, 1);
  });
}

// ---------------------------------------------------------------------------------------------
// Broadcast, allgather, barrier.

class PerWorld : public ::testing::TestWithParam<int> {};

TEST_P(PerWorld, BroadcastFromEveryRootReachesEveryRank) {
  const int world = GetParam();
  struct Shape {
    DType dtype;
    std::size_t count;
  };
  // 0 elements, one byte, an odd count, and one large enough for UCX's rendezvous protocol.
  const std::array<Shape, 4> shapes = {
      {{DType::F32, 0}, {DType::U8, 1}, {DType::F64, 7}, {DType::I32, 250'003}}};
  std::atomic<int> checked{0};
  run_ranks(world, [&](Communicator& comm) {
    for (int root = 0; root < world; ++root) {
      for (std::size_t s = 0; s < shapes.size(); ++s) {
        const auto [dtype, count] = shapes[s];
        const std::uint64_t seed = 100 * static_cast<std::uint64_t>(root) + s;
        const Buffer expected = make_input(dtype, ReduceOp::Max, seed, root, count);
        Buffer buf = comm.rank() == root ? expected : sentinel(expected.size());
        comm.broadcast(buf.data(), count, dtype, root);
        EXPECT_TRUE(buf == expected) << "rank " << comm.rank() << ", root " << root << ", "
                                     << kernels::dtype_name(dtype) << " x " << count;
        checked.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(checked.load(), world * world * static_cast<int>(shapes.size()));
}

TEST_P(PerWorld, AllgatherConcatenatesInRankOrder) {
  const int world = GetParam();
  std::atomic<int> checked{0};
  run_ranks(world, [&](Communicator& comm) {
    for (const DType dtype : {DType::I32, DType::BF16}) {
      for (const std::size_t count : {0UL, 1UL, 7UL, 100'003UL}) {
        for (const bool in_place : {false, true}) {
          const std::uint64_t seed = count + (in_place ? 1 : 0);
          const std::size_t bytes = count * kernels::dtype_size(dtype);
          Buffer expected;
          for (int r = 0; r < world; ++r) {
            const Buffer part = make_input(dtype, ReduceOp::Max, seed, r, count);
            expected.insert(expected.end(), part.begin(), part.end());
          }
          const Buffer mine = make_input(dtype, ReduceOp::Max, seed, comm.rank(), count);
          Buffer out = sentinel(bytes * static_cast<std::size_t>(world));
          if (in_place) {
            // MPI_IN_PLACE style: this rank's block of the output already holds its input.
            std::byte* block = out.data() + bytes * static_cast<std::size_t>(comm.rank());
            if (bytes != 0) std::memcpy(block, mine.data(), bytes);
            comm.allgather(block, out.data(), count, dtype);
          } else {
            comm.allgather(mine.data(), out.data(), count, dtype);
          }
          EXPECT_TRUE(out == expected)
              << "rank " << comm.rank() << ", " << kernels::dtype_name(dtype) << " x " << count
              << (in_place ? " in place" : "");
          checked.fetch_add(1);
        }
      }
    }
  });
  EXPECT_EQ(checked.load(), world * 16);
}

TEST_P(PerWorld, NoRankLeavesABarrierBeforeEveryRankHasEnteredIt) {
  const int world = GetParam();
  constexpr int kRounds = 20;
  std::array<std::atomic<int>, kRounds> arrived{};
  std::atomic<int> early{0};
  run_ranks(world, [&](Communicator& comm) {
    for (int round = 0; round < kRounds; ++round) {
      // The last rank dawdles, so a barrier that let anyone through early would be caught.
      if (comm.rank() == world - 1) std::this_thread::sleep_for(1ms);
      arrived[static_cast<std::size_t>(round)].fetch_add(1);
      comm.barrier();
      if (arrived[static_cast<std::size_t>(round)].load() != world) early.fetch_add(1);
    }
  });
  EXPECT_EQ(early.load(), 0);
  for (const auto& a : arrived) EXPECT_EQ(a.load(), world);
}

INSTANTIATE_TEST_SUITE_P(Worlds1To5, PerWorld, ::testing::Range(1, 6),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return fmt::format("world{}", p.param);
                         });

// ---------------------------------------------------------------------------------------------
// Point to point.

// The payload of message `tag` from `src`: its size and bytes identify it.
Buffer payload(int src, std::uint64_t tag, std::size_t bytes) {
  Buffer b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    b[i] = static_cast<std::byte>(testing::draw(tag, src, i) & 0xffU);
  }
  return b;
}

TEST(SendRecv, ARingOfExactSizeMessagesIncludingToSelf) {
  for (const int world : {2, 5}) {
    run_ranks(world, [world](Communicator& comm) {
      const int r = comm.rank();
      const int right = (r + 1) % world;
      const int left = (r + world - 1) % world;
      auto size_from = [](int src) { return static_cast<std::size_t>(src) * 1000 + 3; };
      const Buffer out = payload(r, 5, size_from(r));
      Buffer in = sentinel(size_from(left));
      Work rx = comm.irecv(in.data(), in.size(), left, 5);
      comm.send(out.data(), out.size(), right, 5);
      rx.wait();
      EXPECT_TRUE(in == payload(left, 5, size_from(left))) << "rank " << r;
      // To itself: the receive posted after the send still matches it.
      const Buffer self_out = payload(r, 6, 77);
      Buffer self_in = sentinel(77);
      Work tx = comm.isend(self_out.data(), self_out.size(), r, 6);
      comm.recv(self_in.data(), self_in.size(), r, 6);
      tx.wait();
      EXPECT_TRUE(self_in == self_out) << "rank " << r;
    });
  }
}

TEST(SendRecv, ManyInFlightMatchByTagWhateverTheOrder) {
  constexpr int kMessages = 24;
  // Small (eager) and large (rendezvous) messages mixed.
  auto size_of = [](std::uint64_t tag) -> std::size_t {
    return tag % 3 == 0 ? 300'000 + tag : 10 + tag;
  };
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      std::vector<Buffer> out;
      std::vector<Work> sends;
      for (std::uint64_t tag = 0; tag < kMessages; ++tag)
        out.push_back(payload(0, tag, size_of(tag)));
      // Sent in tag order, one of them with the largest tag allowed.
      for (std::uint64_t tag = 0; tag < kMessages; ++tag) {
        const std::uint64_t wire_tag = tag == kMessages - 1 ? kMaxUserTag : tag;
        sends.push_back(comm.isend(out[tag].data(), out[tag].size(), 1, wire_tag));
      }
      for (auto it = sends.rbegin(); it != sends.rend(); ++it) it->wait();
    } else {
      std::vector<Buffer> in(kMessages);
      std::vector<Work> recvs(kMessages);
      // Posted in reverse tag order, waited for in yet another order.
      for (int tag = kMessages - 1; tag >= 0; --tag) {
        const auto t = static_cast<std::uint64_t>(tag);
        in[t] = sentinel(size_of(t));
        const std::uint64_t wire_tag = tag == kMessages - 1 ? kMaxUserTag : t;
        recvs[t] = comm.irecv(in[t].data(), in[t].size(), 0, wire_tag);
      }
      for (std::uint64_t k = 0; k < kMessages; ++k) recvs[(k * 7) % kMessages].wait();
      for (std::uint64_t tag = 0; tag < kMessages; ++tag) {
        EXPECT_TRUE(in[tag] == payload(0, tag, size_of(tag))) << "tag " << tag;
      }
    }
  });
}

TEST(SendRecv, MessagesWithOneTagArriveInSendOrder) {
  constexpr int kMessages = 16;
  run_ranks(2, [&](Communicator& comm) {
    std::vector<Buffer> bufs;
    std::vector<Work> works;
    for (std::uint64_t i = 0; i < kMessages; ++i) {
      bufs.push_back(comm.rank() == 0 ? payload(0, i, 64) : sentinel(64));
    }
    for (std::uint64_t i = 0; i < kMessages; ++i) {
      works.push_back(comm.rank() == 0 ? comm.isend(bufs[i].data(), 64, 1, 9)
                                       : comm.irecv(bufs[i].data(), 64, 0, 9));
    }
    for (auto& w : works) w.wait();
    if (comm.rank() == 1) {
      for (std::uint64_t i = 0; i < kMessages; ++i) {
        EXPECT_TRUE(bufs[i] == payload(0, i, 64)) << "message " << i;
      }
    }
  });
}

TEST(SendRecv, AReceiveMustBeForExactlyTheBytesSent) {
  // Longer and shorter than expected: both are Mismatch on the receiver, naming the sender.
  for (const std::size_t sent : {100UL, 40UL}) {
    run_ranks(2, [sent](Communicator& comm) {
      if (comm.rank() == 0) {
        const Buffer out = payload(0, 1, sent);
        comm.send(out.data(), out.size(), 1, 1);
      } else {
        Buffer in = sentinel(64);
        const auto e = error_of([&] { comm.recv(in.data(), in.size(), 0, 1); });
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 0")) << e->what();
      }
    });
  }
}

TEST(SendRecv, BadPeersAndTagsAreInvalidArgument) {
  run_ranks(2, [](Communicator& comm) {
    std::byte b{};
    for (const int peer : {-1, 2}) {
      auto e = error_of([&] { comm.send(&b, 1, peer, 0); });
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
      e = error_of([&] { comm.recv(&b, 1, peer, 0); });
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
    }
    const auto e = error_of([&] { comm.send(&b, 1, 1 - comm.rank(), kMaxUserTag + 1); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
  });
}

// ---------------------------------------------------------------------------------------------
// split.

// The world ranks of `sub`'s members in sub-rank order, learnt through an allgather on `sub`.
std::vector<std::int64_t> members(Communicator& sub, int world_rank) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(sub.size()));
  const std::int64_t mine = world_rank;
  sub.allgather(&mine, all.data(), 1, DType::I64);
  return all;
}

TEST(Split, OrdersByKeyThenRankAndNegativeColorGivesNull) {
  constexpr int kWorld = 5;
  // color = rank % 2, except rank 4 which opts out; key = -rank reverses the order:
  // color 0: world ranks 2, 0; color 1: world ranks 3, 1.
  std::array<std::vector<std::int64_t>, kWorld> seen;
  std::array<int, kWorld> sub_rank{};
  std::array<bool, kWorld> got_null{};
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    const int color = r == 4 ? -1 : r % 2;
    auto sub = comm.split(color, -r);
    const auto ur = static_cast<std::size_t>(r);
    got_null[ur] = sub == nullptr;
    if (sub) {
      sub_rank[ur] = sub->rank();
      seen[ur] = members(*sub, r);
    }
    comm.barrier();  // the parent still works, whatever the split did
  });
  EXPECT_TRUE(got_null[4]);
  for (const int r : {0, 1, 2, 3}) {
    const auto ur = static_cast<std::size_t>(r);
    ASSERT_FALSE(got_null[ur]) << "rank " << r;
    const std::vector<std::int64_t> expected =
        r % 2 == 0 ? std::vector<std::int64_t>{2, 0} : std::vector<std::int64_t>{3, 1};
    EXPECT_EQ(seen[ur], expected) << "rank " << r;
    EXPECT_EQ(sub_rank[ur], r < 2 ? 1 : 0) << "rank " << r;
  }
}

TEST(Split, EqualKeysKeepTheParentsOrderAndSplitsNest) {
  constexpr int kWorld = 4;
  // One color; keys 1, 1, 0, 0: order 2, 3, 0, 1. Then that communicator split by parity of its
  // own ranks: {2, 0} and {3, 1} in world ranks.
  std::array<std::vector<std::int64_t>, kWorld> outer;
  std::array<std::vector<std::int64_t>, kWorld> inner;
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    auto sub = comm.split(7, r < 2 ? 1 : 0);
    ASSERT_NE(sub, nullptr);
    outer[static_cast<std::size_t>(r)] = members(*sub, r);
    auto subsub = sub->split(sub->rank() % 2, 0);
    ASSERT_NE(subsub, nullptr);
    inner[static_cast<std::size_t>(r)] = members(*subsub, r);
  });
  for (std::size_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outer[r], (std::vector<std::int64_t>{2, 3, 0, 1})) << "rank " << r;
    const std::vector<std::int64_t> expected =
        r == 0 || r == 2 ? std::vector<std::int64_t>{2, 0} : std::vector<std::int64_t>{3, 1};
    EXPECT_EQ(inner[r], expected) << "rank " << r;
  }
}

TEST(Split, SubCommunicatorCollectivesRunConcurrentlyWithTheParents) {
  constexpr int kWorld = 4;
  constexpr std::size_t kCount = 100'003;
  constexpr int kRounds = 6;
  std::atomic<int> checked{0};
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    auto sub = comm.split(r % 2, r);  // {0, 2} and {1, 3}
    ASSERT_NE(sub, nullptr);
    ASSERT_EQ(sub->size(), 2);
    const std::uint64_t sub_seed = 500 + static_cast<std::uint64_t>(r % 2);
    // Non-blocking, interleaved on one thread: both streams are in flight at once.
    const Buffer sub_in = make_input(DType::F32, ReduceOp::Sum, sub_seed, sub->rank(), kCount);
    const Buffer world_in = make_input(DType::F64, ReduceOp::Max, 600, r, kCount);
    Buffer sub_out(sub_in.size());
    Buffer world_out(world_in.size());
    Work a = sub->iallreduce(sub_in.data(), sub_out.data(), kCount, DType::F32, ReduceOp::Sum);
    Work b = comm.iallreduce(world_in.data(), world_out.data(), kCount, DType::F64, ReduceOp::Max);
    b.wait();
    a.wait();
    auto wrong = check_allreduce(DType::F32, ReduceOp::Sum, sub_seed, 2, sub_out.data(), kCount);
    EXPECT_FALSE(wrong.has_value()) << *wrong;
    wrong = check_allreduce(DType::F64, ReduceOp::Max, 600, kWorld, world_out.data(), kCount);
    EXPECT_FALSE(wrong.has_value()) << *wrong;
    // Blocking, from two threads of each rank: one on the parent, one on the sub-communicator.
    std::jthread side([&] {
      for (int i = 0; i < kRounds; ++i) {
        const std::uint64_t seed = 700 + static_cast<std::uint64_t>(10 * i + r % 2);
        const Buffer in = make_input(DType::I32, ReduceOp::Sum, seed, sub->rank(), 1000);
        Buffer out(in.size());
        sub->allreduce(in.data(), out.data(), 1000, DType::I32, ReduceOp::Sum);
        const auto bad = check_allreduce(DType::I32, ReduceOp::Sum, seed, 2, out.data(), 1000);
        EXPECT_FALSE(bad.has_value()) << *bad;
        checked.fetch_add(1);
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      const std::uint64_t seed = 800 + static_cast<std::uint64_t>(i);
      const Buffer in = make_input(DType::I64, ReduceOp::Sum, seed, r, 1000);
      Buffer out(in.size());
      comm.allreduce(in.data(), out.data(), 1000, DType::I64, ReduceOp::Sum);
      const auto bad = check_allreduce(DType::I64, ReduceOp::Sum, seed, kWorld, out.data(), 1000);
      EXPECT_FALSE(bad.has_value()) << *bad;
      checked.fetch_add(1);
    }
  });
  EXPECT_EQ(checked.load(), 2 * kWorld * kRounds);
}

// ---------------------------------------------------------------------------------------------
// Non-blocking work.

TEST(NonBlocking, ManyOperationsInFlightCompleteInSubmissionOrder) {
  constexpr int kWorld = 3;
  constexpr int kOps = 40;
  // Large and small operations alternate: without ordering, the small ones would finish first.
  auto count_of = [](int i) -> std::size_t { return i % 4 == 0 ? 200'003 : 1 + i; };
  std::atomic<int> checked{0};
  run_ranks(kWorld, [&](Communicator& comm) {
    std::vector<Buffer> in;
    std::vector<Buffer> out;
    for (int i = 0; i < kOps; ++i) {
      in.push_back(make_input(DType::F32, ReduceOp::Sum, 900 + i, comm.rank(), count_of(i)));
      out.push_back(sentinel(in.back().size()));
    }
    std::mutex mutex;
    std::condition_variable all_called;
    std::vector<int> order;
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) {
      const auto ui = static_cast<std::size_t>(i);
      if (i % 10 == 5) {
        works.push_back(comm.ibarrier());
      } else {
        works.push_back(
            comm.iallreduce(in[ui].data(), out[ui].data(), count_of(i), DType::F32, ReduceOp::Sum));
      }
      works.back().on_complete([&, i](const std::optional<Error>& e) {
        EXPECT_FALSE(e.has_value()) << e->what();
        const std::lock_guard lock(mutex);
        order.push_back(i);
        all_called.notify_all();
      });
    }
    // The last completes only after all the others: once it is done, every earlier one is.
    works.back().wait();
    for (int i = 0; i < kOps; ++i) {
      EXPECT_TRUE(works[static_cast<std::size_t>(i)].test()) << "op " << i;
    }
    for (auto& w : works) w.wait();
    {
      // Callbacks run on the progress thread after the work is marked done, so the last one may
      // still be running when wait() returns: wait for it (generously) before reading `order`.
      std::unique_lock lock(mutex);
      all_called.wait_for(lock, 20s, [&] { return order.size() == kOps; });
      std::vector<int> expected(kOps);
      for (int i = 0; i < kOps; ++i) expected[static_cast<std::size_t>(i)] = i;
      EXPECT_EQ(order, expected);
    }
    for (int i = 0; i < kOps; ++i) {
      if (i % 10 == 5) continue;
      const auto ui = static_cast<std::size_t>(i);
      const auto wrong =
          check_allreduce(DType::F32, ReduceOp::Sum, 900 + i, kWorld, out[ui].data(), count_of(i));
      EXPECT_FALSE(wrong.has_value()) << "op " << i << ": " << *wrong;
    }
    // A callback registered after completion runs at once, on this thread.
    bool ran = false;
    works.front().on_complete([&](const std::optional<Error>& e) { ran = !e.has_value(); });
    EXPECT_TRUE(ran);
    checked.fetch_add(1);
  });
  EXPECT_EQ(checked.load(), kWorld);
}

TEST(NonBlocking, AnEmptyWorkHandleIsInvalidArgument) {
  const Work empty;
  EXPECT_FALSE(empty.valid());
  const auto e = error_of([&] { empty.wait(); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Failures: the caller's timeout, the communicator's timeout, abort(), mismatched counts.

TEST(Failure, AnExpiredWaitFailsTheOperationWithTimeoutAndTheCommunicatorStaysFailed) {
  testing::Gate done;
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() != 0) return done.wait();  // rank 1 never joins
    const testing::OpenOnExit open(done);
    std::vector<float> buf(1000, 1.0F);
    Work w = comm.iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
    EXPECT_FALSE(w.test());
    const auto start = Clock::now();
    auto e = error_of([&] { w.wait(200ms); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
    EXPECT_TRUE(contains(e->what(), "allreduce #0")) << e->what();
    EXPECT_LT(Clock::now() - start, 10s);  // the caller's 200 ms, not the communicator's 30 s
    EXPECT_TRUE(w.test());
    ASSERT_TRUE(w.error().has_value());
    EXPECT_EQ(w.error()->code(), ErrorCode::Timeout);
    // Unusable afterwards: later operations fail at once, saying why.
    e = error_of([&] { comm.allreduce(buf.data(), buf.data(), 1, DType::F32, ReduceOp::Sum); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
    EXPECT_TRUE(contains(e->what(), "unusable")) << e->what();
    e = error_of([&] { comm.barrier(); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), "unusable")) << e->what();
  });
}

TEST(Failure, ARankThatNeverArrivesIsATimeoutNamingIt) {
  // Ring neighbours: rank 0 waits for rank 1, which never calls the allreduce.
  testing::Gate done;
  run_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() != 0) return done.wait();
        const testing::OpenOnExit open(done);
        std::vector<double> buf(10, 1.0);
        const auto start = Clock::now();
        const auto e = error_of(
            [&] { comm.allreduce(buf.data(), buf.data(), 10, DType::F64, ReduceOp::Sum); });
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
        EXPECT_TRUE(contains(e->what(), "from rank 1")) << e->what();
        EXPECT_LT(Clock::now() - start, 20s);
      },
      500ms);
}

TEST(Failure, ARankThatNeverStartsIsATimeoutNamingItAtCreation) {
  // Ranks 0 and 2 of 3 create the world; rank 1 never does.
  auto store = std::make_shared<HashStore>();
  std::array<std::string, 2> errors;
  {
    std::array<std::jthread, 2> ranks;
    for (int i = 0; i < 2; ++i) {
      ranks[static_cast<std::size_t>(i)] = std::jthread([&, i] {
        const auto e = error_of(
            [&] { Communicator::create(store, 2 * i, 3, testing::options_with_timeout(500ms)); });
        errors[static_cast<std::size_t>(i)] =
            e ? fmt::format("{}: {}", to_string(e->code()), e->what()) : "no error";
      });
    }
  }
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "Timeout")) << e;
    EXPECT_TRUE(contains(e, "rank(s) 1 did not start")) << e;
  }
}

TEST(Failure, ALateRankFindsNoFreedBufferOfAnOperationThatTimedOut) {
  // Rank 0 gives up on an allreduce and frees its buffers (8 MiB: returned to the system at once,
  // so a later read of them faults); rank 1 then arrives at the same allreduce. Rank 0's sends of
  // it must have been withdrawn, not taken by rank 1 from freed memory (UCX's rendezvous used to
  // do that), and rank 1 fails rather than finishing with what it got.
  testing::Gate freed;
  testing::Gate late_done;
  std::optional<Error> late_error;
  run_ranks(2, [&](Communicator& comm) {
    constexpr std::size_t kCount = 2 << 20;
    if (comm.rank() == 1) {
      freed.wait();
      const testing::OpenOnExit open(late_done);
      std::vector<float> buf(kCount, 2.0F);
      Work w = comm.iallreduce(buf.data(), buf.data(), kCount, DType::F32, ReduceOp::Sum);
      late_error = error_of([&] { w.wait(2s); });
      return;
    }
    {
      const testing::OpenOnExit open(freed);
      auto buf = std::make_unique<std::vector<float>>(kCount, 1.0F);
      Work w = comm.iallreduce(buf->data(), buf->data(), kCount, DType::F32, ReduceOp::Sum);
      const auto e = error_of([&] { w.wait(300ms); });
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
    }
    late_done.wait();  // rank 0's engine keeps progressing while rank 1 tries
  });
  ASSERT_TRUE(late_error.has_value());
  EXPECT_TRUE(late_error->code() == ErrorCode::Timeout || late_error->code() == ErrorCode::PeerLost)
      << late_error->what();
}

TEST(Failure, AbortFromAnotherThreadUnblocksEveryPendingOperation) {
  testing::Gate done;
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() != 0) return done.wait();  // rank 1 never joins: nothing finishes by itself
    const testing::OpenOnExit open(done);
    std::vector<float> a(1000, 1.0F);
    std::vector<float> b(1000, 1.0F);
    std::atomic<int> aborted{0};
    std::atomic<int> submitted{0};
    const auto start = Clock::now();
    {
      std::jthread collective([&] {
        Work w = comm.iallreduce(a.data(), a.data(), a.size(), DType::F32, ReduceOp::Sum);
        submitted.fetch_add(1);
        const auto e = error_of([&] { w.wait(); });
        if (e && e->code() == ErrorCode::Aborted && contains(e->what(), "test abort")) {
          aborted.fetch_add(1);
        }
      });
      std::jthread receive([&] {
        Work w = comm.irecv(b.data(), b.size() * sizeof(float), 1, 3);
        submitted.fetch_add(1);
        const auto e = error_of([&] { w.wait(); });
        if (e && e->code() == ErrorCode::Aborted) aborted.fetch_add(1);
      });
      while (submitted.load() < 2) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(50ms);  // most likely both threads are blocked in wait() now
      comm.abort("test abort");
    }
    EXPECT_EQ(aborted.load(), 2);
    EXPECT_LT(Clock::now() - start, 10s);  // not the communicator's 30 s timeout
    // Later operations fail too.
    const auto e = error_of([&] { comm.barrier(); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Aborted) << e->what();
  });
}

TEST(Failure, DestroyingASubCommunicatorFailsItsPendingOperationsWithAborted) {
  testing::Gate done;
  std::atomic<int> checked{0};
  // Outlive every communicator: a failed operation's sends may still be queued in UCX (behind an
  // endpoint's wireup) and read later, while the process's UCX worker lives (comm/work.h).
  std::vector<float> a(100'000, 1.0F);
  std::vector<float> b(10, 1.0F);
  run_ranks(2, [&](Communicator& comm) {
    auto sub = comm.split(0, comm.rank());
    ASSERT_NE(sub, nullptr);
    if (comm.rank() == 1) {
      done.wait();  // never joins the sub-communicator's allreduce
    } else {
      const testing::OpenOnExit open(done);
      // Destroyed right after submission: the operations may not even have started yet.
      Work started = sub->iallreduce(a.data(), a.data(), a.size(), DType::F32, ReduceOp::Sum);
      Work queued = sub->iallreduce(b.data(), b.data(), b.size(), DType::F32, ReduceOp::Sum);
      sub.reset();
      for (const Work* w : {&started, &queued}) {
        const auto e = error_of([&] { w->wait(); });
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->code(), ErrorCode::Aborted) << e->what();
        EXPECT_TRUE(contains(e->what(), "destroyed")) << e->what();
      }
    }
    // The parent communicator is unaffected.
    comm.barrier();
    checked.fetch_add(1);
  });
  EXPECT_EQ(checked.load(), 2);
}

// What each rank passes to its allreduce in a mismatch test.
struct Call {
  std::size_t count;
  DType dtype;
  ReduceOp op;
};

// Every rank fails with Mismatch (not a Timeout, not wrong values), well within the timeout.
template <class CallOf>
void expect_mismatch_on_every_rank(int world, CallOf call_of) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<ErrorCode> codes(static_cast<std::size_t>(world), ErrorCode::Internal);
  const auto start = Clock::now();
  run_ranks(world, [&](Communicator& comm) {
    const Call c = call_of(comm.rank());
    std::vector<double> buf(c.count, 1.0);  // 8 bytes an element: room for any dtype
    const auto e =
        error_of([&] { comm.allreduce(buf.data(), buf.data(), c.count, c.dtype, c.op); });
    if (e) {
      errors[static_cast<std::size_t>(comm.rank())] = e->what();
      codes[static_cast<std::size_t>(comm.rank())] = e->code();
    }
  });
  EXPECT_LT(Clock::now() - start, 15s);  // the communicators' timeout is 30 s
  for (int r = 0; r < world; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    EXPECT_EQ(codes[ur], ErrorCode::Mismatch) << "rank " << r << ": " << errors[ur];
    EXPECT_TRUE(contains(errors[ur], "allreduce #0")) << errors[ur];
    EXPECT_TRUE(contains(errors[ur], fmt::format("rank {}", 1 - r))) << errors[ur];
  }
}

TEST(Failure, DifferentAllreduceCountsAreAMismatchOnBothRanks) {
  expect_mismatch_on_every_rank(2, [](int rank) {
    return Call{rank == 0 ? 64UL : 128UL, DType::F32, ReduceOp::Sum};
  });
}

TEST(Failure, CountsThatDifferByOneAreAMismatchOnBothRanks) {
  // Chunks 4 + 4 against 5 + 4: only rank 1 receives a message of a size it did not expect.
  expect_mismatch_on_every_rank(2, [](int rank) {
    return Call{rank == 0 ? 8UL : 9UL, DType::F32, ReduceOp::Sum};
  });
}

TEST(Failure, DifferentDtypesOfOneSizeAreAMismatchNotWrongValues) {
  // Every message has the size each side expects: only the operation's fingerprint tells.
  expect_mismatch_on_every_rank(2, [](int rank) {
    return Call{16, rank == 0 ? DType::F32 : DType::I32, ReduceOp::Sum};
  });
}

TEST(Failure, DifferentReduceOpsAreAMismatchNotDifferentResults) {
  expect_mismatch_on_every_rank(2, [](int rank) {
    return Call{16, DType::F64, rank == 0 ? ReduceOp::Sum : ReduceOp::Max};
  });
}

}  // namespace
}  // namespace strait::comm
