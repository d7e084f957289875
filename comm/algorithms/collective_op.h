// CollectiveOp: what every algorithm's state machine shares: its group, its sequence number, the
// tags of its messages, and the checks that turn transport failures into errors that name the
// operation's peer (a lost peer, a message of the wrong size).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/progress_engine.h"
#include "comm/tag.h"
#include "comm/transport/transport.h"

namespace strait::comm {

// A communicator as algorithms see it: its id, this process's rank, and world rank of every rank.
struct Group {
  int comm_id = 0;
  int rank = 0;
  std::vector<int> world_ranks;
  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks.size()); }
  // "rank 2" in the world communicator, "rank 2 (world rank 5)" in a sub-communicator.
  [[nodiscard]] std::string describe_rank(int group_rank) const;
};

// What a collective is, as every rank must agree: kind, sequence number, dtype, count, op, root.
// Ranks exchange it (comm/tag.h's header step) ahead of the operation's first message to each
// peer, so ranks that disagree fail with Mismatch naming both sides rather than hang or reduce
// data of the wrong size or type. Sent as raw bytes: all ranks run the same build.
struct Fingerprint {
  enum class Kind : std::uint8_t { Allreduce = 1, Broadcast, Allgather, Barrier };
  std::uint64_t seq = 0;
  std::uint64_t count = 0;  // elements
  std::int32_t root = -1;   // broadcast only
  Kind kind = Kind::Barrier;
  std::uint8_t dtype = 0;  // kernels::DType (allreduce, broadcast, allgather)
  std::uint8_t op = 0;     // kernels::ReduceOp (allreduce)
  // The algorithm and its parameters (comm/algorithms/selection.h; 0: the collective has one).
  // Ranks with different tuning tables then fail with Mismatch rather than hang.
  std::uint8_t algorithm = 0;
  std::uint64_t segment_bytes = 0;
  bool operator==(const Fingerprint&) const = default;
  // "allreduce #3 (f32 x 9, sum, ring@seg=1M)".
  [[nodiscard]] std::string describe() const;
  // ", ring@seg=1M": the algorithm, for describe(); empty when none was selected.
  [[nodiscard]] std::string algorithm_suffix() const;
};
// Sent as raw bytes: no padding, nothing but plain fields.
static_assert(std::is_trivially_copyable_v<Fingerprint> && sizeof(Fingerprint) == 32);

class CollectiveOp : public Op {
 public:
  // `bytes_sent` (may be null) is incremented by the size of every message this op sends.
  CollectiveOp(std::shared_ptr<const Group> group, std::uint64_t seq,
               std::atomic<std::uint64_t>* bytes_sent);
  void cancel(Transport& transport) override;
  [[nodiscard]] std::string waiting_for() const override;
  // Before submission: send_to / recv_from then exchange `fingerprint` with each peer, once per
  // peer and direction (point-to-point operations have none).
  void set_fingerprint(const Fingerprint& fingerprint) {
    fingerprint_ = std::make_shared<const Fingerprint>(fingerprint);
  }

 protected:
  // Post a message of step `step` to / from group rank `peer` (collective tags, see comm/tag.h).
  RequestPtr send_to(Transport& t, int peer, int step, const void* buf, std::size_t len);
  RequestPtr recv_from(Transport& t, int peer, int step, void* buf, std::size_t len);
  // Same with an explicit tag (point-to-point operations; step -1: not part of a collective).
  RequestPtr post_send(Transport& t, int peer, Tag tag, const void* buf, std::size_t len,
                       int step = -1);
  RequestPtr post_recv(Transport& t, int peer, Tag tag, void* buf, std::size_t len, int step = -1);
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

 private:
  struct Posted {
    RequestPtr request;
    int peer = 0;
    int step = 0;
    bool is_recv = false;
    std::size_t bytes = 0;
    const Fingerprint* header = nullptr;  // a fingerprint message (owned by its request)
  };
  // Posts the fingerprint exchange with `peer` the first time this op sends to / receives from it.
  void exchange_fingerprint(Transport& t, int peer, bool is_recv);
  void check_header(const Posted& p) const;
  // Throws Mismatch when a fingerprint that has arrived differs from this rank's.
  void check_arrived_headers() const;
  // Before reporting a lost peer: progress briefly so a fingerprint still in flight can turn the
  // error into the Mismatch that caused it.
  void settle_headers(Transport& t) const;

  std::shared_ptr<const Group> group_;
  std::uint64_t seq_;
  std::atomic<std::uint64_t>* bytes_sent_;
  std::vector<Posted> posted_;  // not yet completed
  // Shared with the header sends' requests: UCX may read it after this op has failed and gone
  // (a send queued behind an endpoint's wireup is replayed later).
  std::shared_ptr<const Fingerprint> fingerprint_;
  std::vector<int> header_sent_to_;        // group ranks
  std::vector<int> header_received_from_;  // group ranks
};

}  // namespace strait::comm
