#include "comm/algorithms/collective_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "comm/algorithms/local_mailbox.h"
#include "core/error.h"

namespace strait::comm {
namespace {

std::string at_step(int step) {
  if (step == kHeaderStep) return " (the operation's header)";
  return step < 0 ? std::string() : fmt::format(" at step {}", step);
}

// Algorithms frame only what fits one frame (CollectiveOp::frame_first_exchange_with).
void check_framed_length(std::size_t len) {
  if (len > CollectiveOp::kMaxFramedPayload) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("a framed message of {} bytes (at most {})",
                                                        len, CollectiveOp::kMaxFramedPayload));
  }
}

}  // namespace

std::string Group::describe_rank(int group_rank) const {
  const int world = world_ranks.at(static_cast<std::size_t>(group_rank));
  if (comm_id == 0) return fmt::format("rank {}", group_rank);
  return fmt::format("rank {} (world rank {})", group_rank, world);
}

CollectiveOp::CollectiveOp(OpContext ctx)
    : group_(std::move(ctx.group)), seq_(ctx.seq), bytes_sent_(ctx.bytes_sent) {}

RequestPtr CollectiveOp::send_to(Transport& t, int peer, int step, const void* buf,
                                 std::size_t len) {
  if (peer == framed_peer_ && !framed_sent_) return post_framed_send(t, peer, step, buf, len);
  exchange_fingerprint(t, peer, false);
  return post_send(t, peer, collective_tag(group_->comm_id, group_->rank, seq_, step), buf, len,
                   step);
}

RequestPtr CollectiveOp::recv_from(Transport& t, int peer, int step, void* buf, std::size_t len) {
  if (peer == framed_peer_ && !framed_received_) return post_framed_recv(t, peer, step, buf, len);
  exchange_fingerprint(t, peer, true);
  return post_recv(t, peer, collective_tag(group_->comm_id, peer, seq_, step), buf, len, step);
}

RequestPtr CollectiveOp::recv_from(Transport& t, int peer, int step, void* buf, std::size_t len,
                                   const ReduceOnArrival& how) {
  if (peer == framed_peer_ && !framed_received_) return post_framed_recv(t, peer, step, buf, len);
  exchange_fingerprint(t, peer, true);
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  auto req =
      t.irecv_reduce(world, collective_tag(group_->comm_id, peer, seq_, step), buf, len, how);
  posted_.push_back(Posted{req, peer, step, true, len});
  return req;
}

Fingerprint CollectiveOp::header_for(int peer, bool from_peer) const {
  Fingerprint f = *fingerprint_;
  if (!pair_send_.empty()) {
    const auto j = static_cast<std::size_t>(peer);
    f.count = from_peer ? pair_recv_.at(j) : pair_send_.at(j);
    f.counts = from_peer ? pair_send_.at(j) : pair_recv_.at(j);
  }
  return f;
}

void CollectiveOp::exchange_fingerprint(Transport& t, int peer, bool is_recv) {
  if (!fingerprint_) return;
  if (both_ways_) {
    exchange_one_way(t, peer, true);
    exchange_one_way(t, peer, false);
  } else {
    exchange_one_way(t, peer, is_recv);
  }
}

void CollectiveOp::exchange_one_way(Transport& t, int peer, bool is_recv) {
  auto& done = is_recv ? header_received_from_ : header_sent_to_;
  if (std::find(done.begin(), done.end(), peer) != done.end()) return;
  done.push_back(peer);
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  const int src = is_recv ? peer : group_->rank;
  const Tag tag = collective_tag(group_->comm_id, src, seq_, kHeaderStep);
  constexpr std::size_t kBytes = sizeof(Fingerprint);
  // Posted ahead of the data, so all_done() checks it first when both have arrived. Not counted
  // in bytes_sent_ (the statistics are payload bytes).
  if (is_recv) {
    // Room for a framed message too: a peer that frames where this rank does not (it runs a
    // short-vector algorithm on another count) still arrives whole, and its fingerprint says how.
    auto theirs = frame_buffer();
    RequestPtr req = t.irecv(world, tag, theirs.get(), kFramedBytes);
    const auto* header = reinterpret_cast<const Fingerprint*>(theirs.get());
    posted_.push_back(Posted{req, peer, kHeaderStep, true, kBytes, header});
    req->keep_alive = std::move(theirs);
  } else {
    // One header for every peer, unless it depends on the peer (set_pair_counts).
    auto mine = pair_send_.empty() ? fingerprint_
                                   : std::make_shared<const Fingerprint>(header_for(peer, false));
    RequestPtr req = t.isend(world, tag, mine.get(), kBytes);
    posted_.push_back(Posted{req, peer, kHeaderStep, false, kBytes, mine.get()});
    req->keep_alive = std::move(mine);
  }
}

RequestPtr CollectiveOp::post_framed_send(Transport& t, int peer, int step, const void* buf,
                                          std::size_t len) {
  check_framed_length(len);
  framed_sent_ = true;
  constexpr std::size_t kHeader = sizeof(Fingerprint);
  auto frame = frame_buffer();
  const Fingerprint mine = header_for(peer, false);
  std::memcpy(frame.get(), &mine, kHeader);
  if (len != 0) std::memcpy(frame.get() + kHeader, buf, len);
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  const Tag tag = collective_tag(group_->comm_id, group_->rank, seq_, kHeaderStep);
  auto req = t.isend(world, tag, frame.get(), kHeader + len);
  req->keep_alive = std::move(frame);
  if (bytes_sent_ != nullptr) bytes_sent_->fetch_add(len, std::memory_order_relaxed);
  posted_.push_back(Posted{req, peer, step, false, len});
  return req;
}

RequestPtr CollectiveOp::post_framed_recv(Transport& t, int peer, int step, void* buf,
                                          std::size_t len) {
  check_framed_length(len);
  framed_received_ = true;
  // Room for any framed message, so that a peer which called the operation with another count
  // still arrives whole and its fingerprint names the difference.
  auto frame = frame_buffer();
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  const Tag tag = collective_tag(group_->comm_id, peer, seq_, kHeaderStep);
  auto req = t.irecv(world, tag, frame.get(), kFramedBytes);
  const auto* header = reinterpret_cast<const Fingerprint*>(frame.get());
  req->keep_alive = std::move(frame);
  posted_.push_back(Posted{req, peer, step, true, len, header, true, buf});
  return req;
}

void CollectiveOp::check_header(const Posted& p) const {
  // A bare fingerprint, or one framing p.bytes of payload.
  const std::size_t length = sizeof(Fingerprint) + (p.framed ? p.bytes : 0);
  const Fingerprint expected = header_for(p.peer, true);
  const bool readable = p.request->bytes >= sizeof(Fingerprint);
  if (readable && *p.header == expected && p.request->bytes == length) return;
  if (!readable || *p.header == expected) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("{} sent an operation header of {} bytes, not {}: are all ranks "
                            "running the same strait build?",
                            group_->describe_rank(p.peer), p.request->bytes, length));
  }
  const std::string peer = group_->describe_rank(p.peer);
  Fingerprint same_counts = *p.header;
  same_counts.count = expected.count;
  same_counts.counts = expected.counts;
  if (!pair_send_.empty() && same_counts == expected) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("{} would send this rank {} elements and receive {} from it, where "
                            "this rank's recv_counts[{}] is {} and its send_counts[{}] is {}: "
                            "rank i's send_counts[j] must equal rank j's recv_counts[i]",
                            peer, p.header->count, p.header->counts, p.peer, expected.count, p.peer,
                            expected.counts));
  }
  const Fingerprint mine = pair_send_.empty() ? *fingerprint_ : header_for(p.peer, false);
  throw mismatch_error(*group_, p.peer, *p.header, mine);
}

Error mismatch_error(const Group& group, int peer, const Fingerprint& theirs,
                     const Fingerprint& mine) {
  return Error(ErrorCode::Mismatch,
               fmt::format("{} called {} where this rank called {}: every rank must call the "
                           "same operations, with the same counts, dtypes, ops and roots, in "
                           "the same order",
                           group.describe_rank(peer), theirs.describe(), mine.describe()));
}

RequestPtr CollectiveOp::post_send(Transport& t, int peer, Tag tag, const void* buf,
                                   std::size_t len, int step) {
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  auto req = t.isend(world, tag, buf, len);
  if (bytes_sent_ != nullptr) bytes_sent_->fetch_add(len, std::memory_order_relaxed);
  posted_.push_back(Posted{req, peer, step, false, len});
  return req;
}

RequestPtr CollectiveOp::post_recv(Transport& t, int peer, Tag tag, void* buf, std::size_t len,
                                   int step) {
  const int world = group_->world_ranks.at(static_cast<std::size_t>(peer));
  auto req = t.irecv(world, tag, buf, len);
  posted_.push_back(Posted{req, peer, step, true, len});
  return req;
}

RequestPtr CollectiveOp::post_recv_any(Transport& t, Tag tag, Tag mask, void* buf,
                                       std::size_t len) {
  auto req = t.irecv_any(tag, mask, buf, len);
  posted_.push_back(Posted{req, kAnyPeer, -1, true, len});
  return req;
}

std::string CollectiveOp::describe_peer(int peer) const {
  return peer == kAnyPeer ? std::string("any rank") : group_->describe_rank(peer);
}

void CollectiveOp::check_arrived_headers() const {
  for (const auto& p : posted_) {
    if (p.is_recv && p.header != nullptr && p.request->state == TransportRequest::State::Done) {
      check_header(p);
    }
  }
}

void CollectiveOp::settle_headers(Transport& t) const {
  // A peer that found a mismatch fails and may close its connections at once; its fingerprint
  // can still be on the way. Give it a moment, so that the error names the cause.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) {
    t.progress();
    check_arrived_headers();
    const bool waiting = std::any_of(posted_.begin(), posted_.end(), [](const Posted& p) {
      return p.is_recv && p.header != nullptr && p.request->pending();
    });
    if (!waiting) return;
  }
}

std::string CollectiveOp::others_lost(Transport& t, int except) const {
  t.check_peers();
  std::string out;
  for (int g = 0; g < group_->size(); ++g) {
    if (g == except || g == group_->rank) continue;
    const auto& lost = t.peer_lost(group_->world_ranks.at(static_cast<std::size_t>(g)));
    if (lost.empty()) continue;
    out += fmt::format("{}{} ({})", out.empty() ? "; also gone: " : ", ", group_->describe_rank(g),
                       lost);
  }
  return out;
}

bool CollectiveOp::all_done(Transport& t) {
  // Fingerprints first: when ranks disagree about the operation, that is the cause to report,
  // not the broken connection that follows once the other side gave up.
  check_arrived_headers();
  for (const auto& p : posted_) {
    const auto& r = *p.request;
    const char* what = p.is_recv ? "receive from" : "send to";
    if (r.state == TransportRequest::State::Failed) {
      if (p.is_recv && r.truncated) {
        throw Error(ErrorCode::Mismatch,
                    fmt::format("{} sent more than the {} bytes this rank expected{}: the ranks "
                                "called this operation with different counts or dtypes",
                                describe_peer(p.peer), p.bytes, at_step(p.step)));
      }
      settle_headers(t);
      throw Error(ErrorCode::PeerLost,
                  fmt::format("{} {} failed{}: {}{}", what, describe_peer(p.peer), at_step(p.step),
                              r.error, others_lost(t, p.peer)));
    }
    if (r.state == TransportRequest::State::Done && p.is_recv && p.header != nullptr) {
      // Checked by check_arrived_headers() above; runs once, as done entries are dropped below.
      if (p.framed && p.bytes != 0) {
        std::memcpy(p.payload, reinterpret_cast<const std::byte*>(p.header) + sizeof(Fingerprint),
                    p.bytes);
      }
      continue;
    }
    if (r.state == TransportRequest::State::Done && p.is_recv && r.bytes != p.bytes) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("{} sent {} bytes where this rank expected {}{}: the ranks called "
                              "this operation with different counts or dtypes",
                              describe_peer(p.peer), r.bytes, p.bytes, at_step(p.step)));
    }
    if (r.state == TransportRequest::State::Pending && p.peer != kAnyPeer) {
      // A peer in the shared-memory mailbox with another operation never sends: its
      // announcement says so (comm/algorithms/local_mailbox.h).
      if (group_->mailbox && fingerprint_ && announcement_) {
        if (auto d = group_->mailbox->disagreeing(p.peer, *fingerprint_, *announcement_)) {
          throw mismatch_error(*group_, p.peer, *d, *fingerprint_);
        }
      }
      const int world = group_->world_ranks.at(static_cast<std::size_t>(p.peer));
      if (const auto& lost = t.peer_lost(world); !lost.empty()) {
        settle_headers(t);
        throw Error(ErrorCode::PeerLost,
                    fmt::format("{} {} cannot finish{}: {}{}; this rank was still waiting for {}",
                                what, describe_peer(p.peer), at_step(p.step), lost,
                                others_lost(t, p.peer), waiting_for()));
      }
    }
  }
  std::erase_if(posted_, [](const Posted& p) { return !p.request->pending(); });
  return posted_.empty();
}

void CollectiveOp::cancel(Transport& transport) {
  // The caller frees its buffers once the error is reported: the transport must let go of them
  // first. A peer that failed too is progressing its side, so matched transfers finish quickly.
  constexpr std::chrono::milliseconds kBudget{200};
  std::vector<RequestPtr> pending;
  for (const auto& p : posted_) {
    if (p.request->pending()) pending.push_back(p.request);
  }
  transport.withdraw(pending, kBudget);
}

std::string CollectiveOp::waiting_for() const {
  std::string out;
  for (const auto& p : posted_) {
    if (!p.request->pending()) continue;
    if (!out.empty()) out += ", ";
    if (p.header != nullptr) {
      out += fmt::format("{} {}{}", p.is_recv ? "a message from" : "a send to",
                         describe_peer(p.peer), at_step(p.step));
      continue;
    }
    out += fmt::format("{} {} ({} bytes{})", p.is_recv ? "a message from" : "a send to",
                       describe_peer(p.peer), p.bytes, at_step(p.step));
  }
  return out.empty() ? std::string("nothing (it was about to finish)") : out;
}

}  // namespace strait::comm
