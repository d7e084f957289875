// Single-copy collectives between ranks that all run on this host: broadcast, reduce, gather,
// scatter, allgather(_v), reduce_scatter(_v), alltoall(_v) and allreduce read their peers' buffers
// where they lie (process_vm_readv, comm/transport/peer_memory.h) instead of sending messages
// through the transport. The shape of the CMA-based collectives of shared-memory MPI (Open MPI's
// coll/xhc, MVAPICH2's CMA collectives): addresses are exchanged through shared memory, then every
// rank pulls what it needs.
//
// One call is two rounds of the communicator's shared-memory mailbox (local_mailbox.h), in the
// mailbox's ticket order, so it interleaves with mailbox allreduces like any of them:
//   1. publish: every rank writes its send and receive addresses with the call's fingerprint into
//      its slot (alltoall_v: its send and receive counts too); once every rank's slot holds this
//      call (and every fingerprint agrees, else Mismatch on every rank), each rank reads what it
//      needs straight out of its peers' memory:
//        broadcast       a non-root reads the root's buffer (n bytes)
//        allgather       block q of rank q's send buffer into block q of the output, q != r
//        reduce_scatter  block r of every peer's send buffer, in 256 KiB pieces reduced into the
//                        output as they are read (one read of each operand, rank order r, r+1,
//                        ...; Avg = Sum, then * 1/P)
//        alltoall        block r of rank q's send buffer into block q of the output (in place:
//                        into scratch first, copied over once every peer has read this rank)
//        allreduce       chunk r (of P) reduced as reduce_scatter's block, into the output; then
//                        a round ("reduced"), then chunk q of rank q's output, q != r
//        reduce          as allreduce, but a non-root reduces its chunk into scratch (published
//                        as its receive address) and only the root reads the chunks: the root
//                        moves n + n/P + 2(P-1)n/P bytes instead of the (P+1)n of reducing all
//                        P inputs alone, and the reductions run on all ranks at once
//        gather          the root reads rank q's send buffer into block q of its output
//        scatter         rank q reads block q of the root's send buffer
//        allgather_v, reduce_scatter_v  as allgather and reduce_scatter, blocks at the prefix
//                        sums of the counts (which every rank passes, and the fingerprint checks)
//        alltoall_v      rank r reads its block of rank q's send buffer, at the prefix sum of q's
//                        published send counts; every rank first checks every pair (rank i's
//                        send_counts[j] = rank j's recv_counts[i]) from the published counts, so
//                        that a disagreement is a Mismatch on every rank, not a hang
//      A buffer from Communicator::alloc (comm/symmetric_memory.h) is published with its id, and a
//      peer that maps it reads (and reduces) straight from its mapping: no system call, no
//      pinning; other buffers are read with process_vm_readv.
//   2. done: every rank publishes that it has read; a rank returns only once all have, so no
//      peer still reads a buffer its caller may reuse.
// Bytes copied per rank: what the memory bound counts (docs/commands/bench.md, "The bound"), plus
// the copy of the own block out of place. The kernel still pins the peer's pages on every read
// (what symmetric memory would remove).
// Failures, as the mailbox allreduce's: Mismatch (fingerprints differ, or the awaited peer
// announced another operation), PeerLost (its process exited: the pidfd; or a read failed with
// ESRCH), Timeout from the engine naming the rank awaited (a stopped or absent peer).
// Runs in the progress engine (polled: no event announces a peer's slot).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/mailbox_allreduce.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class LocalCopy final : public CollectiveOp {
 public:
  enum class Kind : std::uint8_t {
    Broadcast,
    Allgather,
    ReduceScatter,
    Alltoall,
    Allreduce,
    Reduce,
    Gather,
    Scatter,
    AllgatherV,
    ReduceScatterV,
    AlltoallV,
  };
  struct Buffers {
    const void* send = nullptr;  // broadcast: the one buffer (recv)
    void* recv = nullptr;
    // Elements per block (allgather, reduce_scatter, alltoall, gather, scatter) or in all.
    std::size_t count = 0;
    kernels::DType dtype = kernels::DType::U8;
    kernels::ReduceOp op = kernels::ReduceOp::Sum;
    int root = 0;
    // The v forms, size() entries each, copied: the blocks (allgather_v, reduce_scatter_v) or the
    // elements sent to each rank (alltoall_v), and those received from each (alltoall_v).
    std::span<const std::size_t> counts{};
    std::span<const std::size_t> recv_counts{};
  };
  // Needs group->mailbox. Buffers are caller-owned and must outlive the operation; in-place
  // layouts as the communicator's (comm/communicator.h). Null where the communicator ignores a
  // buffer (a non-root's recv of reduce and gather, send of scatter).
  LocalCopy(OpContext ctx, Kind kind, const Buffers& b);
  bool advance(Transport& t) override;
  [[nodiscard]] std::string waiting_for() const override;
  [[nodiscard]] bool needs_polling() const noexcept override { return true; }

 private:
  // Polls one round; throws its errors (Mismatch, PeerLost).
  bool round(Transport& t, MailboxCall& call);
  void copy_from_peers();
  // Allreduce, reduce: the peers' reduced chunks, after the "reduced" round.
  void gather_reduced();
  [[nodiscard]] bool is_v() const noexcept;
  // Bytes of this rank's block in `offsets`.
  [[nodiscard]] std::size_t own_block(const std::vector<std::size_t>& offsets) const;
  // The rooted and v forms' reads (local_copy_rooted.cpp).
  void copy_rooted();
  void copy_v();
  // alltoall_v: Mismatch unless every rank's published send counts match its peers' receive
  // counts; the same verdict on every rank.
  void check_pair_counts() const;
  // Bytes of this rank's buffers that peers read: its send and its recv buffers.
  [[nodiscard]] std::size_t send_extent() const;
  [[nodiscard]] std::size_t recv_extent() const;
  // Bytes the peers read from this rank (its "sent" statistic).
  [[nodiscard]] std::size_t read_from_here() const;
  // `len` bytes at address `at` of group rank `r`'s send (or recv) buffer into `into`; PeerLost
  // when it cannot.
  void read(int r, std::uint64_t at, std::byte* into, std::size_t len, bool recv = false) const;
  // Where rank r's bytes [at, at + len) are mapped here (a symmetric buffer), or null.
  [[nodiscard]] const std::byte* mapped(int r, std::uint64_t at, std::size_t len, bool recv) const;
  [[nodiscard]] std::uint64_t published(int r, int word) const;
  // The reduction over all ranks of their send bytes [offset, offset + bytes) into `out`.
  void reduce_block(std::size_t offset, std::byte* out, std::size_t bytes);
  // "; also gone: rank 2's process exited" for every rank but `r` that has exited, or "".
  [[nodiscard]] std::string also_gone(int r, const Transport* t) const;

  Kind kind_;
  Buffers b_;
  std::size_t block_;  // bytes of one block (broadcast, reduce, allreduce: of the buffer)
  // The v forms: byte offsets of each rank's block, size() + 1 entries (alltoall_v: in send);
  // alltoall_v's in recv.
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> recv_offsets_;
  // Published: send, recv, and their symmetric ids (0: ordinary memory); alltoall_v then its
  // send and its receive counts (size() each).
  std::vector<std::uint64_t> words_;
  MailboxCall publish_;
  std::optional<MailboxCall> reduced_;  // allreduce, reduce: every chunk reduced
  MailboxCall done_;
  bool gathered_ = false;
  bool copied_ = false;
  // In-place alltoall(_v)'s staging (then staged_); reduce_scatter's pieces. From scratch_buffer's
  // per-thread cache: a fresh 64 MiB buffer would fault its pages in on every call.
  std::shared_ptr<std::byte[]> scratch_;
  bool staged_ = false;
  // Reduce on a non-root: its reduced chunk, which the root reads.
  std::shared_ptr<std::byte[]> result_;
};

}  // namespace strait::comm
