// CollectiveOp: what every algorithm's state machine shares: its group, its sequence number, the
// tags of its messages, and the checks that turn transport failures into errors that name the
// operation's peer (a lost peer, a message of the wrong size).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/algorithms/fingerprint.h"
#include "comm/algorithms/op_context.h"
#include "comm/algorithms/scratch.h"
#include "comm/transport/op.h"
#include "comm/transport/tag.h"
#include "comm/transport/transport.h"
#include "core/error.h"

namespace strait::comm {

// A communicator as algorithms see it: its id, this process's rank, and world rank of every rank.
class LocalMailbox;
class SymmetricMemory;

struct Group {
  int comm_id = 0;
  int rank = 0;
  std::vector<int> world_ranks;
  // Shared-memory slots for short vectors when every rank is on this host (null otherwise):
  // comm/algorithms/local_mailbox.h, used by comm/algorithms/mailbox_allreduce.h.
  std::shared_ptr<LocalMailbox> mailbox;
  // Buffers every local rank maps (comm/symmetric_memory.h); with the mailbox, else null.
  std::shared_ptr<SymmetricMemory> symmetric;
  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks.size()); }
  // "rank 2" in the world communicator, "rank 2 (world rank 5)" in a sub-communicator.
  [[nodiscard]] std::string describe_rank(int group_rank) const;
};

class RingEngine;

// Mismatch: group rank `peer` called `theirs` where this rank called `mine` (the words every
// fingerprint check uses: message headers, the mailbox's slots and announcements).
Error mismatch_error(const Group& group, int peer, const Fingerprint& theirs,
                     const Fingerprint& mine);

class CollectiveOp : public Op {
  friend class RingEngine;  // posts the ring's messages with this op's tags and fingerprints

 public:
  // ctx.bytes_sent (may be null) is incremented by the size of every message this op sends.
  explicit CollectiveOp(OpContext ctx);
  void cancel(Transport& transport) override;
  [[nodiscard]] std::string waiting_for() const override;
  // Before submission: send_to / recv_from then exchange `fingerprint` with each peer, once per
  // peer (point-to-point operations have none).
  // BothWays (the default): the first message either way with a peer exchanges fingerprints in
  // both directions, so this rank hears from every peer it talks to. Sends are eager and complete
  // without the receiver, so without it a ring rank whose right neighbour never arrived (or died)
  // would wait only on its left one and name the wrong rank; rooted collectives, where data
  // flows one way, would let ranks that disagree about the root all wait, or all send unchecked.
  // ToReceiver: only the receiver checks (one message fewer where data flows one way).
  enum class Exchange : std::uint8_t { ToReceiver, BothWays };
  void set_fingerprint(const Fingerprint& fingerprint, Exchange exchange = Exchange::BothWays) {
    fingerprint_ = std::make_shared<const Fingerprint>(fingerprint);
    both_ways_ = exchange == Exchange::BothWays;
  }
  // The number the communicator's mailbox gave this op's announcement (LocalMailbox::announce):
  // while it waits for a peer, it compares the peer's announcement of the same number.
  void set_announcement(std::uint64_t index) noexcept { announcement_ = index; }
  // alltoall_v, after set_fingerprint: the elements this rank sends to (`send`) and receives from
  // (`recv`) each group rank. The header to peer j then carries count = send[j], counts = recv[j],
  // and the one from j must carry count = recv[j], counts = send[j]: when rank i's send_counts[j]
  // differs from rank j's recv_counts[i] (or the other way), both ranks fail with Mismatch.
  void set_pair_counts(std::vector<std::uint64_t> send, std::vector<std::uint64_t> recv) {
    pair_send_ = std::move(send);
    pair_recv_ = std::move(recv);
  }

  // Short messages carry the fingerprint in front of their payload, in one message on the header
  // tag, instead of in a message of their own: one message each way per exchange instead of two,
  // which is most of a short allreduce's time. kFramedBytes is one eager UCX shared-memory
  // message (see selection.cpp), so a framed message never takes the rendezvous protocol.
  static constexpr std::size_t kFramedBytes = kFrameBufferBytes;
  static constexpr std::size_t kMaxFramedPayload = kFramedBytes - sizeof(Fingerprint);

 protected:
  // Post a message of step `step` to / from group rank `peer` (collective tags, see
  // comm/transport/tag.h).
  RequestPtr send_to(Transport& t, int peer, int step, const void* buf, std::size_t len);
  RequestPtr recv_from(Transport& t, int peer, int step, void* buf, std::size_t len);
  // A receive the transport may reduce on arrival (Transport::irecv_reduce); a framed receive
  // (short messages) never is.
  RequestPtr recv_from(Transport& t, int peer, int step, void* buf, std::size_t len,
                       const ReduceOnArrival& how);
  // Same with an explicit tag (point-to-point operations; step -1: not part of a collective).
  RequestPtr post_send(Transport& t, int peer, Tag tag, const void* buf, std::size_t len,
                       int step = -1);
  RequestPtr post_recv(Transport& t, int peer, Tag tag, void* buf, std::size_t len, int step = -1);
  // A receive from any rank (Transport::irecv_any): tracked as the others, its peer unknown.
  RequestPtr post_recv_any(Transport& t, Tag tag, Tag mask, void* buf, std::size_t len);
  // Posts the fingerprint exchange with `peer` (both ways) now rather than at the first message:
  // an algorithm whose later steps talk to new peers calls it for all of them up front, so a rank
  // whose partner disagrees learns it at once, even when that partner fails at an earlier step.
  void exchange_fingerprints(Transport& t, int peer) {
    exchange_fingerprint(t, peer, false);
    exchange_fingerprint(t, peer, true);
  }
  // Sends this rank's fingerprint to rank + 1 and checks rank - 1's (as the ring does anyway).
  // Algorithms that pair ranks otherwise call it too: ranks that chose different algorithms (other
  // tuning tables) may never talk to each other, but some pair of neighbours then disagrees.
  // After set_fingerprint, before the first message: this op's first send_to(peer) and first
  // recv_from(peer), which the algorithm posts in the same step, carry the fingerprint inside
  // (framed), and the separate exchange with `peer` (exchange_fingerprints, the ring's) is
  // skipped. Both sides must frame, which they do when they run the same algorithm on the same
  // count: a peer that did not frame sends a bare fingerprint, which this side reads and finds
  // different (Mismatch naming both), and a peer that framed where this side did not overflows
  // the bare header this side expects (Mismatch naming the peer). Payloads above
  // kMaxFramedPayload are refused (InvalidArgument: the algorithm must not ask).
  void frame_first_exchange_with(int peer) {
    if (!fingerprint_) return;  // nothing to carry (point-to-point, tests of bare algorithms)
    framed_peer_ = peer;
    header_sent_to_.push_back(peer);
    header_received_from_.push_back(peer);
  }
  void exchange_fingerprints_around_ring(Transport& t) {
    const int p = group_->size();
    if (p < 2) return;
    exchange_fingerprint(t, (group_->rank + 1) % p, false);
    exchange_fingerprint(t, (group_->rank + p - 1) % p, true);
  }
  // True once every posted message has completed. Throws PeerLost when a peer we wait for is
  // gone or its message failed, Mismatch when a message's size is not what this rank expected.
  bool all_done(Transport& t);

  [[nodiscard]] const Group& group() const noexcept { return *group_; }
  [[nodiscard]] std::uint64_t seq() const noexcept { return seq_; }
  // What this op was built from (its parts are built from it too).
  [[nodiscard]] OpContext context() const { return {group_, seq_, bytes_sent_}; }
  [[nodiscard]] std::optional<std::uint64_t> announcement() const noexcept { return announcement_; }
  // set_fingerprint()'s, or null (tests of bare algorithms).
  [[nodiscard]] const Fingerprint* fingerprint() const noexcept { return fingerprint_.get(); }
  // Counts bytes this op moved without a message (the mailbox's slot writes).
  void count_sent(std::size_t bytes) noexcept {
    if (bytes_sent_ != nullptr) bytes_sent_->fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  static constexpr int kAnyPeer = -1;  // Posted::peer of a receive from any rank
  // describe_rank(peer), or "any rank".
  [[nodiscard]] std::string describe_peer(int peer) const;
  struct Posted {
    RequestPtr request;
    int peer = 0;
    int step = 0;
    bool is_recv = false;
    std::size_t bytes = 0;
    const Fingerprint* header = nullptr;  // a fingerprint message (owned by its request)
    // A framed receive: its payload (`bytes` of it, after the header) is copied here on arrival.
    bool framed = false;
    void* payload = nullptr;
  };
  RequestPtr post_framed_send(Transport& t, int peer, int step, const void* buf, std::size_t len);
  RequestPtr post_framed_recv(Transport& t, int peer, int step, void* buf, std::size_t len);
  // Posts the fingerprint exchange with `peer` the first time this op sends to / receives from it.
  void exchange_fingerprint(Transport& t, int peer, bool is_recv);
  void exchange_one_way(Transport& t, int peer, bool is_recv);
  // The fingerprint this rank sends to `peer`, or expects from it.
  [[nodiscard]] Fingerprint header_for(int peer, bool from_peer) const;
  void check_header(const Posted& p) const;
  // Throws Mismatch when a fingerprint that has arrived differs from this rank's.
  void check_arrived_headers() const;
  // Before reporting a lost peer: progress briefly so a fingerprint still in flight can turn the
  // error into the Mismatch that caused it.
  void settle_headers(Transport& t) const;
  // "; also gone: rank 1 (its process exited)" for the group's other lost ranks, or "".
  [[nodiscard]] std::string others_lost(Transport& t, int except) const;

  std::shared_ptr<const Group> group_;
  std::uint64_t seq_;
  std::atomic<std::uint64_t>* bytes_sent_;
  std::vector<Posted> posted_;  // not yet completed
  // Shared with the header sends' requests: UCX may read it after this op has failed and gone
  // (a send queued behind an endpoint's wireup is replayed later).
  std::shared_ptr<const Fingerprint> fingerprint_;
  bool both_ways_ = false;
  std::vector<std::uint64_t> pair_send_, pair_recv_;  // empty unless set_pair_counts()
  std::vector<int> header_sent_to_;                   // group ranks
  std::vector<int> header_received_from_;             // group ranks
  std::optional<std::uint64_t> announcement_;         // set_announcement()
  int framed_peer_ = -1;                              // frame_first_exchange_with()
  bool framed_sent_ = false;
  bool framed_received_ = false;
};

}  // namespace strait::comm
