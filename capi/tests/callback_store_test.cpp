// CallbackStore (capi/callback_store.h): the comm::Store over a straitStore_t's C callbacks,
// tested over C callbacks that forward to an in-memory HashStore and count their calls, and that
// fail on request. Ranks as threads: a Communicator over two CallbackStores bootstraps and reduces.
#include "capi/callback_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace {

using namespace std::chrono_literals;
using strait::Error;
using strait::ErrorCode;
using strait::capi::CallbackStore;
using strait::comm::Bytes;

// What the callbacks forward to, and what they were asked.
// Thread-safe: the callbacks may run on several ranks' threads at once.
struct Backing {
  strait::comm::HashStore store;
  std::atomic<int> gets = 0;
  std::atomic<int> waits = 0;
  std::mutex mutex;
  std::vector<std::size_t> capacities;  // of every get call
  std::atomic<int> fail_with = 0;       // non-zero: every callback returns it
};

Backing& backing(void* user) {
  return *static_cast<Backing*>(user);
}

int set_cb(void* user, const char* key, size_t key_length, const void* value, size_t length) {
  Backing& b = backing(user);
  if (b.fail_with != 0) return b.fail_with;
  const auto* bytes = static_cast<const std::uint8_t*>(value);
  b.store.set(std::string(key, key_length), Bytes(bytes, bytes + length));
  return straitSuccess;
}

int get_cb(void* user, const char* key, size_t key_length, int64_t timeout_ms, void* value,
           size_t capacity, size_t* length) {
  Backing& b = backing(user);
  ++b.gets;
  {
    const std::lock_guard lock(b.mutex);
    b.capacities.push_back(capacity);
  }
  if (b.fail_with != 0) return b.fail_with;
  if (key[key_length] != '\0') return straitInternalError;  // keys are NUL-terminated too
  try {
    const Bytes v =
        b.store.get(std::string(key, key_length), std::chrono::milliseconds(timeout_ms));
    *length = v.size();
    if (capacity > 0) std::memcpy(value, v.data(), std::min(capacity, v.size()));
    return straitSuccess;
  } catch (const Error& e) {
    return e.code() == ErrorCode::Timeout ? straitTimeout : straitInternalError;
  }
}

int add_cb(void* user, const char* key, size_t key_length, int64_t delta, int64_t* result) {
  Backing& b = backing(user);
  if (b.fail_with != 0) return b.fail_with;
  *result = b.store.add(std::string(key, key_length), delta);
  return straitSuccess;
}

int wait_cb(void* user, const char* const* keys, const size_t* key_lengths, size_t count,
            int64_t timeout_ms) {
  Backing& b = backing(user);
  ++b.waits;
  if (b.fail_with != 0) return b.fail_with;
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.emplace_back(keys[i], key_lengths[i]);
  try {
    b.store.wait(names, std::chrono::milliseconds(timeout_ms));
    return straitSuccess;
  } catch (const Error&) {
    return straitTimeout;
  }
}

straitStore_t callbacks(Backing& b, bool with_wait = true) {
  straitStore_t s = STRAIT_STORE_INITIALIZER;
  s.userData = &b;
  s.set = set_cb;
  s.get = get_cb;
  s.add = add_cb;
  s.wait = with_wait ? wait_cb : nullptr;
  return s;
}

Bytes bytes_of(std::size_t n) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 31 + 7);
  return v;
}

TEST(CallbackStore, SetGetAndAddGoThroughTheCallbacks) {
  Backing b;
  CallbackStore store(callbacks(b), "test");
  store.set("k", std::string("value"));
  EXPECT_EQ(store.get_string("k", 1s), "value");
  EXPECT_EQ(b.store.get_string("k", 1s), "value");  // it is in the backing store
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  store.set("empty", Bytes{});
  EXPECT_TRUE(store.get("empty", 1s).empty());
}

TEST(CallbackStore, AValueLargerThanTheFirstBufferIsFetchedAgainWhole) {
  Backing b;
  CallbackStore store(callbacks(b), "test");
  const Bytes big = bytes_of(100'000);
  store.set("big", big);
  EXPECT_EQ(store.get("big", 1s), big);
  ASSERT_EQ(b.capacities.size(), 2U);
  EXPECT_LT(b.capacities[0], big.size());
  EXPECT_EQ(b.capacities[1], big.size());
  // A small one takes one call.
  store.set("small", bytes_of(10));
  b.capacities.clear();
  EXPECT_EQ(store.get("small", 1s), bytes_of(10));
  EXPECT_EQ(b.capacities.size(), 1U);
}

TEST(CallbackStore, GetWaitsForTheKeyAndTimesOutNamingIt) {
  Backing b;
  CallbackStore store(callbacks(b), "test");
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    b.store.set("late", std::string("here"));
  });
  EXPECT_EQ(store.get_string("late", 5s), "here");
  later.join();
  try {
    (void)store.get("never", 30ms);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(std::string(e.what()).find("did not find key \"never\" within 30 ms"),
              std::string::npos)
        << e.what();
  }
}

TEST(CallbackStore, WaitUsesItsCallbackOrElseGetsEachKey) {
  for (const bool with_wait : {true, false}) {
    Backing b;
    CallbackStore store(callbacks(b, with_wait), "test");
    store.set("a", std::string("1"));
    store.set("b", std::string("2"));
    store.wait({"a", "b"}, 1s);
    EXPECT_EQ(b.waits, with_wait ? 1 : 0);
    EXPECT_EQ(b.gets, with_wait ? 0 : 2);
    if (!with_wait) {
      for (const std::size_t c : b.capacities) EXPECT_EQ(c, 0U);  // existence only
    }
    try {
      store.wait({"a", "missing"}, 30ms);
      ADD_FAILURE() << "no timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
  }
}

TEST(CallbackStore, ACallbacksCodeBecomesTheErrorNamingTheCallbackAndKey) {
  Backing b;
  CallbackStore store(callbacks(b), "test");
  const std::pair<int, ErrorCode> cases[] = {{straitPeerLost, ErrorCode::PeerLost},
                                             {straitIoError, ErrorCode::Io},
                                             {straitInvalidArgument, ErrorCode::InvalidArgument},
                                             {12345, ErrorCode::Internal},
                                             {-1, ErrorCode::Internal},
                                             {straitInProgress, ErrorCode::Internal}};
  for (const auto& [rc, code] : cases) {
    b.fail_with = rc;
    try {
      store.set("key1", std::string("x"));
      ADD_FAILURE() << rc;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find("set callback (key \"key1\")"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW((void)store.add("key2", 1), Error);
    EXPECT_THROW((void)store.get("key3", 1s), Error);
  }
}

TEST(CallbackStore, RefusesAStructNotSetUpOrMissingCallbacks) {
  Backing b;
  straitStore_t s = callbacks(b);
  s.magic = 0;
  EXPECT_THROW(CallbackStore(s, "f"), Error);
  s = callbacks(b);
  s.size = sizeof(straitStore_t) + 8;
  EXPECT_THROW(CallbackStore(s, "f"), Error);
  s = callbacks(b);
  s.size = 16;
  EXPECT_THROW(CallbackStore(s, "f"), Error);
  for (int missing = 0; missing < 3; ++missing) {
    s = callbacks(b);
    if (missing == 0) s.set = nullptr;
    if (missing == 1) s.get = nullptr;
    if (missing == 2) s.add = nullptr;
    try {
      CallbackStore store(s, "straitCommInitStore");
      ADD_FAILURE() << "accepted a store without callback " << missing;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("straitCommInitStore: the store has no"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CallbackStore, ACommunicatorBootstrapsOverIt) {
  // Two ranks as threads, each with its own CallbackStore over one backing store.
  Backing b;
  std::vector<double> sums(2);
  std::vector<std::thread> ranks;
  ranks.reserve(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto store = std::make_shared<CallbackStore>(callbacks(b, r == 0), "test");
      auto comm = strait::comm::Communicator::create(store, r, 2);
      const double mine = r + 1.5;
      comm->allreduce(&mine, &sums[static_cast<std::size_t>(r)], 1, strait::kernels::DType::F64,
                      strait::kernels::ReduceOp::Sum);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(sums[0], 4.0);
  EXPECT_EQ(sums[1], 4.0);
}

}  // namespace
