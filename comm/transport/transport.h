// Transport: moves tagged byte ranges between the ranks of a job and reports completion. The only
// layer that knows UCX (transport/ucx); algorithms see this interface. (NCCL is not a transport:
// comm/nccl/ is a backend beside the host algorithms.)
//
// Requests are posted and progressed by one thread at a time, under the progress engine's lock (see
// progress_engine.h); the transport is not thread-safe otherwise. A request stays owned by the
// transport until it completes, so an operation that fails or times out can drop its handle while
// the network still finishes (or cancels) the transfer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "comm/transport/tag.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

// Completion state of one send or receive. `bytes` is the received length (receives only).
struct TransportRequest {
  enum class State { Pending, Done, Failed };
  State state = State::Pending;
  std::size_t bytes = 0;
  std::string error;       // set when Failed: what the transport reported
  bool truncated = false;  // Failed because the message was longer than the receive buffer
  // Done by an irecv_reduce() that reduced the message on arrival (see there): the receive
  // buffer holds none of it. False: the message is in the receive buffer, as irecv() leaves it.
  bool reduced = false;
  // The tag the message was sent with (receives; UcxTransport fills it in): irecv_any() reads the
  // sender's rank out of it.
  Tag sender_tag = 0;
  // Memory the request reads or writes that its poster does not otherwise keep alive (an
  // operation's header): it lives as long as the request, which the transport holds until the
  // request leaves Pending, even after the operation that posted it has failed and gone.
  std::shared_ptr<const void> keep_alive;
  [[nodiscard]] bool pending() const noexcept { return state == State::Pending; }
};

using RequestPtr = std::shared_ptr<TransportRequest>;

// What irecv_reduce() asks of a message of elements of `dtype`: into[i] = from[i] (op) msg[i] for
// every element i of the message. `op` is elementwise (not Avg); `from` may equal `into`, and
// both must hold the message's length and stay valid until the request leaves Pending.
struct ReduceOnArrival {
  kernels::DType dtype{};
  kernels::ReduceOp op = kernels::ReduceOp::Sum;
  std::byte* into = nullptr;
  const std::byte* from = nullptr;
};

class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  [[nodiscard]] virtual int rank() const noexcept = 0;  // in the world (job) the transport spans
  [[nodiscard]] virtual int size() const noexcept = 0;

  // Post a send of [buf, buf + len) to world rank `peer`. The buffer must stay valid until the
  // request leaves Pending.
  virtual RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t len) = 0;
  // Post a receive of at most `len` bytes from world rank `peer` (the tag names the peer).
  virtual RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t len) = 0;
  // A receive whose message the transport may reduce as it reads it (`how`), in cache-sized pieces
  // straight from where it lies (UcxTransport's single-copy path), instead of landing it whole in
  // `buf` for the caller to reduce after it has left the cache. The request says which happened:
  // Done with `reduced` set, the reduction is done and `buf` holds nothing of the message (its
  // contents are unspecified: the transport may use it for its own short messages); else it is in
  // `buf` as irecv() leaves it, and the caller reduces it. While it is pending `how.into` may be
  // written at any time; a Failed request leaves it partly reduced. By default, irecv().
  virtual RequestPtr irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                                  const ReduceOnArrival& how) {
    (void)how;
    return irecv(peer, tag, buf, len);
  }
  // A receive from whichever rank sends a message whose tag matches `tag` in every bit set in
  // `mask` (the source bits left out of `mask`: MPI_ANY_SOURCE); the request's sender_tag then
  // names the sender. By default the transport cannot: the request is Failed, saying so.
  virtual RequestPtr irecv_any(Tag tag, Tag mask, void* buf, std::size_t len) {
    (void)tag;
    (void)mask;
    (void)buf;
    (void)len;
    auto req = std::make_shared<TransportRequest>();
    req->state = TransportRequest::State::Failed;
    req->error = "this transport cannot receive from any source";
    return req;
  }
  // A failed operation gives up its requests (any state; done ones are ignored). When this
  // returns, the transport no longer reads or writes their buffers, so the caller may free them:
  // receives not yet matched are cancelled, the rest get up to `budget` to complete, and sends
  // still pending then are abandoned (UcxTransport force-closes the endpoint they are queued on,
  // which also fails other pending sends to that peer). The one exception is a receive whose
  // data is already arriving and does not finish within the budget: transports cannot stop it;
  // it is logged.
  virtual void withdraw(std::span<const RequestPtr> requests, std::chrono::milliseconds budget) = 0;

  // Drive the network; returns true when anything happened (a completion, a message arriving).
  virtual bool progress() = 0;
  // A file descriptor that becomes readable when progress() has work, or -1 if there is none.
  [[nodiscard]] virtual int event_fd() const noexcept = 0;
  // Prepare to sleep on event_fd(); false when events are already pending (progress instead).
  virtual bool arm() = 0;

  // True when the ranks on this host are no more than its cores: a rank waiting for a peer may
  // then poll for longer without taking a core the peer needs (ProgressEngine::drive).
  [[nodiscard]] virtual bool core_per_local_rank() const noexcept { return false; }

  // Bytes of this transport's sends that a peer copied straight out of this process's memory
  // (UcxTransport's single-copy path). Any thread.
  [[nodiscard]] virtual std::uint64_t single_copy_bytes() const noexcept { return 0; }

  // Refresh what is known about peers' liveness (cheap; called after wake-ups and every few ms).
  virtual void check_peers() = 0;
  // Non-empty when world rank `peer` is known to be gone (process exited, connection broken):
  // says how. Cheap enough to call on every advance of an operation.
  [[nodiscard]] virtual const std::string& peer_lost(int peer) const = 0;
};

}  // namespace strait::comm
