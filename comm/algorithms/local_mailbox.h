// LocalMailbox: shared-memory slots through which the ranks of one communicator, all on this host,
// exchange short vectors without the transport: a rank writes its vector and the collective's
// fingerprint into its own slot and publishes them with one release store; every peer reads them
// straight out of that slot (comm/algorithms/mailbox_allreduce.h). The shape of the shared-memory
// "flag + data" mailboxes behind short collectives in intra-node MPI (Open MPI's coll/sm and
// coll/xhc, MPICH's CH4 shm collectives) and of NCCL's LL protocol, without a flag per 8 bytes:
// one cache line carries the ticket, the fingerprint's hash and up to 48 bytes of data.
//
// Each rank owns one segment: a memfd (anonymous: it never has a name to leak, and it goes with the
// last process that maps it, so it cannot outlive the job), mapped read-write by its owner and
// read-only by its peers, which take its file descriptor with pidfd_getfd(2) (the same ptrace
// permission as process_vm_readv: peer_memory.h). A segment holds two slots, used in turn by a
// communicator's mailbox calls (the call's ticket's parity): a rank writes ticket t + 2 only after
// it has finished call t + 1, which needed every peer's t + 1, which every peer published only
// after it had read everything of call t. So no acknowledgement is needed.
//
// Creation is collective over the communicator's ranks (create()). It fails softly: when any rank
// is on another host or network namespace (the WAN testbed's sites talk through their links), may
// not take a peer's descriptor, or cannot map it, every rank learns it through the store and gets
// null, and the communicator runs its collectives over the transport instead.
// Liveness: a pidfd per peer, readable once that process has exited (peer_exited()).
// Thread-safety: slots are written by their owner's calls, which the communicator orders (tickets);
// take_ticket() and finish() are atomic; peer_exited() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithms/fingerprint.h"
#include "comm/bootstrap/store.h"
#include "core/fd.h"

namespace strait::comm {

class LocalMailbox {
  struct Key {  // only create() makes mailboxes
    explicit Key() = default;
  };

 public:
  // The longest vector a slot holds, in bytes.
  static constexpr std::size_t kPayloadBytes = 1 << 20;
  // One call's record: its whole fingerprint (read only to describe a mismatch), then, in the
  // next cache line, its ticket + 1 (0: none yet, published last with release), the hash of its
  // fingerprint (fingerprint_hash: what readers compare) and the vector, whose first 48 bytes share
  // the ticket's cache line.
  struct alignas(64) Slot {
    Fingerprint fingerprint{};
    alignas(64) std::atomic<std::uint64_t> ticket{0};
    std::uint64_t fingerprint_hash = 0;
    std::byte data[kPayloadBytes];  // not initialised: a memfd's pages read as zero until written
    // A split mailbox allreduce's second publication (mailbox_allreduce.h): ticket + 1 once this
    // rank's block of `data` holds its reduction over every rank.
    alignas(64) std::atomic<std::uint64_t> reduced{0};
    // A split call whose vector lies in a symmetric buffer leaves it there: the buffer's serial
    // (comm/transport/peer_memory.h) and the vector's address in this rank's process; `data`
    // then holds only the reduced block. 0: the vector is in `data`. Written before `ticket`, by
    // split calls only (other calls neither write nor read them: this line is far from the
    // ticket's, and touching it cost small calls a cache-line transfer).
    std::uint64_t in_place_serial = 0;
    std::uint64_t in_place_address = 0;
  };
  static_assert(offsetof(Slot, data) == 64 + 16);
  // A seqlock over a fingerprint: odd version while it is rewritten (announce()).
  struct alignas(64) Announcement {
    static constexpr std::size_t kWords = sizeof(Fingerprint) / sizeof(std::uint64_t);
    std::atomic<std::uint64_t> version{0};
    std::atomic<std::uint64_t> index{0};
    std::atomic<std::uint64_t> words[kWords]{};
  };
  static_assert(sizeof(Fingerprint) % sizeof(std::uint64_t) == 0);

  // Collective over the `size` ranks of a communicator, which call it with the same `prefix`
  // (unique to the communicator in `store`). Null on every rank when any rank cannot take part
  // (see above) or `refuse` is non-empty on any rank (why this one will not: links that must be
  // sealed, comm/transport/sealed_transport.h); `why_not` then says why on this rank.
  // Errors: Timeout when a rank's record never appears in the store within `timeout`.
  static std::shared_ptr<LocalMailbox> create(Store& store, const std::string& prefix, int rank,
                                              int size, std::chrono::milliseconds timeout,
                                              const std::string& refuse = {},
                                              std::string* why_not = nullptr);
  LocalMailbox(const Key& key, int rank, int size);
  LocalMailbox(const LocalMailbox&) = delete;
  LocalMailbox& operator=(const LocalMailbox&) = delete;
  ~LocalMailbox();

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(peers_.size()); }

  // The next call's ticket (0, 1, 2, ... in the order of the communicator's calls).
  std::uint64_t take_ticket() noexcept { return next_ticket_.fetch_add(1); }
  // How many tickets have been taken: finished() == taken() when no call is in flight.
  [[nodiscard]] std::uint64_t taken() const noexcept { return next_ticket_.load(); }
  // How many calls, in ticket order, this rank has finished: call t may write its slot once this
  // is t (the calls before it have read what they needed).
  [[nodiscard]] std::uint64_t finished() const noexcept {
    return finished_.load(std::memory_order_acquire);
  }
  void finish(std::uint64_t ticket) noexcept {
    finished_.store(ticket + 1, std::memory_order_release);
  }
  // This rank's slot for `ticket`, and rank `r`'s (read only; `r` may be this rank).
  [[nodiscard]] Slot& mine(std::uint64_t ticket) noexcept { return own_[ticket & 1]; }
  [[nodiscard]] const Slot& of(int r, std::uint64_t ticket) const noexcept {
    return peers_[static_cast<std::size_t>(r)].slots[ticket & 1];
  }
  // The fingerprint of the collective this rank posted last, whatever its algorithm, numbered by
  // the communicator's collectives (0, 1, ...; not the sequence numbers, which creation resets), so
  // that a rank waiting in the mailbox for a peer that called another operation (one that goes
  // through the transport: a longer vector, another kind) learns it and fails with Mismatch
  // instead of waiting out the timeout, and an operation waiting on the transport for a peer in
  // the mailbox does too (CollectiveOp::all_done). A seqlock: announce() returns the number it
  // gave, and its callers serialise it (the communicator calls it under its lock); announced() from
  // any thread.
  std::uint64_t announce(const Fingerprint& fingerprint) noexcept;
  struct Announced {
    std::uint64_t index = 0;
    Fingerprint fingerprint;
  };
  // Rank r's last announcement, or nullopt (none yet, or being rewritten: ask again later).
  [[nodiscard]] std::optional<Announced> announced(int r) const noexcept;
  // Rank r's fingerprint when its announcement number `index` is another operation than `mine`;
  // else nullopt (the same, or not announced yet).
  [[nodiscard]] std::optional<Fingerprint> disagreeing(int r, const Fingerprint& mine,
                                                       std::uint64_t index) const noexcept;

  // True once rank `r`'s process has exited (its pidfd is readable). A system call: call it every
  // millisecond or so, not on every poll.
  [[nodiscard]] bool peer_exited(int r) const noexcept;
  // Rank r's process id (this process's for this rank), for reading its memory
  // (comm/transport/peer_memory.h); check peer_exited() after a read.
  [[nodiscard]] pid_t pid(int r) const noexcept { return peers_[static_cast<std::size_t>(r)].pid; }
  // Rank r's pidfd (-1 for this rank): what comm/symmetric_memory.h takes descriptors through.
  [[nodiscard]] int pidfd(int r) const noexcept {
    const Fd& fd = peers_[static_cast<std::size_t>(r)].pidfd;
    return fd ? fd.get() : -1;
  }

 private:
  struct Mapping {  // one segment mapped into this process
    void* base = nullptr;
    std::size_t length = 0;
  };
  struct Peer {
    const Slot* slots = nullptr;  // its two slots, read only (this rank's: its own mapping)
    const Announcement* announcement = nullptr;
    Mapping mapping;  // empty for this rank
    Fd pidfd;         // empty for this rank
    pid_t pid = 0;
  };
  int rank_;
  Mapping own_mapping_;
  Slot* own_ = nullptr;
  Announcement* own_announcement_ = nullptr;
  std::uint64_t announcements_ = 0;  // written by announce() only
  std::vector<Peer> peers_;
  std::atomic<std::uint64_t> next_ticket_{0};
  std::atomic<std::uint64_t> finished_{0};
};

}  // namespace strait::comm
