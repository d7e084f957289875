// Symmetric memory: buffers that every rank of a communicator on this host maps once, so that the
// single-copy collectives (comm/algorithms/local_copy.h) read and reduce a peer's data straight out
// of their own mapping of it: a memcpy or a reduction at memory speed, with no process_vm_readv,
// no per-call pinning of the peer's pages and no staging. NCCL's ncclMemAlloc + window
// registration and torch's SymmetricMemory in spirit.
//
// Communicator::alloc(bytes) is collective: every rank calls it with the same size, in the same
// order. Each rank creates a memfd (anonymous: it has no name to leak and goes with the last
// process that maps it, so a buffer never outlives the job), maps it read-write, publishes
// "pid fd address bytes serial" in the store; every peer takes the descriptor with pidfd_getfd(2)
// (the permission the mailbox already needed) and maps it read-only. Allocation n gets id n on
// every rank. A single-copy collective publishes, next to each buffer's address, the id of the
// symmetric buffer that holds it (0: ordinary memory); a peer that has that id mapped reads in
// place, any other read falls back to process_vm_readv, so symmetric and ordinary buffers mix
// freely, per rank. The transport does the same for every other algorithm (the ring, the trees):
// a large message between local ranks names its buffer's serial, and a receiver that maps it
// copies from the mapping (comm/transport/peer_memory.h).
// A SymmetricBuffer's destructor unmaps this rank's buffer and its mappings of the peers' buffers
// of the same allocation (not collective: a peer still publishing that id is then read with
// process_vm_readv). A dead peer is still found by the collectives' pidfd checks.
// Thread-safety: a SymmetricBuffer is a value (one owner); the table behind it
// (comm/symmetric_heap.h) is internally locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/export.h"

namespace strait::comm {

class SymmetricMemory;  // comm/symmetric_heap.h

/// A buffer from Communicator::alloc: `size()` bytes at `data()`, page-aligned, zero-filled,
/// readable in place by every local peer (when the communicator's ranks share this host; else
/// ordinary anonymous memory). Move-only; the destructor frees it (not collective).
class STRAIT_API SymmetricBuffer {
 public:
  /// Empty (no memory).
  SymmetricBuffer() = default;
  /// Communicator::alloc's; `owner` null: `data` is an anonymous mapping of its own.
  SymmetricBuffer(std::shared_ptr<SymmetricMemory> owner, std::uint64_t id, void* data,
                  std::size_t bytes) noexcept;
  /// Moves the buffer; `other` is left empty.
  SymmetricBuffer(SymmetricBuffer&& other) noexcept;
  /// Frees this buffer, then moves `other`'s here; `other` is left empty.
  SymmetricBuffer& operator=(SymmetricBuffer&& other) noexcept;
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;
  ~SymmetricBuffer();

  /// The first byte (null when empty).
  [[nodiscard]] void* data() const noexcept { return data_; }
  /// The size in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// True when peers map it (0 when it is ordinary memory).
  [[nodiscard]] bool symmetric() const noexcept { return id_ != 0; }

 private:
  void reset() noexcept;
  std::shared_ptr<SymmetricMemory> owner_;  // null: ordinary memory (munmap)
  std::uint64_t id_ = 0;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace strait::comm
