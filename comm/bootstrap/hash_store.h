// HashStore: an in-memory Store (comm/bootstrap/store.h) shared by the threads of one process.
//
// For single-process tests (one thread per rank) and world size 1, where a TCP rendezvous would be
// pointless. Keys map to byte values in a std::map under one mutex; get() and wait() sleep on a
// condition variable until every key they need exists, or throw Error(Timeout) naming the keys
// still missing once the timeout passes. add() keeps its counter as decimal ASCII text, as
// torch.distributed's stores do, so get() of a counter key returns e.g. "3".
// Thread-safety: every member may be called from any number of threads at once.
// Errors: InvalidArgument for an empty key, a negative timeout, add() on a value that is not a
// decimal counter, or a counter that would overflow int64; Timeout as above.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"

namespace strait::comm {

class HashStore final : public Store {
 public:
  HashStore() = default;

  using Store::set;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  // Blocks with mu_ held (through lock) until all keys exist; throws Timeout naming the missing.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout, const char* op);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes, std::less<>> data_;
};

}  // namespace strait::comm
