/// \file
/// PrefixStore: a view of another Store whose keys live under "prefix/", so that sub-communicators
/// (and successive jobs phases) share one TcpStore without their keys colliding. PrefixStores nest:
/// PrefixStore("b", PrefixStore("a", s)) uses keys "a/b/...".
///
/// Lifetime: the underlying store must outlive the PrefixStore.
/// Thread-safety: as the underlying store; the prefix is immutable.
/// Errors: InvalidArgument for an empty prefix or key; otherwise those of the underlying store,
/// whose messages name the full keys (prefix included).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/bootstrap/store.h"
#include "core/error.h"
#include "core/export.h"

namespace strait::comm {

/// A view of `store` whose keys live under "prefix/" (see the file comment).
class STRAIT_API PrefixStore final : public Store {
 public:
  /// Keys go to `store` as "prefix/key"; `store` must outlive this view. Errors: InvalidArgument
  /// for an empty prefix.
  PrefixStore(std::string prefix, Store& store) : prefix_(std::move(prefix)), store_(store) {
    if (prefix_.empty()) {
      throw Error(ErrorCode::InvalidArgument, "PrefixStore needs a non-empty prefix");
    }
  }

  /// The text form, set(key, std::string).
  using Store::set;
  void set(const std::string& key, const Bytes& value) override { store_.set(full(key), value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return store_.get(full(key), timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_.add(full(key), delta);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full_keys;
    full_keys.reserve(keys.size());
    for (const std::string& key : keys) full_keys.push_back(full(key));
    store_.wait(full_keys, timeout);
  }

  /// The prefix, without the trailing '/'.
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }

 private:
  [[nodiscard]] std::string full(const std::string& key) const {
    // Checked here: "prefix/" would otherwise pass the underlying store's empty-key check.
    if (key.empty()) throw Error(ErrorCode::InvalidArgument, "empty store key: keys need a byte");
    return prefix_ + "/" + key;
  }

  std::string prefix_;
  Store& store_;
};

}  // namespace strait::comm
