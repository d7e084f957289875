// UcxTransport's single-copy path between ranks on one host: the sender announces a message,
// the receiver reads it straight from the sender's memory (process_vm_readv; a memcpy from its
// mapping when the message lies in a symmetric buffer it maps) and answers "done".
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "comm/transport/peer_memory.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"
#include "kernels/reduce.h"

namespace strait::comm {

RequestPtr UcxTransport::post_single_copy(int peer, Tag tag, const void* buf, std::size_t len) {
  std::size_t slot = 0;
  if (free_slots_.empty()) {
    slot = slots_.size();
    slots_.emplace_back(0);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  if (++next_token_ == 0) ++next_token_;  // 0 marks a free slot
  const std::uint64_t token = next_token_;
  slots_[slot].store(token, std::memory_order_release);
  auto msg = std::make_shared<Announcement>(
      Announcement{reinterpret_cast<std::uintptr_t>(buf), len, token,
                   reinterpret_cast<std::uintptr_t>(&slots_[slot]), own_serial_of(buf, len)});
  auto done = std::make_shared<std::uint64_t>(0);
  SingleCopySend s;
  s.whole = std::make_shared<TransportRequest>();
  s.slot = slot;
  s.token = token;
  s.length = len;
  // The "done" receive first: it is posted before the receiver can answer.
  s.done = post(false, peer, with_source(tag, peer) | kSingleCopyDoneBit, nullptr, done.get(),
                sizeof *done);
  s.done->keep_alive = std::move(done);
  s.announce = post(true, peer, tag | kSingleCopyAnnounceBit, msg.get(), nullptr, sizeof *msg);
  s.announce->keep_alive = std::move(msg);
  RequestPtr whole = s.whole;
  if (!settle(s)) single_sends_.push_back(std::move(s));
  return whole;
}

bool UcxTransport::settle(SingleCopySend& s) {
  auto& w = *s.whole;
  if (w.pending()) {
    const auto failed = [](const RequestPtr& r) {
      return r->state == TransportRequest::State::Failed;
    };
    if (failed(s.announce) || failed(s.done)) {
      w.state = TransportRequest::State::Failed;
      w.error = failed(s.announce) ? s.announce->error : s.done->error;
    } else if (!s.announce->pending() && !s.done->pending()) {
      const auto* got = static_cast<const std::uint64_t*>(s.done->keep_alive.get());
      if (s.done->bytes == sizeof s.token && *got == s.token) {
        w.state = TransportRequest::State::Done;
        single_copy_bytes_.fetch_add(s.length, std::memory_order_relaxed);
      } else {
        w.state = TransportRequest::State::Failed;
        w.error = fmt::format(
            "the receiver's \"done\" for a single-copy message did not name it "
            "({} bytes): are all ranks running the same strait build?",
            s.done->bytes);
      }
    } else {
      return false;
    }
  }
  // The caller may reuse its buffer from now on: a read that has not checked the slot yet fails.
  release_slot(s.slot);
  if (s.done->pending()) {
    if (const auto it = in_flight_.find(s.done.get());
        it != in_flight_.end() && it->second->ucx_request != nullptr) {
      ucp_request_cancel(worker_.get(), it->second->ucx_request);
    }
  }
  return true;
}

void UcxTransport::release_slot(std::size_t slot) {
  slots_[slot].store(0, std::memory_order_seq_cst);
  // The caller's next writes to the buffer come after this store for any reader (peer_memory.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  free_slots_.push_back(slot);
}

void UcxTransport::accept_announcement(InFlight* pending, std::size_t length) {
  PeerReadJob job;
  job.request = pending->request;
  job.peer = pending->peer;
  job.tag = pending->tag;
  job.dst = pending->recv_buf;
  job.capacity = pending->recv_len;
  job.reduce = pending->reduce;
  const bool well_formed = length == sizeof(Announcement);
  if (well_formed) std::memcpy(&job.msg, job.dst, sizeof job.msg);
  in_flight_.erase(job.request.get());  // destroys *pending
  if (!well_formed) {
    job.request->state = TransportRequest::State::Failed;
    job.request->error = fmt::format(
        "rank {} sent a single-copy announcement of {} bytes where {} were expected: are all "
        "ranks running the same strait build?",
        job.peer, length, sizeof(Announcement));
    return;
  }
  reads_.push_back(std::move(job));
}

bool UcxTransport::pump_reads() {
  // One piece of each message in turn, so that none waits for another to be read whole.
  for (std::size_t n = reads_.size(); n > 0; --n) {
    PeerReadJob job = std::move(reads_.front());
    reads_.pop_front();
    if (!read_piece(job)) reads_.push_back(std::move(job));
  }
  return true;
}

bool UcxTransport::read_piece(PeerReadJob& job) {
  auto& req = *job.request;
  if (!req.pending()) return true;
  Peer& peer = *peers_.at(static_cast<std::size_t>(job.peer));
  if (job.msg.length > job.capacity) {
    req.state = TransportRequest::State::Failed;
    req.truncated = true;
    req.error = ucs_status_string(UCS_ERR_MESSAGE_TRUNCATED);
    send_done(job);
    return true;
  }
  if (job.reduce && job.msg.length % kernels::dtype_size(job.reduce->dtype) != 0) {
    job.reduce.reset();  // lands whole instead; the operation then names the wrong size
  }
  const std::size_t n = std::min(kReadPiece, job.msg.length - job.offset);
  if (n > 0 && job.reduce) {
    if (!reduce_piece_) reduce_piece_ = std::make_unique_for_overwrite<std::byte[]>(kReducePiece);
    const ReduceOnArrival& how = *job.reduce;
    const std::size_t elem = kernels::dtype_size(how.dtype);
    for (std::size_t done = 0; done < n;) {
      const std::size_t m = std::min(kReducePiece, n - done);
      const std::size_t at = job.offset + done;
      const PeerRead r =
          read_peer_memory(peer.pid, job.msg.address + at, reduce_piece_.get(), m, job.msg.serial);
      if (r.error != 0) {
        fail_read(job,
                  fmt::format("reading its message from its memory failed after {} of {} bytes: {}",
                              at + r.bytes, job.msg.length, std::strerror(r.error)),
                  true);
        return true;
      }
      // The piece is in this core's cache: reduce it at once (one read of each operand).
      if (how.from != how.into) std::memcpy(how.into + at, how.from + at, m);
      kernels::reduce(how.dtype, how.op, how.into + at, reduce_piece_.get(), m / elem);
      done += m;
    }
    job.offset += n;
  } else if (n > 0) {
    const PeerRead r = read_peer_memory(peer.pid, job.msg.address + job.offset,
                                        job.dst + job.offset, n, job.msg.serial);
    if (r.error != 0) {
      fail_read(job,
                fmt::format("reading its message from its memory failed after {} of {} bytes: {}",
                            job.offset + r.bytes, job.msg.length, std::strerror(r.error)),
                true);
      return true;
    }
    job.offset += n;
  }
  if (job.offset < job.msg.length) return false;
  // All read. The slot, read after the data, still holds the token: the sender had not given the
  // buffer back by then, so what was read is its message. A readable pidfd: the pid may have
  // been another process's.
  std::uint64_t slot = 0;
  const PeerRead s = read_peer_memory(peer.pid, job.msg.slot, &slot, sizeof slot);
  if (s.error != 0 || slot != job.msg.token || mark_if_exited(peer, 0) || !peer.lost.empty()) {
    fail_read(job,
              fmt::format("rank {} withdrew its message before this rank had read it (its "
                          "operation failed there)",
                          job.peer),
              true);
    return true;
  }
  req.state = TransportRequest::State::Done;
  req.bytes = job.msg.length;
  req.reduced = job.reduce.has_value();
  send_done(job);
  return true;
}

void UcxTransport::fail_read(PeerReadJob& job, std::string why, bool tell_sender) {
  Peer& peer = *peers_.at(static_cast<std::size_t>(job.peer));
  // A read fails when the sender is gone, and its pidfd turns readable a moment after its memory
  // went: wait for it once, as failure_cause() does, to report the cause rather than the symptom.
  constexpr int kExitReportMs = 500;
  if (peer.lost.empty()) mark_if_exited(peer, peer.waited_for_exit ? 0 : kExitReportMs);
  peer.waited_for_exit = true;
  auto& req = *job.request;
  req.state = TransportRequest::State::Failed;
  req.error = peer.lost.empty() ? std::move(why) : peer.lost;
  if (tell_sender && peer.lost.empty()) send_done(job);
}

void UcxTransport::send_done(const PeerReadJob& job) {
  auto token = std::make_shared<std::uint64_t>(job.msg.token);
  RequestPtr r = post(true, job.peer, with_source(job.tag, rank_) | kSingleCopyDoneBit, token.get(),
                      nullptr, sizeof *token);
  r->keep_alive = std::move(token);  // a failed send (a closed endpoint) is the sender's loss
}

}  // namespace strait::comm
