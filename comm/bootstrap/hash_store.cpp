#include "comm/bootstrap/hash_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <limits>
#include <string_view>

#include "core/error.h"

namespace strait::comm {
namespace {

void check_key(const std::string& key, const char* op) {
  if (key.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("HashStore::{}: the key is empty: pass a non-empty key", op));
  }
}

void check_timeout(std::chrono::milliseconds timeout, const char* op) {
  if (timeout.count() < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("HashStore::{}: timeout {} ms is negative: pass 0 to poll, or a "
                            "positive deadline",
                            op, timeout.count()));
  }
}

}  // namespace

void HashStore::set(const std::string& key, const Bytes& value) {
  check_key(key, "set");
  {
    const std::lock_guard lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key, "get");
  check_timeout(timeout, "get");
  std::unique_lock lock(mu_);
  wait_locked(lock, {key}, timeout, "get");
  return data_.find(key)->second;
}

std::int64_t HashStore::add(const std::string& key, std::int64_t delta) {
  check_key(key, "add");
  std::int64_t value = 0;
  {
    const std::lock_guard lock(mu_);
    const auto it = data_.find(key);
    if (it != data_.end()) {  // a missing key counts as 0
      const Bytes& stored = it->second;
      const std::string_view text(reinterpret_cast<const char*>(stored.data()), stored.size());
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("HashStore::add: key '{}' holds {} bytes that are not a decimal "
                                "counter: use a separate key for counters",
                                key, stored.size()));
      }
    }
    using Limits = std::numeric_limits<std::int64_t>;
    if ((delta > 0 && value > Limits::max() - delta) ||
        (delta < 0 && value < Limits::min() - delta)) {
      throw Error(
          ErrorCode::InvalidArgument,
          fmt::format("HashStore::add: key '{}' would overflow int64 adding {}", key, delta));
    }
    value += delta;
    const std::string text = std::to_string(value);
    data_[key].assign(text.begin(), text.end());
  }
  cv_.notify_all();
  return value;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& key : keys) check_key(key, "wait");
  check_timeout(timeout, "wait");
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, timeout, "wait");
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                            const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                            const char* op) {
  const auto all_present = [&] {
    for (const std::string& key : keys) {
      if (!data_.contains(key)) return false;
    }
    return true;
  };
  // Saturate: now() + milliseconds::max() would overflow the clock.
  constexpr auto kForever = std::chrono::hours(24 * 365 * 100);
  const auto deadline = std::chrono::steady_clock::now() +
                        (timeout < kForever ? std::chrono::steady_clock::duration(timeout)
                                            : std::chrono::steady_clock::duration(kForever));
  if (cv_.wait_until(lock, deadline, all_present)) return;
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!data_.contains(key)) missing.push_back(key);
  }
  throw Error(ErrorCode::Timeout,
              fmt::format("HashStore::{}: key(s) {} still missing after {} ms: check that the "
                          "rank that sets them runs and uses this store",
                          op, missing, timeout.count()));
}

}  // namespace strait::comm
