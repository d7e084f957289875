// ActivationStore: where a pipeline stage's stashed activations wait between a microbatch's
// forward and its backward, out of the model (activation offload: scheduler/schedule.h's OFFLOAD
// and RELOAD actions, run by scheduler/executor.h).
//
// A stash is an opaque byte range (the model's activation slot, model/transformer.h).
// offload() and reload() only start the copy and return at once; the copy runs on the store's own
// thread (or I/O engine), so it overlaps the caller's compute, and the returned future becomes
// ready when it is done. Keys are the caller's (the executor uses the microbatch index), one stash
// each.
//
// Backends:
// - HostActivationStore ("cpu"): page-aligned host buffers (offload/pinned_buffer.h, locked where
//   RLIMIT_MEMLOCK allows), copied by one worker thread. Buffers are reused: a reloaded key's
//   buffer serves the next offload, so the store holds as many buffers as stashes were out at
//   once. The allocator is a parameter: one PinnedBuffer per block by default, or leases of a
//   PinnedPool (offload/pinned_pool.h, NUMA placement, shared with other users) through
//   pinned_pool_allocator.
// - SwapActivationStore ("nvme"): a SwapStore (offload/swap_store.h): one preallocated, unlinked
//   file in the offload directory, io_uring with O_DIRECT where allowed, xxh3 checksums verified on
//   every read. A stash is swapped out under "act<key>" and erased once it has been read back, so
//   its extent serves the next offload; the file spans the most stashes out at once. The swap
//   store's worker thread runs the transfers in call order.
//
// Thread-safety: offload(), reload() and the accessors are called from one thread at a time (the
// executor's); the futures may be waited for from any thread. The destructor waits for every copy
// that was started, so the caller's byte ranges must outlive the store or their futures.
// Errors: offload() / reload() throw InvalidArgument at once for a misuse (reload of a key that
// holds nothing, a size that differs from the offloaded one, a negative key); a failure of the copy
// itself (no memory, a full disk, an I/O error, a checksum mismatch) is stored in the future and
// thrown by its get().
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string_view>

#include "offload/pinned_pool.h"
#include "offload/swap_store.h"

namespace strait::offload {

class ActivationStore {
 public:
  ActivationStore() = default;
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;
  virtual ~ActivationStore() = default;

  // Starts copying `bytes` out under `key` (>= 0), which must hold nothing. `bytes` must stay valid
  // and unchanged until the future is ready.
  virtual std::future<void> offload(int key, std::span<const std::byte> bytes) = 0;

  // Starts copying the stash held under `key` into `bytes` (the size it was offloaded with); the
  // key holds nothing afterwards. May be called before the key's offload future is ready (the copy
  // back starts after the copy out). `bytes` must stay valid and untouched until the future is
  // ready.
  virtual std::future<void> reload(int key, std::span<std::byte> bytes) = 0;

  // "cpu" or "nvme", for messages.
  [[nodiscard]] virtual std::string_view kind() const noexcept = 0;

  // Bytes the store has allocated for stashes so far (host RAM or file space).
  [[nodiscard]] virtual std::size_t allocated_bytes() const noexcept = 0;
};

// A host memory block for HostActivationStore: `bytes` stays valid as long as `owner` lives.
struct HostBlock {
  std::span<std::byte> bytes;
  std::shared_ptr<void> owner;
};
// Returns a block of at least the given number of bytes; may throw (Io, std::bad_alloc).
using HostAllocator = std::function<HostBlock(std::size_t bytes)>;

// The default HostAllocator: one PinnedBuffer (page-aligned, mlock'ed when allowed) per call.
HostBlock allocate_pinned_block(std::size_t bytes);

// A HostAllocator leasing from `pool` with `placement`: a block goes back to the pool when the
// store lets it go (the lease may outlive the pool object; see PinnedPool).
HostAllocator pinned_pool_allocator(std::shared_ptr<PinnedPool> pool,
                                    Placement placement = Placement::any());

// The "cpu" backend (see above). allocate: where buffers come from (default:
// allocate_pinned_block).
std::unique_ptr<ActivationStore> make_host_activation_store(HostAllocator allocate = {});

// The "nvme" backend (see above). Throws what SwapStore's constructor throws (InvalidArgument for
// a missing or unwritable directory, naming --offload-dir; Io when the file cannot be created).
std::unique_ptr<ActivationStore> make_swap_activation_store(const SwapStoreOptions& options);

}  // namespace strait::offload
