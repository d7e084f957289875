#include "comm/bootstrap/hash_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace strait::comm {
namespace {

using std::chrono::milliseconds;

TEST(HashStore, SetThenGetReturnsTheBytes) {
  HashStore store;
  const Bytes value = {0, 1, 2, 255};
  store.set("k", value);
  EXPECT_EQ(store.get("k", milliseconds(0)), value);
  store.set("k", std::string("text"));
  EXPECT_EQ(store.get_string("k", milliseconds(0)), "text");
}

TEST(HashStore, GetBlocksUntilAnotherThreadSets) {
  HashStore store;
  // The writer sets the key only after the reader has announced itself, and then after a pause,
  // so the get below almost always sleeps on the condition variable before the value arrives.
  // (The pause only makes the blocking path likely; correctness asserts nothing about time.)
  std::thread writer([&] {
    store.wait({"reader-waiting"}, milliseconds(10000));
    std::this_thread::sleep_for(milliseconds(20));
    store.set("late", std::string("value"));
  });
  store.set("reader-waiting", std::string("1"));
  EXPECT_EQ(store.get_string("late", milliseconds(10000)), "value");
  writer.join();
}

TEST(HashStore, WaitTimesOutNamingOnlyTheMissingKeys) {
  HashStore store;
  store.set("present", std::string("x"));
  try {
    store.wait({"present", "absent-a", "absent-b"}, milliseconds(20));
    FAIL() << "wait returned although two keys are missing";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("absent-a"), std::string::npos) << msg;
    EXPECT_NE(msg.find("absent-b"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("present"), std::string::npos) << msg;
  }
  try {
    static_cast<void>(store.get("nobody-sets-this", milliseconds(0)));
    FAIL() << "get returned a missing key";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(std::string(e.what()).find("nobody-sets-this"), std::string::npos) << e.what();
  }
}

TEST(HashStore, AddIsAtomicAcrossThreads) {
  HashStore store;
  constexpr int kThreads = 8;
  constexpr int kAdds = 2000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<std::vector<std::int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(store.add("counter", 1));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store.get_string("counter", milliseconds(0)), std::to_string(kThreads * kAdds));
  // Every add returned a distinct value: no two threads saw the same counter.
  std::vector<bool> hit(kThreads * kAdds + 1, false);
  for (const auto& values : seen) {
    for (const std::int64_t v : values) {
      ASSERT_GE(v, 1);
      ASSERT_LE(v, kThreads * kAdds);
      EXPECT_FALSE(hit[static_cast<std::size_t>(v)]) << "value " << v << " returned twice";
      hit[static_cast<std::size_t>(v)] = true;
    }
  }
}

TEST(HashStore, AddReleasesAWaiterAndCountsFromZero) {
  HashStore store;
  std::thread adder([&] { EXPECT_EQ(store.add("arrivals", 5), 5); });
  EXPECT_EQ(store.get_string("arrivals", milliseconds(10000)), "5");
  adder.join();
  EXPECT_EQ(store.add("arrivals", -7), -2);
}

TEST(HashStore, RejectsBadArguments) {
  HashStore store;
  const auto expect_invalid = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  };
  expect_invalid([&] { store.set("", std::string("x")); });
  expect_invalid([&] { static_cast<void>(store.get("", milliseconds(0))); });
  expect_invalid([&] { static_cast<void>(store.get("k", milliseconds(-1))); });
  expect_invalid([&] { store.wait({"a", ""}, milliseconds(0)); });
  store.set("text", std::string("12abc"));
  expect_invalid([&] { static_cast<void>(store.add("text", 1)); });
  store.set("empty", Bytes{});
  expect_invalid([&] { static_cast<void>(store.add("empty", 1)); });
  store.set("big", std::to_string(std::numeric_limits<std::int64_t>::max()));
  expect_invalid([&] { static_cast<void>(store.add("big", 1)); });
  // A failed add leaves the value as it was.
  EXPECT_EQ(store.get_string("big", milliseconds(0)),
            std::to_string(std::numeric_limits<std::int64_t>::max()));
}

}  // namespace
}  // namespace strait::comm
