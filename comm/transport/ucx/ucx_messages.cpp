// UcxTransport's messages: posting sends and receives (whole, striped over lanes), UCX's
// completion callbacks, and withdrawing what a failed operation left posted.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "comm/transport/partition.h"
#include "comm/transport/peer_memory.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"
#include "kernels/reduce.h"

namespace strait::comm {

void UcxTransport::on_send(void* request, ucs_status_t status, void* user_data) {
  auto* pending = static_cast<InFlight*>(user_data);
  ucp_request_free(request);
  pending->transport->retire(pending, status, 0);
}

void UcxTransport::on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                           void* user_data) {
  auto* pending = static_cast<InFlight*>(user_data);
  // `info` lives in the request: read it before the request goes back to UCX's pool (whose free
  // list then overwrites the sender's tag).
  const Tag sender_tag = status == UCS_OK ? info->sender_tag : 0;
  const std::size_t length = status == UCS_OK ? info->length : 0;
  ucp_request_free(request);
  pending->request->sender_tag = sender_tag;
  if (pending->takes_announcement && (sender_tag & kSingleCopyAnnounceBit) != 0) {
    pending->transport->accept_announcement(pending, length);
    return;
  }
  pending->transport->retire(pending, status, length);
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->lost.empty()) {
    peer->lost =
        fmt::format("the connection to rank {} failed: {}", peer->rank, ucs_status_string(status));
  }
}

RequestPtr UcxTransport::post(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                              std::size_t len, int lane, Tag mask, const ReduceOnArrival* reduce) {
  auto req = std::make_shared<TransportRequest>();
  Peer& to = *peers_.at(static_cast<std::size_t>(peer));
  const auto extra = static_cast<std::size_t>(lane - 1);
  ucp_ep_h ep = lane == 0 ? to.ep : extra < to.extra_lanes.size() ? to.extra_lanes[extra] : nullptr;
  if (is_send && ep == nullptr) {
    req->state = TransportRequest::State::Failed;  // closed by withdraw(): peer_lost() says why
    req->error = peers_[static_cast<std::size_t>(peer)]->lost;
    return req;
  }
  auto owned = std::make_unique<InFlight>();
  InFlight* pending = owned.get();
  pending->transport = this;
  pending->request = req;
  // Registered before posting: UCX may run the completion callback inside the post call.
  in_flight_.emplace(req.get(), std::move(owned));
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = pending;
  pending->is_send = is_send;
  pending->peer = peer;
  pending->recv_buf = static_cast<std::byte*>(recv_buf);
  pending->recv_len = len;
  pending->tag = tag;
  pending->takes_announcement = !is_send && (mask & kSingleCopyAnnounceBit) == 0;
  if (reduce != nullptr && pending->takes_announcement) pending->reduce = *reduce;
  void* r = nullptr;
  if (is_send) {
    p.cb.send = &UcxTransport::on_send;
    r = ucp_tag_send_nbx(ep, send_buf, len, tag, &p);
  } else {
    // Receives always complete through the callback, which is where UCX reports the length.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &UcxTransport::on_recv;
    r = ucp_tag_recv_nbx(worker_.get(), recv_buf, len, tag, mask, &p);
  }
  if (!in_flight_.contains(req.get())) return req;  // the callback already ran (and freed r)
  if (r == nullptr) {
    req->state = TransportRequest::State::Done;
    in_flight_.erase(req.get());
  } else if (UCS_PTR_IS_ERR(r)) {
    req->state = TransportRequest::State::Failed;
    req->error = failure_cause(peer, UCS_PTR_STATUS(r));
    in_flight_.erase(req.get());
  } else {
    pending->ucx_request = r;
  }
  return req;
}

RequestPtr UcxTransport::isend(int peer, Tag tag, const void* buf, std::size_t len) {
  const Peer& to = *peers_.at(static_cast<std::size_t>(peer));
  if (to.lanes > 1 && to.ep != nullptr && len >= kStripeMin && is_collective_tag(tag)) {
    return post_striped(true, peer, tag, buf, nullptr, len);
  }
  if (to.single_copy_to && single_copy_min_ != 0 && len >= single_copy_min_ && to.ep != nullptr &&
      is_collective_tag(tag)) {
    return post_single_copy(peer, tag, buf, len);
  }
  return post(true, peer, tag, buf, nullptr, len);
}

RequestPtr UcxTransport::irecv(int peer, Tag tag, void* buf, std::size_t len) {
  // The sender stripes by the same rule (its lanes to us equal ours to it), so a receive of the
  // size it sends expects the same parts.
  const Peer& from = *peers_.at(static_cast<std::size_t>(peer));
  if (from.lanes > 1 && len >= kStripeMin && is_collective_tag(tag)) {
    return post_striped(false, peer, tag, nullptr, buf, len);
  }
  // The sender decides whether a message is announced (its own threshold): take either.
  const Tag mask =
      from.single_copy_from && is_collective_tag(tag) ? ~kSingleCopyAnnounceBit : ~Tag{0};
  return post(false, peer, tag, nullptr, buf, len, 0, mask);
}

RequestPtr UcxTransport::irecv_any(Tag tag, Tag mask, void* buf, std::size_t len) {
  // Point-to-point tags only (never striped or announced). A receive needs no endpoint: this
  // rank's own entry stands in for the unknown peer.
  return post(false, rank(), tag, nullptr, buf, len, 0, mask | kSingleCopyAnnounceBit);
}

RequestPtr UcxTransport::irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                                      const ReduceOnArrival& how) {
  const Peer& from = *peers_.at(static_cast<std::size_t>(peer));
  if (!from.single_copy_from || from.lanes > 1 || !is_collective_tag(tag)) {
    return irecv(peer, tag, buf, len);
  }
  return post(false, peer, tag, nullptr, buf, len, 0, ~kSingleCopyAnnounceBit, &how);
}

RequestPtr UcxTransport::post_striped(bool is_send, int peer, Tag tag, const void* send_buf,
                                      void* recv_buf, std::size_t len) {
  const int lanes = peers_.at(static_cast<std::size_t>(peer))->lanes;
  Stripe s{std::make_shared<TransportRequest>(), {}};
  for (int lane = 0; lane < lanes; ++lane) {
    const Part c = part(len, static_cast<std::size_t>(lanes), static_cast<std::size_t>(lane));
    s.parts.push_back(post(is_send, peer, with_lane(tag, lane),
                           is_send ? static_cast<const std::byte*>(send_buf) + c.offset : nullptr,
                           is_send ? nullptr : static_cast<std::byte*>(recv_buf) + c.offset,
                           c.count, lane));
  }
  RequestPtr whole = s.whole;
  if (!settle(s)) stripes_.push_back(std::move(s));
  return whole;
}

bool UcxTransport::settle(Stripe& s) {
  for (const auto& p : s.parts) {
    if (p->pending()) return false;
  }
  auto& w = *s.whole;
  w.state = TransportRequest::State::Done;
  for (const auto& p : s.parts) {
    w.bytes += p->bytes;
    if (p->state == TransportRequest::State::Failed && w.state != TransportRequest::State::Failed) {
      w.state = TransportRequest::State::Failed;
      w.error = p->error;
    }
    w.truncated = w.truncated || p->truncated;
  }
  return true;
}

void UcxTransport::withdraw(std::span<const RequestPtr> whole_requests,
                            std::chrono::milliseconds budget) {
  // A striped message is withdrawn through its parts, a single-copy send through its
  // announcement (its "done" receive is its own business, below).
  std::vector<RequestPtr> expanded(whole_requests.begin(), whole_requests.end());
  for (const auto& r : whole_requests) {
    for (const auto& s : stripes_) {
      if (s.whole == r) expanded.insert(expanded.end(), s.parts.begin(), s.parts.end());
    }
    for (const auto& s : single_sends_) {
      if (s.whole == r) expanded.push_back(s.announce);
    }
  }
  const std::span<const RequestPtr> requests(expanded);
  const auto find = [this](const RequestPtr& r) {
    return r && r->pending() ? in_flight_.find(r.get()) : in_flight_.end();
  };
  // Unmatched receives go at once (cancelling may complete them inside the call).
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it != in_flight_.end() && !it->second->is_send && it->second->ucx_request != nullptr) {
      ucp_request_cancel(worker_.get(), it->second->ucx_request);
    }
  }
  const auto any_pending = [&] {
    return std::any_of(requests.begin(), requests.end(),
                       [](const RequestPtr& r) { return r && r->pending(); });
  };
  const auto until = std::chrono::steady_clock::now() + budget;
  while (any_pending() && std::chrono::steady_clock::now() < until) {
    if (!progress()) check_peers();
  }
  const auto withdrawn = [&](const RequestPtr& r) {
    return r->pending() && std::find(requests.begin(), requests.end(), r) != requests.end();
  };
  // Single-copy messages: a receive no longer reads (the sender is told it is done), and a
  // send's slot is cleared, so a peer still reading it fails rather than lands what the caller
  // writes there next.
  std::erase_if(reads_, [&](PeerReadJob& job) {
    if (!withdrawn(job.request)) return false;
    job.request->state = TransportRequest::State::Failed;
    job.request->error = "withdrawn: its operation failed";
    if (peers_.at(static_cast<std::size_t>(job.peer))->lost.empty()) send_done(job);
    return true;
  });
  std::erase_if(single_sends_, [&](SingleCopySend& s) {
    if (!withdrawn(s.whole)) return false;
    s.whole->state = TransportRequest::State::Failed;
    s.whole->error = "withdrawn: its operation failed";
    return settle(s);
  });
  // Sends the peer has not taken: UCX would read their buffers whenever it gets to them (a
  // rendezvous the peer matches later, a queue that drains later). Closing the endpoint by force
  // fails them; UCX 1.13 cannot cancel a single send.
  std::vector<int> stuck_peers;
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it == in_flight_.end()) continue;
    if (it->second->is_send) {
      if (std::find(stuck_peers.begin(), stuck_peers.end(), it->second->peer) == stuck_peers.end())
        stuck_peers.push_back(it->second->peer);
    }
  }
  for (const int p : stuck_peers) {
    reset_endpoint(*peers_.at(static_cast<std::size_t>(p)),
                   fmt::format("a send to it was still pending {} ms after its operation failed",
                               budget.count()));
  }
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it == in_flight_.end() || it->second->is_send) continue;
    spdlog::warn(
        "strait: a receive of a failed operation was still arriving {} ms after the failure; "
        "UCX cannot stop it, so its buffer may still be written. Keep the buffers of failed "
        "operations until the communicator is destroyed if a peer may still be sending",
        budget.count());
    break;
  }
}

void UcxTransport::reset_endpoint(Peer& peer, const std::string& why) {
  spdlog::debug("strait: rank {} force-closes its endpoint to rank {}: {}", rank_, peer.rank, why);
  {
    std::vector<void*> closing;
    close_endpoint(peer.ep, UCP_EP_CLOSE_FLAG_FORCE, closing);
    for (auto& ep : peer.extra_lanes) close_endpoint(ep, UCP_EP_CLOSE_FLAG_FORCE, closing);
    peer.extra_lanes.clear();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (void* r : closing) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < until) {
        ucp_worker_progress(worker_.get());
      }
      if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
    }
  }
  // Another host's peer sees its side of the connection fail; it is gone for this transport.
  // A peer on this host (no peer-failure handling, shared memory) does not notice: reconnect.
  if (peer.same_host && peer.lost.empty()) {
    try {
      connect(peer);
      return;
    } catch (const Error& e) {
      peer.lost = fmt::format("rank {}: reconnecting failed: {}", peer.rank, e.message());
      return;
    }
  }
  if (peer.lost.empty()) {
    peer.lost = fmt::format("this rank closed its connection to rank {}: {}", peer.rank, why);
  }
}

}  // namespace strait::comm
