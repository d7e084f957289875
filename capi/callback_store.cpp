#include "capi/callback_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "capi/arguments.h"
#include "capi/results.h"
#include "core/error.h"

namespace strait::capi {

namespace {

using Clock = std::chrono::steady_clock;

// A first get() buffer that holds strait's small values (ids, counters) and UCX addresses of a
// few hundred bytes in one call.
constexpr std::size_t kFirstCapacity = 1024;
// Calls of get() for one value: more than two only when another rank keeps replacing it.
constexpr int kGetAttempts = 4;

// `key "a"`, or `keys "a", "b"` (the first 8 and how many more), for messages.
std::string name_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 8;
  std::string out = keys.size() == 1 ? "key " : "keys ";
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += fmt::format("{}\"{}\"", i == 0 ? "" : ", ", keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

std::string name_key(const std::string& key) {
  return fmt::format("key \"{}\"", key);
}

std::int64_t ms(std::chrono::milliseconds timeout) {
  return std::max<std::int64_t>(0, timeout.count());
}

}  // namespace

CallbackStore::CallbackStore(const straitStore_t& callbacks, const char* function)
    : callbacks_(read_versioned(&callbacks, StructInfo::store(), function)) {
  const auto missing = [&](const char* name) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: the store has no {} callback; set, get and add are required "
                            "(wait is optional)",
                            function, name));
  };
  if (callbacks_.set == nullptr) missing("set");
  if (callbacks_.get == nullptr) missing("get");
  if (callbacks_.add == nullptr) missing("add");
}

void CallbackStore::check(int rc, const char* callback, const std::string& keys,
                          std::chrono::milliseconds timeout) {
  if (rc == straitSuccess) return;
  const std::optional<ErrorCode> code = to_error_code(rc);
  if (!code) {
    throw Error(ErrorCode::Internal,
                fmt::format("the store's {} callback ({}) returned {}, which is no "
                            "straitResult_t: callbacks return 0 or a straitResult_t code",
                            callback, keys, rc));
  }
  if (*code == ErrorCode::Timeout && timeout.count() >= 0) {
    throw Error(ErrorCode::Timeout,
                fmt::format("the store's {} callback did not find {} within {} ms: is every "
                            "rank of the job running and using this store?",
                            callback, keys, timeout.count()));
  }
  throw Error(*code, fmt::format("the store's {} callback ({}) failed with {}", callback, keys,
                                 result_name(rc)));
}

void CallbackStore::set(const std::string& key, const comm::Bytes& value) {
  check(callbacks_.set(callbacks_.userData, key.c_str(), key.size(), value.data(), value.size()),
        "set", name_key(key));
}

comm::Bytes CallbackStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  comm::Bytes value(kFirstCapacity);
  for (int attempt = 0; attempt < kGetAttempts; ++attempt) {
    // The first call waits for the key; later ones find it at once, within what is left.
    const auto left =
        attempt == 0
            ? timeout
            : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::size_t length = 0;
    check(callbacks_.get(callbacks_.userData, key.c_str(), key.size(), ms(left), value.data(),
                         value.size(), &length),
          "get", name_key(key), timeout);
    if (length <= value.size()) {
      value.resize(length);
      return value;
    }
    value.resize(length);
  }
  throw Error(ErrorCode::Internal,
              fmt::format("the store's get callback reported a longer value for key \"{}\" on {} "
                          "calls in a row: does it set *valueLength to the value's full length?",
                          key, kGetAttempts));
}

std::int64_t CallbackStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t result = 0;
  check(callbacks_.add(callbacks_.userData, key.c_str(), key.size(), delta, &result), "add",
        name_key(key));
  return result;
}

void CallbackStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  if (callbacks_.wait != nullptr) {
    std::vector<const char*> pointers;
    std::vector<std::size_t> lengths;
    pointers.reserve(keys.size());
    lengths.reserve(keys.size());
    for (const std::string& key : keys) {
      pointers.push_back(key.c_str());
      lengths.push_back(key.size());
    }
    check(callbacks_.wait(callbacks_.userData, pointers.data(), lengths.data(), keys.size(),
                          ms(timeout)),
          "wait", name_keys(keys), timeout);
    return;
  }
  const auto deadline = Clock::now() + timeout;
  for (const std::string& key : keys) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::size_t length = 0;
    check(
        callbacks_.get(callbacks_.userData, key.c_str(), key.size(), ms(left), nullptr, 0, &length),
        "get", name_key(key), timeout);
  }
}

}  // namespace strait::capi
