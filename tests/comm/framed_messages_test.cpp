// Short vectors carry the operation's fingerprint inside their data (CollectiveOp's framed
// messages): recursive doubling between 2^k ranks sends one message per step and peer instead of a
// header and a data message, sums stay exact, and ranks that disagree still fail with Mismatch
// naming both sides. The ranks run in this process over an in-memory transport that matches tags
// exactly as UCX does and counts the messages.
#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/algorithms/fingerprint.h"
#include "comm/algorithms/recursive_doubling_allreduce.h"
#include "core/error.h"
#include "core/fd.h"

namespace strait::comm {
namespace {

using kernels::DType;
using kernels::ReduceOp;

// Every rank's mailbox: messages sent to it and not yet received, and receives not yet matched.
struct Fabric {
  struct Message {
    int src = 0;
    Tag tag{};
    std::vector<std::byte> bytes;
  };
  struct Posted {
    int src = 0;
    Tag tag{};
    void* buf = nullptr;
    std::size_t len = 0;
    RequestPtr request;
  };
  explicit Fabric(int ranks) : inbox(ranks), waiting(ranks), sends(ranks, 0) {}
  std::vector<std::deque<Message>> inbox;
  std::vector<std::deque<Posted>> waiting;
  std::vector<int> sends;  // messages each rank has sent

  // Delivers what can be delivered to `rank`, in posting order (UCX's matching order).
  bool match(int rank) {
    bool any = false;
    auto& posted = waiting[static_cast<std::size_t>(rank)];
    auto& box = inbox[static_cast<std::size_t>(rank)];
    for (auto p = posted.begin(); p != posted.end();) {
      auto m = std::find_if(box.begin(), box.end(),
                            [&](const Message& x) { return x.src == p->src && x.tag == p->tag; });
      if (m == box.end()) {
        ++p;
        continue;
      }
      if (m->bytes.size() > p->len) {
        p->request->state = TransportRequest::State::Failed;
        p->request->truncated = true;
        p->request->error = "message truncated";
      } else {
        if (!m->bytes.empty()) std::memcpy(p->buf, m->bytes.data(), m->bytes.size());
        p->request->bytes = m->bytes.size();
        p->request->state = TransportRequest::State::Done;
      }
      box.erase(m);
      p = posted.erase(p);
      any = true;
    }
    return any;
  }
};

class FabricTransport final : public Transport {
 public:
  FabricTransport(Fabric& fabric, int rank)
      : fabric_(fabric), rank_(rank), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override {
    return static_cast<int>(fabric_.inbox.size());
  }
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t len) override {
    const auto* b = static_cast<const std::byte*>(buf);
    fabric_.inbox[static_cast<std::size_t>(peer)].push_back(
        {rank_, tag, std::vector<std::byte>(b, b + len)});
    ++fabric_.sends[static_cast<std::size_t>(rank_)];
    auto r = std::make_shared<TransportRequest>();
    r->state = TransportRequest::State::Done;  // eager: the bytes were copied
    return r;
  }
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t len) override {
    auto r = std::make_shared<TransportRequest>();
    fabric_.waiting[static_cast<std::size_t>(rank_)].push_back({peer, tag, buf, len, r});
    return r;
  }
  void withdraw(std::span<const RequestPtr> /*requests*/,
                std::chrono::milliseconds /*budget*/) override {}
  bool progress() override { return fabric_.match(rank_); }
  [[nodiscard]] int event_fd() const noexcept override { return fd_.get(); }
  bool arm() override { return true; }
  void check_peers() override {}
  [[nodiscard]] const std::string& peer_lost(int /*peer*/) const override { return none_; }

 private:
  Fabric& fabric_;
  int rank_;
  Fd fd_;
  std::string none_;
};

struct Outcome {
  std::vector<std::vector<float>> out;       // per rank
  std::vector<std::optional<Error>> errors;  // per rank
  std::vector<int> sends;                    // messages per rank
};

// Each rank allreduces (sum) counts[r] floats, value r + 1 + i / 8 at element i, through
// recursive doubling, as the communicator builds it (fingerprint included).
Outcome run(const std::vector<std::size_t>& counts) {
  const int p = static_cast<int>(counts.size());
  Fabric fabric(p);
  std::vector<std::unique_ptr<FabricTransport>> transports;
  std::vector<std::unique_ptr<RecursiveDoublingAllreduce>> ops;
  Outcome o;
  o.out.resize(static_cast<std::size_t>(p));
  o.errors.resize(static_cast<std::size_t>(p));
  std::vector<std::vector<float>> in(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    transports.push_back(std::make_unique<FabricTransport>(fabric, r));
    in[ur].resize(counts[ur]);
    for (std::size_t i = 0; i < counts[ur]; ++i) {
      in[ur][i] = static_cast<float>(r + 1) + static_cast<float>(i % 64) / 8.0F;
    }
    o.out[ur].assign(counts[ur], -1.0F);
    auto group = std::make_shared<Group>();
    group->rank = r;
    for (int w = 0; w < p; ++w) group->world_ranks.push_back(w);
    ops.push_back(std::make_unique<RecursiveDoublingAllreduce>(
        OpContext{group, 0, nullptr},
        ReduceBuffers{in[ur].data(), o.out[ur].data(), counts[ur], DType::F32, ReduceOp::Sum}));
    Fingerprint f;
    f.kind = Fingerprint::Kind::Allreduce;
    f.count = counts[ur];
    f.dtype = static_cast<std::uint8_t>(DType::F32);
    f.op = static_cast<std::uint8_t>(ReduceOp::Sum);
    f.algorithm = 2;
    ops.back()->set_fingerprint(f);
  }
  std::vector<bool> finished(static_cast<std::size_t>(p), false);
  for (int round = 0; round < 1000; ++round) {
    bool all = true;
    for (int r = 0; r < p; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (finished[ur]) continue;
      transports[ur]->progress();
      try {
        finished[ur] = ops[ur]->advance(*transports[ur]);
      } catch (const Error& e) {
        o.errors[ur] = e;
        finished[ur] = true;
      }
      all = all && finished[ur];
    }
    if (all) break;
  }
  for (int r = 0; r < p; ++r) EXPECT_TRUE(finished[static_cast<std::size_t>(r)]) << r;
  o.sends = fabric.sends;
  return o;
}

void expect_sums(const Outcome& o, std::size_t count) {
  const auto p = o.out.size();
  for (std::size_t r = 0; r < p; ++r) {
    ASSERT_FALSE(o.errors[r].has_value()) << o.errors[r]->what();
    for (std::size_t i = 0; i < count; ++i) {
      double want = 0;  // exact in float: small multiples of 1/8
      for (std::size_t q = 0; q < p; ++q) want += static_cast<double>(q + 1) + (i % 64) / 8.0;
      ASSERT_EQ(o.out[r][i], static_cast<float>(want)) << "rank " << r << " element " << i;
    }
  }
}

constexpr std::size_t kMaxFramedFloats = CollectiveOp::kMaxFramedPayload / sizeof(float);

TEST(FramedMessages, TwoRanksSendOneMessageEachForAShortVector) {
  for (const std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{1024}, kMaxFramedFloats}) {
    const Outcome o = run({count, count});
    expect_sums(o, count);
    EXPECT_EQ(o.sends, (std::vector<int>{1, 1})) << count << " floats";
  }
}

TEST(FramedMessages, AVectorOverTheFrameTakesAHeaderAndADataMessage) {
  const std::size_t count = kMaxFramedFloats + 1;
  const Outcome o = run({count, count});
  expect_sums(o, count);
  EXPECT_EQ(o.sends, (std::vector<int>{2, 2}));
}

TEST(FramedMessages, FourRanksFrameTheFirstStepOnly) {
  // Step 1 pairs 0-1 and 2-3 (framed), step 2 pairs 0-2 and 1-3 (a bare fingerprint up front,
  // then the data), and ring neighbours that are not partners (1-2, 3-0) exchange bare
  // fingerprints both ways: 4 messages per rank, where unframed it was 5.
  const Outcome o = run({100, 100, 100, 100});
  expect_sums(o, 100);
  EXPECT_EQ(o.sends, (std::vector<int>{4, 4, 4, 4}));
}

TEST(FramedMessages, ThreeRanksFoldAndDoNotFrame) {
  const Outcome o = run({100, 100, 100});
  expect_sums(o, 100);
}

TEST(FramedMessages, CountsThatDifferAreAMismatchNamingBothSides) {
  // Both frame, with payloads of different lengths; then one frames and the other (over the
  // frame) sends a bare header: each side reads the other's fingerprint.
  for (const auto& counts :
       {std::vector<std::size_t>{64, 128}, std::vector<std::size_t>{16, kMaxFramedFloats + 16}}) {
    const Outcome o = run(counts);
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(o.errors[r].has_value()) << "rank " << r;
      EXPECT_EQ(o.errors[r]->code(), ErrorCode::Mismatch) << o.errors[r]->what();
      const std::string what = o.errors[r]->what();
      EXPECT_NE(what.find("rank " + std::to_string(1 - r) + " called allreduce #0 (f32 x " +
                          std::to_string(counts[1 - r])),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("this rank called allreduce #0 (f32 x " + std::to_string(counts[r])),
                std::string::npos)
          << what;
    }
  }
}

}  // namespace
}  // namespace strait::comm
