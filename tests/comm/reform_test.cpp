// Communicator::reform() and join() (comm/reform.h) with ranks as threads of this process over one
// HashStore: argument errors, generations chained (re-form with everyone, exclude, then admit a
// joiner), the bounded failures (a join nobody admits, a decider that never decides) and
// STRAIT_HEARTBEAT_S's parsing. Killed and stopped processes: communicator_reform_test.cpp.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DType;
using kernels::ReduceOp;

CommOptions fast() {
  CommOptions o;
  o.timeout = 20s;
  return o;
}

// Sum allreduce of i64 identities: each rank contributes id * 1000 + i; the reference is the naive
// sum over `ids`.
void expect_sum(Communicator& comm, int id, const std::vector<int>& ids, const std::string& where) {
  constexpr std::size_t kCount = 1001;
  std::vector<std::int64_t> v(kCount);
  for (std::size_t i = 0; i < kCount; ++i) v[i] = id * 1000 + static_cast<std::int64_t>(i);
  comm.allreduce(v.data(), v.data(), kCount, DType::I64, ReduceOp::Sum);
  for (std::size_t i = 0; i < kCount; ++i) {
    std::int64_t expect = 0;
    for (const int other : ids) expect += other * 1000 + static_cast<std::int64_t>(i);
    ASSERT_EQ(v[i], expect) << where << ", element " << i;
  }
}

// Runs body(r) on threads 0..n-1; failures escaping a thread are reported with its index.
template <class Body>
void on_threads(int n, Body body) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "thread " << r;
  }
}

TEST(Reform, OfASplitCommunicatorOrWithARankOutOfRangeIsInvalidArgument) {
  auto store = std::make_shared<HashStore>();
  on_threads(2, [&](int r) {
    auto world = Communicator::create(store, r, 2, fast());
    auto sub = world->split(0, r);
    try {
      sub->reform();
      ADD_FAILURE() << "a split communicator was re-formed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("split"), std::string::npos) << e.what();
    }
    ReformOptions o;
    o.exclude = {2};
    try {
      world->reform(o);
      ADD_FAILURE() << "exclude = {2} was accepted in a world of 2";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
  });
}

// Generation 0 (3 ranks) -> 1 (everyone) -> 2 (rank 1 excluded: it is told so) -> 3 (a joiner
// admitted after the survivors); each generation's collectives are checked against the naive sum.
TEST(Reform, GenerationsChainThroughShrinkAndGrow) {
  auto store = std::make_shared<HashStore>();
  on_threads(4, [&](int t) {
    if (t == 3) {
      // The joiner: waits until generation 2 exists, then asks to join (admitted at 3).
      while (store->add("strait/reform/latest", 0) < 2) std::this_thread::sleep_for(5ms);
      auto comm = Communicator::join(store, fast());
      EXPECT_EQ(comm->generation(), 3u);
      EXPECT_EQ(comm->rank(), 2);
      EXPECT_EQ(comm->size(), 3);
      EXPECT_EQ(comm->former_ranks(), (std::vector<int>{0, 1, -1}));
      expect_sum(*comm, 100, {0, 2, 100}, "generation 3 (joiner)");
      return;
    }
    auto g0 = Communicator::create(store, t, 3, fast());
    EXPECT_EQ(g0->generation(), 0u);
    EXPECT_EQ(g0->former_ranks(), (std::vector<int>{0, 1, 2}));
    expect_sum(*g0, t, {0, 1, 2}, "generation 0");
    auto g1 = g0->reform();
    EXPECT_EQ(g1->generation(), 1u);
    EXPECT_EQ(g1->rank(), t);
    EXPECT_EQ(g1->size(), 3);
    expect_sum(*g1, t, {0, 1, 2}, "generation 1");
    ReformOptions o;
    o.exclude = {1};
    o.admit_joiners = false;
    if (t == 1) {
      try {
        g1->reform(o);
        ADD_FAILURE() << "the excluded rank was admitted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
        EXPECT_NE(std::string(e.what()).find("left out of generation 2"), std::string::npos)
            << e.what();
      }
      return;
    }
    auto g2 = g1->reform(o);
    EXPECT_EQ(g2->generation(), 2u);
    EXPECT_EQ(g2->size(), 2);
    EXPECT_EQ(g2->rank(), t == 0 ? 0 : 1);
    EXPECT_EQ(g2->former_ranks(), (std::vector<int>{0, 2}));
    expect_sum(*g2, t, {0, 2}, "generation 2");
    // A round boundary: the survivors agree (max) that a joiner waits, then admit it.
    std::int64_t waiting = 0;
    while (waiting == 0) {
      waiting = g2->joiners_waiting();
      g2->allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Max);
      if (waiting == 0) std::this_thread::sleep_for(5ms);
    }
    auto g3 = g2->reform();
    EXPECT_EQ(g3->generation(), 3u);
    EXPECT_EQ(g3->size(), 3);
    expect_sum(*g3, t, {0, 2, 100}, "generation 3");
  });
}

// ReformOptions::joiners_multiple = 2 with 3 joiners waiting: generation 1 admits 2 of them (ranks
// 2 and 3, in ticket order), the third waits and is admitted at generation 2 (rank 4) by a reform
// of multiple 1; a multiple below 1 is InvalidArgument.
TEST(Reform, JoinersAreAdmittedInWholeMultiples) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::uint64_t> joined_at(5, 0);  // generation each joiner (threads 2..4) joined
  std::vector<int> rank_at(5, -1);
  // Generation 1's members: the 4 of them count themselves, then admit whoever still waits.
  const auto generation_1 = [&](Communicator& g1, int id) {
    std::int64_t one = 1;
    g1.allreduce(&one, &one, 1, DType::I64, ReduceOp::Sum);
    EXPECT_EQ(one, 4) << "id " << id;
    std::int64_t waiting = 0;
    while (waiting == 0) {
      waiting = g1.joiners_waiting();
      g1.allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Max);
      if (waiting == 0) std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(waiting, 1);
    auto g2 = g1.reform();
    EXPECT_EQ(g2->generation(), 2U);
    EXPECT_EQ(g2->size(), 5);
    expect_sum(*g2, id, {0, 1, 102, 103, 104}, "generation 2");
  };
  on_threads(5, [&](int t) {
    if (t >= 2) {
      auto comm = Communicator::join(store, fast());
      joined_at[static_cast<std::size_t>(t)] = comm->generation();
      rank_at[static_cast<std::size_t>(t)] = comm->rank();
      if (comm->generation() == 1) {
        generation_1(*comm, 100 + t);
      } else {
        expect_sum(*comm, 100 + t, {0, 1, 102, 103, 104}, "generation 2 (the late joiner)");
      }
      return;
    }
    auto g0 = Communicator::create(store, t, 2, fast());
    ReformOptions bad;
    bad.joiners_multiple = 0;
    try {
      g0->reform(bad);
      ADD_FAILURE() << "joiners_multiple = 0 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("joiners_multiple is 0"), std::string::npos) << e.what();
    }
    // Rank 0 waits until all three hold a ticket; everyone goes by its count.
    std::int64_t waiting = 0;
    while (waiting < 3) {
      waiting = g0->joiners_waiting();
      g0->allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Min);
      if (waiting < 3) std::this_thread::sleep_for(5ms);
    }
    ReformOptions pairs;
    pairs.joiners_multiple = 2;
    auto g1 = g0->reform(pairs);
    EXPECT_EQ(g1->generation(), 1U);
    EXPECT_EQ(g1->size(), 4);
    EXPECT_EQ(g1->former_ranks(), (std::vector<int>{0, 1, -1, -1}));
    generation_1(*g1, t);
  });
  std::vector<int> gen1_ranks;
  int late = 0;
  for (int t = 2; t < 5; ++t) {
    if (joined_at[static_cast<std::size_t>(t)] == 1) {
      gen1_ranks.push_back(rank_at[static_cast<std::size_t>(t)]);
    } else {
      EXPECT_EQ(joined_at[static_cast<std::size_t>(t)], 2U);
      EXPECT_EQ(rank_at[static_cast<std::size_t>(t)], 4);
      ++late;
    }
  }
  std::sort(gen1_ranks.begin(), gen1_ranks.end());
  EXPECT_EQ(gen1_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(late, 1);
}

TEST(Reform, AJoinNoReformAdmitsIsATimeoutThatSaysWhy) {
  auto store = std::make_shared<HashStore>();
  CommOptions o;
  o.timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    Communicator::join(store, o);
    ADD_FAILURE() << "joined without a reform";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("Communicator::reform()"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

// A decider elected but gone before deciding (its election is written into the store by hand, as
// a dead process would have left it): the others fail with Timeout naming it, within the bound.
TEST(Reform, ADeciderThatNeverDecidesIsATimeoutNamingIt) {
  auto store = std::make_shared<HashStore>();
  auto world = Communicator::create(store, 0, 1, fast());
  store->add("strait/reform/1/decider", 1);
  store->set("strait/reform/1/decider_rank", std::string("7"));
  ReformOptions o;
  o.deadline = 200ms;
  try {
    world->reform(o);
    ADD_FAILURE() << "re-formed without a decision";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("decider (rank 7)"), std::string::npos) << e.what();
  }
}

TEST(Reform, HeartbeatIntervalIsReadFromTheEnvironmentAndCheckedThere) {
  ::setenv("STRAIT_HEARTBEAT_S", "0.25", 1);
  EXPECT_EQ(CommOptions::default_heartbeat(), 250ms);
  ::setenv("STRAIT_HEARTBEAT_S", "0", 1);
  EXPECT_EQ(CommOptions::default_heartbeat(), 0ms);
  for (const char* bad : {"-1", "often", "1e9", "0.0001"}) {
    ::setenv("STRAIT_HEARTBEAT_S", bad, 1);
    try {
      (void)CommOptions::default_heartbeat();
      ADD_FAILURE() << "STRAIT_HEARTBEAT_S=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("STRAIT_HEARTBEAT_S"), std::string::npos);
    }
  }
  ::unsetenv("STRAIT_HEARTBEAT_S");
  EXPECT_EQ(CommOptions::default_heartbeat(), 0ms);
}

}  // namespace
}  // namespace strait::comm
