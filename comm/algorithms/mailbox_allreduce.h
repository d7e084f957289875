// Mailbox allreduce: vectors between ranks that all run on this host, through their shared-
// memory slots (comm/algorithms/local_mailbox.h) instead of messages. Every rank writes its input
// and the collective's fingerprint into its slot and publishes them with one release store; then
// it reads every rank's slot, checks every fingerprint against its own (Mismatch otherwise, on
// every rank), and reduces the inputs in rank order 0, 1, ..., P-1 into its output: every rank
// computes the same sums in the same order, so all end bit-identical. Avg: Sum, then * 1/P.
// One synchronisation, no transport, no allocation: the shape of intra-node MPI's shared-memory
// short allreduce (Open MPI's coll/sm "fan-in/fan-out" through a control segment, MPICH's release-
// gather) with every rank reducing for itself, which at a few KiB costs less than a fan-out.
// Bytes written per rank: count * size(dtype), once; read: P - 1 times that.
// Split (3 or more ranks, from kSplitMinWork): each rank reduces only its block (1/P of the
// vector, in rank order) out of every slot, writes it back into its own slot's block (which only it
// reads) and publishes that with a second release store (Slot::reduced); then every rank copies
// block q out of rank q's slot. A second synchronisation buys P - 1 fewer whole-vector reductions
// per rank: with P ranks each reduces (P - 1) / P of a vector instead of P - 1 vectors, which is
// what decides when the ranks outnumber the cores (8 ranks on 2 cores: 8x less reduction work).
// Every block is computed once, so all ranks still end bit-identical. A split call whose vector
// lies in a symmetric buffer (Communicator::alloc) leaves it there and peers reduce it from their
// mappings (Slot::in_place_serial): no copy into the slot, and no further round, since a peer
// reads it only before publishing its reduced block.
// A vector longer than a slot (1 MiB) goes through a slot at a time, each piece a whole call
// (mailbox_pieces).
//
// Two ways to run one call, one protocol (MailboxCall):
//   - MailboxAllreduce, an operation of the progress engine (non-blocking calls, or a blocking
//     one while earlier mailbox calls are still in flight): polled, as the engine polls GPU work,
//     since no event announces a peer's slot;
//   - run_inline(), the blocking call's fast path on the caller's thread (Communicator::run): no
//     operation, no work, no hand-off; a spin on the peers' slots that yields the core when this
//     host has more ranks than cores and, after 2 ms without an answer, sleeps between polls
//     (10 us doubling to 500 us), checks the deadline and the peers' pidfds every kCheckEvery
//     polls, and gives up when the communicator breaks (a heartbeat's PeerLost).
// Errors: Mismatch (a peer's fingerprint differs: another count, dtype, op or collective),
// PeerLost (a peer's process exited), Timeout (a peer never published; it may be stuck, or
// calling an operation that does not go through the mailbox).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithms/allreduce_op.h"
#include "comm/algorithms/local_mailbox.h"
#include "core/error.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

// One call of the protocol. Takes its ticket when constructed (calls are constructed in the
// communicator's order).
class MailboxCall {
 public:
  // `send` may equal `recv`; count * size(dtype) <= LocalMailbox::kPayloadBytes. `recv` null: the
  // slots are not reduced (the caller reads them: box.of(r, ticket()),
  // comm/algorithms/local_copy.h).
  MailboxCall(LocalMailbox& box, const Group& group, const void* send, void* recv,
              std::size_t count, kernels::DType dtype, kernels::ReduceOp op);
  // Writes this rank's slot once the earlier calls have finished on this rank; true once written.
  // `announcement`: the number LocalMailbox::announce gave this call, to name a disagreeing
  // peer's operation in full.
  bool try_post(const Fingerprint& fingerprint, std::optional<std::uint64_t> announcement);
  // After try_post(): true once every rank's slot holds this call, which is then reduced into
  // `recv`. Throws Mismatch when a fingerprint differs.
  bool try_finish();
  // Between 3 or more ranks, vectors from this many bytes times the ranks take the split protocol
  // (above): 32 KiB with 8 ranks, 64 KiB with 4, from where it measured faster (8 ranks: 26 against
  // 34 us at 32 KiB, 0.58 against 2.5 ms at 1 MiB; 4 ranks: 16 against 20 us at 64 KiB).
  static constexpr std::size_t kSplitMinWork = 256 << 10;
  // The vector's bytes that share the ticket's cache line, and up to where polling prefetches the
  // lines after it: 64 - 512 B calls took 0.50 - 0.53 us instead of 0.65 - 0.73, while prefetching
  // 1 - 2 KiB made them slower (1.14 - 2.11 against 1.03 - 1.37 us; machine A, 2 ranks).
  static constexpr std::size_t kTicketLineData = 48;
  static constexpr std::size_t kPrefetchBytes = 512;
  // The group rank whose slot this call waits for (-1: none), and that as words.
  [[nodiscard]] int waiting_on() const noexcept;
  [[nodiscard]] std::uint64_t ticket() const noexcept { return ticket_; }
  [[nodiscard]] std::string waiting_for() const;
  // Rank r's process has exited (the pidfd; a system call), as PeerLost's words, or empty.
  [[nodiscard]] std::string lost(int r) const;
  // Mismatch when the awaited rank's announcement number `index` (LocalMailbox::announce) is
  // another operation: it went through the transport and will never fill its slot.
  void check_announced() const;
  // PeerLost: `lost` (how the awaited rank was lost) and what this call still waited for.
  [[nodiscard]] Error lost_error(const std::string& lost) const;

 private:
  LocalMailbox& box_;
  const Group& group_;
  const void* send_;
  void* recv_;
  std::size_t count_;
  kernels::DType dtype_;
  kernels::ReduceOp op_;
  std::uint64_t ticket_;
  Fingerprint fingerprint_{};  // try_post()'s
  std::optional<std::uint64_t> announcement_;
  bool posted_ = false;
  bool split_ = false;    // the split protocol (above)
  bool reduced_ = false;  // split: this rank's block is reduced and published
  int arrived_ = 0;       // ranks 0 .. arrived_-1 have published this call (split: then its block)

  // While the ticket of `slot` is awaited, asks for the vector's other lines too, so that they
  // cross from the writer's core alongside the ticket's line instead of after it.
  void prefetch_lines(const LocalMailbox::Slot& slot) const noexcept;
  // Split: [first, last) elements of rank r's block.
  [[nodiscard]] std::pair<std::size_t, std::size_t> block(int r) const noexcept;
  // Split: reduces this rank's block out of every slot and publishes it; true once every rank's
  // block has been published and copied into `recv`.
  bool finish_split();
  // The reduction in rank order of elements [first, last) of every slot into `out`.
  void reduce_slots(std::size_t first, std::size_t last, std::byte* out) const;
};

// Before the next call on this rank is taken (the ticket box.taken() will give it), asks for its
// slot's lines that a vector of `bytes` will fill (the ticket's and up to
// MailboxCall::kPrefetchBytes more) for writing. The peers read them two calls ago and are done
// with them (a rank posts only after finishing its previous call), so taking them back from the
// peers' caches can overlap the call's preparation instead of delaying its post. A hint: no
// effect on what any rank reads.
void claim_next_slot(LocalMailbox& box, std::size_t bytes) noexcept;

// One call per slot-sized piece (LocalMailbox::kPayloadBytes) of a vector of `count` elements (at
// least one call), in order, their tickets taken now: a longer vector goes through the mailbox in
// pieces, each a whole protocol.
std::vector<MailboxCall> mailbox_pieces(LocalMailbox& box, const Group& group, const void* send,
                                        void* recv, std::size_t count, kernels::DType dtype,
                                        kernels::ReduceOp op);

class MailboxAllreduce final : public AllreduceOp {
 public:
  // Needs group->mailbox. Buffers are caller-owned and must outlive the operation.
  MailboxAllreduce(OpContext ctx, const ReduceBuffers& b);
  bool advance(Transport& t) override;
  [[nodiscard]] std::string waiting_for() const override;
  [[nodiscard]] bool needs_polling() const noexcept override { return true; }

 private:
  std::vector<MailboxCall> pieces_;  // mailbox_pieces()
  std::size_t next_ = 0;             // the first piece not finished
};

// The blocking fast path: runs the calls (one operation's pieces, in order) on the caller's thread
// until they finish or one fails.
// `broken` is polled between checks: non-empty when the communicator has failed meanwhile (a
// heartbeat's PeerLost), which then ends the call with that error. `describe` formats the
// operation for errors only. `yield`: give the core away between polls (more ranks than cores).
// The timeout runs per piece from its first check (kCheckEvery polls in: microseconds), so that a
// call that finishes at once never reads the clock.
struct InlineWait {
  std::chrono::milliseconds timeout{};
  bool yield = false;
  std::optional<std::uint64_t> announcement;  // this call's (MailboxCall::try_post)
  std::function<std::optional<Error>()> broken;
  std::function<std::string()> describe;
};
void run_inline(std::span<MailboxCall> calls, const Fingerprint& fingerprint,
                const InlineWait& wait);

}  // namespace strait::comm
