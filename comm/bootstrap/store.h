/// \file
/// Store: the key-value rendezvous that ranks use to find each other (UCX worker addresses, the
/// NCCL unique id, sub-communicator ids), in the spirit of torch.distributed's Store.
///
/// Values are opaque bytes. get() and wait() block until every key exists or the timeout passes,
/// then throw Error(Timeout) naming the keys still missing. add() is an atomic counter (a missing
/// key counts as 0) and returns the new value.
/// Thread-safety: implementations are safe to call from several threads at once.
/// Errors: Timeout; PeerLost when the store server cannot be reached; InvalidArgument for an empty
/// key or a value that is not a counter passed to add().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/export.h"

namespace strait::comm {

/// A store value: opaque bytes.
using Bytes = std::vector<std::uint8_t>;

/// The rendezvous key-value store (see the file comment). Implementations are thread-safe.
class STRAIT_API Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  /// Sets key to value, replacing any earlier value. Errors: InvalidArgument (empty key), PeerLost.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// The key's value, waiting up to `timeout` for it to be set. Errors: Timeout naming the key,
  /// PeerLost.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// Adds delta to the counter at key (a missing key counts as 0) and returns the new value.
  /// Errors: InvalidArgument when the key holds a value that is not a counter, PeerLost.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  /// Blocks until every key exists, up to `timeout`. Errors: Timeout naming the keys still missing,
  /// PeerLost.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  /// Convenience for text values.
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  /// get() as text.
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout) {
    const Bytes b = get(key, timeout);
    return {b.begin(), b.end()};
  }
};

}  // namespace strait::comm
