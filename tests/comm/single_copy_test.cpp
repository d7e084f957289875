// The single-copy path between ranks on one host (transport/ucx/ucx_transport.h): two
// UcxTransports of this process exchanging announced messages (the receiver reads the sender's
// memory with process_vm_readv, which works on its own process as on another), then every
// collective across the threshold, with the path on and off, against double-precision and
// byte-exact references. Failures across processes (a killed, a stopped, a mismatching peer) are
// in communicator_multiprocess_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "comm/transport/tag.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DType;
using kernels::ReduceOp;
using testing::check_reduced;
using testing::make_input;
using Buffer = std::vector<std::byte>;
using State = TransportRequest::State;

constexpr std::size_t kMin = 64 << 10;  // the threshold these tests set

// ---------------------------------------------------------------------------------------------
// Two transports of this process, rank 0 and rank 1, each with its own threshold (0: off).

struct Pair {
  std::unique_ptr<UcxTransport> t[2];

  // Progresses both until `done` holds; false after `limit`.
  bool drive(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      t[0]->progress();
      t[1]->progress();
    }
    return true;
  }
};

std::unique_ptr<Pair> connect_pair(std::size_t min0, std::size_t min1) {
  auto pair = std::make_unique<Pair>();
  HashStore store;
  std::exception_ptr failed;
  {
    // Construction is collective: rank 1 on a thread of its own.
    std::jthread other([&] {
      try {
        pair->t[1] = std::make_unique<UcxTransport>(store, "pair", 1, 2, 10s, 1, min1);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    pair->t[0] = std::make_unique<UcxTransport>(store, "pair", 0, 2, 10s, 1, min0);
  }
  if (failed) std::rethrow_exception(failed);
  return pair;
}

Buffer random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  Buffer b(n);
  for (auto& x : b) x = static_cast<std::byte>(gen());
  return b;
}

Tag tag_of(int src, int step) {
  return collective_tag(3, src, 7, step);
}

TEST(SingleCopyTransport, ALargeMessageIsReadFromTheSendersMemoryAndItsSendEndsWhenRead) {
  auto pair = connect_pair(kMin, kMin);
  const Buffer sent = random_bytes((1 << 20) + 3, 1);
  auto tx = pair->t[0]->isend(1, tag_of(0, 1), sent.data(), sent.size());
  // No receive yet: the message waits in the sender's memory, and so does its send.
  for (int i = 0; i < 200; ++i) {
    pair->t[0]->progress();
    pair->t[1]->progress();
  }
  EXPECT_EQ(tx->state, State::Pending);
  Buffer got(sent.size(), std::byte{0x5a});
  auto rx = pair->t[1]->irecv(0, tag_of(0, 1), got.data(), got.size());
  ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
  EXPECT_EQ(tx->state, State::Done) << tx->error;
  ASSERT_EQ(rx->state, State::Done) << rx->error;
  EXPECT_EQ(rx->bytes, sent.size());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(pair->t[0]->single_copy_bytes(), sent.size());
  EXPECT_EQ(pair->t[1]->single_copy_bytes(), 0U);
}

TEST(SingleCopyTransport, TheThresholdDecidesAndBothPathsDeliverTheSameBytes) {
  auto pair = connect_pair(kMin, kMin);
  std::uint64_t expected_single = 0;
  for (const std::size_t len : {kMin - 1, kMin, kMin + 1, std::size_t{3} << 20}) {
    SCOPED_TRACE(fmt::format("{} bytes", len));
    const Buffer sent = random_bytes(len, static_cast<std::uint32_t>(len));
    Buffer got(len);
    // Received first this time: the announcement then lands in a posted receive.
    auto rx = pair->t[1]->irecv(0, tag_of(0, 2), got.data(), got.size());
    auto tx = pair->t[0]->isend(1, tag_of(0, 2), sent.data(), sent.size());
    ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
    ASSERT_EQ(rx->state, State::Done) << rx->error;
    EXPECT_EQ(tx->state, State::Done) << tx->error;
    EXPECT_EQ(rx->bytes, len);
    EXPECT_EQ(got, sent);
    if (len >= kMin) expected_single += len;
    EXPECT_EQ(pair->t[0]->single_copy_bytes(), expected_single);
  }
}

TEST(SingleCopyTransport, MessagesMatchTheirReceivesByTagInAnyOrder) {
  auto pair = connect_pair(kMin, kMin);
  const Buffer a = random_bytes(kMin * 3, 11);
  const Buffer b = random_bytes(kMin * 2 + 17, 12);
  auto ta = pair->t[0]->isend(1, tag_of(0, 5), a.data(), a.size());
  auto tb = pair->t[0]->isend(1, tag_of(0, 6), b.data(), b.size());
  Buffer got_b(b.size());
  Buffer got_a(a.size());
  auto rb = pair->t[1]->irecv(0, tag_of(0, 6), got_b.data(), got_b.size());
  auto ra = pair->t[1]->irecv(0, tag_of(0, 5), got_a.data(), got_a.size());
  ASSERT_TRUE(pair->drive(
      [&] { return !ta->pending() && !tb->pending() && !ra->pending() && !rb->pending(); }));
  EXPECT_EQ(ra->state, State::Done) << ra->error;
  EXPECT_EQ(rb->state, State::Done) << rb->error;
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);
  EXPECT_EQ(pair->t[0]->single_copy_bytes(), a.size() + b.size());
}

TEST(SingleCopyTransport, OffOnEitherSideKeepsTheFifoPathBothWays) {
  for (const auto& [min0, min1] :
       {std::pair{kMin, std::size_t{0}}, std::pair{std::size_t{0}, kMin}}) {
    SCOPED_TRACE(fmt::format("thresholds {} and {}", min0, min1));
    auto pair = connect_pair(min0, min1);
    for (const int from : {0, 1}) {
      const int to = 1 - from;
      const Buffer sent = random_bytes(kMin * 4, static_cast<std::uint32_t>(20 + from));
      Buffer got(sent.size());
      auto tx = pair->t[from]->isend(to, tag_of(from, 1), sent.data(), sent.size());
      auto rx = pair->t[to]->irecv(from, tag_of(from, 1), got.data(), got.size());
      ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
      EXPECT_EQ(rx->state, State::Done) << rx->error;
      EXPECT_EQ(got, sent);
    }
    EXPECT_EQ(pair->t[0]->single_copy_bytes(), 0U);
    EXPECT_EQ(pair->t[1]->single_copy_bytes(), 0U);
  }
}

// Point-to-point tags use every bit, the announcement's among them.
TEST(SingleCopyTransport, PointToPointTagsAreNeverAnnounced) {
  auto pair = connect_pair(kMin, kMin);
  const Buffer sent = random_bytes(kMin * 2, 31);
  Buffer got(sent.size());
  auto tx = pair->t[0]->isend(1, p2p_tag(3, 0, kMaxUserTag), sent.data(), sent.size());
  auto rx = pair->t[1]->irecv(0, p2p_tag(3, 0, kMaxUserTag), got.data(), got.size());
  ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
  EXPECT_EQ(rx->state, State::Done) << rx->error;
  EXPECT_EQ(got, sent);
  EXPECT_EQ(pair->t[0]->single_copy_bytes(), 0U);
}

TEST(SingleCopyTransport, AReceiveShorterThanTheMessageIsTruncatedAndTheSendStillEnds) {
  auto pair = connect_pair(kMin, kMin);
  const Buffer sent = random_bytes(kMin * 2, 41);
  Buffer got(sent.size() - 4);
  auto tx = pair->t[0]->isend(1, tag_of(0, 3), sent.data(), sent.size());
  auto rx = pair->t[1]->irecv(0, tag_of(0, 3), got.data(), got.size());
  ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
  EXPECT_EQ(rx->state, State::Failed);
  EXPECT_TRUE(rx->truncated) << rx->error;
  EXPECT_EQ(tx->state, State::Done) << tx->error;  // as an eager send would: its buffer is free
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-100.0F, 100.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// irecv_reduce: an announced message is reduced as it is read, into `into` from `from`, and does
// not land in the receive buffer. Lengths that cross the transport's pieces (kReducePiece) and its
// read turns (kReadPiece) unevenly; out of place, in place, Sum and Max. The reference: each
// element in double (exact for a sum of two floats), rounded once to float.
TEST(SingleCopyTransport, AReducingReceiveReducesAnAnnouncedMessageAsItReadsIt) {
  auto pair = connect_pair(kMin, kMin);
  const std::size_t count = (UcxTransport::kReadPiece + UcxTransport::kReducePiece / 2) / 4 + 7;
  int step = 10;
  for (const bool in_place : {false, true}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      SCOPED_TRACE(fmt::format("in place {}, op {}", in_place, kernels::reduce_op_name(op)));
      const std::vector<float> msg = random_floats(count, 61 + step);
      const std::vector<float> from = random_floats(count, 62 + step);
      std::vector<float> into = in_place ? from : std::vector<float>(count, -1.0F);
      std::vector<float> scratch(count, 7.0F);
      const ReduceOnArrival how{
          DType::F32, op, reinterpret_cast<std::byte*>(into.data()),
          reinterpret_cast<const std::byte*>(in_place ? into.data() : from.data())};
      auto tx = pair->t[0]->isend(1, tag_of(0, step), msg.data(), count * sizeof(float));
      auto rx =
          pair->t[1]->irecv_reduce(0, tag_of(0, step), scratch.data(), count * sizeof(float), how);
      ++step;
      ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
      ASSERT_EQ(rx->state, State::Done) << rx->error;
      EXPECT_EQ(tx->state, State::Done) << tx->error;
      EXPECT_TRUE(rx->reduced);
      EXPECT_EQ(rx->bytes, count * sizeof(float));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const double a = from[i];
        const double b = msg[i];
        const auto want = static_cast<float>(op == ReduceOp::Sum ? a + b : (a < b ? b : a));
        if (into[i] != want && wrong++ < 3) {
          ADD_FAILURE() << "element " << i << ": " << into[i] << ", expected " << want;
        }
        // The buffer's start may hold the transport's announcement; the message never lands.
        if (i >= 16 && scratch[i] != 7.0F && wrong++ < 3) {
          ADD_FAILURE() << "the receive buffer was written at " << i;
        }
      }
      EXPECT_EQ(wrong, 0U);
    }
  }
}

// Where the transport cannot reduce on arrival, a reducing receive is a plain one: the message
// lands in the buffer and `reduced` stays false, for the caller to reduce. Below the threshold
// (UCX's FIFO), and an announced message that is not whole elements of the dtype.
TEST(SingleCopyTransport, AReducingReceiveTheTransportCannotReduceLandsTheMessage) {
  auto pair = connect_pair(kMin, kMin);
  int step = 20;
  for (const std::size_t len : {kMin / 2, kMin * 4 + 2}) {
    SCOPED_TRACE(fmt::format("{} bytes", len));
    const Buffer sent = random_bytes(len, static_cast<std::uint32_t>(len));
    std::vector<float> into((len + 3) / 4, 1.0F);
    const std::vector<float> untouched = into;
    Buffer got(len);
    const ReduceOnArrival how{DType::F32, ReduceOp::Sum, reinterpret_cast<std::byte*>(into.data()),
                              reinterpret_cast<const std::byte*>(into.data())};
    auto tx = pair->t[0]->isend(1, tag_of(0, step), sent.data(), len);
    auto rx = pair->t[1]->irecv_reduce(0, tag_of(0, step), got.data(), len, how);
    ++step;
    ASSERT_TRUE(pair->drive([&] { return !tx->pending() && !rx->pending(); }));
    ASSERT_EQ(rx->state, State::Done) << rx->error;
    EXPECT_FALSE(rx->reduced);
    EXPECT_EQ(got, sent);
    EXPECT_EQ(into, untouched);
  }
}

TEST(SingleCopyTransport, AWithdrawnSendIsNeverLandedEvenWhenItsBufferIsReused) {
  auto pair = connect_pair(kMin, kMin);
  Buffer sent = random_bytes(kMin * 8, 51);
  auto tx = pair->t[0]->isend(1, tag_of(0, 4), sent.data(), sent.size());
  for (int i = 0; i < 50; ++i) pair->t[0]->progress();
  const RequestPtr withdrawn[] = {tx};
  pair->t[0]->withdraw(withdrawn, 20ms);
  EXPECT_EQ(tx->state, State::Failed);
  // The caller owns the buffer again and writes something else there.
  std::fill(sent.begin(), sent.end(), std::byte{0x77});
  Buffer got(sent.size(), std::byte{0});
  auto rx = pair->t[1]->irecv(0, tag_of(0, 4), got.data(), got.size());
  ASSERT_TRUE(pair->drive([&] { return !rx->pending(); }));
  EXPECT_EQ(rx->state, State::Failed);
  EXPECT_NE(rx->error.find("rank 0 withdrew its message before this rank had read it"),
            std::string::npos)
      << rx->error;
  EXPECT_EQ(pair->t[0]->single_copy_bytes(), 0U);
}

TEST(SingleCopyTransport, AThresholdBelowTheAnnouncementIsRejected) {
  HashStore store;
  try {
    UcxTransport t(store, "solo", 0, 1, 1s, 1, 16);
    ADD_FAILURE() << "a 16-byte threshold was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("at least 40"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Every collective, ranks as threads, with the path on (threshold kMin) and off, counts just
// below, at and above the threshold, one not divisible by any world size, and in place.

class Collectives : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  [[nodiscard]] int world() const { return std::get<0>(GetParam()); }
  [[nodiscard]] bool on() const { return std::get<1>(GetParam()); }
};

// f32 elements of a message at the threshold, and counts around it.
constexpr std::size_t kAt = kMin / sizeof(float);
const std::vector<std::size_t> kCounts = {kAt - 1, kAt, kAt + 1, 16411};

Buffer input(std::uint64_t seed, int rank, std::size_t count) {
  return make_input(DType::F32, ReduceOp::Sum, seed, rank, count);
}

// Runs body(comm, failures) on every rank; the failures of all ranks, one per line.
template <class Body>
std::string run_all(int world, bool on, Body body) {
  std::vector<std::string> failures(static_cast<std::size_t>(world));
  testing::run_ranks_with(
      world,
      [on](int) {
        CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
        o.single_copy_min = on ? kMin : 0;
        // The transport's algorithms, which this file tests: not the ones that read peers'
        // buffers in place without messages (local_copy_test.cpp).
        auto table = std::make_shared<AlgorithmTable>(AlgorithmTable::defaults());
        table->append(AlgorithmTable::parse(
            "broadcast:binomial;allgather:ring;reduce_scatter:ring;alltoall:pairwise;"
            "reduce:binomial;gather:binomial;scatter:binomial;allgather_v:ring;"
            "reduce_scatter_v:ring;alltoall_v:pairwise",
            "test"));
        o.algorithms = std::move(table);
        return o;
      },
      [&](Communicator& comm) { body(comm, failures[static_cast<std::size_t>(comm.rank())]); });
  std::string all;
  for (int r = 0; r < world; ++r) {
    if (!failures[static_cast<std::size_t>(r)].empty()) {
      all += fmt::format("rank {}: {}", r, failures[static_cast<std::size_t>(r)]);
    }
  }
  return all;
}

void expect(std::string& failures, bool ok, const std::string& what) {
  if (!ok) failures += what + "\n";
}

TEST_P(Collectives, AllreduceMatchesTheDoubleReference) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 100;
    // Ring segments of 1 MiB and the uneven tails around them, and the counts near kMin (which
    // the ring cuts into 8 KiB segments: the FIFO path whatever the setting).
    for (const std::size_t count : {std::size_t{1'000'003}, std::size_t{262'147}, kAt + 1}) {
      for (const bool in_place : {false, true}) {
        const Buffer in = input(++seed, comm.rank(), count);
        Buffer out = in_place ? in : Buffer(in.size());
        comm.allreduce(in_place ? out.data() : in.data(), out.data(), count, DType::F32,
                       ReduceOp::Sum);
        const auto wrong =
            check_reduced("allreduce", DType::F32, ReduceOp::Sum, seed, p, out.data(), 0, count);
        expect(fail, !wrong, wrong.value_or(""));
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

// The ops and dtypes other than f32 sum on the path that reduces on arrival (1 MiB segments), out
// of place and in place.
TEST_P(Collectives, AllreduceOfEveryOpAndDtypeMatchesTheDoubleReference) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 300;
    constexpr std::size_t kCount = 600'011;
    for (const DType t : {DType::F32, DType::F64, DType::BF16, DType::I32}) {
      for (const ReduceOp op : {ReduceOp::Avg, ReduceOp::Max, ReduceOp::Prod}) {
        if (op == ReduceOp::Avg && t == DType::I32) continue;  // Avg is for floats
        for (const bool in_place : {false, true}) {
          const Buffer in = make_input(t, op, ++seed, comm.rank(), kCount);
          Buffer out = in_place ? in : Buffer(in.size());
          comm.allreduce(in_place ? out.data() : in.data(), out.data(), kCount, t, op);
          const auto wrong = check_reduced("allreduce", t, op, seed, p, out.data(), 0, kCount);
          expect(fail, !wrong, wrong.value_or(""));
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST_P(Collectives, ReduceScatterMatchesTheDoubleReference) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 200;
    const int r = comm.rank();
    for (const std::size_t n : kCounts) {
      for (const bool in_place : {false, true}) {
        Buffer send = input(++seed, r, n * static_cast<std::size_t>(p));
        Buffer out(n * sizeof(float));
        std::byte* own = send.data() + static_cast<std::size_t>(r) * n * sizeof(float);
        comm.reduce_scatter(send.data(), in_place ? own : out.data(), n, DType::F32, ReduceOp::Sum);
        const std::byte* got = in_place ? own : out.data();
        const auto wrong = check_reduced("reduce_scatter", DType::F32, ReduceOp::Sum, seed, p, got,
                                         static_cast<std::size_t>(r) * n, n);
        expect(fail, !wrong, fmt::format("{}{}", wrong.value_or(""), in_place ? " in place" : ""));
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST_P(Collectives, AllgatherIsByteExactAndOnlyMessagesFromTheThresholdAreCopiedOnce) {
  const int p = world();
  const bool single = on();
  const std::string failures = run_all(p, single, [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 300;
    for (const std::size_t n : kCounts) {
      for (const bool in_place : {false, true}) {
        ++seed;
        const std::size_t bytes = n * sizeof(float);
        Buffer out(bytes * static_cast<std::size_t>(p), std::byte{0x5a});
        const Buffer mine = input(seed, comm.rank(), n);
        std::byte* own = out.data() + static_cast<std::size_t>(comm.rank()) * bytes;
        if (in_place) std::memcpy(own, mine.data(), bytes);
        const std::uint64_t before = comm.stats().single_copy_bytes;
        comm.allgather(in_place ? own : mine.data(), out.data(), n, DType::F32);
        const std::uint64_t copied = comm.stats().single_copy_bytes - before;
        for (int q = 0; q < p; ++q) {
          const Buffer theirs = input(seed, q, n);
          expect(fail,
                 std::memcmp(out.data() + static_cast<std::size_t>(q) * bytes, theirs.data(),
                             bytes) == 0,
                 fmt::format("allgather of {}{}: rank {}'s block differs", n,
                             in_place ? " in place" : "", q));
        }
        // The ring sends p - 1 whole blocks; they go by single copy from the threshold on.
        const std::uint64_t expected =
            single && bytes >= kMin ? static_cast<std::uint64_t>(p - 1) * bytes : 0;
        expect(
            fail, copied == expected,
            fmt::format("allgather of {}: {} bytes copied once, expected {}", n, copied, expected));
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST_P(Collectives, BroadcastIsByteExactFromEveryRoot) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 400;
    for (const std::size_t n : kCounts) {
      for (int root = 0; root < p; ++root) {
        ++seed;
        const Buffer expected = input(seed, root, n);
        Buffer buf = comm.rank() == root ? expected : Buffer(expected.size(), std::byte{0x5a});
        comm.broadcast(buf.data(), n, DType::F32, root);
        expect(fail, buf == expected, fmt::format("broadcast of {} from {}", n, root));
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST_P(Collectives, AlltoallIsByteExact) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 500;
    const auto r = static_cast<std::size_t>(comm.rank());
    for (const std::size_t n : kCounts) {
      ++seed;
      const std::size_t bytes = n * sizeof(float);
      for (const bool in_place : {false, true}) {
        const Buffer send = input(seed, comm.rank(), n * static_cast<std::size_t>(p));
        Buffer out = in_place ? send : Buffer(send.size(), std::byte{0x5a});
        comm.alltoall(in_place ? out.data() : send.data(), out.data(), n, DType::F32);
        for (int q = 0; q < p; ++q) {
          const Buffer theirs = input(seed, q, n * static_cast<std::size_t>(p));
          expect(fail,
                 std::memcmp(out.data() + static_cast<std::size_t>(q) * bytes,
                             theirs.data() + r * bytes, bytes) == 0,
                 fmt::format("alltoall of {}{}: the block from rank {} differs", n,
                             in_place ? " in place" : "", q));
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST_P(Collectives, ReduceGatherAndScatterMatchTheirReferences) {
  const int p = world();
  const std::string failures = run_all(p, on(), [&](Communicator& comm, std::string& fail) {
    std::uint64_t seed = 600;
    const int r = comm.rank();
    for (const std::size_t n : kCounts) {
      const int root = static_cast<int>(n % static_cast<std::size_t>(p));
      const std::size_t bytes = n * sizeof(float);
      // reduce
      ++seed;
      const Buffer in = input(seed, r, n);
      Buffer out(bytes);
      comm.reduce(in.data(), out.data(), n, DType::F32, ReduceOp::Sum, root);
      if (r == root) {
        const auto wrong =
            check_reduced("reduce", DType::F32, ReduceOp::Sum, seed, p, out.data(), 0, n);
        expect(fail, !wrong, wrong.value_or(""));
      }
      // gather
      ++seed;
      const Buffer mine = input(seed, r, n);
      Buffer gathered(r == root ? bytes * static_cast<std::size_t>(p) : 0);
      comm.gather(mine.data(), gathered.data(), n, DType::F32, root);
      for (int q = 0; r == root && q < p; ++q) {
        expect(fail,
               std::memcmp(gathered.data() + static_cast<std::size_t>(q) * bytes,
                           input(seed, q, n).data(), bytes) == 0,
               fmt::format("gather of {}: rank {}'s block differs", n, q));
      }
      // scatter
      ++seed;
      const Buffer all = input(seed, root, n * static_cast<std::size_t>(p));
      Buffer piece(bytes, std::byte{0x5a});
      comm.scatter(r == root ? all.data() : nullptr, piece.data(), n, DType::F32, root);
      expect(
          fail,
          std::memcmp(piece.data(), all.data() + static_cast<std::size_t>(r) * bytes, bytes) == 0,
          fmt::format("scatter of {}: rank {}'s piece differs", n, r));
    }
    // With the path on, something went by it (every rank sends or forwards a block >= kMin).
    const std::uint64_t copied = comm.stats().single_copy_bytes;
    expect(fail, on() ? copied > 0 : copied == 0,
           fmt::format("{} bytes copied once with the path {}", copied, on() ? "on" : "off"));
  });
  EXPECT_TRUE(failures.empty()) << failures;
}

INSTANTIATE_TEST_SUITE_P(WorldsOnOff, Collectives,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& p) {
                           std::string name = "n";
                           name += std::to_string(std::get<0>(p.param));
                           name += std::get<1>(p.param) ? "_single_copy" : "_fifo";
                           return name;
                         });

}  // namespace
}  // namespace strait::comm
