// SymmetricMemory: one communicator's table of symmetric buffers (comm/symmetric_memory.h): this
// rank's, and its mappings of its peers', by allocation id; what Communicator::alloc allocates
// through and what the single-copy collectives (comm/algorithms/local_copy.h) look peers' buffers
// up in. Thread-safety: internally locked (alloc and release on callers' threads, find() from the
// progress engine's).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/symmetric_memory.h"

namespace strait::comm {

class LocalMailbox;

class SymmetricMemory : public std::enable_shared_from_this<SymmetricMemory> {
 public:
  SymmetricMemory(int rank, int size) : rank_(rank), size_(size) {}
  SymmetricMemory(const SymmetricMemory&) = delete;
  SymmetricMemory& operator=(const SymmetricMemory&) = delete;
  ~SymmetricMemory();

  // Collective (see above); `prefix` is unique to the communicator in `store`. Errors:
  // InvalidArgument (bytes 0, or ranks asked for different sizes), Unavailable (memfd, mmap or
  // pidfd_getfd refused), Timeout (a rank never called it within `timeout`).
  SymmetricBuffer allocate(Store& store, const std::string& prefix, const LocalMailbox& box,
                           std::size_t bytes, std::chrono::milliseconds timeout);
  // The id of this rank's symmetric buffer holding [p, p + len), 0 when none does.
  [[nodiscard]] std::uint64_t id_of(const void* p, std::size_t len) const;
  // Where [address, address + len) of rank r's buffer `id` is mapped here; null when it is not.
  [[nodiscard]] const std::byte* find(int r, std::uint64_t id, std::uint64_t address,
                                      std::size_t len) const;
  // Bytes read in place (for tests and stats).
  void count_in_place(std::size_t bytes) noexcept { in_place_.fetch_add(bytes); }
  [[nodiscard]] std::uint64_t read_in_place() const noexcept { return in_place_.load(); }

 private:
  friend class SymmetricBuffer;
  void release(std::uint64_t id) noexcept;
  struct Entry {
    int rank = 0;
    std::uint64_t id = 0;
    std::uint64_t address = 0;  // in the owner's address space
    std::size_t bytes = 0;
    void* mapped = nullptr;    // here
    int fd = -1;               // this rank's memfd (own entry only)
    pid_t pid = 0;             // the owner's process (0: this one)
    std::uint64_t serial = 0;  // the owner's name for it in the transport's table (peer_memory.h)
  };
  // Unregisters `e` from the transport's table and unmaps it.
  static void unmap(const Entry& e) noexcept;
  int rank_;
  int size_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::uint64_t next_id_ = 1;
  std::atomic<std::uint64_t> in_place_{0};
};

}  // namespace strait::comm
