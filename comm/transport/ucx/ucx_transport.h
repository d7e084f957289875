// UcxTransport: the host-memory transport, over UCX's UCP tag-matching API (isend / irecv).
//
// UCX picks the wire per peer (shared memory and CMA inside a host, TCP or RDMA between hosts).
// Peers on the same host (same boot id, pid and network namespace) are connected without UCX's
// peer-failure handling, which would restrict UCX to TCP, and are watched through a pidfd
// instead: a local rank that dies is known within milliseconds. Peers on other hosts use
// UCP_ERR_HANDLING_MODE_PEER, and UCX reports their loss through the endpoint error callback.
// STRAIT_UCX_ERR_MODE=peer forces the latter for every peer (e.g. to exercise TCP on one box).
// Unless UCX_TLS is set, CMA is left out: UCX aborts the process when a CMA read from a dead peer
// fails (see the constructor), which would turn one lost rank into a crash of all. When every rank
// is on this host, UCX gets shared memory only. Sends are
// eager at every size unless RDMA devices are present (the constructor says why).
// A failed operation's sends are withdrawn (withdraw()): the endpoint they wait on is
// force-closed, and reconnected when the peer is on this host.
//
// Streams: with `streams` > 1, every peer on another host gets that many endpoints (UCX's TCP
// transport gives each endpoint its own TCP connection), and each collective message of at least
// kStripeMin bytes to or from it is cut into `streams` near-equal parts sent at once, part i on
// endpoint i with lane i in its tag (comm/tag.h), so one message fills a link that polices or
// paces each flow (a long fat pipe one TCP window cannot fill, per-flow rate limits). The parts
// complete as one request. Peers on this host (shared memory) get one endpoint; point-to-point
// messages are never striped. Every rank must use the same count (Communicator::create checks).
//
// Construction is collective over the job: each rank publishes its host identity under
// "<prefix>/host/<rank>", then its worker address and pid under "<prefix>/address/<rank>", and
// connects to every rank (itself included).
// Thread-safety: construction on any thread; everything else from the progress engine's thread.
// Errors: Unavailable when UCX cannot start; Timeout when a rank's address never appears.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
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

  // `streams`: 1 .. kMaxLanes connections per peer on another host (see above).
  UcxTransport(Store& store, const std::string& prefix, int rank, int size,
               std::chrono::milliseconds timeout, int streams = 1);
  ~UcxTransport() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t len) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t len) override;
  void withdraw(std::span<const RequestPtr> requests, std::chrono::milliseconds budget) override;
  bool progress() override;
  [[nodiscard]] int event_fd() const noexcept override { return epoll_fd_.get(); }
  bool arm() override;
  void check_peers() override;
  [[nodiscard]] const std::string& peer_lost(int peer) const override;
  [[nodiscard]] bool core_per_local_rank() const noexcept override { return core_per_local_rank_; }

 private:
  struct InFlight;  // a posted UCX request, owned by in_flight_
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = 0;
    ucp_ep_h ep = nullptr;                // lane 0
    std::vector<ucp_ep_h> extra_lanes{};  // lanes 1 .. streams-1 (peers on other hosts)
    int lanes = 1;
    bool same_host = false;
    Bytes address;                 // its worker's, to reconnect after a forced close (withdraw)
    Fd pidfd;                      // same-host peers: readable when the process has exited
    std::string lost;              // non-empty once the peer is known to be gone
    bool waited_for_exit = false;  // failure_cause() waited for its pidfd once
  };

  static void on_send(void* request, ucs_status_t status, void* user_data);
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                      void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void connect(Peer& peer);
  void close_endpoints();
  // Force-closes the endpoint to `peer` (UCX then fails every send queued on it) and, for a live
  // peer on this host, connects again.
  void reset_endpoint(Peer& peer, const std::string& why);
  RequestPtr post(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                  std::size_t len, int lane = 0);
  // A message cut into peer.lanes parts (see above), completing as the request returned.
  RequestPtr post_striped(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                          std::size_t len);
  // Completes a striped message's request once its parts have; true then.
  struct Stripe {
    RequestPtr whole;
    std::vector<RequestPtr> parts;
  };
  static bool settle(Stripe& s);
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
};

}  // namespace strait::comm
