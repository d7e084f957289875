// UcxTransport: the host-memory transport, over UCX's UCP tag-matching API (isend / irecv).
//
// UCX picks the wire per peer (shared memory and CMA inside a host, TCP or RDMA between hosts).
// Peers on the same host (same boot id, pid and network namespace) are connected without UCX's
// peer-failure handling, which would restrict UCX to TCP, and are watched through a pidfd
// instead: a local rank that dies is known within milliseconds. Peers on other hosts use
// UCP_ERR_HANDLING_MODE_PEER, and UCX reports their loss through the endpoint error callback.
// STRAIT_UCX_ERR_MODE=peer forces the latter for every peer (e.g. to exercise TCP on one box).
// Unless UCX_TLS is set, CMA is left out: UCX aborts the process when a CMA read from a dead peer
// fails (see the constructor), which would turn one lost rank into a crash of all; large
// collective messages between local ranks take strait's own single copy instead (below). When every
// rank is on this host, UCX gets shared memory only. Sends are eager at every size unless RDMA
// devices are present (the constructor says why). A failed operation's sends are withdrawn
// (withdraw()): the endpoint they wait on is force-closed, and reconnected when the peer is on this
// host.
//
// Streams: with `streams` > 1, every peer on another host gets that many endpoints (UCX's TCP
// transport gives each endpoint its own TCP connection), and each collective message of at least
// kStripeMin bytes to or from it is cut into `streams` near-equal parts sent at once, part i on
// endpoint i with lane i in its tag (comm/transport/tag.h), so one message fills a link that
// polices or paces each flow (a long fat pipe one TCP window cannot fill, per-flow rate limits).
// The parts complete as one request. Peers on this host (shared memory) get one endpoint;
// point-to-point messages are never striped. Every rank must use the same count
// (Communicator::create checks).
//
// Single copy between local ranks: a collective message of at least `single_copy_min` bytes to a
// peer on this host is not copied through UCX's shared-memory FIFO (a copy in, a copy out): the
// sender posts a 32-byte announcement {address, length, token, address of the token's slot} with
// kSingleCopyAnnounceBit in the tag (comm/transport/tag.h); the receiver's receive ignores that
// bit, so it takes the data or the announcement, and on an announcement the receiver copies the
// message straight out of the sender's memory (process_vm_readv, transport/peer_memory.h) into its
// buffer, in pieces of kReadPiece between which UCX progresses, then sends an 8-byte "done" (the
// token; kSingleCopyDoneBit, and the receiver as source: comm/transport/tag.h); the send completes
// on it. UCX's CMA does the same copy but aborts the process when its read of a dead peer fails;
// here a failed read is the peer's loss. Safety:
//   - a dead peer: the read fails (ESRCH, EFAULT) or succeeds from a process that is gone;
//     either way its pidfd, checked after every read, says so, and the receive fails with the
//     same "rank R's process exited" as every other transfer with it;
//   - a withdrawn send (its operation failed; withdraw()): its slot is cleared before withdraw()
//     returns, and the receiver reads the slot after the data: a message whose slot no longer
//     holds its token may have been overwritten and fails the receive instead of landing;
//   - ptrace rules that forbid the read (Yama, seccomp, another uid) are probed at connection:
//     each rank reads a known word of every local peer and publishes what it may read under
//     "<prefix>/single_copy/<rank>"; a pair that may not keeps UCX's path, with one log line.
// Only collective tags take this path (point-to-point tags use every bit), and only to peers on
// this host watched by a pidfd. 0 turns it off (CommOptions::single_copy_min).
//
// Construction is collective over the job: each rank publishes its host identity under
// "<prefix>/host/<rank>", then its worker address and pid under "<prefix>/address/<rank>", and
// connects to every rank (itself included), then publishes what it may read (above).
// Thread-safety: construction on any thread; everything else from the progress engine's thread.
// Errors: Unavailable when UCX cannot start; Timeout when a rank's address never appears.
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/transport/transport.h"
#include "core/fd.h"

namespace strait::comm {

class UcxTransport final : public Transport {
 public:
  // Messages shorter than this go whole: striping them would only add per-message costs.
  static constexpr std::size_t kStripeMin = 64 << 10;
  // A single-copy read is done in pieces of this, so other transfers progress between them.
  static constexpr std::size_t kReadPiece = 2 << 20;
  // irecv_reduce(): an announced message is read in pieces of this into a buffer that stays in
  // this core's cache, and each piece is reduced at once (comm/transport/transport.h).
  static constexpr std::size_t kReducePiece = 256 << 10;
  // The announcement of a single-copy message (see above); addresses are the sender's.
  struct Announcement {
    std::uint64_t address = 0;
    std::uint64_t length = 0;
    std::uint64_t token = 0;
    std::uint64_t slot = 0;    // address of a word that holds `token` while the send is live
    std::uint64_t serial = 0;  // the symmetric buffer holding the message (peer_memory.h), or 0
  };

  // `streams`: 1 .. kMaxLanes connections per peer on another host (see above).
  // `single_copy_min`: collective messages of at least this many bytes to peers on this host take
  // the single-copy path (see above); 0: never. At least sizeof(Announcement) otherwise.
  UcxTransport(Store& store, const std::string& prefix, int rank, int size,
               std::chrono::milliseconds timeout, int streams = 1, std::size_t single_copy_min = 0);
  ~UcxTransport() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t len) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t len) override;
  RequestPtr irecv_any(Tag tag, Tag mask, void* buf, std::size_t len) override;
  // Announced messages (single copy) are reduced as they are read, kReducePiece at a time.
  RequestPtr irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                          const ReduceOnArrival& how) override;
  void withdraw(std::span<const RequestPtr> requests, std::chrono::milliseconds budget) override;
  bool progress() override;
  [[nodiscard]] int event_fd() const noexcept override { return epoll_fd_.get(); }
  bool arm() override;
  void check_peers() override;
  [[nodiscard]] const std::string& peer_lost(int peer) const override;
  [[nodiscard]] bool core_per_local_rank() const noexcept override { return core_per_local_rank_; }
  [[nodiscard]] std::uint64_t single_copy_bytes() const noexcept override {
    return single_copy_bytes_.load(std::memory_order_relaxed);
  }

 private:
  // A posted UCX request, owned by in_flight_.
  struct InFlight {
    UcxTransport* transport = nullptr;
    RequestPtr request;
    void* ucx_request = nullptr;  // null until the post call returns a handle
    bool is_send = false;
    int peer = 0;  // world rank
    // Receives: where the message lands, so that an announcement (single copy) can be read there.
    std::byte* recv_buf = nullptr;
    std::size_t recv_len = 0;
    Tag tag = 0;
    // Posted to match an announcement too (a collective tag): a point-to-point tag may have the
    // announcement's bit as one of its own.
    bool takes_announcement = false;
    // irecv_reduce(): an announced message is reduced as it is read (see read_piece()).
    std::optional<ReduceOnArrival> reduce;
  };
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = 0;
    ucp_ep_h ep = nullptr;                // lane 0
    std::vector<ucp_ep_h> extra_lanes{};  // lanes 1 .. streams-1 (peers on other hosts)
    int lanes = 1;
    bool same_host = false;
    Bytes address;  // its worker's, to reconnect after a forced close (withdraw)
    Fd pidfd;       // same-host peers: readable when the process has exited
    pid_t pid = 0;
    bool single_copy_to = false;    // it reads our large messages from our memory
    bool single_copy_from = false;  // we read its large messages from its memory
    std::string lost;               // non-empty once the peer is known to be gone
    bool waited_for_exit = false;   // failure_cause() waited for its pidfd once
  };

  static void on_send(void* request, ucs_status_t status, void* user_data);
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                      void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  // The constructor's steps: UCX's context, worker and event fd; the peers' endpoints (returns
  // their probe addresses).
  void start_ucx(bool shm_only);
  std::vector<std::uint64_t> connect_peers(Store& store, const std::string& prefix,
                                           const std::string& host, bool force_peer_mode,
                                           std::chrono::milliseconds timeout);
  void connect(Peer& peer);
  void close_endpoints();
  // Force-closes the endpoint to `peer` (UCX then fails every send queued on it) and, for a live
  // peer on this host, connects again.
  void reset_endpoint(Peer& peer, const std::string& why);
  RequestPtr post(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                  std::size_t len, int lane = 0, Tag mask = ~Tag{0},
                  const ReduceOnArrival* reduce = nullptr);
  // A message cut into peer.lanes parts (see above), completing as the request returned.
  RequestPtr post_striped(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                          std::size_t len);
  // Completes a striped message's request once its parts have; true then.
  struct Stripe {
    RequestPtr whole;
    std::vector<RequestPtr> parts;
  };
  static bool settle(Stripe& s);

  // Single copy (see above). A send: its announcement, the receive of its "done", its slot.
  struct SingleCopySend {
    RequestPtr whole;
    RequestPtr announce;
    RequestPtr done;
    std::size_t slot = 0;
    std::uint64_t token = 0;
    std::size_t length = 0;
  };
  // A receive that took an announcement: the part of the message read so far.
  struct PeerReadJob {
    RequestPtr request;
    int peer = 0;
    Tag tag = 0;  // as posted (without the announcement bit)
    std::byte* dst = nullptr;
    std::size_t capacity = 0;
    Announcement msg{};
    std::size_t offset = 0;
    std::optional<ReduceOnArrival> reduce{};  // irecv_reduce(): reduce each piece as it is read
  };
  // Publishes and reads which local peers' memory each rank may read; sets single_copy_*.
  void agree_single_copy(Store& store, const std::string& prefix,
                         const std::vector<std::uint64_t>& probe_addresses,
                         std::chrono::milliseconds timeout);
  RequestPtr post_single_copy(int peer, Tag tag, const void* buf, std::size_t len);
  // Called from the receive callback: queues the read (done in progress(), not in a callback).
  void accept_announcement(InFlight* pending, std::size_t length);
  bool pump_reads();
  // One piece of `job`; true when the job is finished (completed or failed).
  bool read_piece(PeerReadJob& job);
  void fail_read(PeerReadJob& job, std::string why, bool tell_sender);
  void send_done(const PeerReadJob& job);
  // Completes a single-copy send once its parts have; true then (and its slot is released).
  bool settle(SingleCopySend& s);
  void release_slot(std::size_t slot);
  void close_endpoint(ucp_ep_h& ep, unsigned flags, std::vector<void*>& closing);
  // Receives and discards the messages no operation took (teardown; see the definition).
  void drain_unexpected(std::chrono::milliseconds budget);
  void retire(InFlight* done, ucs_status_t status, std::size_t bytes);
  // What a failed transfer with `peer` says: why the peer is gone when it is (see retire()).
  std::string failure_cause(int peer, ucs_status_t status);
  // Records a same-host peer whose pidfd is readable within `wait_ms` as lost; true then.
  bool mark_if_exited(Peer& peer, int wait_ms);

  int rank_;
  int size_;
  std::unique_ptr<ucp_context, void (*)(ucp_context_h)> context_;
  std::unique_ptr<ucp_worker, void (*)(ucp_worker_h)> worker_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::unordered_map<TransportRequest*, std::unique_ptr<InFlight>> in_flight_;
  std::vector<Stripe> stripes_;  // striped messages whose parts are not all complete
  int streams_ = 1;
  Fd epoll_fd_;  // the worker's event fd, for the progress engine to sleep on
  bool core_per_local_rank_ = false;
  std::size_t single_copy_min_ = 0;
  std::vector<SingleCopySend> single_sends_;   // not yet complete
  std::deque<PeerReadJob> reads_;              // announcements taken, not yet read
  std::unique_ptr<std::byte[]> reduce_piece_;  // kReducePiece bytes, for irecv_reduce()
  // Slots of live single-copy sends, read by peers: a deque, so addresses stay put as it grows.
  std::deque<std::atomic<std::uint64_t>> slots_;
  std::vector<std::size_t> free_slots_;
  std::uint64_t next_token_ = 0;
  std::atomic<std::uint64_t> single_copy_bytes_{
      0};  // random start: a stale slot never holds a current token
  // A known word local peers read at connection, to learn whether the kernel lets them.
  static constexpr std::uint64_t kProbeValue = 0x5354524149542121ULL;  // "STRAIT!!"
  std::uint64_t probe_word_ = kProbeValue;
};

}  // namespace strait::comm
